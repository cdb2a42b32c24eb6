"""The ``dirstore`` example of ``docs/writing-a-backend.md`` with one thing changed: each
object is written in place under its final name (``open(O_CREAT | O_EXCL)``, so
create-if-absent is kept) instead of through a temporary file and a link. A reader can
then see the object while it is half written; only the transport tests catch it.

Imported with ``docs/examples`` on ``sys.path`` (the suite-run subprocess puts it there).
"""

from __future__ import annotations

import os

from dirstore_backend import DirStorage, DirTransport, _reason

from hicache_sdk import Segments
from hicache_sdk.kit import memoryviews

__all__ = ["InPlaceDirStorage", "InPlaceDirTransport"]


class InPlaceDirTransport(DirTransport):
    """``DirTransport`` whose write opens the object's own name and fills it."""

    def _write_one(self, item: tuple[str, Segments]) -> bool:
        key, segs = item
        try:
            fd = os.open(self._path(key), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return True  # create-if-absent: an existing object is left untouched
        except OSError as e:
            self.count_failure(_reason(e))
            return False
        try:
            with os.fdopen(fd, "wb", buffering=0) as f:
                for view in memoryviews(segs):
                    f.write(view)
            return True
        except OSError as e:
            self.count_failure(_reason(e))
            return False


class InPlaceDirStorage(DirStorage):
    transport_cls = InPlaceDirTransport
