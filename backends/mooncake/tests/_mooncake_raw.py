"""Out-of-band view of a Mooncake cluster for the conformance suite's ``raw_pages``.

A raw ``MooncakeDistributedStore`` client of its own (never the backend's client or
transport) reads, plants and removes objects by name; the object list comes from the
master's HTTP ``/get_all_keys`` (one key per line). Names are relative to the backend's
``extra_backend_tag``: SGLang puts ``<tag>_`` in front of every object name, and the
suite's checks expect the names SGLang gives without a tag (the tag plays the part of
the directory of a per-namespace store), so ``names`` lists only keys under that prefix,
without it, and ``get`` / ``put`` / ``delete`` put it back.
"""

from __future__ import annotations

import urllib.request
from typing import Any

import numpy as np

OBJECT_NOT_FOUND = -704


class MooncakeRawObjects:
    """The ``raw_pages`` protocol (``hicache_conformance.raw``) over a raw client."""

    def __init__(self, client: Any, metrics_port: int) -> None:
        self._client = client
        self._keys_url = f"http://127.0.0.1:{metrics_port}/get_all_keys"

    @staticmethod
    def _prefix(backend: Any) -> str:
        tag = getattr(backend.config, "extra_backend_tag", None)
        return f"{tag}_" if tag else ""

    def names(self, backend: Any) -> list[str]:
        p = self._prefix(backend)
        with urllib.request.urlopen(self._keys_url, timeout=5) as r:
            keys = r.read().decode("utf-8").split("\n")
        return sorted(k[len(p) :] for k in keys if k and k.startswith(p))

    def get(self, backend: Any, name: str) -> bytes | None:
        key = self._prefix(backend) + name
        size = int(self._client.get_size(key))
        if size == OBJECT_NOT_FOUND:
            return None
        if size < 0:
            raise AssertionError(f"get_size({key!r}) failed: rc={size}")
        buf = np.zeros(max(size, 1), dtype=np.uint8)
        got = int(self._client.get_into(key, buf.ctypes.data, size))
        if got == OBJECT_NOT_FOUND:
            return None
        if got != size:
            raise AssertionError(f"get_into({key!r}) read {got} of {size} bytes")
        return bytes(buf[:size])

    def put(self, backend: Any, name: str, data: bytes) -> None:
        key = self._prefix(backend) + name
        rc = int(self._client.upsert(key, bytes(data)))
        if rc != 0:
            raise AssertionError(f"planting {len(data)} bytes as {key!r} failed: rc={rc}")

    def delete(self, backend: Any, name: str) -> None:
        self._client.remove(self._prefix(backend) + name, True)
