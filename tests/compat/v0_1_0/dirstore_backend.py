"""A complete small backend on the transport path: one file per object under a directory.

This file is the example of ``docs/writing-a-backend.md``; ``tests/docs/test_docs_examples.py``
imports it and runs the conformance suite on it, so it cannot rot. It is deliberately small:
for a real local-disk backend use ``file`` (``backends/file/``), which adds an LRU byte
bound, O_DIRECT reads, crash recovery and the SGLang file names.

What the transport does, and nothing more:

* ``exists``: ``os.stat`` per key (size, or ``None`` when absent);
* ``read``: open, check the size equals the buffers' total, ``readinto`` each segment's
  ``memoryview`` (no copy);
* ``write``: create-if-absent and atomic: write a private temporary file, then ``os.link``
  it to the object's name; ``link`` fails when the name exists, so the first writer wins
  and a reader never sees a partial object;
* an I/O error is a miss / ``False`` with a counted reason (``count_failure``), never an
  exception;
* batches fan out over ``io_threads`` threads (``FanOut``, the calling thread included).

Everything else (hit semantics, page keys and headers, host-pool layouts, v1/v2/generic
paths, deadlines, breaker, metrics) comes from ``PagedStorage``.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import quote

from hicache_sdk import BackendConfig, Capabilities, ConfigError, PagedStorage, Segments, Transport
from hicache_sdk.config import setting
from hicache_sdk.kit import FanOut, first_occurrences, memoryviews, total_bytes

__all__ = ["DirConfig", "DirStorage", "DirTransport"]

_TMP = ".tmp-"


@dataclass(frozen=True, kw_only=True)
class DirConfig(BackendConfig):
    """Settings of ``dirstore`` (environment prefix ``HICACHE_DIRSTORE_``).

    * ``root`` (required): the directory holding one file per object; created if absent.
    * ``io_threads`` [4, 1..64]: threads one batch fans out over (1 = inline).
    """

    env_prefix: ClassVar[str] = "DIRSTORE"

    root: str = setting()
    io_threads: int = setting(4, ge=1, le=64)


def _reason(e: OSError) -> str:
    if e.errno == errno.ENOSPC:
        return "disk_full"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission"
    return "io_error"


class DirTransport(Transport):
    """Objects as files ``<root>/<quoted name>`` (see the module docs)."""

    # Only the store's own properties; PagedStorage adds zero_copy, hybrid_pools and mla.
    capabilities: ClassVar[Capabilities] = Capabilities(
        persistent=True, shared_across_processes=True, delete=True, health=True
    )

    def __init__(self, config: DirConfig) -> None:
        self.root = os.path.abspath(config.root)
        try:
            os.makedirs(self.root, mode=0o700, exist_ok=True)
        except OSError as e:  # misconfiguration fails construction, naming the key
            raise ConfigError(f"root: cannot create {self.root!r}: {e.strerror}") from None
        self._fan = FanOut(config.io_threads, name="dirstore-io")

    def _path(self, key: str) -> str:
        # quote() encodes character by character, so quote(prefix) is a prefix of
        # quote(key): clear(prefix) can match on file names.
        return os.path.join(self.root, quote(key, safe=""))

    # -- Transport ---------------------------------------------------------------------
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        out: list[int | None] = []
        for key in keys:
            try:
                out.append(os.stat(self._path(key)).st_size)
            except FileNotFoundError:
                out.append(None)
            except OSError as e:
                self.count_failure(_reason(e))
                out.append(None)
        return out

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        return self._fan.map(self._read_one, list(zip(keys, buffers)))

    def _read_one(self, item: tuple[str, Segments]) -> bool:
        key, segs = item
        try:
            with open(self._path(key), "rb", buffering=0) as f:
                if os.fstat(f.fileno()).st_size != total_bytes(segs):
                    return False  # cut short or foreign: never a hit
                for view in memoryviews(segs):
                    got = 0
                    while got < len(view):
                        n = f.readinto(view[got:])
                        if not n:
                            return False
                        got += n
                return True
        except FileNotFoundError:
            return False
        except OSError as e:
            self.count_failure(_reason(e))
            return False

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        dup = first_occurrences(keys)  # a repeated key is written once, from its first copy
        if dup is None:
            return self._fan.map(self._write_one, list(zip(keys, buffers)))
        keep, owner = dup
        done = self._fan.map(self._write_one, [(keys[i], buffers[i]) for i in keep])
        return [done[j] for j in owner]

    def _write_one(self, item: tuple[str, Segments]) -> bool:
        key, segs = item
        path = self._path(key)
        if os.path.exists(path):
            return True  # create-if-absent: an existing object is left untouched
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=_TMP, dir=self.root)
            with os.fdopen(fd, "wb", buffering=0) as f:
                for view in memoryviews(segs):
                    f.write(view)
            try:
                os.link(tmp, path)  # atomic publication; fails if another writer won
            except FileExistsError:
                pass
            return True
        except OSError as e:
            self.count_failure(_reason(e))
            return False
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass

    def delete(self, keys: Sequence[str]) -> None:
        for key in keys:
            try:
                os.unlink(self._path(key))
            except OSError:
                pass

    def clear(self, prefix: str) -> None:
        quoted = quote(prefix, safe="")
        for name in os.listdir(self.root):
            if name.startswith(quoted) and not name.startswith(_TMP):
                try:
                    os.unlink(os.path.join(self.root, name))
                except OSError:
                    pass

    def close(self) -> None:
        self._fan.close()

    def health(self) -> bool:
        return os.access(self.root, os.W_OK)


class DirStorage(PagedStorage):
    """The ``dirstore`` backend: ``PagedStorage`` builds ``DirTransport(config)``."""

    config_cls = DirConfig
    transport_cls = DirTransport
    backend_name = "dirstore"
