"""``hicache check mooncake`` as a user runs it (a subprocess, the default profile, the
JSON report read), in both documented setups against a real master on free
loopback ports whose metrics port is not SGLang's default, with SGLang's keys only (the
minimal host-pool matrix, see ``LEVELS``):

* A: a separate holder process (``mooncake_client``), clients with no segment: pages
  outlive the clients, every test but the documented skips passes;
* B: the client holds its own segment (no holder): the backend is not ``persistent`` for
  that config, so the persistence test is skipped with the reason; the cross-process test
  runs (the child stays alive while the parent reads its pages) and passes.

Each run must end within 90 s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _servers import QUIET_ENV, MooncakeCluster
from hicache_conformance.run import CheckResult, run_check

BUDGET_S = 90.0
#: Skipped in both setups: L4 (no fault hooks on the command line), capacity (none in
#: Mooncake), the sglang-* naming examples (default scheme), and the out-of-band checks that
#: need an object's size from exists (Mooncake reports SIZE_UNKNOWN).
COMMON_SKIPS = {
    "test_calls_bounded_while_service_down": "fault_injection",
    "test_calls_bounded_while_service_slow": "fault_injection",
    "test_same_object_recovers_after_restart": "fault_injection",
    "test_capacity_bound_is_enforced": "capacity_bound",
}
N_SGLANG_NAMING = 3
N_SIZE_UNKNOWN = 4
MIN_PASSED = 60
#: What the command runs here: every level but ``stateful``, on the minimal host-pool matrix.
#: The backend's ``BackendSuite`` class runs the stateful test and the pairwise matrix on the
#: same kind of cluster; the two routes collect the same tests
#: (``conformance/tests/test_routes.py``).
LEVELS = ("--level", "L0,L1,L2,L3,L4", "--matrix", "minimal")


@pytest.fixture(scope="module")
def master_only() -> Iterator[MooncakeCluster]:
    c = MooncakeCluster()
    try:
        c.start_master()
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def with_holder() -> Iterator[MooncakeCluster]:
    c = MooncakeCluster(holder_bytes=512 << 20)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _check(cluster: MooncakeCluster, segment: Any) -> CheckResult:
    assert cluster.metrics_port != 9003
    config = {
        "master_server_address": cluster.address,
        "protocol": "tcp",
        "global_segment_size": segment,
        "local_hostname": "127.0.0.1",
    }
    res = run_check("mooncake", config, *LEVELS, env=QUIET_ENV, timeout_s=BUDGET_S + 60)
    assert res.ok, (res.failures, res.output[-3000:])
    assert res.summary_line == "mooncake: PASS (profile strict)"
    assert res.seconds <= BUDGET_S, f"hicache check took {res.seconds:.1f} s"
    assert res.report["cleanup"]["status"] == "nothing left", res.report["cleanup"]
    assert res.report["levels_not_selected"] == ["stateful"], res.report["levels_not_selected"]
    assert res.report["capabilities"]["verified"]["health"] == "verified"
    return res


def _common_skips(skipped: dict[str, str]) -> dict[str, str]:
    rest = dict(skipped)
    for test, cap in COMMON_SKIPS.items():
        (name,) = [n for n in rest if n.endswith(f"::{test}")]
        assert f"backend does not declare {cap}" in rest.pop(name)
    naming = [n for n, r in rest.items() if "default key scheme" in r]
    assert len(naming) == N_SGLANG_NAMING, naming
    sizes = [n for n, r in rest.items() if "SIZE_UNKNOWN" in r]
    assert len(sizes) == N_SIZE_UNKNOWN, sizes
    for n in naming + sizes:
        rest.pop(n)
    return rest


def _counts(totals: dict[str, int]) -> tuple[int, int, int]:
    """(skipped, failed, waived); the passed count grows with the suite, so it is only
    bounded below."""
    assert totals["passed"] >= MIN_PASSED, totals
    return totals["skipped"], totals["failed"], totals["waived"]


def test_separate_holder_process(with_holder: MooncakeCluster) -> None:
    res = _check(with_holder, 0)
    assert _counts(res.totals) == (11, 0, 0), res.totals
    assert _common_skips(res.outcomes("skipped")) == {}
    passed = res.outcomes("passed")
    for test in ("test_persists_across_reinstantiation", "test_two_processes_share_one_store"):
        assert any(n.endswith(f"::{test}") for n in passed), test
    assert res.report["capabilities"]["declared"]["persistent"] is True


def test_client_holds_its_own_segment(master_only: MooncakeCluster) -> None:
    res = _check(master_only, "256mb")
    assert _counts(res.totals) == (12, 0, 0), res.totals
    rest = _common_skips(res.outcomes("skipped"))
    ((name, reason),) = rest.items()
    assert name.endswith("::test_persists_across_reinstantiation")
    assert reason.startswith(
        "Skipped: backend does not declare persistent for this config: global_segment_size > 0"
    )
    assert any(n.endswith("::test_two_processes_share_one_store") for n in res.outcomes("passed"))
    assert res.report["capabilities"]["declared"]["persistent"] is False
