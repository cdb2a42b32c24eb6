"""End to end: a real ``lmcache server`` (CPU) with our L2 adapter over the file backend and
over a real ``redis-server``; LMCache's own CPU client stores chunks, ``POST /cache/clear``
empties LMCache's L1, and the chunks read back -- served by our adapter -- have the
checksums they were stored with. ``/status`` shows our ``report_status()``. The server's
``--l2-adapter`` flag is the one ``hicache lmcache-args`` prints."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hicache_conformance.engines.lmcache_l2 import adapter_spec

CLIENT = Path(__file__).with_name("_e2e_client.py")
SEQS = ["0", "1", "2"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http(url: str, body: dict[str, Any] | None = None, timeout: float = 10.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


class Server:
    """One ``lmcache server`` subprocess with our adapter; stopped by PID."""

    def __init__(self, spec: dict[str, Any], log: Path) -> None:
        self.port, self.http_port = _free_port(), _free_port()
        exe = Path(sys.executable).with_name("lmcache")
        args = [str(exe), "server", "--host", "127.0.0.1", "--port", str(self.port),
                "--http-host", "127.0.0.1", "--http-port", str(self.http_port), "--l1-size-gb", "0.25",
                "--eviction-policy", "LRU", "--supported-transfer-mode", "auto",
                "--l2-adapter", json.dumps(spec), "--disable-observability"]  # fmt: skip
        env = {**os.environ, "LMCACHE_TRACK_USAGE": "false"}
        self.log = log
        self.proc = subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lmcache server exited:\n{log.read_text(errors='replace')[-3000:]}")
            try:
                _http(f"{self.url}/status", timeout=2)
                return
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(
            f"lmcache server did not answer in 120 s:\n{log.read_text(errors='replace')[-3000:]}"
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def rpc(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def ours(self) -> dict[str, Any]:
        status = _http(f"{self.url}/status")
        found = [a for a in _adapters(status) if a.get("type") == "hicache_sdk.lmcache.L2Adapter"]
        assert found, f"our adapter is not in /status: {json.dumps(status)[:2000]}"
        return found[0]

    def client(self, phase: str) -> list[dict[str, Any]]:
        out = subprocess.run(
            [sys.executable, str(CLIENT), self.rpc, self.url, phase, *SEQS],
            capture_output=True, text=True, timeout=240, env={**os.environ, "LMCACHE_TRACK_USAGE": "false"},
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _lmcache_args(backend: str, config: dict[str, Any]) -> dict[str, Any]:
    """The ``--l2-adapter`` JSON that ``hicache lmcache-args`` prints (run as a subprocess)."""
    exe = Path(sys.executable).with_name("hicache")
    out = subprocess.run(
        [str(exe), "lmcache-args", backend, "--config", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    flag, value = shlex.split(out.stdout.strip())
    assert flag == "--l2-adapter"
    spec: dict[str, Any] = json.loads(value)
    assert spec == adapter_spec(backend, config)
    return spec


def _adapters(status: Any) -> list[dict[str, Any]]:
    """Every dict in ``/status`` that has an ``is_healthy`` key (adapter reports)."""
    found: list[dict[str, Any]] = []
    stack = [status]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if "is_healthy" in x and "type" in x:
                found.append(x)
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return found


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Callable[[str, dict[str, Any]], Server]]:
    made: list[Server] = []

    def start(backend: str, config: dict[str, Any]) -> Server:
        srv = Server(_lmcache_args(backend, config), tmp_path / f"server-{len(made)}.log")
        made.append(srv)
        return srv

    yield start
    for s in made:
        s.stop()


@pytest.mark.parametrize("backend", ["file", "redis"])
def test_chunks_come_back_from_our_adapter(
    backend: str,
    server: Callable[[str, dict[str, Any]], Server],
    backend_config: Callable[[str], dict[str, Any]],
) -> None:
    srv = server(backend, backend_config(backend))
    stored = srv.client("store")
    assert [r["seq"] for r in stored] == [int(s) for s in SEQS] and all(r["ok"] for r in stored)
    chunks = sum(r["total_chunks"] for r in stored)
    assert chunks >= len(SEQS)
    deadline = time.monotonic() + 60
    while srv.ours()["counters"].get("lmcache_chunks_stored", 0) < chunks and time.monotonic() < deadline:
        time.sleep(0.2)
    assert srv.ours()["counters"].get("lmcache_chunks_stored", 0) == chunks
    assert _http(f"{srv.url}/cache/clear", {"tier": "l1"})["status"] == "ok"
    loaded = srv.client("load")
    assert [r["hit_chunks"] for r in loaded] == [r["total_chunks"] for r in stored]
    assert [r["checksums"] for r in loaded] == [r["checksums"] for r in stored]
    assert all(r["checksums"] for r in loaded)
    status = srv.ours()
    assert status["is_healthy"] is True and status["backend"] == backend and status["key_scheme"] == "lmc1"
    assert status["counters"].get("lmcache_chunks_loaded", 0) >= chunks
