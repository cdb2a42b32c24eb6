"""Each of our four backends inside the REAL SGLang 0.5.23 (collected only in ``tox -e sglang``).

Every backend (``file``; ``redis``, ``s3`` and ``mooncake`` against a real ``redis-server``,
``moto_server`` and ``mooncake_master`` + holder started by this session) is built the way an
operator selects it: ``hicache sglang-args NAME --config JSON`` prints the SGLang flags
(``--hicache-storage-backend dynamic --hicache-storage-backend-extra-config VALUE``, VALUE
an ``@file`` of mode 0600 when the config holds a secret); SGLang's own
``parse_storage_backend_extra_config`` reads VALUE, and SGLang's own
``StorageBackendFactory.create_backend(BACKEND, HiCacheStorageConfig(extra_config=...), pool)``
imports the bridge and constructs it, as ``attach_storage_backend`` does. Each test uses two
bridges: a writer on one set of SGLang host pools and a reader built separately on another
(so a hit is a hit in the backend, never in a local copy). Pools are SGLang's own classes:

* KV: ``MHATokenToKVPoolHost`` and ``MLATokenToKVPoolHost``, layer_first and page_first;
* sidecars: ``MambaPoolHost`` (page_first, page size 1, mixed float32/bfloat16 states) and
  the SWA pool SGLang builds for a hybrid-SWA model (an ``MHATokenToKVPoolHost`` over the
  sliding-window layers, registered as ``PoolName.SWA``).

Paths: v1 (``batch_set_v1``/``batch_get_v1``), v2 (``batch_set_v2``/``batch_get_v2``/
``batch_exists_v2`` with SGLang's ``PoolTransfer``) and the generic path (``batch_set``/
``batch_get`` with the flat pages SGLang's controller moves: those of the anchor KV pool
only, sidecars then going through v2). Pages are compared byte for
byte; hit counts are exact; results are SGLang's ``PoolTransferResult`` / ``StorageMetrics``.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import stat
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from sglang.srt.mem_cache import hicache_storage as sgl
from sglang.srt.mem_cache.hybrid_cache.hybrid_cache_controller import HybridCacheController
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.observability.metrics_collector import StorageMetrics as SGLStorageMetrics
from sglang_pools import PAGE_SIZE, POOLS, mamba_pool, mha_pool, swa_pool
from sglang_servers import BACKEND_NAMES, backend_config

from hicache_sdk.cli import main as hicache_main
from hicache_sdk.sglang import HiCacheSDKStorage

N = 4
#: The inner class each backend name resolves to (through its installed entry point).
INNER = {
    "file": ("hicache_backend_file", "FileStorage"),
    "redis": ("hicache_backend_redis", "RedisStorage"),
    "s3": ("hicache_backend_s3", "S3Storage"),
    "mooncake": ("hicache_backend_mooncake", "MooncakeStorage"),
}
INFO = sgl.HiCacheStorageExtraInfo


def _keys(salt: str, n: int = N) -> list[str]:
    return [hashlib.sha256(f"{salt}-{uuid.uuid4().hex}-{i}".encode()).hexdigest() for i in range(n)]


def _fill(pool: Any, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for buf in pool.kv_buffer if isinstance(pool.kv_buffer, list) else [pool.kv_buffer]:
        raw = buf.view(torch.uint8)
        raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))


def _page(pool: Any, start: int) -> bytes:
    return bytes(pool.get_data_page(start, flat=True).contiguous().view(torch.uint8).numpy())


def _zero(pool: Any, starts: list[int]) -> None:
    for s in starts:
        pool.set_from_flat_data_page(s, torch.zeros_like(pool.get_dummy_flat_data_page()))


def _starts(pool: Any, indices: torch.Tensor) -> list[int]:
    return [int(indices[i]) for i in range(0, len(indices), pool.page_size)]


Make = Callable[..., Any]

#: Config keys that hold a secret (declared ``secret`` by the backends' configs).
SECRETS = {"s3": ["secret_access_key"]}


def _sglang_flags(name: str, config: dict[str, Any], secret_file: Path) -> tuple[str, str]:
    """``hicache sglang-args NAME --config JSON``: the operator's command, in process;
    returns (``--hicache-storage-backend`` value, ``--hicache-storage-backend-extra-config``
    value) from the one line it prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = hicache_main(
            ["sglang-args", name, "--config", json.dumps(config), "--secret-file", str(secret_file)]
        )
    assert rc == 0
    argv = shlex.split(out.getvalue().strip())
    assert argv[0::2] == ["--hicache-storage-backend", "--hicache-storage-backend-extra-config"]
    value = argv[3]
    for key in SECRETS.get(name, []):  # a secret never reaches the command line
        assert str(config[key]) not in out.getvalue()
        assert value == f"@{secret_file}" and stat.S_IMODE(os.stat(secret_file).st_mode) == 0o600
    if name not in SECRETS:
        assert not value.startswith("@")
    return argv[1], value


