"""``hicache_sdk.lmcache.ConnectorAdapter`` / ``TransportConnector`` inside LMCache 0.5.x:
built by LMCache's own connector loader (``remote_storage_plugins``) behind its
``RemoteBackend``, over real file and redis backends; and LMCache's check tool in its remote
mode, its output judged."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hicache_conformance.engines.lmcache_check import run_remote_check

from hicache_sdk.lmcache import TransportConnector

MODEL = "conformance/model"


def _config(backend: str, backend_config: dict[str, Any], cls: str = "ConnectorAdapter") -> dict[str, Any]:
    return {
        "chunk_size": 256,
        "local_cpu": True,
        "max_local_cpu_size": 0.1,  # GB, allocated per test: kept small
        "remote_url": "plugin://hicache",
        "remote_serde": "naive",
        "remote_storage_plugins": ["hicache"],
        "extra_config": {
            "remote_storage_plugin.hicache.module_path": cls.rpartition(".")[0] or "hicache_sdk.lmcache",
            "remote_storage_plugin.hicache.class_name": cls.rpartition(".")[2],
            "remote_storage_plugin.hicache.adapter_params": {
                "backend": backend,
                "backend_config": backend_config,
            },
        },
    }


class Remote:
    """LMCache's ``RemoteBackend`` over our connector, with its event loop on a thread."""

    def __init__(self, config: dict[str, Any], kv_dtype: torch.dtype = torch.bfloat16) -> None:
        from lmcache.v1.check.utils import _get_default_metadata
        from lmcache.v1.config import LMCacheEngineConfig
        from lmcache.v1.storage_backend import RemoteBackend
        from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

        self.config = LMCacheEngineConfig.from_dict(config)
        self.metadata = _get_default_metadata(MODEL, kv_dtype=kv_dtype)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.cpu = LocalCPUBackend(config=self.config, metadata=self.metadata, dst_device="cpu")
        self.backend = RemoteBackend(
            config=self.config,
            metadata=self.metadata,
            loop=self.loop,
            local_cpu_backend=self.cpu,
            dst_device="cpu",
        )
        conn = self.backend.connection
        self.connector = conn.getWrappedConnector() if hasattr(conn, "getWrappedConnector") else conn

    def key(self, i: int | str, dtype: torch.dtype = torch.bfloat16, **kw: Any) -> Any:
        from lmcache.utils import CacheEngineKey

        fields = {"model_name": MODEL, "world_size": 8, "worker_id": 0, "dtype": dtype, **kw}
        return CacheEngineKey(chunk_hash=hash(("k", i)) & 0xFFFFFFFF, **fields)

    def obj(self, fill: int) -> Any:
        c = self.connector
        o = self.cpu.allocate(c.meta_shapes, c.meta_dtypes, c.meta_fmt)
        o.tensor.view(torch.uint8).fill_(fill)
        return o

    def run(self, coro: Any, timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.backend.close()
        self.cpu.close()  # frees LMCache's CPU pool (it would outlive the test otherwise)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(params=["file", "redis", "s3"])
def remote(
    request: pytest.FixtureRequest, backend_config: Callable[[str], dict[str, Any]]
) -> Iterator[Remote]:
    r = Remote(_config(request.param, backend_config(request.param)))
    yield r
    r.close()


BROKEN = "hicache_conformance.broken.lmcache_connector"


@pytest.mark.parametrize(
    ("cls", "test", "reason"),
    [
        (f"{BROKEN}.ReleasesOnPutAdapter", "test_put_get_and_ownership", "put released"),
        (
            f"{BROKEN}.BlocksTheLoopAdapter",
            "test_io_never_runs_on_lmcaches_loop",
            "ran on LMCache's event loop",
        ),
    ],
)
def test_each_broken_connector_fails_its_test(
    cls: str, test: str, reason: str, backend_config: Callable[[str], dict[str, Any]]
) -> None:
    r = Remote(_config("file", backend_config("file"), cls))
    try:
        assert type(r.connector).__module__ == BROKEN
        with pytest.raises(AssertionError, match=reason):
            globals()[test](r)
    finally:
        r.close()


def test_built_by_lmcaches_loader(remote: Remote) -> None:
    assert isinstance(remote.connector, TransportConnector)


def test_put_get_and_ownership(remote: Remote) -> None:
    c, key = remote.connector, remote.key(1)
    src = remote.obj(7)
    refs = src.get_ref_count()
    remote.run(c.put(key, src))
    assert src.get_ref_count() == refs, "put released the caller's object"
    assert c.exists_sync(key) and remote.run(c.exists(key))
    got = remote.run(c.get(key))
    assert got is not None and bytes(got.byte_array) == bytes(src.byte_array)
    assert remote.run(c.get(remote.key(2))) is None
    assert c.remove_sync(key) and not c.exists_sync(key)
    assert remote.run(c.list()) == []


def test_short_chunks_come_back_short(remote: Remote) -> None:
    c = remote.connector
    full = remote.obj(3)
    short_bytes = c.single_token_size * 16
    key = remote.key("short")
    short = remote.cpu.allocate(c.meta_shapes, c.meta_dtypes, c.meta_fmt)
    short.tensor.view(torch.uint8).fill_(5)
    short = c.reshape_partial_chunk(short, short_bytes)
    remote.run(c.put(key, short))
    got = remote.run(c.get(key))
    assert (
        got is not None and got.get_size() == short_bytes and bytes(got.byte_array) == bytes(short.byte_array)
    )
    del full


@pytest.mark.parametrize("other", [{"world_size": 4}, {"worker_id": 1}, {"dtype": torch.float16}])
def test_key_fields_isolate(remote: Remote, other: dict[str, Any]) -> None:
    c = remote.connector
    remote.run(c.put(remote.key("iso"), remote.obj(9)))
    assert c.exists_sync(remote.key("iso"))
    assert not c.exists_sync(remote.key("iso", **other))


def test_another_layout_is_a_miss(backend_config: Callable[[str], dict[str, Any]]) -> None:
    cfg = _config("file", backend_config("file"))
    a, b = Remote(cfg, torch.bfloat16), Remote(cfg, torch.float16)
    try:
        key = a.key("layout")  # the same key, written by a bf16 deployment
        a.run(a.connector.put(key, a.obj(1)))
        assert a.run(a.connector.get(key)) is not None
        assert b.run(b.connector.get(key)) is None
    finally:
        a.close()
        b.close()


def test_io_never_runs_on_lmcaches_loop(remote: Remote) -> None:
    c = remote.connector
    seen: list[str] = []
    inner = c.objects.sizes

    def sizes(names: Any) -> Any:
        seen.append(threading.current_thread().name)
        time.sleep(0.2)
        return inner(names)

    c.objects.sizes = sizes  # type: ignore[method-assign]
    t0 = time.monotonic()
    fut = asyncio.run_coroutine_threadsafe(c.exists(remote.key("slow")), remote.loop)

    async def now() -> float:  # runs on LMCache's loop: late when something blocks it
        return time.monotonic()

    lag = remote.run(now()) - t0
    assert fut.result(10) is False
    assert lag < 0.1 and seen and all(n.startswith("hicache-lmc-conn") for n in seen), (
        f"I/O ran on LMCache's event loop (it was blocked {lag:.3f} s; threads {seen})"
    )


@pytest.mark.parametrize("backend", ["file", "redis", "s3"])
def test_lmcache_remote_check_passes(
    backend: str, backend_config: Callable[[str], dict[str, Any]], tmp_path: Path
) -> None:
    # the connector's lines are the ones `hicache lmcache-args --plug connector` prints
    cfg = backend_config(backend)
    exe = Path(sys.executable).with_name("hicache")
    out = subprocess.run(
        [str(exe), "lmcache-args", backend, "--config", json.dumps(cfg), "--plug", "connector",
         "--secret-file", str(tmp_path / "secrets.json")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    base = {
        k: v
        for k, v in _config(backend, cfg).items()
        if k not in ("remote_url", "remote_storage_plugins", "extra_config")
    }
    path = tmp_path / "lmcache.yaml"
    path.write_text("\n".join(f"{k}: {json.dumps(v)}" for k, v in base.items()) + "\n" + out.stdout)
    run = run_remote_check(str(path), num_keys=16)
    assert run.passed, f"{run.problems}\n{run.output[-3000:]}"
