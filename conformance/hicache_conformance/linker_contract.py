"""The contract of SGLang 0.5.23's ``UnifiedCacheLinker``, as checks on any linker class.

Every check builds its linkers through SGLang's own factory
(``create_unified_cache_linker(..., backend="dynamic")``), so an abstract or mis-signatured
class fails with the factory's own reason, over SGLang's real CPU device pools
(``MHATokenToKVPool`` / ``MLATokenToKVPool``), and raises ``AssertionError`` naming the
broken rule. The rules, each from SGLang's ``unified_cache_linker.py`` and its callers:

* ``lookup`` returns every restorable prefix length in pages, ascending (the wrapper
  intersects the sets across ranks, so the longest alone is wrong);
* ``load`` only queues: nothing is written before ``start_layer_wise_loading``;
* after ``wait_until(l)`` returns for a batch that did not fail, layer ``l``'s bytes are in
  the pool, byte for byte (the forward reads them next), and all of them when ``finish``
  returns ``True``;
* a page that cannot load makes ``finish_layer_wise_loading`` return ``False``, with no
  exception (the scheduler aborts those requests);
* ``cancel_queued_load`` before the start writes nothing;
* an offload reads device memory only after its ``record_offload_ready`` events, and the
  results pop first-in, first-out with exact counts;
* ``reset`` quiesces and ``close`` is idempotent;
* MLA pages are written by the owner rank (TP rank 0) only;
* SWA windows: for an SWA model (an ``SWAKVPool``, components ``FULL`` and ``SWA``) a
  length is restorable only with its trailing window's SWA pages (SGLang's
  ``TRAILING_PAGES`` rule, as ``batch_exists_v2`` folds it), so ``lookup`` is sparse, and a
  load restores both pools;
* Mamba windows: for a hybrid Mamba model (a ``HybridLinearKVPool`` over an MLA pool and a
  ``MambaPool``, components ``FULL`` and ``MAMBA``) the Mamba state is one slot per node,
  stored under the node's last page (``TRAILING_PAGES``, a window of one page), so a length
  is restorable only where a state was stored: ``lookup`` is sparse, and a load restores
  the KV pages and the state. (An MLA full pool, so that SGLang's own Mooncake linker can
  be checked too: its view builder serves Mamba only over MLA.)

Only imported where SGLang is installed (and importable: a CPU machine needs stand-ins for
its GPU-only imports).
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from hicache_sdk.bench.linker import fill_buffers

__all__ = ["CHECKS", "LinkerEnv", "linker_env"]

PAGE = 4
LAYERS = 3
TOKENS = 64


@dataclass
class LinkerEnv:
    """How the checks build linkers: ``module:Class`` of the linker, its
    ``linker_extra_config`` (``tp_rank``/``tp_size`` are added for rank checks when the
    class accepts them), and a fresh model name per check (one namespace)."""

    module: str
    cls: str
    extra: dict[str, Any]
    made: list[Any]

    def build(
        self,
        pool: Any,
        model: str,
        *,
        components: set[str] | None = None,
        req_pool: Any = None,
        **extra: Any,
    ) -> Any:
        """A linker over ``pool`` built by SGLang's factory, for the components named
        (``ComponentType`` names; default ``{"FULL"}``); ``req_pool``: the request pool
        (a hybrid Mamba model's holds the Mamba state)."""
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
        from sglang.srt.mem_cache.unified_cache.linker_factory import create_unified_cache_linker

        params = CacheInitParams(
            disable=False,
            req_to_token_pool=req_pool,
            token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool),
            page_size=PAGE,
        )
        config = {
            "linker": self.cls,
            "linker_module_path": self.module,
            "linker_extra_config": {**self.extra, **extra},
        }
        server_args = SimpleNamespace(model_path=model, tp_size=int(extra.get("tp_size", 1)))
        wanted = {ComponentType[name] for name in (components or {"FULL"})}
        linker = create_unified_cache_linker(
            server_args, params, backend="dynamic", config=config, components=wanted
        )
        self.made.append(linker)
        return linker

    def close(self) -> None:
        for linker in self.made:
            try:
                linker.close()
            except Exception:
                pass
        self.made.clear()


