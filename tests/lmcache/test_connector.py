"""``hicache_sdk.lmcache.ConnectorAdapter`` / ``TransportConnector`` inside LMCache 0.5.x:
the suite's connector contract (``ConnectorTests``, built by LMCache's own connector loader
behind its ``RemoteBackend``) over real file, redis, s3 and mooncake backends; the broken
connectors of ``hicache_conformance.broken.lmcache_connector``, each failing the one test it
names, through ``hicache check --engine lmcache-connector``; MLA writes by rank 0 only; and
LMCache's check tool in its remote mode, its output judged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hicache_conformance.broken import lmcache_connector as broken
from hicache_conformance.cli import main
from hicache_conformance.engines.lmcache_check import run_remote_check
from hicache_conformance.engines.lmcache_connector import Harness, connector_config, metadata
from hicache_conformance.suite.lmcache_connector_tests import ConnectorTests

from hicache_sdk.lmcache import TransportConnector


def _frozen(redis_server: Any) -> Callable[[], contextlib.AbstractContextManager[None]]:
    return _frozen_pid(redis_server.proc.pid)


def _frozen_pid(pid: int) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """``freeze()``: the process ``pid`` stopped (SIGSTOP: every request to it hangs) while
    the block runs, then continued."""

    @contextlib.contextmanager
    def freeze() -> Iterator[None]:
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    return freeze


class TestOursOnFile(ConnectorTests):
    @pytest.fixture
    def connector_config(self, backend_config: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        return connector_config("file", backend_config("file"))

    def test_the_connector_is_ours(self, h: Harness) -> None:
        assert isinstance(h.connector, TransportConnector)


class TestOursOnRedis(ConnectorTests):
    @pytest.fixture
    def connector_config(self, backend_config: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        cfg = {**backend_config("redis"), "exists_timeout_s": 0.3, "transfer_timeout_s": 1.0}
        return connector_config("redis", cfg)

    @pytest.fixture
    def freeze(self, redis_server: Any) -> Callable[[], contextlib.AbstractContextManager[None]]:
        return _frozen(redis_server)


class TestOursOnS3(ConnectorTests):
    @pytest.fixture
    def connector_config(self, backend_config: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        return connector_config("s3", backend_config("s3"))


class TestOursOnMooncake(ConnectorTests):
    @pytest.fixture
    def connector_config(self, backend_config: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        return connector_config("mooncake", backend_config("mooncake"))

    @pytest.fixture
    def freeze(self, mooncake_cluster: Any) -> Callable[[], contextlib.AbstractContextManager[None]]:
        return _frozen_pid(mooncake_cluster.master.pid)  # the real mooncake_master


BROKEN = [
    broken.ReleasesOnPutAdapter,
    broken.BlocksTheLoopAdapter,
    broken.TagBlindAdapter,
    broken.LeaksFailedGetsAdapter,
    broken.LoopBoundExistsSyncAdapter,
]


@pytest.mark.parametrize("cls", BROKEN, ids=lambda c: c.__name__)
def test_each_broken_connector_fails_its_test_only(cls: type, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    cfg = json.dumps({"backend": "file", "backend_config": {"root": str(tmp_path / "kv")}})
    target = f"{cls.__module__}:{cls.__name__}"
    code = main([target, "--engine", "lmcache-connector", "--config", cfg, "--report", str(report), "-q"])
    doc = json.loads(report.read_text())
    assert doc["engine"] == "lmcache-connector"
    failed = sorted(k.rsplit("::", 1)[-1] for k, v in doc["tests"].items() if v["outcome"] == "failed")
    assert code == 1 and failed == [cls.FAILS], failed  # type: ignore[attr-defined]


def test_ours_passes_through_the_cli(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    cfg = json.dumps({"root": str(tmp_path / "kv")})
    assert (
        main(["file", "--engine", "lmcache-connector", "--config", cfg, "--report", str(report), "-q"]) == 0
    )
    tests = json.loads(report.read_text())["tests"]
    assert len(tests) >= 18 and all(v["outcome"] in ("passed", "skipped") for v in tests.values())
    assert tests["TestLMCacheConnector::test_32_mib_chunks_round_trip"]["outcome"] == "passed"


def test_a_constructor_error_lmcache_only_logs_fails(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    cfg = json.dumps({"backend": "no-such-backend"})
    target = "hicache_sdk.lmcache:ConnectorAdapter"
    code = main([target, "--engine", "lmcache-connector", "--config", cfg, "--report", str(report), "-q"])
    tests = json.loads(report.read_text())["tests"]
    assert code == 1
    built = tests["TestLMCacheConnector::test_built_by_lmcaches_loader"]
    assert built["outcome"] == "failed" and "no-such-backend" in built["reason"], built


def test_mla_only_rank_0_writes_without_lmcaches_own_rule(
    backend_config: Callable[[str], dict[str, Any]],
) -> None:
    # LMCache's RemoteBackend skips the puts of ranks > 0 itself by default; with that
    # turned off the connector still keeps one object per chunk, written by rank 0 only
    cfg = connector_config("file", backend_config("file"))
    cfg["extra_config"]["remote_enable_mla_worker_id_as0"] = False
    r0 = Harness(cfg, metadata(use_mla=True, world_size=2, worker_id=0))
    r1 = Harness(cfg, metadata(use_mla=True, world_size=2, worker_id=1))
    try:
        assert r1.backend._mla_worker_id_as0_mode is False  # LMCache's own rule is off
        c0, c1 = r0.connector, r1.connector
        assert c0.writes and not c1.writes
        k0, k1 = r0.key("mla"), r1.key("mla")
        assert c0.object_name(k0) == c1.object_name(k1)
        r1.put(k1, r1.obj(3))
        assert not c0.exists_sync(k0), "rank 1 wrote an MLA chunk"
        src = r0.obj(4)
        r0.put(k0, src)
        got = r1.backend.get_blocking(k1)
        assert got is not None and bytes(got.byte_array) == bytes(src.byte_array)
        got.ref_count_down()
    finally:
        r0.close()
        r1.close()


def test_lmcaches_async_lookup_path_answers_prefixes_in_one_batch(
    backend_config: Callable[[str], dict[str, Any]],
) -> None:
    # RemoteBackend's async forms (vLLM's async loading): a prefix count, then the leading
    # run of objects (a later hit is released, not handed back)
    h = Harness(connector_config("file", backend_config("file")), metadata())
    try:
        keys = [h.key(("async", i)) for i in range(4)]
        h.batched_put([keys[0], keys[1], keys[3]], [h.obj(1), h.obj(2), h.obj(4)])
        assert h.run(h.backend.batched_async_contains("l1", keys)) == 2
        assert h.run(h.wrapper.batched_async_contains("l1", keys[2:])) == 0
        got = h.run(h.backend.batched_get_non_blocking("l1", keys))
        assert len(got) == 2 and bytes(got[1].byte_array) == bytes(h.obj(2).byte_array)
        leaked = h.unreleased(got)
        for g in got:
            g.ref_count_down()
        assert not leaked
    finally:
        h.close()


def test_a_cancelled_get_releases_what_it_allocated_when_it_ends(
    backend_config: Callable[[str], dict[str, Any]],
) -> None:
    # LMCache cancels a get past its blocking_timeout_secs; the read still running on the
    # connector's thread allocated LMCache memory, released once that read ends
    h = Harness(connector_config("file", backend_config("file")), metadata())
    try:
        keys = [h.key(("cancel", i)) for i in range(3)]
        h.batched_put(keys, [h.obj(i) for i in range(3)])
        conn = h.connector
        real = conn.objects.load_sized

        def slow(chunks: Any) -> Any:
            time.sleep(0.5)
            return real(chunks)

        conn.objects.load_sized = slow
        for call in (lambda: h.wrapper.batched_get(keys), lambda: h.wrapper.get(keys[0])):
            before = len(h.allocated)
            fut = asyncio.run_coroutine_threadsafe(call(), h.loop)
            time.sleep(0.2)
            fut.cancel()
            time.sleep(0.8)
            assert len(h.allocated) > before, "the get allocated nothing"
            assert not h.unreleased(), "a cancelled get kept what it allocated"
    finally:
        h.close()


def _config(backend: str, backend_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "chunk_size": 256,
        "local_cpu": True,
        "max_local_cpu_size": 0.1,  # GB
        "remote_serde": "naive",
        **connector_config(backend, backend_config),
    }


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
