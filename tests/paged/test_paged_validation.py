"""Bad input raises ValueError naming the argument, before any I/O, leaving the host pool
untouched; calls before registration raise NotRegisteredError."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from paged_helpers import (
    RecordingStorage,
    StorageFactory,
    hkey,
    mamba,
    mha,
    randomize,
    same_snapshot,
    scattered_slots,
    snapshot,
)

from hicache_sdk.errors import ConfigError, NotRegisteredError
from hicache_sdk.spec import PoolHitPolicy, PoolName, PoolTransfer

KEYS = [hkey(0), hkey(1)]


def good() -> torch.Tensor:
    return torch.arange(8, dtype=torch.int64)


BAD_INDICES: list[tuple[str, Any]] = [
    ("not_tensor", list(range(8))),
    ("float", torch.arange(8, dtype=torch.float32)),
    ("2d", torch.arange(8, dtype=torch.int64).reshape(2, 4)),
    ("too_short", torch.arange(4, dtype=torch.int64)),
    ("too_long", torch.arange(12, dtype=torch.int64)),
    ("not_multiple", torch.arange(7, dtype=torch.int64)),
    ("unaligned", torch.arange(1, 9, dtype=torch.int64)),
    ("non_contiguous_page", torch.tensor([0, 1, 3, 2, 4, 5, 6, 7])),
    ("out_of_bounds", torch.arange(10_000, 10_008, dtype=torch.int64)),
    ("negative", torch.arange(-4, 4, dtype=torch.int64)),
]


@pytest.fixture
def setup(make_storage: StorageFactory):  # type: ignore[no-untyped-def]
    pool = randomize(mha(), 1)
    s = make_storage(pool, cls=RecordingStorage)
    assert s.batch_set_v1(KEYS, good()) == [True, True]
    s.raw_transport.calls.clear()  # type: ignore[attr-defined]
    return s, pool


def no_io(s: Any) -> None:
    assert s.raw_transport.calls == []


@pytest.mark.parametrize("case,indices", BAD_INDICES, ids=[c for c, _ in BAD_INDICES])
@pytest.mark.parametrize("op", ["batch_get_v1", "batch_set_v1"])
def test_v1_bad_host_indices(setup, case: str, indices: Any, op: str) -> None:  # type: ignore[no-untyped-def]
    s, pool = setup
    before = snapshot(pool)
    with pytest.raises(ValueError, match="host_indices"):
        getattr(s, op)(KEYS, indices)
    no_io(s)
    assert same_snapshot(before, snapshot(pool))


@pytest.mark.parametrize("keys", ["abc", [1, 2], [hkey(0), None], None])
@pytest.mark.parametrize("op", ["batch_get_v1", "batch_set_v1", "batch_exists", "batch_exists_v2"])
def test_bad_keys(setup, keys: Any, op: str) -> None:  # type: ignore[no-untyped-def]
    s, pool = setup
    before = snapshot(pool)
    with pytest.raises(ValueError, match="keys"):
        if op in ("batch_exists", "batch_exists_v2"):
            getattr(s, op)(keys)
        else:
            getattr(s, op)(keys, good())
    no_io(s)
    assert same_snapshot(before, snapshot(pool))


def test_unsafe_page_hash_is_value_error(setup) -> None:  # type: ignore[no-untyped-def]
    s, _ = setup
    with pytest.raises(ValueError):
        s.batch_get_v1(["../etc/passwd", hkey(1)], good())
    no_io(s)


BAD_FLAT: list[tuple[str, Any]] = [
    ("list", [0] * 10),
    ("wrong_dtype", lambda p: p.get_dummy_flat_data_page().to(torch.float32)),
    ("short", lambda p: p.get_dummy_flat_data_page()[:-1].clone()),
    ("long", lambda p: torch.cat([p.get_dummy_flat_data_page(), p.get_dummy_flat_data_page()[:1]])),
    ("non_contiguous", lambda p: torch.zeros(2 * p.get_dummy_flat_data_page().numel(), dtype=p.dtype)[::2]),
]


@pytest.mark.parametrize("case,make", BAD_FLAT, ids=[c for c, _ in BAD_FLAT])
def test_legacy_bad_tensors(setup, case: str, make: Any) -> None:  # type: ignore[no-untyped-def]
    s, pool = setup
    t = make(pool) if callable(make) else make
    before = snapshot(pool)
    with pytest.raises(ValueError, match="target_location"):
        s.get(KEYS[0], t)
    with pytest.raises(ValueError, match=r"target_locations\[0\]"):
        s.batch_get([KEYS[0]], [t])
    with pytest.raises(ValueError, match="value"):
        s.set(hkey(5), t)
    with pytest.raises(ValueError, match=r"values\[0\]"):
        s.batch_set([hkey(5)], [t])
    no_io(s)
    assert same_snapshot(before, snapshot(pool))


def test_legacy_length_mismatch(setup) -> None:  # type: ignore[no-untyped-def]
    s, pool = setup
    with pytest.raises(ValueError, match="target_locations"):
        s.batch_get(KEYS, [pool.get_dummy_flat_data_page()])
    with pytest.raises(ValueError, match="values"):
        s.batch_set(KEYS, [pool.get_dummy_flat_data_page()])
    no_io(s)


def test_v2_bad_transfers(make_storage: StorageFactory) -> None:
    pool, side = randomize(mha(), 1), randomize(mamba(), 2)
    s = make_storage(pool, cls=RecordingStorage, sidecars={"mamba": side})
    before = snapshot(side), snapshot(pool)
    cases: list[tuple[list[PoolTransfer], str]] = [
        ([PoolTransfer(PoolName.MAMBA, host_indices=torch.arange(3), keys=KEYS)], "mamba"),
        ([PoolTransfer(PoolName.SWA, host_indices=torch.arange(8), keys=KEYS)], "not registered"),
        ([PoolTransfer(PoolName.MAMBA, host_indices=None, keys=KEYS)], "host_indices"),
        ([PoolTransfer(PoolName.MAMBA, host_indices=torch.arange(2), keys=None)], "keys"),
        (
            [PoolTransfer(PoolName.MAMBA, torch.arange(2), keys=KEYS, hit_policy=PoolHitPolicy.BLOCK_GROUPS)],
            "hit policy",
        ),
        ([PoolTransfer(PoolName.INDEXER, indices_from_pool=PoolName.KV)], "indices_from_pool"),
        (
            [
                PoolTransfer(PoolName.MAMBA, torch.arange(2), keys=KEYS),
                PoolTransfer(PoolName.MAMBA, torch.arange(2), keys=KEYS),
            ],
            "twice",
        ),
        ([PoolTransfer(PoolName.KV, host_indices=torch.arange(1, 9), keys=KEYS)], "host_indices"),
    ]
    for transfers, match in cases:
        for op in (s.batch_get_v2, s.batch_set_v2):
            with pytest.raises(ValueError, match=match):
                op(transfers)
    with pytest.raises(ValueError, match="hit policy"):
        s.batch_exists_v2(
            KEYS, [PoolTransfer(PoolName.MAMBA, keys=KEYS, hit_policy=PoolHitPolicy.BLOCK_GROUPS)]
        )
    with pytest.raises(ValueError, match="not registered"):
        s.batch_exists_v2(KEYS, [PoolTransfer(PoolName.SWA, keys=KEYS)])
    no_io(s)
    assert same_snapshot(before[0], snapshot(side)) and same_snapshot(before[1], snapshot(pool))


def test_not_registered(make_storage: StorageFactory) -> None:
    s = make_storage(None)
    for call in (
        lambda: s.batch_exists(KEYS),
        lambda: s.exists(KEYS[0]),
        lambda: s.batch_get_v1(KEYS, good()),
        lambda: s.batch_set_v1(KEYS, good()),
        lambda: s.batch_exists_v2(KEYS, []),
        lambda: s.batch_get_v2([]),
        lambda: s.batch_set_v2([]),
        lambda: s.get(KEYS[0]),
        lambda: s.set(KEYS[0], torch.zeros(4)),
        lambda: s.batch_get(KEYS),
        lambda: s.batch_set(KEYS, []),
        s.on_host_pools_registered,
    ):
        with pytest.raises(NotRegisteredError, match="register_mem_pool_host"):
            call()


def test_logical_anchor_kv_transfers_rejected(make_storage: StorageFactory) -> None:
    s = make_storage(mha(logical=True), cls=RecordingStorage, sidecars={"mamba": mamba()})
    with pytest.raises(ValueError, match="logical anchor"):
        s.batch_get_v1(KEYS, good())
    with pytest.raises(ValueError, match="logical anchor"):
        s.batch_get_v2([PoolTransfer(PoolName.KV, host_indices=good(), keys=KEYS)])
    with pytest.raises(ValueError, match="logical anchor"):
        s.batch_get(KEYS)
    no_io(s)


def test_config_errors_raise_at_construction(make_storage: StorageFactory) -> None:
    with pytest.raises(ConfigError, match="stroe"):
        make_storage(None, extra={"stroe": "x"})
    with pytest.raises(ConfigError):
        make_storage(None, extra={"capacity_bytes": -1})
    with pytest.raises(ValueError):
        make_storage(None, extra={"key_scheme": "sglang-file", "namespace": "ns"})


def test_scattered_indices_are_fine(make_storage: StorageFactory) -> None:
    pool = randomize(mha(), 3)
    s = make_storage(pool)
    slots = scattered_slots(pool, 4, seed=11)
    assert s.batch_set_v1([hkey(i) for i in range(4)], slots) == [True] * 4
    assert s.batch_set_v1([hkey(0)], slots[:4].to(torch.int32)) == [True]
