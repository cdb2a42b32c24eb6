"""A minimal engine around the read and write paths: what the demo and the tests drive.

Per request: ``match_prefix`` -> ``prefetch_from_storage`` on the storage candidate span
-> the admission gate (:meth:`Engine.try_admit`, polled) -> ``load_back`` of the host run
-> "prefill" of the rest (KV computed by :func:`page_kv`, a deterministic function of the
page's chained hash, i.e. of (prefix, layer)) -> the write path. :meth:`Engine.verify`
compares every device page of a served prefix with :func:`page_kv`, so a page served from
the wrong prefix (or with the wrong bytes) is caught.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .backup import WritePath
from .cache import CacheState
from .counters import explain
from .loadback import load_back
from .prefetch import Prefetcher
from .sidecars import side_page_ok
from .tree import TreeNode


def page_kv(hash_hex: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Deterministic KV of one page, shape ``(2, page_size, layers, heads, head_dim)``: a
    function of the page hash (which chains the whole prefix) and of the layer index."""
    seed = int(hash_hex[:12], 16)
    n = 1
    for d in shape:
        n *= d
    base = torch.arange(n, dtype=torch.int64).view(shape)
    layer = torch.arange(shape[2], dtype=torch.int64).view(1, 1, -1, 1, 1)
    vals = (base * 31 + seed + layer * 1_000_003) % 251 - 125
    return vals.to(dtype)


@dataclass
class Served:
    req_id: str
    tokens: int
    gpu_hit: int = 0
    host_hit: int = 0
    storage_hit: int = 0
    computed: int = 0
    blocked_polls: int = 0
    waited_s: float = 0.0
    nodes: list[TreeNode] = field(default_factory=list)


