"""SGLang 0.5.23's own ``HiCacheFile``, loadable the way SGLang's ``dynamic`` loader builds a
backend, with v1 methods on its own page I/O, and deliberately broken variants of it.

``HiCacheFile`` itself has no v1 methods; :class:`FileWithV1` adds them on top of its
``get`` / ``set`` (as its own v2 methods are built), so a fault planted in the page I/O
shows on the generic and the v1 path alike. Only imported under ``tox -e sglang``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, List, Optional

import torch
from sglang.srt.mem_cache import hicache_storage as sgl


def sglang_config(storage_config: Any) -> Any:
    """SGLang's own ``HiCacheStorageConfig`` with the fields both dataclasses share."""
    names = {f.name for f in dataclasses.fields(sgl.HiCacheStorageConfig)}
    return sgl.HiCacheStorageConfig(
        **{n: getattr(storage_config, n) for n in names if hasattr(storage_config, n)}
    )


class FileWithV1(sgl.HiCacheFile):
    """``HiCacheFile`` built as ``cls(storage_config, config)`` (its directory from
    ``extra_config["file_storage_path"]``), plus correct v1 methods on its page I/O."""

    def __init__(self, storage_config: Any, config: Any = None) -> None:
        path = (storage_config.extra_config or {})["file_storage_path"]
        super().__init__(sglang_config(storage_config), file_path=path)

    def _starts(self, keys: List[str], host_indices: torch.Tensor) -> list[int]:
        ps = int(self.mem_pool_host.page_size)
        return [int(host_indices[i * ps]) for i in range(len(keys))]

    def batch_get_v1(
        self, keys: List[str], host_indices: torch.Tensor, extra_info: Optional[Any] = None
    ) -> List[bool]:
        out = []
        for key, start in zip(keys, self._starts(keys, host_indices)):
            page = self.get(key, self.mem_pool_host.get_dummy_flat_data_page())
            if page is not None:
                self.mem_pool_host.set_from_flat_data_page(start, page)
            out.append(page is not None)
        return out

    def batch_set_v1(
        self, keys: List[str], host_indices: torch.Tensor, extra_info: Optional[Any] = None
    ) -> List[bool]:
        values = [self.mem_pool_host.get_data_page(s, flat=True) for s in self._starts(keys, host_indices)]
        ok = self.batch_set(list(keys), values)
        return [bool(ok)] * len(keys)


class ShortReadFile(FileWithV1):
    """``get`` reads only the first half of the file and never checks the count."""

    PATHS: ClassVar[tuple[str, ...]] = ("generic", "v1")

    def get(self, key: str, target_location: Any, target_sizes: Optional[Any] = None) -> Any:
        import os

        path = os.path.join(self.file_path, f"{self._get_suffixed_key(key)}.bin")
        try:
            with open(path, "rb", buffering=0) as f:
                buf = memoryview(target_location.view(torch.uint8).contiguous().numpy())
                f.readinto(buf[: len(buf) // 2])
        except FileNotFoundError:
            return None
        return target_location


class TruncatedLastPageFile(FileWithV1):
    """``batch_set`` writes the last page of every batch cut to half and reports success;
    ``HiCacheFile``'s own ``get`` then raises on the short file."""

    PATHS: ClassVar[tuple[str, ...]] = ("generic", "v1")

    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Any = None,
        target_sizes: Any = None,
    ) -> bool:
        values = list(values or [])
        if values:
            last = values[-1].contiguous().view(torch.uint8).reshape(-1)
            values[-1] = last[: last.numel() // 2].clone()
        return super().batch_set(keys, values)


class StoresNothingFile(FileWithV1):
    """Every ``set`` reports success and stores nothing (as SGLang's ``shm``)."""

    PATHS: ClassVar[tuple[str, ...]] = ("generic", "v1")

    def set(
        self, key: str, value: Optional[Any] = None, target_location: Any = None, target_sizes: Any = None
    ) -> bool:
        return True


BROKEN = (ShortReadFile, TruncatedLastPageFile, StoresNothingFile)


class MLAOnlyBrokenFile(FileWithV1):
    """Right for MHA, wrong for MLA only: an MLA page is stored with its two halves swapped
    (latent and rope parts put back in the wrong order), and every write reports success."""

    PATHS: ClassVar[tuple[str, ...]] = ("generic", "v1")

    def set(
        self, key: str, value: Optional[Any] = None, target_location: Any = None, target_sizes: Any = None
    ) -> bool:
        if value is not None and "MLA" in type(self.mem_pool_host).__name__:
            flat = value.contiguous().view(torch.uint8).reshape(-1)
            half = flat.numel() // 2
            value = torch.cat([flat[half:], flat[:half]]).view(value.dtype).reshape(value.shape)
        return bool(super().set(key, value, target_location, target_sizes))