@pytest.fixture(params=BACKEND_NAMES)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Make]:
    """``make(kv_pool, mla=..., sidecars={PoolName: pool})``: a bridge to this test's backend
    built by SGLang's factory and registered the way SGLang's cache controller does. Every
    bridge of one test shares the backend's namespace (model name and server config)."""
    name: str = request.param
    backend_arg, extra_arg = _sglang_flags(name, backend_config(name, request, tmp_path), tmp_path / "x.json")
    assert backend_arg == "dynamic"
    model = f"org/deep-{uuid.uuid4().hex[:8]}"
    made: list[Any] = []

    def build(kv_pool: Any, *, mla: bool = False, sidecars: dict[Any, Any] | None = None) -> Any:
        # SGLang's own reading of the flag (JSON or @file), a fresh dict per attach
        extra = HybridCacheController.parse_storage_backend_extra_config(extra_arg)[0]
        assert extra["backend"] == name
        cfg = sgl.HiCacheStorageConfig(
            tp_rank=0,
            tp_size=1,
            pp_rank=0,
            pp_size=1,
            attn_cp_rank=0,
            attn_cp_size=1,
            is_mla_model=mla,
            enable_storage_metrics=True,
            is_page_first_layout=kv_pool.layout == "page_first",
            model_name=model,
            extra_config=extra,
        )
        bridge = StorageBackendFactory.create_backend(backend_arg, cfg, kv_pool)
        made.append(bridge)
        assert type(bridge) is HiCacheSDKStorage and bridge.backend_name == name
        module, cls = INNER[name]
        assert (type(bridge.inner).__module__.split(".")[0], type(bridge.inner).__name__) == (module, cls)
        # every one of our backends implements v1: SGLang's controller takes the zero-copy path
        assert cfg.extra_config["interface_v1"]
        bridge.register_mem_pool_host(kv_pool)
        bridge.register_mem_host_pool_v2(kv_pool, sgl.PoolName.KV)
        for pool_name, pool in (sidecars or {}).items():
            bridge.register_mem_host_pool_v2(pool, pool_name)
        bridge.on_host_pools_registered()
        return bridge

    build.backend = name  # type: ignore[attr-defined]
    yield build
    for b in made:
        b.close()