def linker_env(linker: str, extra: dict[str, Any]) -> LinkerEnv:
    """``linker`` is ``module:Class``; ``extra`` its ``linker_extra_config``."""
    module, sep, cls = linker.partition(":")
    if not sep or not module or not cls:
        raise ValueError(f"linker must be 'module:Class', got {linker!r}")
    return LinkerEnv(module, cls, dict(extra), [])


# -- device pools and transfers --------------------------------------------------------------
def device_pool(kind: str = "mha", seed: int | None = None) -> Any:
    """SGLang's real CPU device pool, random bytes from ``seed`` (else zeros)."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool

    if kind == "mha":
        pool = MHATokenToKVPool(TOKENS, PAGE, torch.bfloat16, 2, 8, LAYERS, "cpu", False)
        bufs = [*pool.k_buffer, *pool.v_buffer]
    else:
        pool = MLATokenToKVPool(TOKENS, PAGE, torch.bfloat16, 8, 4, LAYERS, "cpu", False)
        bufs = list(pool.kv_buffer)
    fill_buffers(bufs, seed)
    return pool


def swa_pool(
    seed: int | None = None, *, swa_layers: tuple[int, ...] = (1,), full_layers: tuple[int, ...] = (0, 2)
) -> Any:
    """SGLang's real CPU ``SWAKVPool`` of an SWA model (by default full attention on layers 0
    and 2, a sliding window on layer 1), random bytes from ``seed`` (else zeros)."""
    from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool

    pool = SWAKVPool(
        size=TOKENS,
        size_swa=TOKENS // 2,
        page_size=PAGE,
        dtype=torch.bfloat16,
        head_num=2,
        head_dim=8,
        swa_attention_layer_ids=list(swa_layers),
        full_attention_layer_ids=list(full_layers),
        device="cpu",
    )
    fill_buffers(
        [b for sub in (pool.full_kv_pool, pool.swa_kv_pool) for b in (*sub.k_buffer, *sub.v_buffer)], seed
    )
    return pool


#: The hybrid Mamba model of :func:`mamba_pools`: full attention on layers 0 and 2, a Mamba
#: (linear attention) layer 1, and this many state slots.
MAMBA_FULL_LAYERS, MAMBA_LAYERS, MAMBA_SLOTS = [0, 2], [1], 8


def mamba_pools(kind: str = "mla", seed: int | None = None, *, swa: bool = False) -> tuple[Any, Any]:
    """SGLang's real CPU pools of a hybrid Mamba model: ``(kvcache, req_to_token_pool)``,
    a ``HybridLinearKVPool`` over an ``mla`` or ``mha`` full-attention pool (with ``swa``:
    an ``SWAKVPool``, full attention on layer 0 and a sliding window on layer 2) and a
    ``HybridReqToTokenPool`` holding the ``MambaPool`` (a Mamba2 state: one bfloat16 conv
    state, one float32 temporal state), random bytes from ``seed`` (else zeros)."""
    from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateDType, Mamba2StateShape
    from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool, HybridReqToTokenPool

    shape = Mamba2StateShape.create(
        tp_world_size=1, intermediate_size=8, n_groups=1, num_heads=2, head_dim=4, state_size=4, conv_kernel=4
    )
    params = Mamba2CacheParams(
        shape=shape,
        layers=MAMBA_LAYERS,
        dtype=Mamba2StateDType(conv=torch.bfloat16, temporal=torch.float32),
    )
    req_pool = HybridReqToTokenPool(
        size=4,
        mamba_size=MAMBA_SLOTS,
        mamba_spec_state_size=4,
        max_context_len=TOKENS,
        device="cpu",
        enable_memory_saver=False,
        cache_params=params,
        mamba_layer_ids=MAMBA_LAYERS,
        enable_mamba_extra_buffer=False,
        enable_overlap_schedule=False,
    )
    if swa:
        kvcache: Any = swa_pool(swa_layers=(2,), full_layers=(0,))
        subs = [kvcache.full_kv_pool, kvcache.swa_kv_pool]
    else:
        kvcache = HybridLinearKVPool(
            size=TOKENS,
            dtype=torch.bfloat16,
            page_size=PAGE,
            head_num=2,
            head_dim=8,
            full_attention_layer_ids=MAMBA_FULL_LAYERS,
            device="cpu",
            mamba_pool=req_pool.mamba_pool,
            use_mla=kind == "mla",
            kv_lora_rank=8,
            qk_rope_head_dim=4,
        )
        subs = [kvcache.full_kv_pool]
    cache = req_pool.mamba_pool.mamba_cache
    kv_bufs = [
        b
        for sub in subs
        for b in (sub.kv_buffer if kind == "mla" and not swa else (*sub.k_buffer, *sub.v_buffer))
    ]
    fill_buffers([*kv_bufs, cache.temporal, *cache.conv], seed)
    return kvcache, req_pool


def mamba_state_bytes(req_pool: Any, slot: int) -> list[bytes]:
    """Every Mamba layer's state bytes of ``slot`` (temporal, then each conv state)."""
    cache = req_pool.mamba_pool.mamba_cache
    return [
        b"".join(
            bytes(t[layer][slot].contiguous().view(torch.uint8).numpy())
            for t in (cache.temporal, *cache.conv)
        )
        for layer in range(cache.temporal.shape[0])
    ]


