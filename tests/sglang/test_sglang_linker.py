"""``TransportLinker`` inside the REAL SGLang 0.5.23 (collected only in ``tox -e sglang``).

Each linker is built by SGLang's own factory (``create_unified_cache_linker(...,
backend="dynamic")``) over SGLang's real CPU device pools, on each of our four backends
against its real server. A writer linker and a separately built reader linker on another
pool share one backend namespace, so a hit is a hit in the store. Bytes are compared per
layer, at the moment ``wait_until(layer)`` returns.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hicache_conformance.linker_contract import offloaded as wait_offloads
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang_linker_stand import (
    all_bytes,
    build,
    device_pool,
    flat_page,
    layer_bytes,
    linker_config,
    page_keys,
    slots,
    transfer,
)
from sglang_pools import LAYERS
from sglang_servers import BACKEND_NAMES, backend_config

from hicache_sdk.cli import main as hicache_main
from hicache_sdk.errors import ConfigError

Make = Callable[..., Any]


def _operator_config(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    """The linker config as an operator gets it: ``hicache sglang-args NAME --config JSON
    --linker`` (in process). S3's config holds a secret, which the command refuses to put
    on a command line: that backend's config is built directly."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = hicache_main(["sglang-args", name, "--config", json.dumps(cfg), "--linker"])
    if name == "s3":
        assert rc == 2 and "secret_access_key" in err.getvalue()
        assert cfg["secret_access_key"] not in err.getvalue() + out.getvalue()
        return linker_config(name, cfg)
    assert rc == 0, err.getvalue()
    argv = shlex.split(out.getvalue().strip())
    assert argv[:4] == [
        "--enable-unified-cache-external-linker",
        "--unified-cache-external-linker-backend",
        "dynamic",
        "--unified-cache-external-linker-config",
    ]
    config: dict[str, Any] = json.loads(argv[4])
    assert config == linker_config(name, cfg)
    return config


@pytest.fixture(params=BACKEND_NAMES)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    """``make(pool, **extra)``: a linker on this test's backend (one namespace and model
    per test), closed at teardown."""
    name: str = request.param
    cfg = backend_config(name, request, tmp_path)
    config = _operator_config(name, cfg)
    model = f"org/linker-{uuid.uuid4().hex[:8]}"
    made: list[Any] = []

    def mk(pool: Any, **extra: Any) -> Any:
        doc = {**config, "linker_extra_config": {**config["linker_extra_config"], **extra}}
        linker = build(pool, doc, model=model)
        made.append(linker)
        return linker

    yield mk
    for linker in made:
        linker.close()


def test_offload_lookup_and_layer_wise_load(make: Make) -> None:
    src, dst = device_pool("mha", seed=1), device_pool("mha")
    writer, reader = make(src), make(dst)
    keys = page_keys(3)
    wslots, rslots = slots(2, 3), slots(7, 3)
    assert writer.offload(transfer(keys, wslots)) is True
    assert wait_offloads(writer, 1) == [True]
    assert writer.num_completed_offloads() == 0

    # lookup: every restorable prefix, sorted; a hole stops it
    assert reader.lookup("r", transfer(keys, None)) == [1, 2, 3]
    holed = [keys[0], page_keys(1)[0], keys[2]]
    assert reader.lookup("r", transfer(holed, None)) == [1]
    assert reader.lookup("r", transfer(page_keys(2), None)) == []

    # load only queues: nothing lands before the start
    blank = all_bytes(dst, rslots)
    assert reader.load("r1", transfer(keys, rslots)) is True
    assert all_bytes(dst, rslots) == blank
    index = reader.start_layer_wise_loading()
    assert index >= 0
    reader.layer_done_counter.set_consumer(index)
    for layer in range(LAYERS):
        reader.layer_done_counter.wait_until(layer)
        assert layer_bytes(dst, layer, rslots) == layer_bytes(src, layer, wslots), f"layer {layer}"
    assert reader.finish_layer_wise_loading(index) is True
    assert all_bytes(dst, rslots) == all_bytes(src, wslots)
    assert reader.start_layer_wise_loading() == -1  # nothing queued


def test_cancel_failed_load_and_fifo_offloads(make: Make) -> None:
    src, dst = device_pool("mha", seed=2), device_pool("mha")
    writer, reader = make(src), make(dst)
    batches = [page_keys(1, f"b{i}") for i in range(4)]
    for i, keys in enumerate(batches):
        assert writer.offload(transfer(keys, slots(i, 1))) is True
    assert wait_offloads(writer, 4) == [True] * 4
    assert writer.pop_completed_offload() is False  # none left

    rslots = slots(9, 1)
    blank = all_bytes(dst, rslots)
    assert reader.load("c", transfer(batches[0], rslots)) is True
    assert reader.cancel_queued_load("c") is True and reader.cancel_queued_load("c") is False
    assert reader.start_layer_wise_loading() == -1
    assert all_bytes(dst, rslots) == blank

    # a page that is not there: the batch fails, finish says so, nothing raises
    assert reader.load("f", transfer([batches[1][0], page_keys(1)[0]], slots(10, 2))) is True
    index = reader.start_layer_wise_loading()
    reader.layer_done_counter.set_consumer(index)
    reader.layer_done_counter.wait_until(LAYERS - 1)
    assert reader.finish_layer_wise_loading(index) is False

    reader.reset()
    assert reader.num_completed_offloads() == 0
    reader.close()
    reader.close()  # idempotent


