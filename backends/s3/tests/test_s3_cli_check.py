"""``hicache check s3`` certifies the backend against a real ``moto_server``, run as
docs/backends/s3.md tells a user to: a subprocess, the default profile (levels L0 to L2
on the minimal matrix, see ``LEVELS``), the bucket created by the backend (``create_bucket``), the JSON report read (not only the
exit code)."""

from __future__ import annotations

import uuid
from typing import Any

from hicache_conformance.run import run_check

#: What the command runs here: L0 to L2 on the minimal host-pool matrix. The backend's
#: ``BackendSuite`` classes run every level, L3 (concurrency), L4 (faults) and stateful
#: included, on the pairwise matrix against the same kind of server, and the two routes
#: collect the same tests and give them the same outcomes (``conformance/tests/test_routes.py``).
LEVELS = ("--level", "L0,L1,L2", "--matrix", "minimal")


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
        # and a 128-page batch of PUTs longer than the 5 s default (no L4 test runs here)
        "transfer_timeout_s": 15.0,
    }
    res = run_check("s3", config, *LEVELS)
    assert res.ok, (res.failures, res.output[-3000:])
    assert res.summary_line == "s3: PASS (profile strict)"
    assert res.report["profile"] == "strict"
    totals = res.totals
    assert totals["failed"] == 0 and totals["passed"] >= 60, totals
    assert res.report["levels_not_selected"] == ["L3-concurrency", "L4-faults", "stateful"], res.report[
        "levels_not_selected"
    ]
    skipped = res.outcomes("skipped")
    # capacity (a bucket has no byte limit of ours), the SGLang naming vectors (the default scheme runs), and ranges of
    # many objects in one call (not offered: one request per object instead)
    assert len(skipped) == 5, skipped
    assert all(
        r.startswith("Skipped: backend does not declare")
        or "default key scheme" in r
        or "does not offer RangedReads (ranges of many objects)" in r
        for r in skipped.values()
    ), skipped
    assert res.report["cleanup"]["status"] == "nothing left", res.report["cleanup"]
    verified = res.report["capabilities"]["verified"]
    # shared_across_processes: its test is L3 (not selected here)
    assert verified["shared_across_processes"] == "untested", verified
    for cap in ("persistent", "delete", "zero_copy", "health"):
        assert verified[cap] == "verified", (cap, verified)
