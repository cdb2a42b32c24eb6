"""``_hotpath.Namer``: ``plan_names`` bound to one plan, which rewrites in place the names
its caller let go of. It must answer exactly what ``plan_names`` answers, batch after batch,
and never change a name anybody still holds (a list, a variable, a dict or set, interning)."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk._ext import hotpath
from hicache_sdk.keys.scheme_base import NAMES_KEPT, NamePlan

pytestmark = pytest.mark.skipif(hotpath is None, reason="hicache_sdk._hotpath was not compiled")

HEX64 = st.text("0123456789abcdef", min_size=64, max_size=64)
PLAIN = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="/\\."), min_size=1, max_size=70
)
PLANS = st.tuples(
    st.sampled_from(["", "bench_", "ns/m/", "é"]),  # a non-ASCII prefix: never vouched for
    st.lists(st.sampled_from(["", "_k", "_v", "__k", "_0_k", "_0_v"]), max_size=3).map(tuple),
    st.sampled_from([0, 0, 2]),
    st.booleans(),
)


def copy_of(names: list[str]) -> list[str]:
    """New str objects equal to ``names`` (``s + ""`` would answer ``s`` itself)."""
    return [s.encode().decode() for s in names]


def hashes(n: int, salt: int) -> list[str]:
    return [f"{salt:08x}{i:056x}" for i in range(n)]


@given(
    plan=PLANS,
    capacity=st.integers(0, 12),
    batches=st.lists(st.tuples(st.lists(st.one_of(HEX64, PLAIN), max_size=8), st.booleans()), max_size=8),
)
def test_namer_answers_plan_names_batch_after_batch(
    plan: tuple[str, tuple[str, ...], int, bool], capacity: int, batches: list[tuple[list[str], bool]]
) -> None:
    """Equal to ``plan_names`` on every batch (batch sizes and key lengths vary, so kept
    names come back in other columns and at other lengths), and the batches still held
    keep their text."""
    namer = hotpath.Namer(*plan, capacity)
    held: list[tuple[list[str], list[str]]] = []
    for keys, hold in batches:
        got = namer(keys)
        assert got == hotpath.plan_names(*plan, keys)
        if got is not None:
            assert [hash(s) for s in got] == [hash(c) for c in copy_of(got)]
            if hold:
                held.append((got, copy_of(got)))
    for got, text in held:
        assert got == text


def test_names_let_go_of_are_rewritten_in_place() -> None:
    namer = hotpath.Namer("bench_", ("_0_k", "_0_v"), 0, True, 64)
    first = namer(hashes(3, 1))
    ids = [id(s) for s in first]
    del first
    second = namer(hashes(3, 2))
    assert [id(s) for s in second] == ids and namer.reused == 6
    assert second == [f"bench_{h}_0_{kv}" for kv in "kv" for h in hashes(3, 2)]
    assert second == copy_of(second)
    del second
    third = namer(hashes(2, 3))  # slot 2 held a K name and now holds a V name: rewritten whole
    assert third == [f"bench_{h}_0_{kv}" for kv in "kv" for h in hashes(2, 3)]
    assert [id(s) for s in third] == ids[:4] and namer.reused == 10


def test_a_name_still_held_anywhere_is_never_touched() -> None:
    namer = hotpath.Namer("p_", ("_k", "_v"), 0, True, 64)
    got = namer(hashes(4, 1))
    kept = got[0]  # a variable
    as_key = {got[1]: 1}  # a dict key (hash cached)
    in_set = {got[2]}
    # interned and otherwise let go of: the interned table's reference is not counted, so
    # only the interned flag keeps this one from being rewritten
    interned_id = id(sys.intern(got[3]))
    assert interned_id == id(got[3])
    text = copy_of(got[:4])
    del got
    again = namer(hashes(4, 2))
    assert again == hotpath.plan_names("p_", ("_k", "_v"), 0, True, hashes(4, 2))
    assert [kept, *as_key, *in_set] == text[:3]
    # not rewritten (it was freed once the slot took a new name: its interned entry with it)
    assert all(s is not kept and id(s) != interned_id for s in again)
    assert sys.intern(text[3]) == text[3]
    assert namer.reused == 4  # the four let go of (the V column)
    assert as_key[text[1]] == 1 and text[2] in in_set


def test_a_rewritten_name_hashes_as_its_new_text() -> None:
    namer = hotpath.Namer("x/", ("_k",), 2, True, 8)
    got = namer(hashes(2, 1))
    {s: 1 for s in got}  # hashes computed and cached in the objects
    del got
    again = namer(hashes(2, 2))
    assert namer.reused == 2
    fresh = copy_of(again)
    assert [hash(s) for s in again] == [hash(s) for s in fresh]
    table = dict.fromkeys(again, 1)
    assert all(table[s] == 1 for s in fresh)  # found by an equal, separately made str


def test_names_past_the_capacity_are_new_every_time() -> None:
    namer = hotpath.Namer("p_", ("_k",), 0, True, 2)
    assert namer.capacity == 2
    got = namer(hashes(5, 1))
    ids = [id(s) for s in got]
    del got
    again = namer(hashes(5, 2))
    assert [id(s) for s in again[:2]] == ids[:2] and namer.reused == 2
    none_kept = hotpath.Namer("p_", ("_k",), 0, True, 0)
    a = none_kept(hashes(2, 1))
    del a
    assert none_kept(hashes(2, 2)) == hotpath.plan_names("p_", ("_k",), 0, True, hashes(2, 2))
    assert none_kept.reused == 0


def test_namer_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="capacity"):
        hotpath.Namer("p_", ("_k",), 0, True, -1)
    with pytest.raises(ValueError, match="fanout"):
        hotpath.Namer("p_", ("_k",), -1, True, 4)
    with pytest.raises(TypeError):
        hotpath.Namer("p_", ["_k"], 0, True, 4)  # suffixes: a tuple
    with pytest.raises(TypeError, match="tuple of str"):
        hotpath.Namer("p_", ("_k", 1), 0, True, 4)
    namer = hotpath.Namer("p_", ("_k",), 0, True, 4)
    with pytest.raises(TypeError, match="one positional"):
        namer()
    with pytest.raises(TypeError, match="one positional"):
        namer(hashes(1, 1), hashes(1, 1))
    with pytest.raises(TypeError, match="one positional"):
        namer(keys=hashes(1, 1))
    for bad in (iter(hashes(1, 1)), "a" * 64, [1], [b"0" * 64], ["A" * 64]):
        assert namer(bad) is None


def test_the_plan_builder_recycles_and_names_does_not() -> None:
    plan = NamePlan("bench_", ("_0_k", "_0_v"), 0, True)
    build = plan.builder()
    assert isinstance(build, hotpath.Namer) and build.capacity == NAMES_KEPT
    got = build(hashes(2, 1))
    assert got == plan.names(hashes(2, 1))
    ids = [id(s) for s in got]
    del got
    assert [id(s) for s in build(hashes(2, 3))] == ids
    once = plan.names(hashes(2, 1))
    assert once is not None and all(id(s) not in ids for s in once)
