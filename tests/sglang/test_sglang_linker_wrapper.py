"""``TransportLinker`` driven by SGLang 0.5.23's own ``UnifiedCacheLinkerWrapper``
(collected only in ``tox -e sglang``), so the calls come in the order and with the values
SGLang's scheduler uses: ``match`` -> ``lookup``; ``load_back`` -> ``load``;
``start_layer_wise_loading``; ``finish_loads`` -> ``finish_layer_wise_loading``; and
``offload_nodes`` -> ``offload``, then ``num_completed_offloads`` /
``take_completed_offloads`` / ``commit_completed_offloads``.

The radix tree under the wrapper is a stand-in (SGLang's ``UnifiedRadixCache`` imports its
serving stack, which the CPU test env lacks): it holds one FULL component that builds
transfers exactly as SGLang's ``FullComponent`` does, over a real CPU device pool. Page
keys are SGLang's own storage hashes (``get_storage_hash_str``), as the wrapper computes
them.
"""

from __future__ import annotations

import time
import uuid
from array import array
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from sglang.srt.mem_cache.base_prefix_cache import MatchResult
from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer
from sglang.srt.mem_cache.radix_cache import RadixKey
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang.srt.mem_cache.unified_cache.components import ExternalLinkerLoadPhase, LinkerTransferPhase
from sglang.srt.mem_cache.unified_cache.unified_cache_linker import UnifiedCacheLinkerWrapper
from sglang.srt.mem_cache.utils import get_storage_hash_str
from sglang_linker_stand import all_bytes, build, device_pool, linker_config, slots
from sglang_pools import PAGE_SIZE
from sglang_servers import BACKEND_NAMES, backend_config


class _Full:
    """SGLang's ``FullComponent`` transfer rules over a list of free device pages."""

    component_type = ComponentType.FULL

    def __init__(self, free_pages: list[int]) -> None:
        self.free = list(free_pages)

    def build_external_linker_transfer(self, phase: Any, node: Any, keys: Any) -> PoolTransfer | None:
        if not keys:
            return None
        if phase == LinkerTransferPhase.LOOKUP:
            return PoolTransfer(name=PoolName.KV, keys=list(keys))
        assert phase == LinkerTransferPhase.LOAD
        pages = [self.free.pop(0) for _ in keys]
        idx = torch.cat([slots(p, 1) for p in pages])
        return PoolTransfer(name=PoolName.KV, device_indices=idx, keys=list(keys))

    def update_external_linker_load(
        self, phase: Any, req: Any, full: Any, transfer: Any, prefix_len: int
    ) -> Any:
        assert phase != ExternalLinkerLoadPhase.ABORT, "the wrapper aborted the load"
        return transfer


class _Tree:
    """The parts of ``UnifiedRadixCache`` the wrapper touches."""

    def __init__(self, free_pages: list[int], offloads: dict[int, PoolTransfer]) -> None:
        full = _Full(free_pages)
        self.tree_components = (ComponentType.FULL,)
        self.components = {ComponentType.FULL: full}
        self._components_tuple = (full,)
        self.page_size = PAGE_SIZE
        self.finished: list[tuple[Any, Any, bool]] = []
        self.locks = 0
        self.tree_core = SimpleNamespace(
            is_eagle=False,
            enable_external_cache_linker=False,
            build_external_linker_offload_transfers=lambda node: [offloads[node]],
            mark_external_linker_offload_pending=lambda node: None,
            finish_external_linker_offload=lambda pub, lock, ok: self.finished.append((pub, lock, ok)),
        )

    def _all_reduce_attn_groups(self, tensor: torch.Tensor, op: Any) -> None:
        """One rank: the reduction is the identity."""

    def get_last_hash_value(self, node: Any) -> None:
        return None

    def inc_lock_ref(self, node: Any) -> Any:
        self.locks += 1
        return SimpleNamespace(to_dec_params=lambda: None)

    def dec_lock_ref(self, node: Any, params: Any) -> None:
        self.locks -= 1


@pytest.mark.parametrize("name", BACKEND_NAMES)
def test_linker_under_sglangs_wrapper(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    cfg = backend_config(name, request, tmp_path)
    model = f"org/wrap-{uuid.uuid4().hex[:8]}"
    tokens = array("q", range(1000, 1000 + 3 * PAGE_SIZE + 2))  # 3 whole pages and a tail
    hashes = get_storage_hash_str(RadixKey(tokens[: 3 * PAGE_SIZE]), None, page_size=PAGE_SIZE)
    assert isinstance(hashes, list) and len(hashes) == 3

    # offload: the write-through chain of one node holding pages 2..4 of the source pool
    src, dst = device_pool("mha", seed=11), device_pool("mha")
    offloads = {"node": PoolTransfer(name=PoolName.KV, device_indices=slots(2, 3), keys=list(hashes))}
    wtree = _Tree([], offloads)
    writer = UnifiedCacheLinkerWrapper(wtree, build(src, linker_config(name, cfg), model=model))
    try:
        writer.offload_nodes(["node"])
        end = time.monotonic() + 20
        while writer.num_completed_offloads() < 1:
            assert time.monotonic() < end, "the offload never completed"
            time.sleep(0.005)
        done = writer.take_completed_offloads(writer.num_completed_offloads())
        assert done == [True]
        writer.commit_completed_offloads(done)
        assert wtree.finished == [(["node"], "node", True)] and wtree.locks == 0
    finally:
        writer.close()

    # match -> load_back -> start -> finish_loads, into pages 9..11 of another pool
    rtree = _Tree([9, 10, 11], {})
    reader = UnifiedCacheLinkerWrapper(rtree, build(dst, linker_config(name, cfg), model=model))
    try:
        req = SimpleNamespace(rid="req-1", last_node="root", kv=None, swa_branching_seqlen=None)
        miss = MatchResult(
            device_prefix_len=0, last_device_node="root", last_host_node="root", best_match_node="root"
        )
        result = reader.match(RadixKey(tokens), req, miss)
        assert result.host_hit_length == 3 * PAGE_SIZE and reader.has_hit("req-1")
        blank = all_bytes(dst, slots(9, 3))
        n, _ = reader.load_back(req)
        assert n == 3 * PAGE_SIZE
        assert all_bytes(dst, slots(9, 3)) == blank, "the linker wrote before the batch started"
        index = reader.start_layer_wise_loading()
        assert index >= 0
        assert reader.finish_loads() == []  # every layer landed: no request aborted
        assert all_bytes(dst, slots(9, 3)) == all_bytes(src, slots(2, 3))

        # a request whose pages are gone: match finds nothing
        other = array("q", range(5000, 5000 + 2 * PAGE_SIZE))
        req2 = SimpleNamespace(rid="req-2", last_node="root", kv=None, swa_branching_seqlen=None)
        assert reader.match(RadixKey(other), req2, miss).host_hit_length == 0
    finally:
        reader.close()
