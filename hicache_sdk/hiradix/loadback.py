"""``load_back(node, mem_quota, req)``: L2 -> L1 (spec 5.6).

The host-only nodes on the path to ``node`` (those after the device run) are copied to
device memory in one batched transfer. Host and device lock references are held for the
whole transfer; the device indices are committed to the nodes only after the copy
succeeded; on any failure the device slots are freed, the locks released and nothing is
marked GPU-resident. Returns the tokens loaded (0 on skip or failure, with the reason counted).
"""

from __future__ import annotations

import torch

from .cache import CacheState
from .counters import Abort
from .devpool import CopyFailed
from .tree import TreeNode


def load_back(state: CacheState, node: TreeNode, mem_quota: int | None = None, req_id: str = "") -> int:
    path = node.path()
    todo = [n for n in path if not n.on_device]
    if not todo:
        return 0
    if any(not n.on_host for n in todo):
        raise ValueError(f"node {node.id}: a node on the path is neither on device nor on host")
    ps = state.config.page_size
    kv_tokens = len(todo) * ps
    tree = state.tree
    tree.inc_host_lock_ref(node)
    tree.inc_lock_ref(node)
    try:
        if kv_tokens < max(1, state.config.load_back_threshold):
            state.counters.abort(req_id, Abort.BELOW_LOAD_BACK_THRESHOLD)
            return 0
        if mem_quota is not None and kv_tokens > mem_quota:
            state.counters.abort(req_id, Abort.OVER_QUOTA)
            return 0
        dev_idx = state.alloc_device_evicting(kv_tokens)
        if dev_idx is None:
            state.counters.abort(req_id, Abort.DEVICE_POOL_FULL)
            return 0
        host_idx = torch.cat([n.host_value for n in todo if n.host_value is not None])
        try:
            state.dev.load_from_host(state.host_kv, host_idx, dev_idx)
        except CopyFailed:
            state.dev.free(dev_idx)
            state.counters.abort(req_id, Abort.TRANSFER_FAILED)
            return 0
        for i, n in enumerate(todo):
            n.value = dev_idx[i * ps : (i + 1) * ps]
        state.counters.trace(req_id).device_committed_tokens += kv_tokens
        return kv_tokens
    finally:
        tree.dec_lock_ref(node)
        tree.dec_host_lock_ref(node)
