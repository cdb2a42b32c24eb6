"""Page alignment and prefix-key chaining."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk.keys.alignment import aligned_span, chain_keys, num_pages, page_align


def test_vectors():
    assert page_align(130, 64) == 128
    assert page_align(63, 64) == 0
    assert page_align(0, 1) == 0
    assert num_pages(130, 64) == 2
    assert list(aligned_span(list(range(10)), 4)) == list(range(8))
    assert list(aligned_span(list(range(10)), 4, start=4)) == [4, 5, 6, 7]
    assert list(aligned_span(list(range(10)), 4, start=20)) == []


@pytest.mark.parametrize("bad", [0, -1, 1.0, "4", None, True])
def test_bad_page_size(bad):
    with pytest.raises(ValueError, match="page_size"):
        page_align(10, bad)
    with pytest.raises(ValueError, match="page_size"):
        aligned_span([1, 2], bad)


@pytest.mark.parametrize("bad", [-1, 2.5, "3"])
def test_bad_counts(bad):
    with pytest.raises(ValueError, match="n_tokens"):
        page_align(bad, 4)
    with pytest.raises(ValueError, match="start"):
        aligned_span([1, 2, 3], 1, start=bad)


@given(st.integers(0, 10**6), st.integers(1, 512))
def test_page_align_property(n, size):
    a = page_align(n, size)
    assert a % size == 0 and a <= n < a + size
    assert num_pages(n, size) == a // size


@given(st.lists(st.integers(), max_size=50), st.integers(1, 9), st.integers(0, 60))
def test_aligned_span_property(tokens, size, start):
    before = list(tokens)
    span = aligned_span(tokens, size, start)
    assert tokens == before
    assert len(span) % size == 0
    assert list(span) == tokens[start : start + len(span)]
    assert len(tokens) - start - len(span) < size or start >= len(tokens)


@given(
    st.one_of(st.none(), st.lists(st.text(max_size=3), max_size=5)), st.lists(st.text(max_size=3), max_size=5)
)
def test_chain_keys_never_mutates_or_aliases(prefix, keys):
    p_before = None if prefix is None else list(prefix)
    k_before = list(keys)
    out = chain_keys(prefix, keys)
    assert out == (p_before or []) + k_before
    assert prefix == p_before and keys == k_before
    out.append("x")
    assert keys == k_before and prefix == p_before


def test_chain_keys_legacy_default_and_bad_entries():
    assert chain_keys((None,), ["a"]) == ["a"]
    with pytest.raises(ValueError, match=r"prefix_keys\[1\]"):
        chain_keys(["a", None], ["b"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"keys\[0\]"):
        chain_keys([], [3])  # type: ignore[list-item]
