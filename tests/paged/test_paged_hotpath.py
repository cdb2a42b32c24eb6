"""The per-batch helpers of the hot path: page digests (hashlib), the hex check, object
names, integrity records, page starts of a strided view, and counting / swapping answers
by identity."""

from __future__ import annotations

import hashlib
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hicache_sdk.hostpool import describe
from hicache_sdk.keys import names
from hicache_sdk.kit import batches
from hicache_sdk.paged import header


def test_page_digests_are_sha256_of_each_hash() -> None:
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(50)] + ["", "é"]
    assert header.page_digests(keys) == b"".join(hashlib.sha256(k.encode()).digest() for k in keys)
    assert header.page_digests([]) == b""
    # FIPS 180-2 test vector
    assert header.page_digests(["abc"]).hex() == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet="0123456789abcdef", min_size=63, max_size=65),
            st.text(alphabet="0123456789abcdefABCDEFg \x00é", min_size=64, max_size=64),
            st.binary(min_size=64, max_size=64),
            st.integers(),
        ),
        max_size=5,
    )
)
def test_all_hex64_is_the_rule(items: list[object]) -> None:
    want = bool(items) and all(
        isinstance(i, str) and len(i) == 64 and set(i) <= set("0123456789abcdef") for i in items
    )
    assert names.all_hex64(items) is want  # type: ignore[arg-type]


def test_page_starts_of_a_strided_view_uses_the_view() -> None:
    base = torch.arange(64, dtype=torch.int64)
    view = base.view(-1, 2)[:, 0]  # 0, 2, 4, ... : not contiguous, and not pages of 2
    assert not view.is_contiguous()
    with pytest.raises(ValueError, match="not contiguous from its start"):
        describe.page_starts(view, 2)
    assert describe.page_starts(base[8:16], 4) == [8, 12]


@settings(max_examples=100, deadline=None)
@given(
    hashes=st.lists(st.text(min_size=2, max_size=70), max_size=6),
    prefix=st.text(max_size=12),
    suffix=st.text(max_size=12),
    fanout=st.sampled_from([0, 2]),
)
def test_batch_names_are_prefix_fanout_hash_suffix(
    hashes: list[str], prefix: str, suffix: str, fanout: int
) -> None:
    if fanout:
        want = [f"{prefix}{h[:fanout]}/{h}{suffix}" for h in hashes]
    else:
        want = [f"{prefix}{h}{suffix}" for h in hashes]
    assert names.batch_names(hashes, prefix, suffix, fanout) == want


@pytest.mark.parametrize("payloads", [[100], [131072, 131072], [5, 7, 9]])
def test_page_records_are_templates_with_each_pages_digest(payloads: list[int]) -> None:
    identity = hashlib.sha256(b"pool").digest()
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(9)] + ["x", "é"]
    got = header.page_records(identity, keys, payloads)
    assert got.shape == (len(keys) * len(payloads), header.TRAILER_SIZE)
    for c, plen in enumerate(payloads):
        for i, k in enumerate(keys):
            want = header.PageHeader(identity, header.digest(k), plen).encode()
            assert got[c * len(keys) + i].tobytes() == want
    got[0, 0] ^= 1  # writable: the write path encodes into it
    assert header.page_records(identity, [], payloads).shape == (0, header.TRAILER_SIZE)


@given(items=st.lists(st.sampled_from([None, -1, 0, 1, 4096, "x", b"x", 2.5]), max_size=40))
def test_count_is_counts_by_identity(items: list[object]) -> None:
    for obj in (None, -1, "x"):
        want = sum(1 for x in items if x is obj)
        assert batches.count_is(items, obj) == want
        assert batches.count_is(tuple(items), obj) == want


ONE = 1


@given(items=st.lists(st.sampled_from([1, True, 1.0, -1, None, 2]), max_size=12))
def test_swap_if_all_swaps_only_a_list_of_old_alone(items: list[object]) -> None:
    """Every item *is* ``old`` (identity: True and 1.0 equal 1 but are not it): each becomes
    ``new``, in place; otherwise the list is left as it was."""
    want_all = all(x is ONE for x in items)
    got = list(items)
    assert batches.swap_if_all(got, ONE, -1) is want_all
    assert got == ([-1] * len(items) if want_all else items)
    assert all(a is b for a, b in zip(got, [-1] * len(items) if want_all else items))
    with pytest.raises(TypeError, match="must be a list"):
        batches.swap_if_all((1,), ONE, -1)  # type: ignore[arg-type]


def test_swap_if_all_keeps_references_counted() -> None:
    old, new = object(), object()
    before_old, before_new = sys.getrefcount(old), sys.getrefcount(new)
    items = [old] * 50
    assert batches.swap_if_all(items, old, new)
    assert (sys.getrefcount(old), sys.getrefcount(new)) == (before_old, before_new + 50)
    del items
    assert sys.getrefcount(new) == before_new
    same = [ONE] * 3
    assert batches.swap_if_all(same, ONE, ONE) and same == [1, 1, 1]
