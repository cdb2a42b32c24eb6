from __future__ import annotations

import itertools

import pytest
from hicache_conformance.capabilities import parse_levels, requires, validate_waivers
from hicache_conformance.matrix import DIMENSIONS, full_matrix, pairwise
from hicache_conformance.report import redact_config
from hicache_conformance.watchdog import CallTimeout, Watchdog, WatchdogTimeout, bounded_call, settle
from hypothesis import given
from hypothesis import strategies as st


def test_pairwise_covers_every_pair_and_is_smaller() -> None:
    cases = pairwise()
    names = list(DIMENSIONS)
    for a, b in itertools.combinations(names, 2):
        for va in DIMENSIONS[a]:
            for vb in DIMENSIONS[b]:
                assert any(getattr(c, a) == va and getattr(c, b) == vb for c in cases), (a, va, b, vb)
    assert len(cases) < len(full_matrix()) == 36


@given(
    st.dictionaries(
        st.sampled_from(["kind", "layout", "dtype", "page_size"]),
        st.lists(st.integers(0, 3), min_size=1, max_size=3, unique=True).map(tuple),
        min_size=2,
    )
)
def test_pairwise_property(dims: dict) -> None:
    cases = pairwise(dims)
    names = list(dims)
    for i, j in itertools.combinations(names, 2):
        got = {(getattr(c, i), getattr(c, j)) for c in cases}
        assert got == set(itertools.product(dims[i], dims[j]))


def test_parse_levels() -> None:
    assert parse_levels(None) is None
    assert parse_levels(["L0,L2", "stateful"]) == {0, 2, 5}
    assert parse_levels("semantics") == {1}
    assert parse_levels("all") is None
    with pytest.raises(ValueError, match="level"):
        parse_levels("L9")


def test_requires_rejects_unknown_capability() -> None:
    with pytest.raises(ValueError, match="unknown capability"):
        requires("teleport")


def test_waivers_need_test_name_and_reason() -> None:
    assert validate_waivers({"test_x": " slow "}) == {"test_x": "slow"}
    with pytest.raises(ValueError, match="waivers"):
        validate_waivers({"x": "r"})
    with pytest.raises(ValueError, match="reason"):
        validate_waivers({"test_x": ""})


def test_redact_config() -> None:
    red = redact_config(
        {
            "password": "p",
            "namespace_salt": "s",
            "url": "redis://u:pw@h:1/0",
            "host": "h",
            "nested": {"secret_key": "k"},
            "token": None,
        }
    )
    assert red == {
        "password": "***",
        "namespace_salt": "***",
        "url": "redis://u:***@h:1/0",
        "host": "h",
        "nested": {"secret_key": "***"},
        "token": None,
    }


def test_bounded_call_times_out_and_passes_through() -> None:
    import threading

    ev = threading.Event()
    with pytest.raises(CallTimeout):
        bounded_call(ev.wait, 5, timeout=0.1)
    ev.set()
    assert bounded_call(lambda x: x + 1, 1, timeout=1) == 2
    with pytest.raises(KeyError):
        bounded_call({}.__getitem__, "k", timeout=1)


def test_settle_waits_for_abandoned_calls_and_names_the_rest() -> None:
    import threading
    import time

    assert settle(0) == []
    short, long_ = threading.Event(), threading.Event()
    with pytest.raises(CallTimeout):
        bounded_call(short.wait, 5, timeout=0.05, label="short")
    with pytest.raises(CallTimeout):
        bounded_call(long_.wait, 5, timeout=0.05, label="long")
    threading.Timer(0.2, short.set).start()
    t0 = time.monotonic()
    assert settle(0.6) == ["hicache-conformance-call-long"]  # waited for "short", gave up on "long"
    assert 0.5 <= time.monotonic() - t0 < 3
    long_.set()
    assert settle(2) == []


def test_watchdog_interrupts_a_hang() -> None:
    import time

    with pytest.raises(WatchdogTimeout), Watchdog(0.2):
        time.sleep(5)