def sub_pool_bytes(sub: Any, slots: torch.Tensor) -> list[bytes]:
    """Every layer's bytes of ``slots`` in one MHA (sub-)pool."""
    return [layer_bytes(sub, layer, slots) for layer in range(len(sub.k_buffer))]


def layer_bytes(pool: Any, layer: int, slots: torch.Tensor) -> bytes:
    bufs = (
        [pool.k_buffer[layer], pool.v_buffer[layer]] if hasattr(pool, "k_buffer") else [pool.kv_buffer[layer]]
    )
    return b"".join(bytes(b[slots].contiguous().view(torch.uint8).numpy()) for b in bufs)


def pool_bytes(pool: Any, slots: torch.Tensor) -> list[bytes]:
    return [layer_bytes(pool, layer, slots) for layer in range(LAYERS)]


def keys(n: int) -> list[str]:
    base = uuid.uuid4().hex
    return [hashlib.sha256(f"{base}-{i}".encode()).hexdigest() for i in range(n)]


def slots(first_page: int, n_pages: int) -> torch.Tensor:
    return torch.arange(first_page * PAGE, (first_page + n_pages) * PAGE, dtype=torch.int64)


def kv(page_keys: list[str], indices: torch.Tensor | None) -> list[Any]:
    from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer

    return [PoolTransfer(name=PoolName.KV, keys=list(page_keys), device_indices=indices)]


def kv_swa(
    page_keys: list[str], indices: torch.Tensor | None, window: list[str], swa_indices: torch.Tensor | None
) -> list[Any]:
    """The KV transfer and the SWA transfer of the trailing ``window``, as SGLang's SWA
    component builds them (``TRAILING_PAGES``, slots of the SWA pool)."""
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    swa = PoolTransfer(
        name=PoolName.SWA,
        keys=list(window),
        device_indices=swa_indices,
        hit_policy=PoolHitPolicy.TRAILING_PAGES,
    )
    return [*kv(page_keys, indices), swa]


def kv_mamba(
    page_keys: list[str], indices: torch.Tensor | None, last: list[str], state_slot: int | None
) -> list[Any]:
    """The KV transfer and the Mamba transfer, as SGLang's Mamba component builds them:
    one key (the last page's), ``TRAILING_PAGES``, one state slot (``None`` for a lookup)."""
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer

    mamba = PoolTransfer(
        name=PoolName.MAMBA,
        keys=list(last),
        device_indices=None if state_slot is None else torch.tensor([state_slot], dtype=torch.int64),
        hit_policy=PoolHitPolicy.TRAILING_PAGES,
    )
    return [*kv(page_keys, indices), mamba]


def offloaded(linker: Any, n: int, timeout: float = 20.0) -> list[bool]:
    """Pop ``n`` completed offloads in order (at most ``timeout`` seconds)."""
    end = time.monotonic() + timeout
    while linker.num_completed_offloads() < n:
        assert time.monotonic() < end, f"only {linker.num_completed_offloads()} of {n} offloads completed"
        time.sleep(0.005)
    return [linker.pop_completed_offload() for _ in range(n)]


def _stored(env: LinkerEnv, model: str, pool: Any, page_keys: list[str], first_page: int) -> None:
    writer = env.build(pool, model)
    assert writer.offload(kv(page_keys, slots(first_page, len(page_keys)))) is True, "offload refused"
    assert offloaded(writer, 1) == [True], "an offload of stored-able pages reported failure"


