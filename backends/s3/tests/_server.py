"""A real ``moto_server`` on a free 127.0.0.1 port, started and stopped by PID; with
``tls=(cert, key, ca)`` it serves HTTPS with that certificate (moto's ``-c`` / ``-k``)."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from typing import Any

import boto3
from botocore.config import Config

CREDS = {"aws_access_key_id": "testing-akid", "aws_secret_access_key": "testing-secret-key"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class MotoServer:
    """``start()`` / ``stop()`` (SIGTERM, then SIGKILL, by PID); ``restart`` keeps the port."""

    def __init__(
        self,
        port: int | None = None,
        env: dict[str, str] | None = None,
        tls: tuple[str, str, str] | None = None,
    ) -> None:
        self.port = port or free_port()
        self.env = env
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def start(self, timeout: float = 20.0) -> None:
        exe = os.path.join(os.path.dirname(sys.executable), "moto_server")
        tls_args = ["-c", self.tls[0], "-k", self.tls[1]] if self.tls else []
        ctx = ssl.create_default_context(cafile=self.tls[2]) if self.tls else None
        self.proc = subprocess.Popen(
            [exe, "-H", "127.0.0.1", "-p", str(self.port), *tls_args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(self.env or {})},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.proc.returncode}")
            try:
                urllib.request.urlopen(self.url + "/moto-api/", timeout=0.5, context=ctx).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("moto_server did not answer in time")

    def stop(self) -> None:
        p, self.proc = self.proc, None
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name="us-east-1",
            verify=self.tls[2] if self.tls else None,
            config=Config(retries={"mode": "standard", "max_attempts": 2}, max_pool_connections=64),
            **CREDS,
        )

    def make_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)
