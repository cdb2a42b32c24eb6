"""hicache-backend-s3: pages as objects in an S3 (or S3-compatible) bucket, over boto3.

``S3Storage`` (the ``s3`` entry point) is the paged adapter over :class:`S3Transport`;
``S3Config`` documents every setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import S3Config

if TYPE_CHECKING:
    from .s3_transport import S3Transport
    from .storage import S3Storage

__all__ = ["S3Config", "S3Storage", "S3Transport"]


def __getattr__(name: str) -> Any:
    # S3Storage pulls in the paged adapter (and torch), S3Transport boto3: only when asked for.
    if name == "S3Storage":
        from .storage import S3Storage

        return S3Storage
    if name == "S3Transport":
        from .s3_transport import S3Transport

        return S3Transport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