def test_mla_pages_are_written_by_rank_zero_only(make: Make) -> None:
    src = device_pool("mla", seed=3)
    rank1, rank0 = make(src, tp_rank=1, tp_size=2), make(src, tp_rank=0, tp_size=2)
    keys = page_keys(2)
    assert rank1.offload(transfer(keys, slots(1, 2))) is True
    assert wait_offloads(rank1, 1) == [True]
    assert rank0.lookup("m", transfer(keys, None)) == []  # rank 1 stored nothing
    assert rank0.offload(transfer(keys, slots(1, 2))) is True
    assert wait_offloads(rank0, 1) == [True]
    # MLA pages are rank-replicated: rank 1 reads what rank 0 wrote
    assert rank1.lookup("m", transfer(keys, None)) == [1, 2]
    dst = device_pool("mla")
    reader = make(dst, tp_rank=1, tp_size=2)
    assert reader.load("m", transfer(keys, slots(5, 2))) is True
    index = reader.start_layer_wise_loading()
    assert reader.finish_layer_wise_loading(index) is True
    assert all_bytes(dst, slots(5, 2)) == all_bytes(src, slots(1, 2))


def test_factory_refusals(tmp_path: Path) -> None:
    """Misconfiguration fails at construction, with the reason (the file backend only)."""
    pool = device_pool("mha")
    good = linker_config("file", {"root": str(tmp_path)})
    with pytest.raises(ConfigError, match="unsupported components: \\['C128'\\]"):
        build(pool, good, model="m", components={ComponentType.FULL, ComponentType.SWA, ComponentType.C128})
    with pytest.raises(ConfigError, match=r"needs a hybrid linear-attention pool .* got MHATokenToKVPool"):
        build(pool, good, model="m", components={ComponentType.FULL, ComponentType.MAMBA})
    with pytest.raises(
        ConfigError, match="needs an SWA pool with full_kv_pool and swa_kv_pool, got MHATokenToKVPool"
    ):
        build(pool, good, model="m", components={ComponentType.FULL, ComponentType.SWA})
    with pytest.raises(ConfigError, match="unknown keys \\['bogus'\\]"):
        build(pool, linker_config("file", {}, bogus=1), model="m")
    bad = {**good, "linker_extra_config": {"backend_config": {}}}
    with pytest.raises(ConfigError, match="must name a hicache-sdk backend"):
        build(pool, bad, model="m")
    with pytest.raises(ValueError, match="unknown fields"):
        build(pool, {**good, "linker_extra": {}}, model="m")
    linker = build(pool, good, model="m")
    try:
        with pytest.raises(ValueError, match="device indices for 2 pages"):
            linker.load("x", transfer(page_keys(2), slots(0, 1)))
        with pytest.raises(ValueError, match="page 0 starts at slot 1"):
            linker.offload(transfer(page_keys(1), torch.arange(1, 5)))
    finally:
        linker.close()


def _bridge(name: str, cfg: dict[str, Any], model: str, host_pool: Any) -> Any:
    """The HiCache path: our bridge built by SGLang's storage factory on a host pool."""
    from sglang.srt.mem_cache import hicache_storage as sgl
    from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

    from hicache_sdk.sglang import BRIDGE_EXTRA_CONFIG

    extra = {**BRIDGE_EXTRA_CONFIG, "backend": name, "backend_config": cfg}
    sc = sgl.HiCacheStorageConfig(
        tp_rank=0,
        tp_size=1,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        enable_storage_metrics=False,
        is_page_first_layout=False,
        model_name=model,
        extra_config=extra,
    )
    bridge = StorageBackendFactory.create_backend("dynamic", sc, host_pool)
    bridge.register_mem_pool_host(host_pool)
    return bridge


