"""A real ``mooncake_master`` and a separate segment holder (``mooncake_client``) on free
loopback ports, started and stopped by PID. Used by the test session and the benchmark."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

#: Quiet Mooncake's glog output (GLOG_minloglevel has no effect on it).
QUIET_ENV = {"MC_LOG_LEVEL": "ERROR"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _bin(name: str) -> str:
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else (shutil.which(name) or name)


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=0.5) as r:
            return r.read().decode("utf-8", "replace")
    except Exception:
        return ""


@dataclass
class MooncakeCluster:
    """One master plus (optionally) one holder process; ``stop_master``/``start_master``
    kill and restart the master on the same ports (L4 faults)."""

    holder_bytes: int = 256 << 20
    rpc_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    holder_port: int = field(default_factory=free_port)
    master: subprocess.Popen[bytes] | None = None
    holder: subprocess.Popen[bytes] | None = None
    _raw: Any = None

    def raw_client(self) -> Any:
        """A raw Mooncake client of this cluster (no segment), made on first use and
        closed by :meth:`stop`: the out-of-band view of the tests."""
        if self._raw is None:
            from mooncake.store import MooncakeDistributedStore

            s = MooncakeDistributedStore()
            rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", self.address)
            if rc != 0:
                raise RuntimeError(f"raw mooncake client setup against {self.address} failed (rc={rc})")
            self._raw = s
        return self._raw

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.rpc_port}"

    def config(self, **kw: Any) -> dict[str, Any]:
        """Client settings in SGLang's keys only: tcp, P2PHANDSHAKE, no segment of its own
        (data lives in the holder). No ``master_metrics_port``: the master's metrics port
        is a free one, never SGLang's default 9003, and nothing needs it without
        ``check_server``."""
        base: dict[str, Any] = {
            "master_server_address": self.address,
            "metadata_server": "P2PHANDSHAKE",
            "protocol": "tcp",
            "global_segment_size": 0,
            "local_hostname": "127.0.0.1",
        }
        base.update(kw)
        return base

    def _env(self) -> dict[str, str]:
        return {**os.environ, **QUIET_ENV}

    def start_master(self, timeout: float = 20.0) -> None:
        self.master = subprocess.Popen(
            [
                _bin("mooncake_master"),
                "--rpc_address=127.0.0.1",
                f"--rpc_port={self.rpc_port}",
                "--metrics_host=127.0.0.1",
                f"--metrics_port={self.metrics_port}",
                "--logtostderr",
            ],
            env=self._env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while '"service_ready":true' not in _get(self.health_url).replace(" ", ""):
            if self.master.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mooncake_master did not become ready on {self.address}")
            time.sleep(0.05)

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/health"

    def clients(self) -> int:
        text = _get(f"http://127.0.0.1:{self.metrics_port}/metrics/summary")
        for part in text.split("|"):
            if "Clients:" in part:
                return int(part.split(":")[1].split()[0])
        return 0

    def start_holder(self, timeout: float = 30.0) -> None:
        before = self.clients()
        self.holder = subprocess.Popen(
            [
                _bin("mooncake_client"),
                "--host=127.0.0.1",
                f"--port={self.holder_port}",
                f"--global_segment_size={self.holder_bytes}",
                "--local_buffer_size=16777216",
                "--metadata_server=P2PHANDSHAKE",
                f"--master_server_address={self.address}",
                "--protocol=tcp",
                "--logtostderr",
            ],
            env=self._env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while self.clients() <= before:
            if self.holder.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("mooncake_client (holder) did not register with the master")
            time.sleep(0.1)

    @staticmethod
    def _kill(p: subprocess.Popen[bytes] | None, sig: int = signal.SIGKILL) -> None:
        if p is not None and p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)

    def stop_master(self) -> None:
        self._kill(self.master)

    def stop_holder(self) -> None:
        self._kill(self.holder)

    def start(self) -> MooncakeCluster:
        self.start_master()
        self.start_holder()
        return self

    def stop(self) -> None:
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        self._kill(self.holder)
        self._kill(self.master, signal.SIGTERM)
