"""Real ``redis-server`` processes for the tests: free 127.0.0.1 ports, no persistence,
stopped by PID (also on failure), restartable on the same port (L4 faults)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

__all__ = [
    "RedisClusterServers",
    "RedisServer",
    "TlsFiles",
    "call",
    "free_port",
    "make_tls_files",
    "redis_server_binary",
]


def redis_server_binary() -> str | None:
    return shutil.which("redis-server")


def call(port: int, *args: bytes | str | int, password: str | None = None, timeout: float = 10.0) -> Any:
    """One command on a redis-py connection of its own to ``127.0.0.1:port`` (out of band),
    the reply as redis-py parses it."""
    import redis

    r = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=timeout)
    try:
        return r.execute_command(*args)
    finally:
        r.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TlsFiles:
    """A throwaway CA, a server certificate it signed (for 127.0.0.1 / localhost), and a
    second, unrelated CA; made with openssl in ``d``."""

    def __init__(self, d: Path) -> None:
        self.ca_key, self.ca = self._ca(d, "test-ca")
        _, self.other_ca = self._ca(d, "other-ca")
        self.key, self.cert = d / "server.key", d / "server.crt"
        csr, ext = d / "server.csr", d / "ext.cnf"
        ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
                        "-keyout", str(self.key), "-out", str(csr)], check=True, capture_output=True)  # fmt: skip
        subprocess.run(["openssl", "x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
                        "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(self.cert)],
                       check=True, capture_output=True)  # fmt: skip

    @staticmethod
    def _ca(d: Path, name: str) -> tuple[Path, Path]:
        key, crt = d / f"{name}.key", d / f"{name}.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(crt)],
                       check=True, capture_output=True)  # fmt: skip
        return key, crt

    def server_args(self) -> list[str]:
        """redis-server options for TLS with these files (clients need no certificate)."""
        return ["--tls-cert-file", str(self.cert), "--tls-key-file", str(self.key),
                "--tls-ca-cert-file", str(self.ca), "--tls-auth-clients", "no"]  # fmt: skip


def make_tls_files(d: Path) -> TlsFiles:
    return TlsFiles(d)


class RedisServer:
    """One ``redis-server`` on a free loopback port. ``extra`` are more command-line args
    (TLS, ACL). ``stop()`` kills it (SIGKILL: a crash, not a shutdown); ``start()`` brings
    it back empty on the same port."""

    def __init__(self, extra: list[str] | None = None, tls_port: bool = False) -> None:
        # made at start(): a module that is collected but not run leaves nothing behind
        self.dir = Path(tempfile.gettempdir()) / f"hicache-redis-{uuid.uuid4().hex[:12]}"
        self.port = free_port()
        self.tls = tls_port
        self.extra = list(extra or [])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert self.proc is None
        self.dir.mkdir(mode=0o700, exist_ok=True)
        port_args = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        args = [redis_server_binary() or "redis-server", *port_args, "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", str(self.dir), "--logfile", str(self.dir / "redis.log"),
                *self.extra]  # fmt: skip
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
                self.proc = None
                raise RuntimeError(f"redis-server exited at start:\n{log}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.2):
                return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not listen within 10 s")

    def stop(self) -> None:
        """Kill by PID and reap; idempotent."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisClusterServers:
    """Three masters, no replicas, ``cluster-require-full-coverage no`` (servers.md recipe).
    ``tls``: TLS only (client port and cluster bus); ``extra``: more server options (ACL
    users, ``--requirepass``); ``cli_args``: what ``redis-cli`` then needs (``-a``, ``--tls``)."""

    def __init__(
        self,
        masters: int = 3,
        tls: TlsFiles | None = None,
        extra: list[str] | None = None,
        cli_args: list[str] | None = None,
    ) -> None:
        opts = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000",
                "--cluster-require-full-coverage", "no", *(extra or [])]  # fmt: skip
        if tls is not None:
            opts += [*tls.server_args(), "--tls-cluster", "yes"]
        self.cli_args = list(cli_args or [])
        if tls is not None:
            self.cli_args += ["--tls", "--cacert", str(tls.ca)]
        self._masters, self._opts, self._tls = masters, opts, tls is not None
        self.nodes = self._new_nodes()

    def _new_nodes(self) -> list[RedisServer]:
        # an explicit bus port: the default (port + 10000) may not exist for a high free port
        return [
            RedisServer(extra=[*self._opts, "--cluster-port", str(free_port())], tls_port=self._tls)
            for _ in range(self._masters)
        ]

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self, attempts: int = 3) -> None:
        """Start the nodes and join them. A free port can be taken between its pick and the
        server's bind (other test workers start servers too), and ``redis-cli --cluster
        create`` gives up on a node that answers late on a loaded machine: each retry starts
        new nodes on new ports."""
        for attempt in range(attempts):
            try:
                for n in self.nodes:
                    n.start()
                res = subprocess.run(
                    ["redis-cli", *self.cli_args, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                     "--cluster-replicas", "0", "--cluster-yes"],
                    capture_output=True, text=True, timeout=60,
                )  # fmt: skip
                if res.returncode != 0:
                    raise RuntimeError(
                        f"redis-cli --cluster create: exit {res.returncode}\n{res.stdout}{res.stderr}"
                    )
                self.wait_ok()
                return
            except Exception:
                self.close()
                if attempt == attempts - 1:
                    raise
                self.nodes = self._new_nodes()
            except BaseException:
                self.close()
                raise

    def cli(self, node: RedisServer, *args: str) -> str:
        return subprocess.run(
            ["redis-cli", *self.cli_args, "-p", str(node.port), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout

    def wait_ok(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        for n in self.nodes:
            while "cluster_state:ok" not in self.cli(n, "cluster", "info"):
                if time.monotonic() > deadline:
                    raise RuntimeError("the cluster did not reach cluster_state:ok")
                time.sleep(0.05)

    def close(self) -> None:
        for n in self.nodes:
            n.close()
