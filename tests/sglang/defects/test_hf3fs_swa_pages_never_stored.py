"""``hf3fs`` (``HiCacheHF3FS``) sizes a hybrid pool's pages from the K half only: an SWA
pool's pages never fit, so they are never stored.

SGLang's hybrid controller backs up a hybrid-SWA model's sliding-window pages through
``batch_set_v2`` with a ``PoolTransfer(name=PoolName.SWA, ...)`` and reads them back with
``batch_get_v2``, counting the leading run of ``True`` as the pages written / hit
(``mem_cache/hybrid_cache/hybrid_cache_controller.py``, ``_page_backup_with_stable_layout``
and ``_page_transfer_sidecar``; ``managers/cache_controller.py``, the KV-derived sidecar
read, clamps the KV hit to it). The SWA host pool is an ``MHATokenToKVPoolHost`` over the
sliding-window layers, whose flat data page is K and V:
``get_size_per_token() = (head_dim + v_head_dim) * head_num * layer_num * itemsize``
(``mem_cache/pool_host/mha.py:290``).

``HiCacheHF3FS.register_mem_host_pool_v2`` sizes the pool's file slots as
``pool_bytes_per_page = host_pool.get_ksize_per_token() * pool_page_size``
(``mem_cache/storage/hf3fs/storage_hf3fs.py:588``), and ``get_ksize_per_token()`` is
``get_size_per_token() // 2`` for MHA (``pool_host/mha.py:302``). The K-half size is right
for the KV pool only because the v1 zero-copy path stores K and V under separate keys
(``_get_mha_zero_copy_keys``); ``_pool_batch_set`` writes the whole flat page
(``host_pool.get_data_page(host_idx, flat=True)``, ``storage_hf3fs.py:826``), twice the
slot, and counts a page written only if ``r == ctx.bytes_per_page`` (``storage_hf3fs.py:839``).
So every SWA page returns ``False`` (the mock client writes the 2x page over its neighbour's
slot and reports 2x; the real usrbio client's ``check`` raises ``ValueError`` and closes
itself), the controller never marks an SWA page backed up, and a hybrid-SWA prefetch never
hits. ``_pool_batch_get`` has the same mismatch on the read side
(``read_result == ctx.bytes_per_page``, ``storage_hf3fs.py:777``). Sizing the slot with
``host_pool.get_size_per_token()`` (the flat page's size) would fix both.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

# HiCacheHF3FS's local metadata client lives in a module that imports fastapi
# (tests/sglang/requirements.txt); without it there is nothing to reproduce.
pytest.importorskip("sglang.srt.mem_cache.storage.hf3fs.mini_3fs_metadata_server")

from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang_pools import PAGE_SIZE, mha_pool, swa_pool

PAGES = 3


@pytest.mark.xfail(
    strict=True,
    reason="SGLang 0.5.23: HF3FS sizes a hybrid pool's pages from the K half only "
    "(storage_hf3fs.py register_mem_host_pool_v2): SWA pages are never stored",
)
def test_swa_pages_hf3fs_writes_can_be_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SGLang's single-machine config (local metadata, mock client), with a 32 MiB file: the
    # local metadata keeps a Python list of every free page
    cfg = tmp_path / "hf3fs.json"
    cfg.write_text(
        json.dumps(
            {
                "file_path_prefix": str(tmp_path / "hicache"),
                "file_size": 32 << 20,
                "numjobs": 16,
                "entries": 8,
            }
        )
    )
    monkeypatch.setenv("SGLANG_HICACHE_HF3FS_CONFIG_PATH", str(cfg))
    kv, swa = mha_pool("page_first"), swa_pool()
    config = sgl.HiCacheStorageConfig(
        tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
        model_name="org/model", extra_config={"use_mock_hf3fs_client": True},
    )  # fmt: skip
    # HiCacheHF3FS.__init__ takes over SIGINT/SIGTERM/SIGQUIT; give them back to pytest after
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)}
    store = StorageBackendFactory.create_backend("hf3fs", config, kv)
    try:
        store.register_mem_pool_host(kv)
        store.register_mem_host_pool_v2(swa, PoolName.SWA)

        def transfer() -> PoolTransfer:
            return PoolTransfer(
                name=PoolName.SWA,
                keys=[f"page-{i}" for i in range(PAGES)],
                host_indices=torch.arange(0, PAGES * PAGE_SIZE, dtype=torch.int64),
                hit_policy=PoolHitPolicy.TRAILING_PAGES,
            )

        for i in range(PAGES):
            swa.get_data_page(i * PAGE_SIZE, flat=False).random_(0, 100)
        pages = [swa.get_data_page(i * PAGE_SIZE, flat=True).clone() for i in range(PAGES)]
        written = store.batch_set_v2([transfer()])[PoolName.SWA]
        assert written == [True] * PAGES, (
            f"batch_set_v2 of {PAGES} SWA pages returned {written}: the controller never counts them as backed up"
        )
        for i in range(PAGES):
            swa.get_data_page(i * PAGE_SIZE, flat=False).zero_()
        read = store.batch_get_v2([transfer()])[PoolName.SWA]
        assert read == [True] * PAGES, f"batch_get_v2 of {PAGES} written SWA pages returned {read}"
        for i, page in enumerate(pages):
            assert torch.equal(swa.get_data_page(i * PAGE_SIZE, flat=True), page), (
                f"SWA page {i} read back differs"
            )
    finally:
        store.close()
        for s, h in handlers.items():
            signal.signal(s, h)
