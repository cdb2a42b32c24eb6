"""``hicache check s3`` certifies the backend against a real ``moto_server``, run as
docs/backends/s3.md tells a user to: a subprocess, the default profile and matrix (every
level but ``stateful``, see ``LEVELS``), the
bucket created by the backend (``create_bucket``), the JSON report read (not only the
exit code)."""

from __future__ import annotations

import uuid
from typing import Any

from hicache_conformance.run import run_check

#: The levels the command runs here: all but ``stateful``, whose one test (30 hypothesis
#: examples of calls against the reference model) the backend's ``BackendSuite`` class runs
#: on the same kind of server; the two routes collect the same tests
#: (``conformance/tests/test_routes.py``).
LEVELS = ("--level", "L0,L1,L2,L3,L4")


def test_s3_certifies_in_its_default_profile(moto: Any) -> None:
    config = {
        "bucket": f"check-{uuid.uuid4().hex[:8]}",
        "create_bucket": True,
        "endpoint_url": moto.url,
        "access_key_id": "test",
        "secret_access_key": "test",
        # moto answers HEADs slowly while the other test workers load both cores: a 133-page
        # existence query can take longer than the 2 s default (see test_s3_conformance.py)
        "exists_timeout_s": 6.0,
    }
    res = run_check("s3", config, *LEVELS)
    assert res.ok, (res.failures, res.output[-3000:])
    assert res.summary_line == "s3: PASS (profile strict)"
    assert res.report["profile"] == "strict"
    totals = res.totals
    assert totals["failed"] == 0 and totals["passed"] >= 69, totals
    assert res.report["levels_not_selected"] == ["stateful"], res.report["levels_not_selected"]
    skipped = res.outcomes("skipped")
    # fault injection (3 L4 tests: no hooks from the command line), capacity (a bucket has
    # no byte limit of ours), the SGLang naming vectors (the default scheme runs), and ranges of
    # many objects in one call (not offered: one request per object instead)
    assert len(skipped) == 8, skipped
    assert all(
        r.startswith("Skipped: backend does not declare")
        or "default key scheme" in r
        or "does not offer RangedReads (ranges of many objects)" in r
        for r in skipped.values()
    ), skipped
    assert res.report["cleanup"]["status"] == "nothing left", res.report["cleanup"]
    verified = res.report["capabilities"]["verified"]
    for cap in ("persistent", "shared_across_processes", "delete", "zero_copy", "health"):
        assert verified[cap] == "verified", (cap, verified)
