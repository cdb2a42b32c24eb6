"""A transport that misbehaves on purpose, for the resilience tests.

It sleeps (or blocks on an event) *before* touching the buffers it was given, so a call
that outlives its deadline still writes into (reads) / reads from (writes) those addresses
late -- exactly what the staging layer must make harmless.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hicache_sdk.capabilities import Capabilities
from hicache_sdk.transport import Segments, Transport


@dataclass(frozen=True)
class Cfg:
    """The resilience fields of BackendConfig (small deadlines for tests)."""

    exists_timeout_s: float = 0.1
    transfer_timeout_s: float = 0.1
    breaker_failures: int = 3
    breaker_reset_s: float = 1.0
    max_abandoned: int = 8
    staging_bytes: int = 8 << 20


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, s: float) -> None:
        self.t += s


#: Every Buf ever made stays alive: a test that passes ``Buf(n).segs()`` inline must not
#: hand the SDK an address whose memory is freed before the (late) I/O touches it.
_ALIVE: list[Buf] = []


class Buf:
    """A caller-owned buffer with an address (kept alive for the whole session)."""

    def __init__(self, n: int, fill: int = 0) -> None:
        self.arr = ctypes.create_string_buffer(bytes([fill]) * n, n)
        self.n = n
        _ALIVE.append(self)

    @property
    def addr(self) -> int:
        return ctypes.addressof(self.arr)

    def segs(self, pieces: int = 1) -> list[tuple[int, int]]:
        step = self.n // pieces
        out = [(self.addr + i * step, step) for i in range(pieces - 1)]
        out.append((self.addr + (pieces - 1) * step, self.n - (pieces - 1) * step))
        return out

    def bytes(self) -> bytes:
        return self.arr.raw[: self.n]

    def fill(self, value: int) -> None:
        ctypes.memset(self.addr, value, self.n)


class MisbehavingTransport(Transport):
    """Dict-backed store; per-op delay or gate; optional exception per op."""

    capabilities = Capabilities(health=False)

    def __init__(self) -> None:
        self.store: dict[str, bytes] = {}
        self.delay: dict[str, float] = {}
        self.gate: dict[str, threading.Event] = {}
        self.raise_: dict[str, BaseException] = {}
        self.calls: dict[str, int] = {}
        self.seen_buffers: list[Any] = []
        self.threads: list[str] = []
        self.finished: dict[str, threading.Event] = {}
        self.health_ok = True
        self.closed = False
        self.cleared: list[str] = []
        self._lock = threading.Lock()

    def _enter(self, op: str) -> None:
        with self._lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            self.threads.append(threading.current_thread().name)
            self.finished.setdefault(op, threading.Event()).clear()
        if op in self.gate:
            self.gate[op].wait(10)
        d = self.delay.get(op, 0.0)
        if d:
            time.sleep(d)
        exc = self.raise_.get(op)
        if exc is not None:
            self._leave(op)
            raise exc

    def _leave(self, op: str) -> None:
        self.finished.setdefault(op, threading.Event()).set()

    def n(self, op: str) -> int:
        return self.calls.get(op, 0)

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        self._enter("exists")
        try:
            return [len(self.store[k]) if k in self.store else None for k in keys]
        finally:
            self._leave("exists")

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self._enter("read")
        self.seen_buffers.append([list(b) for b in buffers])
        out = []
        for k, segs in zip(keys, buffers):
            data = self.store.get(k)
            total = sum(n for _, n in segs)
            if data is None or len(data) != total:
                out.append(False)
                continue
            off = 0
            for addr, n in segs:
                ctypes.memmove(addr, data[off : off + n], n)
                off += n
            out.append(True)
        self._leave("read")
        return out

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self._enter("write")
        self.seen_buffers.append([list(b) for b in buffers])
        for k, segs in zip(keys, buffers):
            data = b"".join(ctypes.string_at(a, n) for a, n in segs)
            self.store.setdefault(k, data)
        self._leave("write")
        return [True] * len(keys)

    def delete(self, keys: Sequence[str]) -> None:
        self._enter("delete")
        for k in keys:
            self.store.pop(k, None)
        self._leave("delete")

    def clear(self, prefix: str) -> None:
        self.cleared.append(prefix)
        for k in [k for k in self.store if k.startswith(prefix)]:
            del self.store[k]

    def health(self) -> bool:
        self._enter("health")
        self._leave("health")
        return self.health_ok

    def close(self) -> None:
        self.closed = True


class HealthTransport(MisbehavingTransport):
    """Declares a real health probe (the breaker's half-open state uses it)."""

    capabilities = Capabilities(health=True)


class FakeQuarantine:
    def __init__(self) -> None:
        self.events: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def hold(self, buffers: Sequence[Segments]) -> None:
        with self.lock:
            self.events.append(("hold", len(buffers)))

    def release(self, buffers: Sequence[Segments]) -> None:
        with self.lock:
            self.events.append(("release", len(buffers)))
