"""Why each failure in the matrix happens: a defect of the backend (with the SGLang source
line and a reproducer under ``tests/sglang/defects/``), a strict-only rule (an SDK promise
beyond SGLang's contract), or a check of the suite that SGLang's own use of the backend
does not support. ``classify(row, test)`` picks the first finding that matches.

SGLang source lines are of the ``sglang==0.5.23`` wheel, relative to ``sglang/srt/``.
"""

from __future__ import annotations

import dataclasses
import fnmatch

DEFECT, STRICT, SUITE = "defect", "strict", "suite"


@dataclasses.dataclass(frozen=True)
class Finding:
    #: Matrix rows it applies to (fnmatch patterns).
    rows: tuple[str, ...]
    #: Suite test functions it explains (fnmatch patterns, without parameters).
    tests: tuple[str, ...]
    kind: str
    text: str
    source: str = ""
    reproducer: str = ""


FINDINGS: tuple[Finding, ...] = (
    # -- defects of SGLang's backends -------------------------------------------------------
    Finding(
        ("sim",),
        (
            "test_get_after_set_is_byte_exact",
            "test_get_returns_each_pages_own_bytes",
            "test_legacy_get_set_is_byte_exact",
            "test_batch_larger_than_storage_batch_size",
            "test_v1_results_are_per_key",
            "test_sidecar_pool_round_trip",
            "test_half_written_page_never_a_hit",
            "test_threads_mixing_ops_no_torn_page_no_lost_write",
            "test_matches_reference_model",
            "test_set_existing_page_keeps_original",
            "test_duplicate_keys_in_one_batch",
            "test_clear_is_scoped_to_the_namespace",
            "test_*",
        ),
        DEFECT,
        "`sim` stores keys only: `batch_set`/`batch_set_v1`/`batch_set_v2` record the key and "
        "return True, and a read of that key reports a hit without writing a byte into the host "
        "pool, so SGLang loads whatever the host pages held (its docstring says so: "
        'benchmark-only, "served KV is garbage").',
        "mem_cache/storage/sim_storage.py:132 (batch_get_v1 returns presence only), :107 (batch_get returns the target unchanged)",
        "tests/sglang/defects/test_sim_serves_unwritten_pages.py",
    ),
    Finding(
        ("shm",),
        ("test_*",),
        DEFECT,
        "`shm` stores nothing: `batch_set` and `batch_set_v2` return True for every page, while "
        "`exists`, `batch_get` and `batch_exists_v2` always miss, so SGLang counts every backup as "
        "done and never gets a page back (a placeholder for the shared-memory host allocator, "
        "registered as a storage backend).",
        "mem_cache/storage/shm/hicache_shm.py:54 (batch_set returns True), :62 (exists returns False)",
        "tests/sglang/defects/test_shm_claims_writes_it_drops.py",
    ),
)


def classify(row: str, test: str) -> Finding | None:
    """The finding that explains ``test`` failing on ``row`` (``test`` may carry pytest
    parameters), or ``None``."""
    name = test.split("[", 1)[0]
    for f in FINDINGS:
        if any(fnmatch.fnmatchcase(row, r) for r in f.rows) and any(
            fnmatch.fnmatchcase(name, t) for t in f.tests
        ):
            return f
    return None
