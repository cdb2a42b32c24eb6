"""A complete small backend on the full-contract path: ``HiCacheStorage`` subclassed directly.

The example of ``docs/writing-a-backend.md`` ("the full-contract path");
``tests/docs/test_docs_examples.py`` runs the conformance suite on it at the ``contract``
profile. Use this path only when you need full control (an existing store with its own page
format, a client that must see pages rather than objects); otherwise the transport path
(``dirstore_backend.py``) gives you more for less.

It implements the legacy generic path (``get`` / ``set`` / ``exists`` and their batch forms,
which SGLang 0.5.23 uses when ``interface_v1`` is off) and ``clear``. It keeps pages in a
process-wide dict per ``extra_config["namespace"]``. Keys carry the model name and the TP
rank the way SGLang's own backends do, so: correct by SGLang's contract, but two
deployments with another KV dtype or host layout *would* read each other's pages (the
``strict`` profile's rules, which ``PagedStorage`` backends get for free).

What the contract asks of it, and where it is done below:

* a miss is ``None`` / ``False``, never an exception;
* ``set`` is create-if-absent: an existing page is success and is not rewritten;
* ``batch_exists`` (inherited from the ABC) counts *consecutive* hits from the start;
* thread safety (SGLang calls from four threads): one lock around the dict;
* no ``batch_get_v1`` / ``batch_set_v1``: the ABC raises ``NotImplementedError`` for them,
  and the bridge then keeps SGLang on the generic path.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional

import torch

from hicache_sdk import HiCacheStorage

__all__ = ["DictPagesStorage"]

_STORES: dict[str, dict[str, bytes]] = {}
_LOCK = threading.Lock()


class DictPagesStorage(HiCacheStorage):
    """In-process pages, built the way SGLang's ``dynamic`` loader builds a backend:
    ``DictPagesStorage(storage_config, kwargs)``."""

    def __init__(self, storage_config: Any, kwargs: Any = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        self._namespace = str(extra.get("namespace", "default"))
        model = str(getattr(storage_config, "model_name", "") or "").replace("/", "-")
        self._suffix = f"_{model}_{storage_config.tp_rank}_{storage_config.tp_size}"
        with _LOCK:
            self._pages = _STORES.setdefault(self._namespace, {})

    def _key(self, key: str) -> str:
        return key + self._suffix

    def get(self, key: str, target_location: Optional[Any] = None, target_sizes: Optional[Any] = None) -> Any:
        with _LOCK:
            data = self._pages.get(self._key(key))
        if data is None or target_location is None:
            return None
        flat = target_location.view(torch.uint8).reshape(-1)
        if flat.numel() != len(data):
            return None  # a page of another size is a miss, never a partial fill
        flat.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return target_location

    def batch_get(
        self, keys: List[str], target_locations: Optional[Any] = None, target_sizes: Optional[Any] = None
    ) -> List[Any]:
        targets = list(target_locations or [None] * len(keys))
        return [self.get(k, t) for k, t in zip(keys, targets)]

    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        if value is None:
            return False
        data = value.detach().contiguous().view(torch.uint8).reshape(-1).cpu().numpy().tobytes()
        with _LOCK:
            self._pages.setdefault(self._key(key), data)  # the first writer wins
        return True

    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        vals = list(values or [None] * len(keys))
        results = [self.set(k, v) for k, v in zip(keys, vals)]
        return len(results) == len(keys) and all(results)

    def exists(self, key: str) -> bool:
        with _LOCK:
            return self._key(key) in self._pages

    def clear(self) -> None:
        with _LOCK:
            self._pages.clear()
