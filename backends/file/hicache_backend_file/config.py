"""Typed configuration of the file backend, and the root-directory precedence.

Every field is settable from ``extra_config`` (JSON) and from the environment as
``HICACHE_FILE_<FIELD>``; the fields SGLang's HiCacheFile knows also read SGLang's own
environment variables (``SGLANG_HICACHE_FILE_BACKEND_*``). The mapping wins over the
environment, except for the root directory, which follows SGLang's order (see
:func:`resolve_root`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import ClassVar

from hicache_sdk.config import BackendConfig

__all__ = ["DEFAULT_ROOT", "SGLANG_DIR_ENV", "FileConfig", "parse_size", "resolve_root"]

#: SGLang's constructor default directory.
DEFAULT_ROOT = "/tmp/hicache"
#: SGLang's environment variable for the directory (wins over ``file_storage_path``).
SGLANG_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"

_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")


def parse_size(value: str | int, name: str = "max_size") -> int:
    """Parse a byte count the way SGLang's ``human_readable_int`` does.

    Accepts a plain integer, SI suffixes (``k``, ``M``, ``G``, ``T``; decimals allowed:
    ``"25.6k"`` is 25600) and IEC suffixes (``Ki``, ``Mi``, ``Gi``, ``Ti``; integers only).
    Suffixes are case-sensitive. ``""`` and ``"0"`` mean 0 (no limit). Unlike SGLang, an
    invalid value raises ``ValueError`` naming ``name`` instead of silently disabling the cap.
    """
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a size, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value!r}")
        return value
    s = value.strip()
    if not s:
        return 0
    m = _SIZE_RE.fullmatch(s)
    if m:
        number, suffix = m.groups()
        if suffix in _IEC:
            if "." in number:
                raise ValueError(f"{name}: decimals are not allowed with IEC suffix {suffix!r}: {value!r}")
            return int(number) * _IEC[suffix]
        try:
            return int(Decimal(number) * _SI[suffix])
        except InvalidOperation as e:  # pragma: no cover - the regex guarantees digits
            raise ValueError(f"{name}: invalid size {value!r}") from e
    try:
        n = int(s)
    except ValueError:
        raise ValueError(
            f"{name}: invalid size {value!r} (use an integer, SI suffixes 1k/1M/1G or IEC 1Ki/1Mi/1Gi)"
        ) from None
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return n


@dataclass(frozen=True)
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

    transfer_timeout_s: float = 0.0

    root: str | None = None
    file_storage_path: str | None = None
    io_threads: int = 4
    cold_read_threads: int = 8
    max_bytes: int = 0
    max_size: str = field(default="", metadata={"env": "SGLANG_HICACHE_FILE_BACKEND_MAX_SIZE"})
    min_free_space: str = field(default="", metadata={"env": "SGLANG_HICACHE_FILE_BACKEND_MIN_FREE_SPACE"})
    eviction_ratio: float = field(default=0.9, metadata={"env": "SGLANG_HICACHE_FILE_BACKEND_EVICTION_RATIO"})
    file_mode: int = 0o600
    dir_mode: int = 0o700
    strict_root: bool = True
    enable_metadata_cache: bool = field(
        default=False, metadata={"env": "SGLANG_HICACHE_FILE_BACKEND_ENABLE_METADATA_CACHE"}
    )
    metadata_ttl: float = field(default=5.0, metadata={"env": "SGLANG_HICACHE_FILE_BACKEND_METADATA_TTL"})
    fsync: bool = False
    direct_io: bool = True
    stale_temp_s: float = 600.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.io_threads < 1:
            raise ValueError(f"io_threads must be >= 1, got {self.io_threads!r}")
        if self.cold_read_threads < 1:
            raise ValueError(f"cold_read_threads must be >= 1, got {self.cold_read_threads!r}")
        if self.max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {self.max_bytes!r}")
        parse_size(self.max_size, "max_size")
        parse_size(self.min_free_space, "min_free_space")
        if not 0.0 < self.eviction_ratio <= 1.0:
            raise ValueError(f"eviction_ratio must be in (0, 1], got {self.eviction_ratio!r}")
        for n in ("file_mode", "dir_mode"):
            v = getattr(self, n)
            if not 0 <= v <= 0o777:
                raise ValueError(f"{n} must be a permission mode in 0..0o777, got {v!r}")
        if self.dir_mode & 0o700 != 0o700:
            raise ValueError(f"dir_mode must give the owner rwx, got {oct(self.dir_mode)}")
        if self.file_mode & 0o600 != 0o600:
            raise ValueError(f"file_mode must give the owner rw, got {oct(self.file_mode)}")
        if self.metadata_ttl < 0 and self.metadata_ttl != -1:
            raise ValueError(f"metadata_ttl must be >= 0 or -1, got {self.metadata_ttl!r}")
        if self.stale_temp_s < 0:
            raise ValueError(f"stale_temp_s must be >= 0, got {self.stale_temp_s!r}")
        for n in ("root", "file_storage_path"):
            v = getattr(self, n)
            if v is not None and ("\x00" in v or not v.strip()):
                raise ValueError(f"{n} must be a non-empty path without NUL, got {v!r}")

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
