"""The hot path's C helpers (:mod:`hicache_sdk._hotpath`) give exactly what their Python
fallbacks give: page digests (hashlib), the hex check, page starts (numpy, which also names
what is wrong) -- with and without the CPU's SHA extensions."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hicache_sdk.hostpool import describe
from hicache_sdk.keys import names
from hicache_sdk.paged import header

_hotpath = pytest.importorskip("hicache_sdk._hotpath")


@pytest.fixture(params=[True, False], ids=["sha-extensions", "portable"])
def accel(request: pytest.FixtureRequest) -> Iterator[bool]:
    before = _hotpath.set_accelerated(1 if request.param else 0)
    if request.param and not _hotpath.set_accelerated(-1):
        _hotpath.set_accelerated(int(before))
        pytest.skip("this CPU has no SHA extensions")
    yield request.param
    _hotpath.set_accelerated(1 if before else 0)


def _hashlib(items: list[str | bytes]) -> bytes:
    return b"".join(hashlib.sha256(i.encode() if isinstance(i, str) else i).digest() for i in items)


def test_sha256_each_equals_hashlib_at_every_length(accel: bool) -> None:
    # every padding case: lengths around the 55/56/64-byte block boundaries, several blocks
    items: list[str | bytes] = [bytes(range(256))[:n] for n in range(0, 200)]
    items += ["", "abc", "é" * 40, hashlib.sha256(b"x").hexdigest()]
    assert _hotpath.sha256_each(items) == _hashlib(items)
    assert _hotpath.sha256_each([]) == b""
    # FIPS 180-2 test vector
    assert _hotpath.sha256_each(["abc"]).hex() == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=150), st.binary(max_size=300)), max_size=20))
def test_sha256_each_equals_hashlib_on_any_input(items: list[str | bytes]) -> None:
    try:
        want = _hashlib(items)
    except UnicodeEncodeError:  # a lone surrogate: both refuse it
        with pytest.raises(UnicodeEncodeError):
            _hotpath.sha256_each(items)
        return
    assert _hotpath.sha256_each(items) == want


def test_sha256_each_names_a_bad_item() -> None:
    with pytest.raises(TypeError, match="item 1 is int"):
        _hotpath.sha256_each(["a", 3])


def test_page_digests_native_and_fallback_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(50)]
    native = header.page_digests(keys)
    monkeypatch.setattr(header, "_hotpath", None)
    assert header.page_digests(keys) == native == b"".join(header.digest(k) for k in keys)


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
def test_all_hex64_native_equals_the_python_rule(items: list[object]) -> None:
    want = bool(items) and all(
        isinstance(i, str) and len(i) == 64 and set(i) <= set("0123456789abcdef") for i in items
    )
    assert names.all_hex64(items) is want  # type: ignore[arg-type]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(names, "_hotpath", None)
        assert names.all_hex64(items) is want  # type: ignore[arg-type]


def _numpy_starts(t: torch.Tensor, page_size: int, pool_size: int | None) -> list[int] | str:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(describe, "_hotpath", None)
        try:
            return describe.page_starts(t, page_size, pool_size)
        except ValueError as e:
            return str(e)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_page_starts_native_equals_numpy(dtype: torch.dtype, data: st.DataObject) -> None:
    page_size = data.draw(st.sampled_from([1, 2, 4, 16]))
    pages = data.draw(st.lists(st.integers(0, 40), max_size=8))
    slots = [p * page_size + k for p in pages for k in range(page_size)]
    if slots and data.draw(st.booleans()):  # break one slot: misaligned, negative, out of order
        i = data.draw(st.integers(0, len(slots) - 1))
        slots[i] += data.draw(st.sampled_from([-1000, -1, 1, page_size]))
    t = torch.tensor(slots, dtype=dtype)
    pool_size = data.draw(st.sampled_from([None, 41 * page_size, 20 * page_size]))
    want = _numpy_starts(t, page_size, pool_size)
    try:
        got: list[int] | str = describe.page_starts(t, page_size, pool_size)
    except ValueError as e:
        got = str(e)
    assert got == want


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
def test_batch_names_native_equals_python(hashes: list[str], prefix: str, suffix: str, fanout: int) -> None:
    if fanout:
        want = [f"{prefix}{h[:fanout]}/{h}{suffix}" for h in hashes]
    else:
        want = [f"{prefix}{h}{suffix}" for h in hashes]
    assert names.batch_names(hashes, prefix, suffix, fanout) == want  # native, or Python for non-ASCII
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(names, "_hotpath", None)
        assert names.batch_names(hashes, prefix, suffix, fanout) == want


def test_batch_names_leaves_non_ascii_to_python() -> None:
    assert _hotpath.names(["ab", "é"], "p/", "", 0) is None
    assert _hotpath.names(["ab"], "é", "", 0) is None
    assert _hotpath.names(["ab", "cd"], "p/", ".bin", 1) == ["p/a/ab.bin", "p/c/cd.bin"]


@pytest.mark.parametrize("payloads", [[100], [131072, 131072], [5, 7, 9]])
def test_page_records_native_equals_digests_and_templates(payloads: list[int]) -> None:
    identity = hashlib.sha256(b"pool").digest()
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(9)] + ["x", "é"]
    native = header.page_records(identity, keys, payloads)
    want = header.plain_records(identity, header.page_digests(keys), payloads, len(keys))
    assert native.shape == want.shape and (native == want).all()
    native[0, 0] ^= 1  # writable: the write path encodes into it
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(header, "_hotpath", None)
        assert (header.page_records(identity, keys, payloads) == want).all()
    assert header.page_records(identity, [], payloads).shape == (0, header.TRAILER_SIZE)


@given(items=st.lists(st.sampled_from([None, -1, 0, 1, 4096, "x", b"x", 2.5]), max_size=40))
def test_count_is_counts_by_identity(items: list[object]) -> None:
    from hicache_sdk.kit import batches

    for obj in (None, -1, "x"):
        want = sum(1 for x in items if x is obj)
        assert _hotpath.count_is(items, obj) == want == batches._count_is(items, obj)
        assert _hotpath.count_is(tuple(items), obj) == want
    assert batches.count_is is _hotpath.count_is  # no Python frame where it built
    with pytest.raises(TypeError, match="expects a sequence"):
        _hotpath.count_is(5, None)


ONE = 1


@given(items=st.lists(st.sampled_from([1, True, 1.0, -1, None, 2]), max_size=12))
def test_swap_if_all_swaps_only_a_list_of_old_alone(items: list[object]) -> None:
    """Every item *is* ``old`` (identity: True and 1.0 equal 1 but are not it): each becomes
    ``new``, in place; otherwise the list is left as it was. C and Python agree."""
    from hicache_sdk.kit import batches

    want_all = all(x is ONE for x in items)
    for fn in (_hotpath.swap_if_all, batches._swap_if_all):
        got = list(items)
        assert fn(got, ONE, -1) is want_all
        assert got == ([-1] * len(items) if want_all else items)
        assert all(a is b for a, b in zip(got, [-1] * len(items) if want_all else items))
    assert batches.swap_if_all is _hotpath.swap_if_all
    with pytest.raises(TypeError):
        _hotpath.swap_if_all((1,), ONE, -1)  # a list only: answers are swapped in place
    with pytest.raises(TypeError, match="must be a list"):
        batches._swap_if_all((1,), ONE, -1)


def test_swap_if_all_keeps_references_counted() -> None:
    import sys

    old, new = object(), object()
    before_old, before_new = sys.getrefcount(old), sys.getrefcount(new)
    items = [old] * 50
    assert _hotpath.swap_if_all(items, old, new)
    assert (sys.getrefcount(old), sys.getrefcount(new)) == (before_old, before_new + 50)
    del items
    assert sys.getrefcount(new) == before_new
    same = [ONE] * 3
    assert _hotpath.swap_if_all(same, ONE, ONE) and same == [1, 1, 1]


def test_plan_names_checks_its_arguments() -> None:
    h = "a" * 64
    assert _hotpath.plan_names("p/", ("", "_v"), 2, True, [h]) == [f"p/aa/{h}", f"p/aa/{h}_v"]
    assert _hotpath.plan_names("p_", ("_k",), 0, False, []) == []
    assert _hotpath.plan_names("p_", ("_k",), 0, True, ["A" * 64]) is None  # hex_only: lowercase hex
    assert _hotpath.plan_names("p_", ("_k",), 0, True, ["a" * 63]) is None
    assert _hotpath.plan_names("é", ("_k",), 0, False, [h]) is None  # not ASCII: the checked path
    assert _hotpath.plan_names("p_", ("é",), 0, False, [h]) is None
    with pytest.raises(TypeError):
        _hotpath.plan_names("p_", ["_k"], 0, False, [h])  # suffixes: a tuple
