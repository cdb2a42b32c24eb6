"""``S3Storage``: the ``s3`` backend, the paged adapter over :class:`S3Transport`.

Construction follows SGLang's dynamic loader: ``S3Storage(storage_config, kwargs)`` with
the settings (:class:`S3Config`) in ``storage_config.extra_config``. The bucket is checked
at construction (missing bucket, rejected credentials: ``HiCacheError``); an unreachable
endpoint is not an error there (calls miss until it answers).
"""

from __future__ import annotations

from typing import ClassVar

from hicache_sdk import BackendConfig, PagedStorage

from .config import S3Config
from .transport import S3Transport

__all__ = ["S3Storage"]


class S3Storage(PagedStorage):
    """Pages as objects in an S3 bucket under a prefix (see :mod:`hicache_backend_s3`)."""

    config_cls: ClassVar[type[BackendConfig]] = S3Config
    transport_cls = S3Transport
    backend_name: ClassVar[str] = "s3"