@pytest.mark.parametrize("name", ["file", "redis"])
def test_linker_pages_are_hicache_pages(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Under one key scheme and model, a page the linker offloads is a hit for the HiCache
    path with a ``layer_first`` host pool, and the reverse: the same names, header identity
    and bytes (all K layers, then all V layers)."""
    from sglang_pools import mha_pool

    cfg = backend_config(name, request, tmp_path)
    model = f"org/both-{uuid.uuid4().hex[:8]}"
    host = mha_pool("layer_first")
    bridge = _bridge(name, cfg, model, host)
    src = device_pool("mha", seed=5)
    linker = build(src, linker_config(name, cfg), model=model)
    try:
        keys = page_keys(2)
        assert linker.offload(transfer(keys, slots(3, 2))) is True
        assert wait_offloads(linker, 1) == [True]
        assert bridge.batch_exists(keys) == 2
        hslots = host.alloc(2 * host.page_size)
        assert bridge.batch_get_v1(keys, hslots) == [True, True]
        for i in range(2):
            want = flat_page(src, slots(3 + i, 1))
            start = int(hslots[i * host.page_size])
            got = bytes(host.get_data_page(start, flat=True).contiguous().view(torch.uint8).numpy())
            assert got == want, f"page {i}: the HiCache path read other bytes than the linker wrote"

        # the reverse: HiCache writes, the linker loads
        back = page_keys(2, "back")
        gen = torch.Generator().manual_seed(9)
        for buf in host.kv_buffer if isinstance(host.kv_buffer, list) else [host.kv_buffer]:
            raw = buf.view(torch.uint8)
            raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))
        assert bridge.batch_set_v1(back, hslots) == [True, True]
        assert linker.lookup("b", transfer(back, None)) == [1, 2]
        dst = device_pool("mha")
        reader = build(dst, linker_config(name, cfg), model=model)
        try:
            assert reader.load("b", transfer(back, slots(8, 2))) is True
            assert reader.finish_layer_wise_loading(reader.start_layer_wise_loading()) is True
            for i in range(2):
                start = int(hslots[i * host.page_size])
                flat = bytes(host.get_data_page(start, flat=True).contiguous().view(torch.uint8).numpy())
                got = flat_page(dst, slots(8 + i, 1))
                assert got == flat, f"page {i}: the linker loaded other bytes than the HiCache path wrote"
        finally:
            reader.close()
    finally:
        linker.close()
        bridge.close()


@pytest.mark.parametrize("ranged", [True, False])
def test_layerwise_integrity_on_file(ranged: bool, tmp_path: Path) -> None:
    """Layer-by-layer loads (ranged reads) keep the integrity rules of whole reads: a page
    stored under another page's name fails at layer 0 (its trailer names the other page),
    a flipped payload byte fails the checksum once the last layer lands; either way
    ``finish`` is ``False`` and nothing raises."""
    import os

    cfg = {"root": str(tmp_path), "checksum": True}
    model = f"org/lw-{uuid.uuid4().hex[:8]}"
    src = device_pool("mha", seed=21)
    writer = build(src, linker_config("file", cfg), model=model)
    reader = build(device_pool("mha"), linker_config("file", cfg, ranged_reads=ranged), model=model)
    try:
        assert (writer._ranged is not None) and ((reader._ranged is not None) is ranged)
        keys = page_keys(3)
        assert writer.offload(transfer(keys, slots(1, 3))) is True
        assert wait_offloads(writer, 1) == [True]
        files = {k: p for p in tmp_path.rglob("*") if p.is_file() for k in keys if p.name.startswith(k)}
        assert sorted(files) == sorted(keys)
        os.replace(files[keys[0]], files[keys[1]])  # page 1's name now holds page 0's bytes
        data = bytearray(files[keys[2]].read_bytes())
        data[5] ^= 0xFF  # a flipped payload byte in page 2
        files[keys[2]].write_bytes(bytes(data))
        for bad in (keys[1], keys[2]):
            assert reader.load("x", transfer([bad], slots(6, 1))) is True
            index = reader.start_layer_wise_loading()
            reader.layer_done_counter.set_consumer(index)
            reader.layer_done_counter.wait_until(LAYERS - 1)
            assert reader.finish_layer_wise_loading(index) is False, f"page {keys.index(bad)} loaded"
    finally:
        writer.close()
        reader.close()


def test_ranged_reads_refused_where_not_cheap(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    cfg = backend_config("redis", request, tmp_path)
    with pytest.raises(ConfigError, match="cannot load layer by layer"):
        build(device_pool("mha"), linker_config("redis", cfg, ranged_reads=True), model="m")


def test_staging_ring_moves_the_same_pages(make: Make) -> None:
    """The host staging ring (what CUDA pools use), forced on CPU pools with a ring smaller
    than the batch: pages written through it read back without it, and the reverse; layers
    land before ``wait_until`` returns; a missing page fails the batch."""
    src, dst, plain_dst = device_pool("mha", seed=31), device_pool("mha"), device_pool("mha")
    writer = make(src, staging=True, staging_pages=2)
    assert writer.ring is not None and writer._ranged is None
    keys = page_keys(3)
    assert writer.offload(transfer(keys, slots(2, 3))) is True
    assert wait_offloads(writer, 1) == [True]
    plain = make(plain_dst, staging=False)
    assert plain.lookup("p", transfer(keys, None)) == [1, 2, 3]
    assert plain.load("p", transfer(keys, slots(8, 3))) is True
    assert plain.finish_layer_wise_loading(plain.start_layer_wise_loading()) is True
    assert all_bytes(plain_dst, slots(8, 3)) == all_bytes(src, slots(2, 3))

    reader = make(dst, staging=True, staging_pages=2)
    blank = all_bytes(dst, slots(5, 3))
    assert reader.load("s", transfer(keys, slots(5, 3))) is True
    assert all_bytes(dst, slots(5, 3)) == blank
    index = reader.start_layer_wise_loading()
    reader.layer_done_counter.set_consumer(index)
    for layer in range(LAYERS):
        reader.layer_done_counter.wait_until(layer)
        assert layer_bytes(dst, layer, slots(5, 3)) == layer_bytes(src, layer, slots(2, 3)), f"layer {layer}"
    assert reader.finish_layer_wise_loading(index) is True
    assert reader.load("m", transfer([keys[0], page_keys(1)[0]], slots(9, 2))) is True
    assert reader.finish_layer_wise_loading(reader.start_layer_wise_loading()) is False


def test_stalled_ranged_reads_fail_the_layer_within_the_deadline(tmp_path: Path) -> None:
    """Layer-by-layer loads run under the resilience layer's deadline: against a file store
    whose ranged reads stall after layer 0, layer 0 lands, the next layer fails within the
    transfer deadline, ``finish`` is ``False`` and nothing raises; the stalled reads, once
    they go on, land in SDK-owned staging, never in the device pool."""
    from sglang_stalled_file import STALL

    cfg = {"root": str(tmp_path), "transfer_timeout_s": 0.3}
    config = linker_config("sglang_stalled_file:StalledFileStorage", cfg)
    model = f"org/stall-{uuid.uuid4().hex[:8]}"
    src, dst = device_pool("mha", seed=41), device_pool("mha")
    writer, reader = build(src, config, model=model), build(dst, config, model=model)
    try:
        assert reader._ranged is not None
        keys = page_keys(3)
        assert writer.offload(transfer(keys, slots(1, 3))) is True
        assert wait_offloads(writer, 1) == [True]
        rslots = slots(6, 3)
        blank = all_bytes(dst, rslots)
        STALL.calls, STALL.after = 0, 3  # layer 0 of the 3 pages reads; layer 1 stalls
        assert reader.load("s", transfer(keys, rslots)) is True
        t0 = time.monotonic()
        index = reader.start_layer_wise_loading()
        counter = reader.layer_done_counter
        counter.set_consumer(index)
        counter.wait_until(0)
        assert layer_bytes(dst, 0, rslots) == layer_bytes(src, 0, slots(1, 3))
        counter.wait_until(LAYERS - 1)
        assert reader.finish_layer_wise_loading(index) is False
        assert time.monotonic() - t0 < 0.3 + 2.0  # the deadline, with slack for a busy machine
        assert STALL.stalled.is_set() and not STALL.landed.is_set()
        STALL.thaw.set()
        assert STALL.landed.wait(10)
        time.sleep(0.05)
        assert all_bytes(dst, rslots)[1:] == blank[1:]  # no late write into layers 1..
        stats = reader.store.metrics.snapshot()
        assert stats["counters"]["abandoned_reads"] >= 1
        STALL.after = None
        # the breaker has not opened on one abandoned call: the next load lands whole
        assert reader.load("t", transfer(keys, slots(12, 3))) is True
        assert reader.finish_layer_wise_loading(reader.start_layer_wise_loading()) is True
        assert all_bytes(dst, slots(12, 3)) == all_bytes(src, slots(1, 3))
    finally:
        STALL.after = None
        STALL.thaw.set()
        writer.close()
        reader.close()


def test_swa_model_windows_lookup_load_and_offload(tmp_path: Path) -> None:
    """An SWA model (SGLang's ``SWAKVPool``; SGLang's own view builder refuses it): the
    full-attention pages and the SWA window's pages are both stored; ``lookup`` is sparse
    (a length needs its trailing window's SWA pages); a load restores both pools; a
    missing SWA page fails the batch."""
    from sglang_linker_stand import SWA_FULL_LAYERS, SWA_LAYERS, sub_pool_bytes, swa_pool, swa_transfers

    cfg = {"root": str(tmp_path)}
    model = f"org/swa-{uuid.uuid4().hex[:8]}"
    components = {ComponentType.FULL, ComponentType.SWA}
    src, dst = swa_pool(seed=51), swa_pool()
    writer = build(src, linker_config("file", cfg), model=model, components=components)
    reader = build(dst, linker_config("file", cfg), model=model, components=components)
    try:
        assert set(map(str, reader.pools)) == {str(p) for p in writer.pools} and len(reader.pools) == 2
        assert reader.num_layers == len(SWA_FULL_LAYERS) + len(SWA_LAYERS) and reader._ranged is None
        keys = page_keys(4)
        # the node's offload: all 4 KV pages, the SWA pages of its last 2 (the window)
        assert writer.offload(swa_transfers(keys, slots(1, 4), keys[2:], slots(3, 2))) is True
        assert wait_offloads(writer, 1) == [True]
        # SGLang's SWA lookup sends the tail's trailing window (here 2 pages)
        assert reader.lookup("r", swa_transfers(keys, None, keys[2:], None)) == [4]
        assert reader.lookup("r", swa_transfers(keys[:3], None, keys[1:3], None)) == []
        assert reader.lookup("r", transfer(keys, None)) == [1, 2, 3, 4]  # KV alone: every length

        full_blank = sub_pool_bytes(dst.full_kv_pool, slots(5, 4))
        assert reader.load("r", swa_transfers(keys, slots(5, 4), keys[2:], slots(1, 2))) is True
        assert sub_pool_bytes(dst.full_kv_pool, slots(5, 4)) == full_blank  # only queued
        index = reader.start_layer_wise_loading()
        reader.layer_done_counter.set_consumer(index)
        reader.layer_done_counter.wait_until(reader.num_layers - 1)
        assert reader.finish_layer_wise_loading(index) is True
        assert sub_pool_bytes(dst.full_kv_pool, slots(5, 4)) == sub_pool_bytes(src.full_kv_pool, slots(1, 4))
        assert sub_pool_bytes(dst.swa_kv_pool, slots(1, 2)) == sub_pool_bytes(src.swa_kv_pool, slots(3, 2))

        # a window whose SWA pages are not stored: the batch fails, nothing raises
        assert reader.load("m", swa_transfers(keys[:2], slots(10, 2), keys[:2], slots(4, 2))) is True
        assert reader.finish_layer_wise_loading(reader.start_layer_wise_loading()) is False
        with pytest.raises(ValueError, match="swa device_indices"):
            reader.load("x", swa_transfers(keys, slots(5, 4), keys[2:], slots(8, 2)))  # past the SWA pool

        # through the host staging rings (one per pool; what CUDA pools use), a ring smaller
        # than the batch
        ringed_dst = swa_pool()
        ringed = build(
            ringed_dst,
            linker_config("file", cfg, staging=True, staging_pages=1),
            model=model,
            components=components,
        )
        try:
            assert ringed.ring is not None and ringed.swa_ring is not None
            assert ringed.load("g", swa_transfers(keys, slots(2, 4), keys[2:], slots(5, 2))) is True
            assert ringed.finish_layer_wise_loading(ringed.start_layer_wise_loading()) is True
            assert sub_pool_bytes(ringed_dst.full_kv_pool, slots(2, 4)) == sub_pool_bytes(
                src.full_kv_pool, slots(1, 4)
            )
            assert sub_pool_bytes(ringed_dst.swa_kv_pool, slots(5, 2)) == sub_pool_bytes(
                src.swa_kv_pool, slots(3, 2)
            )
            other = page_keys(2)
            assert ringed.offload(swa_transfers(other, slots(2, 2), other[1:], slots(5, 1))) is True
            assert wait_offloads(ringed, 1) == [True]
            assert reader.lookup("o", swa_transfers(other, None, other[1:], None)) == [2]
        finally:
            ringed.close()
        with pytest.raises(
            ConfigError, match="beside its KV \\(SWA, Mamba, DSA, DeepSeek V4\\) loads its pools page by page"
        ):
            build(
                swa_pool(), linker_config("file", cfg, ranged_reads=True), model=model, components=components
            )
    finally:
        writer.close()
        reader.close()


def test_swa_linker_pages_are_hicache_pages(tmp_path: Path) -> None:
    """An SWA model's pages offloaded by the linker are hits for the HiCache path with
    ``layer_first`` host pools (the KV host pool over the full-attention layers, the SWA
    host pool over the sliding-window layers, as SGLang 0.5.23 builds them), both pools'
    bytes included; and the reverse."""
    from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
    from sglang_linker_stand import SWA_FULL_LAYERS, SWA_LAYERS, swa_pool, swa_transfers
    from sglang_pools import mha_pool

    cfg = {"root": str(tmp_path)}
    model = f"org/swa-both-{uuid.uuid4().hex[:8]}"
    host_kv, host_swa = (
        mha_pool("layer_first", layers=len(SWA_FULL_LAYERS)),
        mha_pool("layer_first", layers=1),
    )
    bridge = _bridge("file", cfg, model, host_kv)
    bridge.register_mem_host_pool_v2(host_swa, PoolName.SWA)
    src = swa_pool(seed=61)
    linker = build(
        src, linker_config("file", cfg), model=model, components={ComponentType.FULL, ComponentType.SWA}
    )
    try:
        assert len(SWA_LAYERS) == 1
        keys = page_keys(3)
        assert linker.offload(swa_transfers(keys, slots(1, 3), keys[1:], slots(2, 2))) is True
        assert wait_offloads(linker, 1) == [True]
        window = PoolTransfer(name=PoolName.SWA, keys=keys[1:], hit_policy=PoolHitPolicy.TRAILING_PAGES)
        assert list(bridge.batch_exists_v2(keys, [window]).restorable_prefix_pages) == [3]
        kv_slots, swa_slots = host_kv.alloc(3 * host_kv.page_size), host_swa.alloc(2 * host_swa.page_size)

        def host_transfers(pages: list[str]) -> list[Any]:
            """The HiCache path's transfers of ``pages`` into the host slots above: every KV
            page, and the SWA pages of all but the first (the window)."""
            swa = PoolTransfer(
                name=PoolName.SWA,
                keys=pages[1:],
                host_indices=swa_slots,
                hit_policy=PoolHitPolicy.TRAILING_PAGES,
            )
            return [PoolTransfer(name=PoolName.KV, keys=pages, host_indices=kv_slots), swa]

        got = bridge.batch_get_v2(host_transfers(keys))
        assert [ok for oks in got.values() for ok in oks] == [True] * 5

        def flat(sub: Any, page: int) -> bytes:
            rows = slots(page, 1)
            k = [bytes(b[rows].contiguous().view(torch.uint8).numpy()) for b in sub.k_buffer]
            v = [bytes(b[rows].contiguous().view(torch.uint8).numpy()) for b in sub.v_buffer]
            return b"".join(k) + b"".join(v)

        def host_flat(host: Any, start: int) -> bytes:
            return bytes(host.get_data_page(start, flat=True).contiguous().view(torch.uint8).numpy())

        for i in range(3):
            assert host_flat(host_kv, int(kv_slots[i * host_kv.page_size])) == flat(src.full_kv_pool, 1 + i)
        for i in range(2):
            assert host_flat(host_swa, int(swa_slots[i * host_swa.page_size])) == flat(src.swa_kv_pool, 2 + i)

        # the reverse: the HiCache path writes both pools, the linker restores them
        back = page_keys(3, "back")
        gen = torch.Generator().manual_seed(62)
        for host in (host_kv, host_swa):
            for buf in host.kv_buffer if isinstance(host.kv_buffer, list) else [host.kv_buffer]:
                raw = buf.view(torch.uint8)
                raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))
        put = bridge.batch_set_v2(host_transfers(back))
        assert [ok for oks in put.values() for ok in oks] == [True] * 5
        assert linker.lookup("b", swa_transfers(back, None, back[1:], None)) == [3]
        dst = swa_pool()
        reader = build(
            dst, linker_config("file", cfg), model=model, components={ComponentType.FULL, ComponentType.SWA}
        )
        try:
            assert reader.load("b", swa_transfers(back, slots(4, 3), back[1:], slots(1, 2))) is True
            assert reader.finish_layer_wise_loading(reader.start_layer_wise_loading()) is True
            for i in range(3):
                assert flat(dst.full_kv_pool, 4 + i) == host_flat(
                    host_kv, int(kv_slots[i * host_kv.page_size])
                )
            for i in range(2):
                assert flat(dst.swa_kv_pool, 1 + i) == host_flat(
                    host_swa, int(swa_slots[i * host_swa.page_size])
                )
        finally:
            reader.close()
    finally:
        linker.close()
        bridge.close()


@pytest.fixture
def mamba_linker(tmp_path: Path) -> Iterator[Make]:
    """``mamba_linker(kind, seed=None, *, swa=False, **extra)``: ``(linker, kvcache,
    req_pool)``, a linker on the file backend (one store and model per test) over new
    hybrid Mamba pools (``mamba_pools``: over an ``mha`` or ``mla`` full-attention pool,
    with an SWA pool and the SWA component when ``swa``), closed at teardown."""
    from hicache_conformance.linker_contract import mamba_pools

    cfg = {"root": str(tmp_path)}
    model = f"org/mamba-{uuid.uuid4().hex[:8]}"
    made: list[Any] = []

    def mk(kind: str, seed: int | None = None, *, swa: bool = False, **extra: Any) -> tuple[Any, Any, Any]:
        kvcache, req_pool = mamba_pools(kind, seed, swa=swa)
        components = {ComponentType.FULL, ComponentType.MAMBA} | ({ComponentType.SWA} if swa else set())
        linker = build(
            kvcache,
            linker_config("file", cfg, **extra),
            model=model,
            components=components,
            req_pool=req_pool,
        )
        made.append(linker)
        return linker, kvcache, req_pool

    yield mk
    for linker in made:
        linker.close()


def test_mamba_models_lookup_load_and_offload(mamba_linker: Make) -> None:
    """Hybrid Mamba models (SGLang's ``HybridLinearKVPool`` and the ``MambaPool`` of its
    ``HybridReqToTokenPool``): over an MHA full pool (SGLang's own view builder refuses it)
    and with an SWA pool too. Each node's state is stored under its last page, so
    ``lookup`` is sparse; a load restores the KV pages and the state slot; through the
    staging ring too; the layer counter spans every layer and is the request pool's."""
    from hicache_conformance.linker_contract import kv_mamba, mamba_state_bytes

    writer, src, src_req = mamba_linker("mha", 71)
    reader, dst, dst_req = mamba_linker("mha", staging=True, staging_pages=1)
    assert "mha+mamba" in repr(writer) and writer.num_layers == 3 and writer._ranged is None
    assert dst_req.layer_transfer_counter is reader.layer_done_counter and reader.mamba_ring is not None
    keys = page_keys(4)
    for node, state in ((0, 2), (1, 6)):
        node_keys = keys[2 * node : 2 * node + 2]
        assert writer.offload(kv_mamba(node_keys, slots(1 + 2 * node, 2), node_keys[-1:], state)) is True
    assert wait_offloads(writer, 2) == [True, True]
    assert reader.lookup("r", kv_mamba(keys, None, keys[-1:], None)) == [2, 4]
    assert reader.lookup("r", transfer(keys, None)) == [1, 2, 3, 4]  # KV alone: every length
    blank = mamba_state_bytes(dst_req, 4)
    assert reader.load("r", kv_mamba(keys[:2], slots(8, 2), keys[1:2], 4)) is True
    assert mamba_state_bytes(dst_req, 4) == blank  # only queued
    assert reader.finish_layer_wise_loading(reader.start_layer_wise_loading()) is True
    assert mamba_state_bytes(dst_req, 4) == mamba_state_bytes(src_req, 2)
    full_src, full_dst = src.full_kv_pool, dst.full_kv_pool
    assert sub_bytes(full_dst, slots(8, 2)) == sub_bytes(full_src, slots(1, 2))
    # a length whose state is missing fails the batch (the store holds no state at page 3)
    assert reader.load("m", kv_mamba(keys[:3], slots(10, 3), keys[2:3], 5)) is True
    assert reader.finish_layer_wise_loading(reader.start_layer_wise_loading()) is False
    from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer

    bad = PoolTransfer(name=PoolName.MAMBA, keys=keys[:1], device_indices=torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="2 device indices for 1 pages of the mamba pool of 1 slots"):
        reader.load("x", [*transfer(keys[:1], slots(8, 1)), bad])
    # an offload through the ring reads back without it
    other = page_keys(2)
    assert reader.offload(kv_mamba(other, slots(8, 2), other[1:], 4)) is True
    assert wait_offloads(reader, 1) == [True]
    assert writer.lookup("o", kv_mamba(other, None, other[1:], None)) == [2]

    # Mamba + SWA: three pools, one offload result, one load
    writer, src, src_req = mamba_linker("mha", 72, swa=True)
    reader, dst, dst_req = mamba_linker("mha", swa=True)
    assert "mha+swa+mamba" in repr(writer) and writer.num_layers == 3
    keys = page_keys(2)
    from sglang_linker_stand import swa_transfers

    both = swa_transfers(keys, slots(1, 2), keys[1:], slots(3, 1))
    assert writer.offload([*both, kv_mamba(keys, None, keys[1:], 7)[1]]) is True
    assert wait_offloads(writer, 1) == [True]
    look = swa_transfers(keys, None, keys[1:], None)
    assert reader.lookup("r", [*look, kv_mamba(keys, None, keys[1:], None)[1]]) == [2]
    assert (
        reader.lookup(
            "r",
            [*swa_transfers(keys[:1], None, keys[:1], None), kv_mamba(keys[:1], None, keys[:1], None)[1]],
        )
        == []
    )
    load = swa_transfers(keys, slots(5, 2), keys[1:], slots(2, 1))
    assert reader.load("r", [*load, kv_mamba(keys, None, keys[1:], 3)[1]]) is True
    assert reader.finish_layer_wise_loading(reader.start_layer_wise_loading()) is True
    assert mamba_state_bytes(dst_req, 3) == mamba_state_bytes(src_req, 7)
    assert sub_bytes(dst.full_kv_pool, slots(5, 2)) == sub_bytes(src.full_kv_pool, slots(1, 2))
    assert sub_bytes(dst.swa_kv_pool, slots(2, 1)) == sub_bytes(src.swa_kv_pool, slots(3, 1))


def test_mamba_refusals(tmp_path: Path) -> None:
    """A hybrid Mamba pool without the MAMBA component, and state SGLang keeps beside the
    Mamba pool that the linker would not move, are refused at construction, named."""
    from hicache_conformance.linker_contract import mamba_pools

    good = linker_config("file", {"root": str(tmp_path)})
    kvcache, req_pool = mamba_pools("mla")
    with pytest.raises(ConfigError, match="hybrid linear-attention pool, but the linker was built without"):
        build(kvcache, good, model="m", req_pool=req_pool)
    mamba = {ComponentType.FULL, ComponentType.MAMBA}
    with pytest.raises(ConfigError, match="needs SGLang's hybrid request pool with a mamba_pool"):
        build(kvcache, good, model="m", components=mamba)
    req_pool.mamba_ckpt_pool = object()
    with pytest.raises(ConfigError, match="an int8 Mamba checkpoint pool"):
        build(kvcache, good, model="m", components=mamba, req_pool=req_pool)
    req_pool.mamba_ckpt_pool = None

    class _VirtualSlots(type(req_pool)):  # type: ignore[misc]
        def translate_mamba_indices(self, mamba_indices: torch.Tensor) -> torch.Tensor:
            return mamba_indices + 1

    req_pool.__class__ = _VirtualSlots
    with pytest.raises(ConfigError, match="translates Mamba slot ids"):
        build(kvcache, good, model="m", components=mamba, req_pool=req_pool)


def sub_bytes(pool: Any, slots_: torch.Tensor) -> list[bytes]:
    """Every layer's bytes of ``slots_`` in one MHA or MLA (sub-)pool."""
    n = len(pool.k_buffer) if hasattr(pool, "k_buffer") else len(pool.kv_buffer)
    return [layer_bytes(pool, layer, slots_) for layer in range(n)]


def test_mamba_pages_are_not_hicache_pages() -> None:
    """docs/linker.md: the linker's Mamba page holds the bytes of SGLang's ``page_first``
    ``MambaPoolHost`` page, in the same order, but is segmented per layer and state (the
    device pool keeps layers apart), so its layout identity differs: not a HiCache hit."""
    import ctypes

    from sglang_pools import mamba_pool as host_mamba_pool

    from hicache_sdk.bench.linker import fill_buffers
    from hicache_sdk.hostpool.describe import describe_pool, page_segments
    from hicache_sdk.sglang.linker.view import DeviceMambaView

    host = host_mamba_pool()
    info = host.buffer_info  # the device state tensors the host pool mirrors
    fill_buffers([info.temporal, *info.conv], 81)
    view = DeviceMambaView(info.temporal, info.conv)
    ours, theirs = describe_pool(view, "mamba"), describe_pool(host, "mamba")
    assert ours.kind == theirs.kind == "mamba" and ours.page_bytes == theirs.page_bytes
    assert len(ours.segment_sizes) == info.temporal.shape[0] * len(theirs.segment_sizes)
    assert ours.fingerprint() != theirs.fingerprint()
    flat = b"".join(ctypes.string_at(a, n) for a, n in page_segments(view, ours, [3])[0])
    host.set_from_flat_data_page(5, torch.frombuffer(bytearray(flat), dtype=torch.uint8))

    def raw(t: torch.Tensor) -> bytes:
        return bytes(t.contiguous().view(torch.uint8).numpy())

    assert raw(host.temporal_buffer[5][:, 0]) == raw(info.temporal[:, 3])
    for h, d in zip(host.conv_buffer, info.conv):
        assert raw(h[5][:, 0]) == raw(d[:, 3])


def test_mamba_state_is_written_by_every_rank_beside_mla_pages(mamba_linker: Make) -> None:
    """Mamba over MLA at TP 2: the MLA pages are rank 0's to write, the Mamba state is
    rank-local, so each rank stores its own (and a length needs this rank's state)."""
    from hicache_conformance.linker_contract import kv_mamba

    rank1, _, _ = mamba_linker("mla", 91, tp_rank=1, tp_size=2)
    rank0, _, _ = mamba_linker("mla", 90, tp_rank=0, tp_size=2)
    keys = page_keys(2)
    assert rank1.offload(kv_mamba(keys, slots(1, 2), keys[1:], 2)) is True
    assert wait_offloads(rank1, 1) == [True]
    assert rank0.lookup("r", transfer(keys, None)) == []  # rank 1 wrote no MLA page
    assert rank0.offload(kv_mamba(keys, slots(1, 2), keys[1:], 2)) is True
    assert wait_offloads(rank0, 1) == [True]
    for linker in (rank1, rank0):
        assert linker.lookup("r", kv_mamba(keys, None, keys[1:], None)) == [2]
    other = page_keys(2)
    assert rank0.offload(kv_mamba(other, slots(3, 2), other[1:], 3)) is True
    assert wait_offloads(rank0, 1) == [True]
    assert rank1.lookup("r", transfer(other, None)) == [1, 2]  # rank 0's MLA pages
    assert rank1.lookup("r", kv_mamba(other, None, other[1:], None)) == []  # but not its state
