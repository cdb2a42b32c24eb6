"""Fixture: a plain, correct backend written only against SGLang's contract.

No ``PagedStorage``, no ``capabilities`` attribute, no v2, no ``close`` of its own: the
legacy methods plus zero-copy ``batch_get_v1`` / ``batch_set_v1`` and ``clear``, keys
kept per model and rank the way SGLang's own backends keep them (so pages *do* leak
across dtype and layout: correct by the contract, wrong by the SDK's ``strict`` rules).
Pages live in a process-wide dict per ``extra_config["namespace"]``.
"""

from __future__ import annotations

import threading
from typing import Any, List, Optional

import torch

from hicache_sdk import HiCacheStorage

_STORES: dict[str, dict[str, bytes]] = {}
_LOCK = threading.Lock()


class PlainV1Backend(HiCacheStorage):
    """Thread-safe in-memory pages; an existing page is kept (create-if-absent)."""

    def __init__(self, storage_config: Any, config: Any = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        self._ns = str(extra.get("namespace", "plain"))
        model = str(storage_config.model_name or "").replace("/", "-")
        self._suffix = f"_{model}_{storage_config.tp_rank}_{storage_config.tp_size}"
        with _LOCK:
            self._pages = _STORES.setdefault(self._ns, {})

    def _k(self, key: str) -> str:
        return key + self._suffix

    # -- legacy ------------------------------------------------------------------------
    def get(self, key: str, target_location: Optional[Any] = None, target_sizes: Optional[Any] = None) -> Any:
        with _LOCK:
            data = self._pages.get(self._k(key))
        if data is None or target_location is None:
            return None
        view = target_location.view(torch.uint8).reshape(-1)
        if view.numel() != len(data):
            return None
        view.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return target_location

    def batch_get(
        self, keys: List[str], target_locations: Optional[Any] = None, target_sizes: Optional[Any] = None
    ) -> List[Any]:
        return [self.get(k, t) for k, t in zip(keys, target_locations or [])]

    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        if value is None:
            return False
        data = bytes(value.contiguous().view(torch.uint8).reshape(-1).numpy())
        with _LOCK:
            self._pages.setdefault(self._k(key), data)
        return True

    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        return all(self.set(k, v) for k, v in zip(keys, values or []))

    def exists(self, key: str) -> bool:
        with _LOCK:
            return self._k(key) in self._pages

    # -- zero copy -----------------------------------------------------------------------
    def _page_starts(self, keys: List[str], host_indices: torch.Tensor) -> list[int]:
        ps = int(self.mem_pool_host.page_size)
        if len(host_indices) != len(keys) * ps:
            raise ValueError(f"host_indices: {len(host_indices)} slots for {len(keys)} keys of {ps}")
        return [int(host_indices[i * ps]) for i in range(len(keys))]

    def batch_get_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        out = []
        for key, start in zip(keys, self._page_starts(keys, host_indices)):
            target = self.mem_pool_host.get_dummy_flat_data_page()
            if self.get(key, target) is None:
                out.append(False)
                continue
            self.mem_pool_host.set_from_flat_data_page(start, target)
            out.append(True)
        return out

    def batch_set_v1(self, keys: List[str], host_indices: torch.Tensor, extra_info: Any = None) -> List[bool]:
        starts = self._page_starts(keys, host_indices)
        return [self.set(k, self.mem_pool_host.get_data_page(s, flat=True)) for k, s in zip(keys, starts)]

    def clear(self) -> None:
        with _LOCK:
            self._pages.clear()