# -- the checks ------------------------------------------------------------------------------
def check_lookup_lists_every_prefix(env: LinkerEnv) -> None:
    model = f"org/lk-{uuid.uuid4().hex[:8]}"
    page_keys = keys(3)
    _stored(env, model, device_pool("mha", 1), page_keys, 1)
    reader = env.build(device_pool("mha"), model)
    got = reader.lookup("r", kv(page_keys, None))
    assert got == [1, 2, 3], (
        f"lookup must list every restorable prefix length, ascending: got {got}, want [1, 2, 3]"
    )
    holed = [page_keys[0], keys(1)[0], page_keys[2]]
    got = reader.lookup("r", kv(holed, None))
    assert got == [1], f"a missing page ends the restorable prefixes: got {got}, want [1]"
    assert reader.lookup("r", kv(keys(2), None)) == [], "absent pages must give []"


def check_layers_land_before_wait_returns(env: LinkerEnv) -> None:
    model = f"org/lw-{uuid.uuid4().hex[:8]}"
    src, dst = device_pool("mha", 2), device_pool("mha")
    page_keys = keys(3)
    _stored(env, model, src, page_keys, 2)
    reader = env.build(dst, model)
    # the moment a layer is marked complete, its bytes must already be in the pool
    early: list[int] = []
    complete = reader.layer_done_counter.complete

    def watched(index: int, layer: int) -> None:
        if layer_bytes(dst, layer, slots(7, 3)) != layer_bytes(src, layer, slots(2, 3)):
            early.append(layer)
        complete(index, layer)

    reader.layer_done_counter.complete = watched
    blank = pool_bytes(dst, slots(7, 3))
    assert reader.load("r", kv(page_keys, slots(7, 3))) is True, "load of stored pages refused"
    time.sleep(0.05)  # a linker that writes at load() time has done so by now
    assert pool_bytes(dst, slots(7, 3)) == blank, (
        "the linker wrote device memory before start_layer_wise_loading"
    )
    index = reader.start_layer_wise_loading()
    assert index >= 0, f"start_layer_wise_loading returned {index} with a load queued"
    counter = reader.layer_done_counter
    counter.set_consumer(index)
    for layer in range(LAYERS):
        counter.wait_until(layer)
        assert not early, f"layer(s) {early} marked complete before their bytes were in the device pool"
        assert layer_bytes(dst, layer, slots(7, 3)) == layer_bytes(src, layer, slots(2, 3)), (
            f"wait_until({layer}) returned before layer {layer}'s bytes were in the device pool"
        )
    assert reader.finish_layer_wise_loading(index) is True, "finish returned False for a load that landed"
    assert pool_bytes(dst, slots(7, 3)) == pool_bytes(src, slots(2, 3)), "the loaded pages differ"


def check_failed_load_finishes_false(env: LinkerEnv) -> None:
    model = f"org/lf-{uuid.uuid4().hex[:8]}"
    page_keys = keys(1)
    _stored(env, model, device_pool("mha", 3), page_keys, 0)
    reader = env.build(device_pool("mha"), model)
    assert reader.load("f", kv([page_keys[0], keys(1)[0]], slots(4, 2))) is True
    index = reader.start_layer_wise_loading()
    counter = reader.layer_done_counter
    counter.set_consumer(index)
    try:
        for layer in range(LAYERS):
            counter.wait_until(layer)
        ok = reader.finish_layer_wise_loading(index)
    except Exception as e:
        raise AssertionError(
            f"a failed load raised {type(e).__name__} into the forward / scheduler (finish must return False)"
        ) from e
    assert ok is False, "finish_layer_wise_loading returned True although a page was missing"


def check_cancel_before_start_writes_nothing(env: LinkerEnv) -> None:
    model = f"org/lc-{uuid.uuid4().hex[:8]}"
    page_keys = keys(2)
    _stored(env, model, device_pool("mha", 4), page_keys, 0)
    dst = device_pool("mha")
    reader = env.build(dst, model)
    blank = pool_bytes(dst, slots(5, 2))
    assert reader.load("c", kv(page_keys, slots(5, 2))) is True
    assert reader.cancel_queued_load("c") is True, "cancel_queued_load of a queued load returned False"
    assert reader.start_layer_wise_loading() == -1, "a cancelled load still started"
    time.sleep(0.05)
    assert pool_bytes(dst, slots(5, 2)) == blank, "a load cancelled before the start wrote device memory"


