"""Settings of the LMCache bindings, parsed from LMCache's ``adapter_params`` (no LMCache import).

``adapter_params`` of ``lmcache server --l2-adapter '{"type": "plugin", ...}'`` (and the
connector's config) is a JSON object::

    {"backend": "redis", "backend_config": {"url": "redis://127.0.0.1:6379/0"},
     "workers": 4, "task_timeout_s": 30}

* ``backend`` (required): a backend name resolved like ``hicache sglang-args`` resolves it
  (runtime registration, entry point in ``hicache_sdk.backends``, or a literal
  ``package.module:Class`` of a ``PagedStorage`` backend).
* ``backend_config`` [``{}``]: that backend's settings, the same keys and values as the
  ``--config`` of ``hicache sglang-args`` (its typed config validates them: unknown keys
  and bad values fail construction), or ``"@FILE"``: read from a .json/.toml/.yaml file
  (so secrets stay off the command line; ``hicache lmcache-args`` writes one). ``namespace`` and ``namespace_salt`` apply to the
  object names (:mod:`.keys`); ``checksum`` adds a crc32 of each chunk to its record;
  ``transfer_timeout_s`` / ``exists_timeout_s`` bound every call into the store.
* ``workers`` [4]: threads per direction (stores on their own, lookups and loads on theirs).
* ``task_timeout_s`` [30.0]: a task not started this long after submission completes as
  failed without I/O, so a stalled store never holds LMCache's poll loop.
* ``in_place`` [``true``]: chunks in LMCache's registered L1 arena move in place over a
  transport that registers memory (Mooncake), and such a task is reported once its
  transfers have ended; ``false``: through the resilience layer's staging (one copy each
  way), every task reported by its deadline (see :mod:`.l2`).

Anything else is refused with a ``ValueError`` naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["L2Settings"]

_KEYS = ("backend", "backend_config", "workers", "task_timeout_s", "in_place")


@dataclass(frozen=True)
class L2Settings:
    """Typed ``adapter_params`` (see the module docs for every key and its default)."""

    backend: str
    backend_config: Mapping[str, Any] = field(default_factory=dict)
    workers: int = 4
    task_timeout_s: float = 30.0
    in_place: bool = True

    @classmethod
    def from_mapping(cls, params: object) -> L2Settings:
        """Parse ``params`` (a mapping, or a JSON object as text); ``ValueError`` naming
        the bad key."""
        if isinstance(params, str):
            try:
                params = json.loads(params)
            except ValueError as e:
                raise ValueError(f"adapter_params is not valid JSON: {e}") from None
        if not isinstance(params, Mapping):
            raise ValueError(f"adapter_params must be a JSON object, got {type(params).__name__}")
        unknown = sorted(set(params) - set(_KEYS) - {"type"})
        if unknown:
            raise ValueError(f"adapter_params: unknown key(s) {unknown}; known: {list(_KEYS)}")
        backend = params.get("backend")
        if not isinstance(backend, str) or not backend:
            raise ValueError("adapter_params.backend must be a backend name or 'module:Class', e.g. \"file\"")
        config = params.get("backend_config", {})
        if config is None:
            config = {}
        if isinstance(config, str) and config.startswith("@"):
            from ..config import parse_config_arg

            config = parse_config_arg(config)
        if not isinstance(config, Mapping):
            raise ValueError(
                f"adapter_params.backend_config must be a JSON object, got {type(config).__name__}"
            )
        workers = params.get("workers", 4)
        if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= 256:
            raise ValueError(f"adapter_params.workers must be an int in 1..256, got {workers!r}")
        timeout = params.get("task_timeout_s", 30.0)
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"adapter_params.task_timeout_s must be a number > 0, got {timeout!r}")
        in_place = params.get("in_place", True)
        if not isinstance(in_place, bool):
            raise ValueError(f"adapter_params.in_place must be true or false, got {in_place!r}")
        return cls(backend, dict(config), workers, float(timeout), in_place)
