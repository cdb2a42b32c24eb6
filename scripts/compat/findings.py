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
    Finding(
        ("hf3fs",),
        ("test_sidecar_pool_round_trip", "test_v2_exists_endpoint_vectors", "test_v2_*"),
        DEFECT,
        "`hf3fs` never stores SWA sidecar pages: `register_mem_host_pool_v2` sizes a hybrid "
        "pool's pages from the K half only (`get_ksize_per_token() * page_size`), while an SWA "
        "page holds K and V, so every `batch_set_v2` of SWA pages returns False and SGLang's "
        "hybrid prefetch never gets an SWA hit.",
        "mem_cache/storage/hf3fs/storage_hf3fs.py:588 (pool_bytes_per_page from the K half)",
        "tests/sglang/defects/test_hf3fs_swa_pages_never_stored.py",
    ),
)


_LEGACY = "managers/cache_controller.py:650-665 (these backends, and dynamic with interface_v1, go through _page_get_zero_copy / _page_set_zero_copy)"
_LEADING_RUN = (
    "managers/cache_controller.py:1113-1127 (_page_get_zero_copy counts the leading run of True), "
    "mem_cache/hicache_storage.py:201-205 (count_pool_hits, v2)"
)

#: Checks of main's suite that SGLang's use of a backend does not support; each goes to
#: strict or is rewritten on the path SGLang takes (the suite's own work).
SUITE_FINDINGS: tuple[Finding, ...] = (
    Finding(
        ("*",),
        ("test_empty_batches",),
        STRICT,
        "empty get/set batches: SGLang's controller sends 1 to 128 pages per get/set call "
        "(STORAGE_BATCH_SIZE) and never an empty one.",
        "mem_cache/hicache_storage.py:24, managers/cache_controller.py _page_transfer",
    ),
    Finding(
        ("*",),
        ("test_unsupported_v1_v2_answer_like_sglang_base",),
        SUITE,
        "despite its name, this test failed on an empty batch (see the empty-batch rule).",
        "mem_cache/hicache_storage.py:24",
    ),
    Finding(
        ("*",),
        ("test_duplicate_keys_in_one_batch",),
        STRICT,
        "a key repeated in one batch: page keys are chained hashes of token ids, so one "
        "request's batch never repeats a key.",
        "mem_cache/utils.py get_hash_str (chained page hashes)",
    ),
    Finding(
        ("*",),
        ("test_set_existing_page_keeps_original",),
        STRICT,
        "first write wins: SGLang relies only on a rewrite of an existing key returning True "
        "(a False stops the rest of the backup); a rewrite may store different bytes when "
        "kernels are not batch-invariant.",
        "managers/cache_controller.py:1428-1433",
    ),
    Finding(
        ("nixl*",),
        ("test_legacy_get_set_is_byte_exact", "test_missing_page_is_a_miss"),
        SUITE,
        "legacy get/set on a backend SGLang routes through v1: HiCacheNixl's get/set/batch_get/"
        "batch_set raise NotImplementedError('deprecated; use batch_get_v1'), and SGLang never "
        "calls them for nixl.",
        _LEGACY,
    ),
    Finding(
        ("nixl*",),
        ("test_v1_results_are_per_key", "test_sidecar_pool_round_trip"),
        STRICT,
        "per-key results: NIXL answers a batch all-or-nothing ([False, False] for [present, "
        "missing]); SGLang uses only the leading run of True, and a miss reported for a present "
        "page is safe.",
        _LEADING_RUN,
    ),
    Finding(
        ("mooncake",),
        ("test_clear_is_scoped_to_the_namespace",),
        DEFECT,
        "`clear()` is `remove_all()`, which removes every object of the Mooncake cluster (once "
        "its lease has expired), including other deployments' keys under another "
        "`extra_backend_tag`, though every key this store writes carries its `config_prefix`.",
        "mem_cache/storage/mooncake_store/mooncake_store.py:1628-1629 (clear), :456-474 (config_prefix)",
        "tests/sglang/defects/test_mooncake_clear_wipes_other_tenants.py",
    ),
    Finding(
        ("*",),
        ("test_matches_reference_model",),
        SUITE,
        "the stateful test: an empty get batch, a legacy call on a v1 backend, or (NIXL) "
        "hypothesis' FlakyStrategyDefinition; it repeats the findings above.",
    ),
)


def classify(row: str, test: str) -> Finding | None:
    """The finding that explains ``test`` failing on ``row`` (``test`` may carry pytest
    parameters), or ``None``."""
    name = test.split("[", 1)[0]
    for f in (*FINDINGS, *SUITE_FINDINGS):
        if any(fnmatch.fnmatchcase(row, r) for r in f.rows) and any(
            fnmatch.fnmatchcase(name, t) for t in f.tests
        ):
            return f
    return None
