"""Typed configuration of the file backend, and the root-directory precedence.

Every field is settable from ``extra_config`` (JSON) and from the environment as
``HICACHE_FILE_<FIELD>``; the fields SGLang's HiCacheFile knows also read SGLang's own
environment variables (``SGLANG_HICACHE_FILE_BACKEND_*``). The mapping wins over the
environment, except for the root directory, which follows SGLang's order (see
:func:`resolve_root`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from hicache_sdk.config import BackendConfig, setting
from hicache_sdk.config.units import parse_size as _parse_size
from hicache_sdk.errors import ConfigError
from hicache_sdk.sglang.versions import CURRENT

__all__ = ["DEFAULT_ROOT", "SGLANG_DIR_ENV", "FileConfig", "parse_size", "resolve_root"]

#: SGLang's constructor default directory.
DEFAULT_ROOT = CURRENT.file_dir_default
#: SGLang's environment variable for the directory (wins over ``file_storage_path``).
SGLANG_DIR_ENV = CURRENT.file_dir_env


def parse_size(value: str | int, name: str = "max_size") -> int:
    """A byte count as SGLang's ``human_readable_int`` reads it (``"200G"`` = 200 * 10^9,
    ``"64Gi"`` = 64 * 2^30, ``""`` = 0); the core parser (:func:`hicache_sdk.config.units.parse_size`),
    which also takes ``"4gb"``. Unlike SGLang, an invalid value raises a ``ConfigError``
    naming ``name`` instead of silently disabling the cap."""
    return _parse_size(value, name)


@dataclass(frozen=True, kw_only=True)
class FileConfig(BackendConfig):
    """Settings of the file backend (defaults in brackets).

    * ``root`` [None]: the cache directory. When ``None``: env
      ``SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR``, then ``file_storage_path``, then
      ``/tmp/hicache`` (SGLang's order).
    * ``file_storage_path`` [None]: SGLang's key for the directory (ignored when ``root`` is set).
    * ``io_threads`` [4]: workers that run one batch's writes in parallel (1 = inline).
    * ``cold_read_threads`` [8]: threads that read the pages of a batch the page cache
      does not hold (device queue depth matters for cold reads); pages the page cache
      holds are read in the calling thread.
    * ``max_bytes`` [0]: byte limit of all pages under the root (0 = unbounded), enforced
      with LRU eviction across every process sharing the directory.
    * ``max_size`` [""]: SGLang's human-readable form of the same limit (``"200G"``,
      ``"64Gi"``); used when ``max_bytes`` is 0.
    * ``min_free_space`` [""]: SGLang's free-disk watermark (``"10G"``; empty or 0 = off):
      before a batch is written, pages are evicted (LRU, as for the byte limit) so that the
      file system keeps at least this much free space after the write; a batch that cannot
      fit is refused (``False``). Enforced across processes with the same ledger.
    * ``eviction_ratio`` [0.9]: eviction shrinks the directory to ``limit * ratio`` minus
      the incoming batch, where ``limit`` is the byte limit or the space the watermark
      allows, whichever is smaller.
    * ``file_mode`` [0o600] / ``dir_mode`` [0o700]: permissions of created pages and
      directories (set exactly, regardless of the umask). Widen deliberately to share.
    * ``strict_root`` [True]: refuse a root owned by another user or writable by others.
    * ``enable_metadata_cache`` [False] / ``metadata_ttl`` [5.0]: a positive-lookup cache
      for ``exists`` (SGLang's names; ``-1`` = entries never expire). Pages deleted by
      another process may be reported present until the entry expires; the following
      read is then a miss.
    * ``direct_io`` [True]: read what is not in the page cache with ``O_DIRECT`` straight
      into the destination, when its memory is 4 KiB-aligned (our host pools are); cached
      data, unaligned destinations (e.g. SGLang's own pools) and file systems without
      ``O_DIRECT`` (tmpfs) use buffered reads. See docs/backends/file.md.
    * ``fsync`` [False]: fsync each page and its directory before it counts as written.
      Off: a page survives a process crash (the kernel holds it) but not a power loss.
    * ``stale_temp_s`` [600.0]: age after which a temporary file of a writer we cannot
      prove dead is removed at start.
    * ``transfer_timeout_s`` [0.0]: local page-cache transfers run inline without staging
      (zero-copy); see docs/backends/file.md for the argument.
    """

    env_prefix: ClassVar[str] = "FILE"

    transfer_timeout_s: float = setting(0.0, ge=0, le=3600, unit="seconds")

    root: str | None = None
    file_storage_path: str | None = None
    io_threads: int = setting(4, ge=1, le=256)
    cold_read_threads: int = setting(8, ge=1, le=256)
    max_bytes: int = setting(0, ge=0, le=1 << 60, unit="bytes")
    max_size: str = setting("", env="SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE")
    min_free_space: str = setting("", env="SGLANG_HICACHE_FILE_BACKEND_MIN_FREE_SPACE")
    eviction_ratio: float = setting(0.9, gt=0, le=1, env="SGLANG_HICACHE_FILE_BACKEND_EVICTION_RATIO")
    file_mode: int = setting(0o600, ge=0, le=0o777)
    dir_mode: int = setting(0o700, ge=0, le=0o777)
    strict_root: bool = True
    enable_metadata_cache: bool = setting(False, env="SGLANG_HICACHE_FILE_BACKEND_ENABLE_METADATA_CACHE")
    metadata_ttl: float = setting(
        5.0, ge=0, le=1e9, allow=(-1,), unit="seconds", env="SGLANG_HICACHE_FILE_BACKEND_METADATA_TTL"
    )
    fsync: bool = False
    direct_io: bool = True
    stale_temp_s: float = setting(600.0, ge=0, le=1e9, unit="seconds")

    def exists_cache_ttl(self) -> float:
        """SGLang's ``enable_metadata_cache`` / ``metadata_ttl`` select the adapter's existence
        cache when ``exists_cache_ttl_s`` is not set (``metadata_ttl`` 0: no cache)."""
        if self.exists_cache_ttl_s == 0 and self.enable_metadata_cache:
            return float(self.metadata_ttl)
        return float(self.exists_cache_ttl_s)

    def __post_init__(self) -> None:
        super().__post_init__()  # types, units, ranges and finiteness of every field
        parse_size(self.max_size, "max_size")
        parse_size(self.min_free_space, "min_free_space")
        if self.dir_mode & 0o700 != 0o700:
            raise ConfigError(f"dir_mode: must give the owner rwx, got {oct(self.dir_mode)}")
        if self.file_mode & 0o600 != 0o600:
            raise ConfigError(f"file_mode: must give the owner rw, got {oct(self.file_mode)}")
        for n in ("root", "file_storage_path"):
            v = getattr(self, n)
            if v is not None and ("\x00" in v or not v.strip()):
                raise ConfigError(f"{n}: must be a non-empty path without NUL")

    @property
    def byte_limit(self) -> int:
        """The effective byte limit: ``max_bytes``, else ``max_size`` parsed, else 0."""
        return self.max_bytes or parse_size(self.max_size, "max_size")

    @property
    def min_free_bytes(self) -> int:
        """The free-space watermark in bytes (0 = off)."""
        return parse_size(self.min_free_space, "min_free_space")


def resolve_root(config: FileConfig, environ: Mapping[str, str] | None = None) -> str:
    """The absolute cache directory: ``root``, else SGLang's env variable, else
    ``file_storage_path``, else ``/tmp/hicache``. Empty values are skipped (as SGLang's
    ``or`` chain does)."""
    env = os.environ if environ is None else environ
    for candidate in (config.root, env.get(SGLANG_DIR_ENV), config.file_storage_path, DEFAULT_ROOT):
        if candidate:
            if "\x00" in candidate:
                raise ValueError(f"root directory must not contain NUL: {candidate!r}")
            return os.path.abspath(os.path.expanduser(candidate))
    return DEFAULT_ROOT  # pragma: no cover - DEFAULT_ROOT is never empty