def check_offloads_are_fifo_and_wait_for_events(env: LinkerEnv) -> None:
    model = f"org/lo-{uuid.uuid4().hex[:8]}"
    src = device_pool("mha", 5)
    writer = env.build(src, model)
    reader = env.build(device_pool("mha"), model)
    gate = threading.Event()

    class _Gate:  # an event the forward has not reached yet
        def synchronize(self) -> None:
            gate.wait(10)

    original = writer.record_offload_ready
    writer.record_offload_ready = lambda: [_Gate(), *original()]
    first = keys(2)
    assert writer.offload(kv(first, slots(1, 2))) is True
    time.sleep(0.1)
    assert reader.lookup("o", kv(first, None)) == [], "an offload stored pages before its ready events fired"
    assert writer.num_completed_offloads() == 0, "an offload completed before its ready events fired"
    gate.set()
    writer.record_offload_ready = original
    # results pop in submission order: a page hash the key scheme refuses fails its offload
    batches = [["not-a-page-hash"], keys(1), keys(1), keys(1)]
    for i, page_keys in enumerate(batches):
        writer.offload(kv(page_keys, slots(4 + i, 1)))
    got = offloaded(writer, 5)
    assert got == [True, False, True, True, True], (
        f"offload results must pop first-in, first-out: got {got}, want [True, False, True, True, True]"
    )
    assert writer.num_completed_offloads() == 0, "more results than offloads"
    assert reader.lookup("o", kv(first, None)) == [1, 2], "the gated offload never stored its pages"


def check_reset_and_close(env: LinkerEnv) -> None:
    model = f"org/lr-{uuid.uuid4().hex[:8]}"
    page_keys = keys(1)
    _stored(env, model, device_pool("mha", 6), page_keys, 0)
    linker = env.build(device_pool("mha"), model)
    assert linker.load("x", kv(page_keys, slots(3, 1))) is True
    linker.offload(kv(keys(1), slots(5, 1)))
    linker.reset()
    assert linker.start_layer_wise_loading() == -1, "reset kept a queued load"
    assert linker.num_completed_offloads() == 0, "reset kept an unconsumed offload result"
    linker.close()
    try:
        linker.close()
    except Exception as e:
        raise AssertionError(f"a second close raised {type(e).__name__}: close must be idempotent") from e


def check_mla_owner_rank_writes(env: LinkerEnv) -> None:
    model = f"org/lm-{uuid.uuid4().hex[:8]}"
    src = device_pool("mla", 7)
    rank1 = env.build(src, model, tp_rank=1, tp_size=2)
    rank0 = env.build(src, model, tp_rank=0, tp_size=2)
    page_keys = keys(2)
    assert rank1.offload(kv(page_keys, slots(1, 2))) is True
    offloaded(rank1, 1)
    assert rank0.lookup("m", kv(page_keys, None)) == [], (
        "a non-owner rank wrote MLA pages (only TP rank 0 may)"
    )
    assert rank0.offload(kv(page_keys, slots(1, 2))) is True
    assert offloaded(rank0, 1) == [True]
    assert rank1.lookup("m", kv(page_keys, None)) == [1, 2], "rank 1 does not see the owner's MLA pages"


