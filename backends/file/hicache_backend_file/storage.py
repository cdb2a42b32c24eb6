"""``FileStorage``: the ``file`` backend, the paged adapter over :class:`FileTransport`.

Construction follows SGLang's dynamic loader: ``FileStorage(storage_config, kwargs)``
with the settings (:class:`FileConfig`) in ``storage_config.extra_config``. The root
directory is created (and checked) at construction: an unsafe root fails loudly there.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hicache_sdk.config import BackendConfig
from hicache_sdk.paged.adapter import PagedStorage

from .config import FileConfig
from .file_transport import FileTransport

__all__ = ["FileStorage"]


class FileStorage(PagedStorage):
    """Pages as files under a local directory (SGLang HiCacheFile compatible with
    ``key_scheme="sglang-file"``). ``capacity_bound`` is declared: a configured byte limit
    (``max_bytes``) is enforced with LRU eviction across processes; ``eviction`` is not,
    since without a limit nothing is ever evicted."""

    config_cls: ClassVar[type[BackendConfig]] = FileConfig
    transport_cls = FileTransport
    backend_name: ClassVar[str] = "file"

    @classmethod
    def capacity_config(cls, capacity_bytes: int) -> dict[str, Any]:
        """``{"max_bytes": n}``: a byte limit on the page files under the root, shared by
        every process using that root."""
        return {"max_bytes": capacity_bytes}

    @property
    def root(self) -> str:
        """The cache directory in use."""
        t = self.raw_transport
        assert isinstance(t, FileTransport)
        return t.root

    def describe_l3_object_layout(
        self, *, sidecar_pool_specs: Any = (), swa_trailing_pages: int | None = None, page_size: int
    ) -> dict[str, Any]:
        """The file names of the registered pools under the ``sglang-file`` key scheme, in
        the shape of SGLang's Mooncake layout (our schema, :func:`hicache_sdk.keys.l3_layout.file_layout`):
        page ``h`` of a pool is the file ``f"{h}{suffix}"`` under :attr:`root`. Under any
        other scheme a disabled layout saying why."""
        from hicache_sdk.keys.l3_layout import file_layout

        return self._sglang_layout(
            file_layout,
            scheme="sglang-file",
            names="SGLang's file names",
            sidecar_pool_specs=sidecar_pool_specs,
            swa_trailing_pages=swa_trailing_pages,
            page_size=page_size,
        )