@pytest.mark.parametrize("pool_case", sorted(POOLS))
def test_kv_pool_v1_generic_v2(make: Make, pool_case: str) -> None:
    build, mla = POOLS[pool_case]
    wpool, rpool = build(), build()
    w, r = make(wpool, mla=mla), make(rpool, mla=mla)
    _fill(wpool, 1)
    absent = _keys("absent", 1)[0]

    # -- v1 ---------------------------------------------------------------------------------
    keys = _keys("v1")
    src = wpool.alloc(N * PAGE_SIZE)
    want = [_page(wpool, s) for s in _starts(wpool, src)]
    assert w.batch_set_v1(keys, src, INFO()) == [True] * N
    stats = w.get_stats()
    assert type(stats) is SGLStorageMetrics and sum(stats.backup_pgs) == N
    assert r.batch_exists(keys, INFO()) == N
    assert r.batch_exists([*keys[:2], absent, keys[3]], INFO()) == 2
    assert r.exists(keys[3]) is True and r.exists(absent) is False
    dst = rpool.alloc((N + 1) * PAGE_SIZE)
    dst_starts = _starts(rpool, dst)
    _zero(rpool, dst_starts)
    blank = _page(rpool, dst_starts[-1])
    assert r.batch_get_v1([*keys, absent], dst, INFO()) == [True] * N + [False]
    assert [_page(rpool, s) for s in dst_starts[:N]] == want
    assert _page(rpool, dst_starts[N]) == blank
    stats = r.get_stats()
    assert type(stats) is SGLStorageMetrics and sum(stats.prefetch_pgs) == N

    # -- generic (flat pages, as SGLang's controller moves them without interface_v1) --------
    gkeys = _keys("generic")
    gsrc = wpool.alloc(N * PAGE_SIZE)
    gwant = [_page(wpool, s) for s in _starts(wpool, gsrc)]
    assert w.batch_set(gkeys, [wpool.get_data_page(s, flat=True) for s in _starts(wpool, gsrc)]) is True
    got = r.batch_get([*gkeys, absent], [rpool.get_dummy_flat_data_page() for _ in range(N + 1)])
    assert isinstance(got, list) and len(got) == N + 1 and got[N] is None
    gdst = rpool.alloc(N * PAGE_SIZE)
    for page, s in zip(got[:N], _starts(rpool, gdst)):
        rpool.set_from_flat_data_page(s, page)
    assert [_page(rpool, s) for s in _starts(rpool, gdst)] == gwant
    assert r.batch_exists(gkeys) == N

    # -- v2 (SGLang's PoolTransfer in, SGLang's PoolTransferResult out) ----------------------
    vkeys = _keys("v2")
    vsrc = wpool.alloc(N * PAGE_SIZE)
    vwant = [_page(wpool, s) for s in _starts(wpool, vsrc)]
    put = w.batch_set_v2([sgl.PoolTransfer(name=sgl.PoolName.KV, host_indices=vsrc, keys=vkeys)], INFO())
    assert put == {"kv": [True] * N}
    res = r.batch_exists_v2([*vkeys, absent], [], INFO())
    assert type(res) is sgl.PoolTransferResult and res.kv_hit_pages == N
    res = r.batch_exists_v2([*vkeys[:3], absent, vkeys[3]], [], INFO())
    assert type(res) is sgl.PoolTransferResult and res.kv_hit_pages == 3
    vdst = rpool.alloc((N + 1) * PAGE_SIZE)
    vdst_starts = _starts(rpool, vdst)
    _zero(rpool, vdst_starts)
    got2 = r.batch_get_v2(
        [sgl.PoolTransfer(name=sgl.PoolName.KV, host_indices=vdst, keys=[*vkeys, absent])], INFO()
    )
    assert got2[sgl.PoolName.KV] == [True] * N + [False]
    assert sgl.count_pool_hits(got2) == {"kv": N}
    assert [_page(rpool, s) for s in vdst_starts[:N]] == vwant
    assert _page(rpool, vdst_starts[N]) == blank

    # -- the paths read each other's pages (SGLang switches with interface_v1) --------------
    xdst = rpool.alloc(N * PAGE_SIZE)
    assert r.batch_get_v2([sgl.PoolTransfer(name=sgl.PoolName.KV, host_indices=xdst, keys=keys)]) == {
        "kv": [True] * N
    }
    assert [_page(rpool, s) for s in _starts(rpool, xdst)] == want
    assert r.batch_get_v1(vkeys, xdst) == [True] * N
    assert [_page(rpool, s) for s in _starts(rpool, xdst)] == vwant
    flat = r.batch_get(keys, [rpool.get_dummy_flat_data_page() for _ in keys])
    assert isinstance(flat, list)
    assert [bytes(t.contiguous().view(torch.uint8).numpy()) for t in flat] == want


