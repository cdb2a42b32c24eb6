"""``TransportLinker`` inside the REAL SGLang 0.5.23 (collected only in ``tox -e sglang``).

Each linker is built by SGLang's own factory (``create_unified_cache_linker(...,
backend="dynamic")``) over SGLang's real CPU device pools, on each of our four backends
against its real server. A writer linker and a separately built reader linker on another
pool share one backend namespace, so a hit is a hit in the store. Bytes are compared per
layer, at the moment ``wait_until(layer)`` returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
from sglang_linker_stand import (
    all_bytes,
    build,
    device_pool,
    layer_bytes,
    linker_config,
    page_keys,
    slots,
    transfer,
    wait_offloads,
)
from sglang_pools import LAYERS
from sglang_servers import BACKEND_NAMES, backend_config

from hicache_sdk.errors import ConfigError

Make = Callable[..., Any]


@pytest.fixture(params=BACKEND_NAMES)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    """``make(pool, **extra)``: a linker on this test's backend (one namespace and model
    per test), closed at teardown."""
    name: str = request.param
    cfg = backend_config(name, request, tmp_path)
    model = f"org/linker-{uuid.uuid4().hex[:8]}"
    made: list[Any] = []

    def mk(pool: Any, **extra: Any) -> Any:
        linker = build(pool, linker_config(name, cfg, **extra), model=model)
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
    with pytest.raises(ConfigError, match="unsupported components: \\['SWA'\\]"):
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
