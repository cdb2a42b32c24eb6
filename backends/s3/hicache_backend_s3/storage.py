"""``S3Storage``: the ``s3`` backend, the paged adapter over :class:`S3Transport`.

Construction follows SGLang's dynamic loader: ``S3Storage(storage_config, kwargs)`` with
the settings (:class:`S3Config`) in ``storage_config.extra_config``. The bucket is checked
at construction (missing bucket, rejected credentials: ``HiCacheError``); an unreachable
endpoint is not an error there (calls miss until it answers).
"""

from __future__ import annotations

from typing import ClassVar, List

from hicache_sdk import BackendConfig, PagedStorage
from hicache_sdk.paged.pools import check_keys

from .config import S3Config
from .s3_transport import S3Transport

__all__ = ["S3Storage"]


class S3Storage(PagedStorage):
    """Pages as objects in an S3 bucket under a prefix (see :mod:`hicache_backend_s3`)."""

    config_cls: ClassVar[type[BackendConfig]] = S3Config
    transport_cls = S3Transport
    backend_name: ClassVar[str] = "s3"

    def batch_delete(self, keys: List[str]) -> None:
        """The adapter's ``batch_delete``. Under an ``sglang-*`` scheme the transport
        refuses deletes it was not asked for (the adapter's removal of wrong-length
        objects, which may be another deployment's), so the pages' object names are
        marked as requested for the duration of the call."""
        t = self.raw_transport
        if not isinstance(t, S3Transport) or t.owns_names:
            super().batch_delete(keys)
            return
        objs, _ = self._page_objects_nomem(self._require_kv("batch_delete"), check_keys(keys))
        with t.deletes_requested([o.name for o in objs]):
            super().batch_delete(keys)