#: sidecar -> (pool builder, the trailing window SGLang asks batch_exists_v2 about,
#: pages (by index into the KV keys) that get a sidecar object, expected restorable ends)
SIDECARS: dict[str, tuple[Callable[[], Any], int, list[int], list[int]]] = {
    # Mamba (TRAILING_PAGES, N=1): prefix p needs the state at page p-1
    "mamba": (mamba_pool, 1, [1, 3], [2, 4]),
    # SWA (TRAILING_PAGES, N=window): prefix p needs the window's pages p-2, p-1
    "swa": (swa_pool, 2, [2, 3], [4]),
}


def _sglang_file_reference(
    root: Path, pools: dict[Any, Any], put: list[Any], keys: list[str], probe: Any
) -> Any:
    """SGLang's own ``HiCacheFile`` holding the same pages (written by its own v2 path from
    the same pools): its ``batch_exists_v2`` answer to ``probe`` is the reference."""
    cfg = sgl.HiCacheStorageConfig(
        tp_rank=0,
        tp_size=1,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        enable_storage_metrics=False,
        is_page_first_layout=True,
        model_name="reference-model",
        extra_config={},
    )
    root.mkdir(mode=0o700)
    theirs = sgl.HiCacheFile(cfg, file_path=str(root))
    theirs.register_mem_pool_host(pools[sgl.PoolName.KV])
    for pool_name, pool in pools.items():
        theirs.register_mem_host_pool_v2(pool, pool_name)
    written = theirs.batch_set_v2(put)
    assert all(all(v) for v in written.values()), written
    return theirs.batch_exists_v2(keys, [probe])


