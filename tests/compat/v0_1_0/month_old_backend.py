"""An outside backend as a backend author wrote it from the 0.1.0 docs of a month before:
the transport declares its store capabilities, and the storage class restates them
(``capabilities = MyTransport.capabilities``) and builds the transport in
``create_transport`` without setting ``transport_cls``.

Frozen: this file is a fixture of the 0.1.0 public API and is never edited; the SDK must keep
certifying it or fail at import or construction with one error that names the change to
make (``tests/compat/test_frozen_backends.py``).

Objects are files ``<root>/<sha1 of the name>`` holding ``name\\n`` then the bytes; writes
go to a private temporary file and are published with ``os.link`` (create-if-absent,
atomic).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from hicache_sdk import (
    BackendConfig,
    Capabilities,
    PagedStorage,
    Segments,
    Transport,
    TransportError,
    secret_field,
)

__all__ = ["MineConfig", "MineStorage", "MineTransport"]


def _view(addr: int, n: int) -> memoryview:
    return memoryview((ctypes.c_char * n).from_address(addr)).cast("B")


class MineTransport(Transport):
    capabilities = Capabilities(persistent=True, shared_across_processes=True, delete=True, health=True)
    max_segments = 1 << 30

    def __init__(self, root: str, token: str | None) -> None:
        self.root = os.path.abspath(root)
        self._token = token
        self._lock = threading.Lock()
        os.makedirs(self.root, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, hashlib.sha1(key.encode()).hexdigest())

    def _header(self, key: str) -> bytes:
        return key.encode() + b"\n"

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        out: list[int | None] = []
        for key in keys:
            try:
                size = os.stat(self._path(key)).st_size - len(self._header(key))
            except FileNotFoundError:
                out.append(None)
                continue
            except OSError as e:
                raise TransportError(str(e), reason="io_error") from None
            out.append(size)
        return out

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        out = []
        for key, segs in zip(keys, buffers):
            out.append(self._read_one(key, segs))
        return out

    def _read_one(self, key: str, segs: Segments) -> bool:
        head = self._header(key)
        want = sum(n for _, n in segs)
        try:
            with open(self._path(key), "rb") as f:
                if f.read(len(head)) != head:
                    return False
                if os.fstat(f.fileno()).st_size - len(head) != want:
                    return False
                for addr, n in segs:
                    view = _view(addr, n)
                    got = 0
                    while got < n:
                        k = f.readinto(view[got:])
                        if not k:
                            return False
                        got += k
            return True
        except FileNotFoundError:
            return False
        except OSError as e:
            raise TransportError(str(e), reason="io_error") from None

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        out = []
        for key, segs in zip(keys, buffers):
            path = self._path(key)
            if os.path.exists(path):
                out.append(True)
                continue
            fd, tmp = tempfile.mkstemp(prefix=".w-", dir=self.root)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(self._header(key))
                    for addr, n in segs:
                        f.write(_view(addr, n))
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    pass
                out.append(True)
            except OSError:
                out.append(False)
            finally:
                os.unlink(tmp)
        return out

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            try:
                os.unlink(self._path(key))
            except OSError:
                pass

    def clear(self, prefix: str) -> None:
        with self._lock:
            for name in os.listdir(self.root):
                if name.startswith(".w-"):
                    continue
                path = os.path.join(self.root, name)
                try:
                    with open(path, "rb") as f:
                        key = f.readline()[:-1].decode()
                except OSError:
                    continue
                if key.startswith(prefix):
                    try:
                        os.unlink(path)
                    except OSError:
                        pass

    def close(self) -> None:
        pass

    def health(self) -> bool:
        return os.path.isdir(self.root)


@dataclass(frozen=True)
class MineConfig(BackendConfig):
    env_prefix = "MINE"
    root: str = "/tmp/mine-store"
    token: str | None = secret_field(None)


class MineStorage(PagedStorage):
    config_cls = MineConfig
    capabilities = MineTransport.capabilities
    backend_name = "mine"

    def create_transport(self, config: MineConfig) -> MineTransport:
        return MineTransport(config.root, config.token)