class Engine:
    def __init__(self, state: CacheState) -> None:
        self.s = state
        self.prefetcher = Prefetcher(state)
        self.writer = WritePath(state)
        self._pending: dict[str, tuple[list[int], Served, float]] = {}

    def explain(self, req_id: str) -> dict[str, object]:
        return explain(self.s.counters, req_id)

    def _page_shape(self) -> tuple[int, ...]:
        kv = self.s.dev.kv
        return (2, self.s.config.page_size, *kv.shape[2:])

    # -- scheduler-facing steps --------------------------------------------------------------

    def submit(self, req_id: str, tokens: list[int]) -> None:
        """Request arrival: match and, where the rules allow, start an L3 prefetch."""
        m = self.s.tree.match_prefix(tokens)
        tr = self.s.counters.trace(req_id)
        tr.gpu_hit_tokens, tr.host_hit_tokens = m.device_len, m.host_len
        if m.storage_span:
            self.prefetcher.prefetch_from_storage(req_id, m.last_host_node, m.storage_span)
        self._pending[req_id] = (
            tokens,
            Served(req_id, len(tokens), m.device_len, m.host_len),
            self.s.clock.now(),
        )

    def try_admit(self, req_id: str, queue_head: bool = True) -> Served | None:
        """One admission poll (one scheduling pass for the request); the served request when
        admitted, else ``None``. A due prefetch retry re-matches and re-issues the L3 lookup
        first. ``queue_head=False``: the request is not at the head of the waiting queue, so
        it waits for an armed retry (the head never does)."""
        self.writer.drain()
        tokens, served, t0 = self._pending[req_id]
        if self.prefetcher.retries.tick(req_id):
            m = self.s.tree.match_prefix(tokens)
            if m.storage_span:
                self.prefetcher.prefetch_from_storage(req_id, m.last_host_node, m.storage_span, retry=True)
        if not self.prefetcher.check_prefetch_progress(req_id, queue_head):
            served.blocked_polls += 1
            return None
        self.prefetcher.retries.forget(req_id)
        del self._pending[req_id]
        served.waited_s = self.s.clock.now() - t0
        self._run(req_id, tokens, served)
        return served

    def cancel(self, req_id: str) -> None:
        """The request went away (its open storage hit is excluded from the counters)."""
        self.prefetcher.cancel(req_id)
        self._pending.pop(req_id, None)

    def serve(self, req_id: str, tokens: list[int], poll_s: float = 0.0005) -> Served:
        """Submit and poll the gate until admitted (real clock and thread runner)."""
        self.submit(req_id, tokens)
        while True:
            served = self.try_admit(req_id)
            if served is not None:
                return served
            time.sleep(poll_s)

    # -- after admission ----------------------------------------------------------------------

    def _run(self, req_id: str, tokens: list[int], served: Served) -> None:
        s, ps = self.s, self.s.config.page_size
        m = s.tree.match_prefix(tokens)
        served.storage_hit = s.counters.trace(req_id).host_filled_tokens
        # the tiers as they stand at admission (the device match may have shrunk while queued)
        served.gpu_hit = m.device_len
        served.host_hit = max(0, m.host_len - served.storage_hit)
        node = m.last_host_node
        s.tree.inc_lock_ref(node)  # keep the matched path while the rest is computed
        try:
            loaded_back = True
            if m.host_len and load_back(s, node, None, req_id) == 0:
                # not loaded: the host run is recomputed (drop the match below the device run)
                node = m.last_device_node
                loaded_back = False
            self._settle_storage_hit(req_id, loaded_back)
            path = node.path()
            rest = tokens[len(path) * ps : len(tokens) // ps * ps]
            new_nodes = s.tree.insert(node, rest)
            todo = [n for n in new_nodes if not n.on_device]
            if todo:
                s.tree.inc_lock_ref(node)
                try:
                    idx = s.alloc_device_evicting(len(todo) * ps)
                finally:
                    s.tree.dec_lock_ref(node)
                if idx is None:
                    raise RuntimeError(f"{req_id}: device pool too small for {len(todo) * ps} tokens")
                shape = self._page_shape()
                for i, n in enumerate(todo):
                    assert n.hash is not None
                    slots = idx[i * ps : (i + 1) * ps].to(s.dev.kv.device)
                    s.dev.kv.index_copy_(1, slots, page_kv(n.hash, shape, s.dev.dtype).to(s.dev.kv.device))
                    n.value = idx[i * ps : (i + 1) * ps]
            served.computed = len(todo) * ps
            served.nodes = path + new_nodes
            self.writer.on_hit(served.nodes)
        finally:
            s.tree.dec_lock_ref(m.last_host_node)

    def _settle_storage_hit(self, req_id: str, loaded_back: bool) -> None:
        """Admission closes the request's storage hit (SGLang's
        ``_account_prefill_cache_admission``): the L3-filled pages now on the device are
        fulfilled; the rest is ``device_capacity`` when the load-back fell short, else
        ``cache_admission_shortfall``."""
        s, ps = self.s, self.s.config.page_size
        nodes = self.prefetcher.loaded_nodes.pop(req_id, [])
        fulfilled = ps * sum(1 for n in nodes if n.on_device)
        if s.counters.open_tokens(req_id) <= fulfilled:
            s.counters.finish(req_id, fulfilled, None)
            return
        aborts = s.counters.trace(req_id).aborts
        cause = aborts[-1] if aborts and not loaded_back else None
        reason = "cache_admission_shortfall" if loaded_back else "device_capacity"
        s.counters.finish(req_id, fulfilled, reason, cause, fulfilled_tokens=fulfilled)

    def verify(self, nodes: list[TreeNode]) -> bool:
        """Every device-resident node in ``nodes`` holds exactly :func:`page_kv` of its hash."""
        shape = self._page_shape()
        for n in nodes:
            if n.value is None or n.hash is None:
                continue
            got = self.s.dev.kv.index_select(1, n.value.to(self.s.dev.kv.device)).cpu()
            if not torch.equal(got, page_kv(n.hash, shape, self.s.dev.dtype)):
                return False
        return True

    def verify_sidecars(self) -> bool:
        """Every host-resident sidecar page holds :func:`~hicache_sdk.hiradix.sidecars.side_page`
        of its node's hash: KV-derived pools at the node's KV host slots, trailing pools at
        the node's own ``side`` slots."""
        for n in self.s.tree.walk():
            if n.hash is None:
                continue
            for sc in self.s.sidecars:
                if sc.kv_derived and n.host_value is not None:
                    if not side_page_ok(sc, int(n.host_value[0]), n.hash):
                        return False
                elif sc.name in n.side and not side_page_ok(sc, int(n.side[sc.name][0]), n.hash):
                    return False
        return True

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every storage backup has been acknowledged (real runner)."""
        end = time.monotonic() + timeout_s
        while self.writer.ongoing and time.monotonic() < end:
            self.writer.drain()
            time.sleep(0.001)
        self.writer.drain()
