"""An outside backend whose storage class sets ``transport_cls`` and also restates
``capabilities`` (the transport's own, as the 0.1.0 docs of a month before showed them on
the storage class).

Frozen: this file is a fixture of the 0.1.0 public API and is never edited; the SDK must keep
certifying it or fail at import or construction with one error that names the change to
make (``tests/compat/test_frozen_backends.py``).
"""

from __future__ import annotations

from dirstore_backend import DirConfig, DirTransport

from hicache_sdk import PagedStorage

__all__ = ["RestatedStorage"]


class RestatedStorage(PagedStorage):
    config_cls = DirConfig
    transport_cls = DirTransport
    capabilities = DirTransport.capabilities
    backend_name = "restated"