def check_swa_windows(env: LinkerEnv) -> None:
    """An SWA model: a restorable length needs its trailing window's SWA pages, so
    ``lookup`` is sparse; a load restores the full-attention and the SWA pages."""
    model = f"org/sw-{uuid.uuid4().hex[:8]}"
    swa = {"FULL", "SWA"}
    src, dst = swa_pool(11), swa_pool()
    writer = env.build(src, model, components=swa)
    page_keys = keys(4)
    # a node's offload: its 4 KV pages and the SWA pages of its last 2 (the window)
    assert writer.offload(kv_swa(page_keys, slots(1, 4), page_keys[2:], slots(3, 2))) is True
    assert offloaded(writer, 1) == [True], "an SWA model's offload reported failure"
    reader = env.build(dst, model, components=swa)
    got = reader.lookup("r", kv_swa(page_keys, None, page_keys[2:], None))
    assert got == [4], (
        f"lookup must follow the SWA window (TRAILING_PAGES): with SWA pages for pages 3-4 only, "
        f"4 is the one restorable length; got {got}"
    )
    got = reader.lookup("r", kv_swa(page_keys[:3], None, page_keys[1:3], None))
    assert got == [], f"a window without its SWA pages is not restorable (SWA window); got {got}"
    assert reader.load("r", kv_swa(page_keys, slots(5, 4), page_keys[2:], slots(1, 2))) is True
    index = reader.start_layer_wise_loading()
    assert reader.finish_layer_wise_loading(index) is True, "an SWA model's stored pages did not load"
    assert sub_pool_bytes(dst.full_kv_pool, slots(5, 4)) == sub_pool_bytes(src.full_kv_pool, slots(1, 4)), (
        "the full-attention pages loaded other bytes"
    )
    assert sub_pool_bytes(dst.swa_kv_pool, slots(1, 2)) == sub_pool_bytes(src.swa_kv_pool, slots(3, 2)), (
        "the SWA window's pages loaded other bytes"
    )


def check_mamba_windows(env: LinkerEnv) -> None:
    """A hybrid Mamba model: a restorable length needs the Mamba state stored at its last
    page, so ``lookup`` is sparse; a load restores the KV pages and the state."""
    model = f"org/mb-{uuid.uuid4().hex[:8]}"
    mamba = {"FULL", "MAMBA"}
    (src, src_req), (dst, dst_req) = mamba_pools("mla", 12), mamba_pools("mla")
    writer = env.build(src, model, components=mamba, req_pool=src_req)
    page_keys = keys(4)
    # two nodes of two pages each: their KV pages, and each node's state under its last page
    for node, state in ((0, 1), (1, 3)):
        node_keys = page_keys[2 * node : 2 * node + 2]
        assert writer.offload(kv_mamba(node_keys, slots(1 + 2 * node, 2), node_keys[-1:], state)) is True
    assert offloaded(writer, 2) == [True, True], "a Mamba model's offload reported failure"
    reader = env.build(dst, model, components=mamba, req_pool=dst_req)
    got = reader.lookup("r", kv_mamba(page_keys, None, page_keys[-1:], None))
    assert got == [2, 4], (
        f"lookup must follow the Mamba window (TRAILING_PAGES, one page): with states stored at "
        f"pages 2 and 4 only, the restorable lengths are [2, 4]; got {got}"
    )
    got = reader.lookup("r", kv_mamba(page_keys[:3], None, page_keys[2:3], None))
    assert got == [2], f"a length without its Mamba state is not restorable (Mamba window); got {got}"
    assert reader.load("r", kv_mamba(page_keys, slots(6, 4), page_keys[-1:], 5)) is True
    index = reader.start_layer_wise_loading()
    assert reader.finish_layer_wise_loading(index) is True, "a Mamba model's stored pages did not load"
    full_src, full_dst = src.full_kv_pool, dst.full_kv_pool
    assert [layer_bytes(full_dst, i, slots(6, 4)) for i in range(len(full_dst.kv_buffer))] == [
        layer_bytes(full_src, i, slots(1, 4)) for i in range(len(full_src.kv_buffer))
    ], "the full-attention pages loaded other bytes"
    assert mamba_state_bytes(dst_req, 5) == mamba_state_bytes(src_req, 3), (
        "the Mamba state loaded other bytes (want the state stored at the last page)"
    )


#: name -> check, in the order the suite runs them.
CHECKS: dict[str, Callable[[LinkerEnv], None]] = {
    "lookup_lists_every_prefix": check_lookup_lists_every_prefix,
    "layers_land_before_wait_returns": check_layers_land_before_wait_returns,
    "failed_load_finishes_false": check_failed_load_finishes_false,
    "cancel_before_start_writes_nothing": check_cancel_before_start_writes_nothing,
    "offloads_are_fifo_and_wait_for_events": check_offloads_are_fifo_and_wait_for_events,
    "reset_and_close": check_reset_and_close,
    "mla_owner_rank_writes": check_mla_owner_rank_writes,
    "swa_windows": check_swa_windows,
    "mamba_windows": check_mamba_windows,
}
