"""A backend shaped like SGLang 0.5.23's ``HiCacheFile`` (one raw file per page, written
to a temporary file and renamed into place, ``get`` reading into the caller's flat page
and raising ``OSError`` on a short read), with correct v1 methods built on the same page
I/O, and deliberately broken variants of it. It declares no capabilities (``zero_copy``
and ``delete`` are inferred; ``mla`` must be declared from the command line, as for any
backend written straight against SGLang's ABC).

Each broken variant names in ``FAILS`` the suite test it must fail under ``contract``,
and in ``PATHS`` the I/O paths it is broken on: faults in the shared page I/O break both
the generic and the v1 path, on MHA and MLA pools alike. Under ``tox -e sglang`` the same
faults are planted in SGLang's real ``HiCacheFile`` (``tests/sglang``).

``extra_config``: ``root`` (default: a directory under the system temporary directory)
and ``namespace`` (a subdirectory per test namespace).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from typing import Any, ClassVar, List, Optional

import torch

from hicache_sdk.spec import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo

__all__ = [
    "FilePages",
    "ShortReadFilePages",
    "TruncatedLastPageFilePages",
    "StoresNothingFilePages",
    "ShortReadGenericOnlyFilePages",
    "BROKEN_FILE_PAGES",
]


class FilePages(HiCacheStorage):
    """Correct: raw pages as ``<root>/<namespace>/<key>_<model>[_<tp>_<tp_size>].bin``."""

    def __init__(self, storage_config: HiCacheStorageConfig, kwargs: Any = None) -> None:
        extra = dict(storage_config.extra_config or {})
        root = str(extra.get("root") or os.path.join(tempfile.gettempdir(), "hicache-conformance-filelike"))
        self.file_path = os.path.join(root, str(extra.get("namespace", "default")))
        os.makedirs(self.file_path, exist_ok=True)
        model = "-".join(str(storage_config.model_name or "").split("/"))
        tp = f"_{storage_config.tp_rank}_{storage_config.tp_size}"
        self._suffix = f"_{model}" if storage_config.is_mla_model else f"_{model}{tp}"

    def _path(self, key: str) -> str:
        return os.path.join(self.file_path, f"{key}{self._suffix}.bin")

    # -- page I/O (shared by the generic and the v1 path) -----------------------------------
    def _read_into(self, path: str, buf: memoryview) -> int:
        with open(path, "rb", buffering=0) as f:
            return f.readinto(buf) or 0

    def get(self, key: str, target_location: Any = None, target_sizes: Optional[Any] = None) -> Any:
        expected = target_location.numel() * target_location.element_size()
        try:
            buf = memoryview(target_location.view(torch.uint8).contiguous().numpy())
            if self._read_into(self._path(key), buf) != expected:
                raise OSError(f"Short read for {key}")
        except FileNotFoundError:
            return None
        return target_location

    def batch_get(
        self, keys: List[str], target_locations: Any = None, target_sizes: Optional[Any] = None
    ) -> Any:
        return [self.get(k, t) for k, t in zip(keys, target_locations or [None] * len(keys))]

    def _write(self, path: str, data: bytes) -> None:
        tmp = os.path.join(self.file_path, f".{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        if self.exists(key):
            return True
        try:
            self._write(self._path(key), value.contiguous().view(torch.uint8).numpy().tobytes())
        except OSError:
            return False
        return True

    def _set_pages(self, keys: list[str], values: list[Any]) -> list[bool]:
        """Write each page (both paths end here); per-page success."""
        return [self.set(k, v) for k, v in zip(keys, values)]

    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        return all(self._set_pages(list(keys), list(values or [])))

    def exists(self, key: str) -> bool:
        return os.path.exists(self._path(key))

    # -- v1, on the same page I/O -----------------------------------------------------------
    def _starts(self, keys: List[str], host_indices: torch.Tensor) -> list[int]:
        ps = int(self.mem_pool_host.page_size)
        if len(host_indices) != len(keys) * ps:
            raise ValueError(f"host_indices: {len(host_indices)} slots for {len(keys)} pages of {ps}")
        return [int(host_indices[i * ps]) for i in range(len(keys))]

    def batch_get_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        out = []
        for key, start in zip(keys, self._starts(keys, host_indices)):
            page = self.get(key, self.mem_pool_host.get_dummy_flat_data_page())
            if page is not None:
                self.mem_pool_host.set_from_flat_data_page(start, page)
            out.append(page is not None)
        return out

    def batch_set_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        starts = self._starts(keys, host_indices)
        return self._set_pages(list(keys), [self.mem_pool_host.get_data_page(s, flat=True) for s in starts])

    def clear(self) -> None:
        for name in os.listdir(self.file_path):
            try:
                os.remove(os.path.join(self.file_path, name))
            except OSError:
                pass


class ShortReadFilePages(FilePages):
    """Reads only the first half of each page file and never checks the count (a read
    loop that stops at the first short ``readinto``), reporting a hit."""

    FAILS: ClassVar[str] = "test_get_after_set_is_byte_exact"
    PATHS: ClassVar[tuple[str, ...]] = ("generic", "v1")

    def get(self, key: str, target_location: Any = None, target_sizes: Optional[Any] = None) -> Any:
        try:
            buf = memoryview(target_location.view(torch.uint8).contiguous().numpy())
            self._read_into(self._path(key), buf[: len(buf) // 2])
        except FileNotFoundError:
            return None
        return target_location


class TruncatedLastPageFilePages(FilePages):
    """Writes the last page of every batch cut to half its bytes and reports success (a
    writer that loses the tail of its last buffer); reads check the size, as
    ``HiCacheFile``'s do, and raise on the short file."""

    FAILS: ClassVar[str] = "test_get_after_set_is_byte_exact"
    PATHS: ClassVar[tuple[str, ...]] = ("generic", "v1")

    def _set_pages(self, keys: list[str], values: list[Any]) -> list[bool]:
        out = []
        for i, (key, value) in enumerate(zip(keys, values)):
            data = value.contiguous().view(torch.uint8).numpy().tobytes()
            if i == len(keys) - 1:
                data = data[: len(data) // 2]
            if not self.exists(key):
                self._write(self._path(key), data)
            out.append(True)
        return out


class StoresNothingFilePages(FilePages):
    """Every write reports success and stores nothing (as SGLang's ``shm`` backend)."""

    FAILS: ClassVar[str] = "test_get_after_set_is_byte_exact"
    PATHS: ClassVar[tuple[str, ...]] = ("generic", "v1")

    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        return True


class ShortReadGenericOnlyFilePages(ShortReadFilePages):
    """Short reads on the generic path only; its v1 methods read correctly (the case a
    suite that certified only v1 let through: SGLang's ``dynamic`` loader takes the
    generic path unless ``interface_v1`` is set)."""

    PATHS: ClassVar[tuple[str, ...]] = ("generic",)

    def batch_get_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        out = []
        for key, start in zip(keys, self._starts(keys, host_indices)):
            page = FilePages.get(self, key, self.mem_pool_host.get_dummy_flat_data_page())
            if page is not None:
                self.mem_pool_host.set_from_flat_data_page(start, page)
            out.append(page is not None)
        return out


#: Broken variant name -> class.
BROKEN_FILE_PAGES: dict[str, type[FilePages]] = {
    c.__name__: c
    for c in (
        ShortReadFilePages,
        TruncatedLastPageFilePages,
        StoresNothingFilePages,
        ShortReadGenericOnlyFilePages,
    )
}
