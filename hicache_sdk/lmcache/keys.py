"""Object names of LMCache chunks: the ``lmc1`` key scheme (no LMCache import).

LMCache's multiprocess key (``ObjectKey``) has five fields: the chunk hash (bytes), the
model name, ``kv_rank``, ``object_group_id`` and ``cache_salt``. :func:`object_name` maps
them to one object name that every hicache-sdk backend accepts (file names, Redis keys, S3
keys, Mooncake keys)::

    [<namespace>/]lmc1_<model>-<model digest>_<kv_rank>_<group>_<salt>_<hash>

* ``lmc1``: the scheme and its version. A later, incompatible scheme gets a new token, so
  objects of two versions never alias each other.
* ``<model>``: the model name made safe (every character outside ``[A-Za-z0-9._-]`` becomes
  ``-``, runs of dots become ``-``), cut to 32 characters, for people reading a listing.
* ``<model digest>``: 16 hex characters of sha256 of the exact model name (and of the
  backend's ``namespace_salt`` when one is set), so two models whose safe forms are equal
  never share objects.
* ``<kv_rank>`` and ``<group>``: lowercase hex, 8 digits at least (``m`` in front of a
  negative rank).
* ``<salt>``: ``0`` for the empty ``cache_salt``, else ``s`` and 32 hex characters of
  sha256 of the salt (salts are at most 128 characters and may hold characters no backend
  accepts in a name).
* ``<hash>``: the chunk hash in lowercase hex when it is at most 32 bytes, else ``h`` and
  sha256 of it in hex. An empty hash is refused.

Names are at most 190 characters before the namespace, inside every backend's limit (the
file backend's 255-byte names). The byte layout of an object is *not* in its name (LMCache
does not pass it to lookups); it is stored with the object (:mod:`.objects`).

Edge cases: a field of the wrong type raises ``ValueError`` naming it, before any I/O.
"""

from __future__ import annotations

import hashlib
from typing import Protocol

from ..keys.names import sanitize_component

__all__ = ["SCHEME", "KeyFields", "NameMaker", "object_name"]

#: The scheme token at the start of every object name.
SCHEME = "lmc1"
_MODEL_CHARS = 32


class KeyFields(Protocol):
    """What :func:`object_name` reads of a key (LMCache's ``ObjectKey`` has these)."""

    chunk_hash: bytes
    model_name: str
    kv_rank: int
    object_group_id: int
    cache_salt: str


def _hex_int(value: object, arg: str) -> str:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{arg} must be an int, got {type(value).__name__}")
    return f"{value:08x}" if value >= 0 else f"m{-value:08x}"


class NameMaker:
    """:func:`object_name` with a fixed namespace and salt, caching the model part (a
    server serves one or a few models, so the digest is computed once per model)."""

    def __init__(self, namespace: str = "", namespace_salt: str | None = None) -> None:
        self.prefix = f"{sanitize_component(namespace)}/" if namespace else ""
        self._salt = (namespace_salt or "").encode()
        self._models: dict[str, str] = {}
        self._salts: dict[str, str] = {"": "0"}

    def _model(self, model: object) -> str:
        if not isinstance(model, str):
            raise ValueError(f"model_name must be a str, got {type(model).__name__}")
        got = self._models.get(model)
        if got is None:
            readable = sanitize_component(model)[:_MODEL_CHARS]
            digest = hashlib.sha256(self._salt + b"\0" + model.encode("utf-8", "surrogatepass"))
            got = f"{readable}-{digest.hexdigest()[:16]}"
            if len(self._models) < 1024:
                self._models[model] = got
        return got

    def _salt_token(self, salt: object) -> str:
        if not isinstance(salt, str):
            raise ValueError(f"cache_salt must be a str, got {type(salt).__name__}")
        got = self._salts.get(salt)
        if got is None:
            got = "s" + hashlib.sha256(salt.encode("utf-8", "surrogatepass")).hexdigest()[:32]
            if len(self._salts) < 4096:
                self._salts[salt] = got
        return got

    def __call__(self, key: KeyFields) -> str:
        h = key.chunk_hash
        if not isinstance(h, (bytes, bytearray)) or not h:
            raise ValueError(f"chunk_hash must be non-empty bytes, got {type(h).__name__} {h!r:.40}")
        hx = bytes(h).hex() if len(h) <= 32 else "h" + hashlib.sha256(h).hexdigest()
        return (
            f"{self.prefix}{SCHEME}_{self._model(key.model_name)}_{_hex_int(key.kv_rank, 'kv_rank')}_"
            f"{_hex_int(key.object_group_id, 'object_group_id')}_{self._salt_token(key.cache_salt)}_{hx}"
        )


_DEFAULT = NameMaker()


def object_name(key: KeyFields) -> str:
    """The ``lmc1`` object name of ``key`` with no namespace (see the module docs)."""
    return _DEFAULT(key)
