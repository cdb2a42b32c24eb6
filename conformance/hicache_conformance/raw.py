"""Out-of-band access to a backend's stored objects (the ``raw_pages`` fixture).

The suite uses these to test reads and writes independently of each other: a page
written through the backend is looked at in the store directly, and an object planted
in the store directly is read through the backend. A raw helper works on *physical
object names* (what the key scheme produces: ``<hash>_<model>_0_1.bin`` under
``sglang-file``, ``ns/model/kv-…/ab/<hash>`` under ``default``), never through the
backend's own I/O path.

The protocol (:class:`RawObjects`), duck-typed::

    names(backend) -> list[str]              # every object name in the backend's store
    get(backend, name) -> bytes | None       # the object's bytes, None when absent
    put(backend, name, data) -> None         # create or replace the object
    delete(backend, name) -> None            # remove it (absent: no-op)

Two implementations ship: :class:`MemoryRawObjects` (the in-process store of the
``memory`` backend, unwrapping test transports that wrap it) and
:class:`DirectoryRawObjects` (files under a directory, for filesystem backends such as
``file``: hidden names, i.e. temporary and control files, are not objects).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "RawObjects",
    "MemoryRawObjects",
    "DirectoryRawObjects",
    "default_raw_objects",
    "is_memory_backend",
]


@runtime_checkable
class RawObjects(Protocol):
    """Out-of-band object access for one backend kind (see the module docs)."""

    def names(self, backend: Any) -> list[str]: ...

    def get(self, backend: Any, name: str) -> bytes | None: ...

    def put(self, backend: Any, name: str, data: bytes) -> None: ...

    def delete(self, backend: Any, name: str) -> None: ...


def _memory_transport(backend: Any) -> Any:
    """The ``MemoryTransport`` under ``backend.raw_transport``, following ``.inner`` of
    wrapping test transports. Raises ``ValueError`` naming ``backend`` when there is none."""
    from hicache_sdk.memory import MemoryTransport

    t = getattr(backend, "raw_transport", None)
    for _ in range(8):
        if isinstance(t, MemoryTransport):
            return t
        t = getattr(t, "inner", None)
    raise ValueError(f"backend {type(backend).__name__} has no MemoryTransport under raw_transport")


class MemoryRawObjects:
    """Direct access to the named in-process store of a ``memory`` backend (its
    ``MemoryTransport``). ``put`` replaces an existing object and keeps the store's byte
    accounting right; it never evicts."""

    def _store(self, backend: Any) -> Any:
        return _memory_transport(backend)._store

    def names(self, backend: Any) -> list[str]:
        st = self._store(backend)
        with st.lock:
            return list(st.objects)

    def get(self, backend: Any, name: str) -> bytes | None:
        st = self._store(backend)
        with st.lock:
            arr = st.objects.get(name)
        return None if arr is None else arr.tobytes()

    def put(self, backend: Any, name: str, data: bytes) -> None:
        st = self._store(backend)
        arr = np.frombuffer(bytes(data), dtype=np.uint8).copy()
        arr.flags.writeable = False
        with st.lock:
            old = st.objects.pop(name, None)
            if old is not None:
                st.used -= old.nbytes
            st.objects[name] = arr
            st.used += arr.nbytes

    def delete(self, backend: Any, name: str) -> None:
        st = self._store(backend)
        with st.lock:
            old = st.objects.pop(name, None)
            if old is not None:
                st.used -= old.nbytes


class DirectoryRawObjects:
    """Objects as files under ``root_of(backend)``: object ``a/b/c`` is the file
    ``<root>/a/b/c``. ``names`` skips every path with a component starting with ``.``
    (temporary files, ledgers). ``put`` writes a temporary file and renames it into
    place (so a concurrent reader never sees a partial plant), creating directories.
    Names with ``..`` components or absolute names raise ``ValueError`` naming ``name``."""

    def __init__(self, root_of: Callable[[Any], str]) -> None:
        self._root_of = root_of

    def _path(self, backend: Any, name: str) -> str:
        parts = name.split("/")
        if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"name must be a relative object name, got {name!r}")
        return os.path.join(self._root_of(backend), *parts)

    def names(self, backend: Any) -> list[str]:
        root = self._root_of(backend)
        out: list[str] = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = os.path.relpath(dirpath, root)
            for f in filenames:
                if f.startswith("."):
                    continue
                out.append(f if rel == "." else f"{rel.replace(os.sep, '/')}/{f}")
        return sorted(out)

    def get(self, backend: Any, name: str) -> bytes | None:
        try:
            with open(self._path(backend, name), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def put(self, backend: Any, name: str, data: bytes) -> None:
        path = self._path(backend, name)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".conformance-", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def delete(self, backend: Any, name: str) -> None:
        try:
            os.unlink(self._path(backend, name))
        except FileNotFoundError:
            pass


def is_memory_backend(cls: Any) -> bool:
    """Whether ``cls`` is the ``memory`` backend or a subclass of it."""
    try:
        from hicache_sdk.memory import MemoryStorage
    except ImportError:  # pragma: no cover - the SDK always ships memory
        return False
    return isinstance(cls, type) and issubclass(cls, MemoryStorage)


def default_raw_objects(cls: Any) -> RawObjects | None:
    """The raw helper the suite can supply by itself for backend class ``cls``:
    ``memory`` and its subclasses get the store itself; any other backend built on
    ``PagedStorage`` gets its own transport (objects below the adapter, see
    :mod:`hicache_conformance.raw_transport`); anything else ``None``."""
    if is_memory_backend(cls):
        return MemoryRawObjects()
    from hicache_sdk import PagedStorage

    if isinstance(cls, type) and issubclass(cls, PagedStorage):
        from .raw_transport import TransportRawObjects

        return TransportRawObjects()
    return None