@pytest.mark.parametrize("sidecar", sorted(SIDECARS))
def test_sidecar_pool_v2_and_generic(make: Make, sidecar: str, tmp_path: Path) -> None:
    builder, window, with_side, restorable = SIDECARS[sidecar]
    pool_name = sgl.PoolName(sidecar)
    trailing = sgl.PoolHitPolicy.TRAILING_PAGES
    kv_w, kv_r = mha_pool("page_first"), mha_pool("page_first")
    side_w, side_r = builder(), builder()
    assert side_w.page_size == (1 if sidecar == "mamba" else PAGE_SIZE)
    w = make(kv_w, sidecars={pool_name: side_w})
    r = make(kv_r, sidecars={pool_name: side_r})
    _fill(kv_w, 2)
    _fill(side_w, 3)
    n_kv = 5
    keys = _keys(f"{sidecar}-kv", n_kv)
    side_keys = [keys[i] for i in with_side]
    kv_src = kv_w.alloc(n_kv * PAGE_SIZE)
    side_src = side_w.alloc(len(side_keys) * side_w.page_size)
    side_want = [_page(side_w, s) for s in _starts(side_w, side_src)]
    kv_want = [_page(kv_w, s) for s in _starts(kv_w, kv_src)]
    put_transfers = [
        sgl.PoolTransfer(name=sgl.PoolName.KV, host_indices=kv_src, keys=keys),
        sgl.PoolTransfer(name=pool_name, host_indices=side_src, keys=side_keys, hit_policy=trailing),
    ]
    put = w.batch_set_v2(put_transfers, INFO())
    assert put == {"kv": [True] * n_kv, sidecar: [True] * len(side_keys)}

    # SGLang asks with placeholder keys of the window's length; the hit is the last prefix
    # whose trailing sidecar pages all exist (and whose KV pages do).
    probe = sgl.PoolTransfer(name=pool_name, keys=["placeholder"] * window, hit_policy=trailing)
    res = r.batch_exists_v2(keys, [probe], INFO())
    assert type(res) is sgl.PoolTransferResult
    assert res.kv_hit_pages == restorable[-1]
    assert res.restorable_prefix_pages == restorable
    # ...exactly what SGLang's own HiCacheFile answers for the same pages (all three fields)
    ref = _sglang_file_reference(
        tmp_path / "sglang-reference", {sgl.PoolName.KV: kv_w, pool_name: side_w}, put_transfers, keys, probe
    )
    assert (res.kv_hit_pages, res.extra_pool_hit_pages, res.restorable_prefix_pages) == (
        ref.kv_hit_pages,
        ref.extra_pool_hit_pages,
        ref.restorable_prefix_pages,
    )
    assert r.batch_exists_v2(_keys("none", 3), [probe], INFO()).kv_hit_pages == 0
    assert r.batch_exists(keys) == n_kv  # the KV pages alone

    # Read KV then the sidecar, as SGLang's prefetch does, into zeroed reader slots.
    hit = restorable[-1]
    kv_dst = kv_r.alloc(hit * PAGE_SIZE)
    side_dst = side_r.alloc((len(side_keys) + 1) * side_r.page_size)
    side_dst_starts = _starts(side_r, side_dst)
    _zero(side_r, side_dst_starts)
    blank = _page(side_r, side_dst_starts[-1])
    missing = keys[0]  # a KV page with no sidecar object
    got = r.batch_get_v2(
        [
            sgl.PoolTransfer(name=sgl.PoolName.KV, host_indices=kv_dst, keys=keys[:hit]),
            sgl.PoolTransfer(
                name=pool_name, host_indices=side_dst, keys=[*side_keys, missing], hit_policy=trailing
            ),
        ],
        INFO(),
    )
    assert got == {"kv": [True] * hit, sidecar: [True] * len(side_keys) + [False]}
    assert sgl.count_pool_hits(got) == {"kv": hit, sidecar: len(side_keys)}
    assert [_page(kv_r, s) for s in _starts(kv_r, kv_dst)] == kv_want[:hit]
    assert [_page(side_r, s) for s in side_dst_starts[:-1]] == side_want
    assert _page(side_r, side_dst_starts[-1]) == blank

    # Generic path: SGLang's controller moves only the anchor (KV) pool's flat pages through
    # batch_set/batch_get (cache_controller's _generic_page_set/_get on storage_host_pool);
    # sidecars always go through v2. Both together, as a hybrid model without v1 runs.
    gkeys = _keys(f"{sidecar}-generic", 2)
    gkv = kv_w.alloc(2 * PAGE_SIZE)
    gside = side_w.alloc(2 * side_w.page_size)
    gkv_want = [_page(kv_w, s) for s in _starts(kv_w, gkv)]
    gside_want = [_page(side_w, s) for s in _starts(side_w, gside)]
    assert w.batch_set(gkeys, [kv_w.get_data_page(s, flat=True) for s in _starts(kv_w, gkv)]) is True
    assert w.batch_set_v2([sgl.PoolTransfer(name=pool_name, host_indices=gside, keys=gkeys)]) == {
        sidecar: [True, True]
    }
    flat = r.batch_get(gkeys, [kv_r.get_dummy_flat_data_page() for _ in gkeys])
    assert isinstance(flat, list) and all(t is not None for t in flat)
    gdst = kv_r.alloc(2 * PAGE_SIZE)
    for page, s in zip(flat, _starts(kv_r, gdst)):
        kv_r.set_from_flat_data_page(s, page)
    assert [_page(kv_r, s) for s in _starts(kv_r, gdst)] == gkv_want
    gside_dst = side_r.alloc(2 * side_r.page_size)
    assert r.batch_get_v2([sgl.PoolTransfer(name=pool_name, host_indices=gside_dst, keys=gkeys)]) == {
        sidecar: [True, True]
    }
    assert [_page(side_r, s) for s in _starts(side_r, gside_dst)] == gside_want
    # A sidecar's flat page is not a KV page: the generic path says so instead of storing it
    # under the KV page's name.
    with pytest.raises(ValueError, match=r"values\[0\] (has dtype|holds)"):
        w.batch_set(_keys("not-kv", 1), [side_w.get_data_page(int(gside[0]), flat=True)])
