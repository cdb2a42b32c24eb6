"""The ``file`` backend with a stalled path: its ranged reads block, as on a hung disk or
network filesystem, once ``STALL.after`` of them have run, until ``STALL.thaw`` is set;
then they go on and land their bytes late. Loaded by ``module:Class``
(``sglang_stalled_file:StalledFileStorage``), as an operator names a third-party backend."""

from __future__ import annotations

import threading

from hicache_backend_file.file_transport import FileTransport
from hicache_backend_file.storage import FileStorage

from hicache_sdk.transport import Segments


class Stall:
    def __init__(self) -> None:
        self.after: int | None = None  # ranged reads that run before the stall (None: never)
        self.calls = 0
        self.stalled = threading.Event()  # a read is blocked
        self.thaw = threading.Event()
        self.landed = threading.Event()  # a stalled read has finished, late
        self.lock = threading.Lock()


STALL = Stall()


class StalledFileTransport(FileTransport):
    def _read_checked(self, key: str, checked: list[tuple[int, int, Segments]]) -> bool:
        """One object's ranged read (``read_ranges`` and ``read_ranges_batch`` both)."""
        with STALL.lock:
            n, STALL.calls = STALL.calls, STALL.calls + 1
        if STALL.after is None or n < STALL.after:
            return super()._read_checked(key, checked)
        STALL.stalled.set()
        STALL.thaw.wait(30)
        try:
            return super()._read_checked(key, checked)
        finally:
            STALL.landed.set()


class StalledFileStorage(FileStorage):
    transport_cls = StalledFileTransport
