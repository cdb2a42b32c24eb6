"""Broken transports under the paged adapter (``memory`` underneath), each with the
suite test that must fail for it in ``FAILS``.

Deadlines are switched off in their configs (``exists_timeout_s = transfer_timeout_s =
0``) so the adapter's own protection does not mask the transport's fault.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from hicache_sdk.memory import MemoryStorage
from hicache_sdk.transport import Segments, Transport

from ..faults import FaultState, FaultyTransport, memory_with_faults

__all__ = ["HalfWrittenPageVisible", "HangsWhileDown", "ReadLandsAfterDeadline"]

_NO_DEADLINES = {"exists_timeout_s": 0, "transfer_timeout_s": 0}


class _Wrapping(MemoryStorage):
    def __init__(self, storage_config: Any = None, kwargs: Any = None) -> None:
        extra = dict(getattr(storage_config, "extra_config", None) or {})
        storage_config.extra_config = {**_NO_DEADLINES, **extra}
        super().__init__(storage_config, kwargs)


class _HalfWrite(FaultyTransport):
    """Publishes each object with its last segment (under the default scheme, the SDK's
    integrity trailer) in place but the second half of the bytes before it never
    written (zeros): a torn write the object's own integrity record cannot reveal
    without a payload checksum. A one-segment object loses the second half of its bytes."""

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        copies = []
        for segs in buffers:
            sizes = [n for _, n in segs]
            body = sum(sizes[:-1]) if len(sizes) > 1 else sum(sizes)
            out, seen = [], 0
            for addr, n in segs:
                buf = ctypes.create_string_buffer(n)
                ctypes.memmove(buf, addr, n)
                for i in range(n):
                    if body // 2 <= seen + i < body:
                        buf[i] = b"\x00"
                seen += n
                out.append(buf)
            copies.append(out)
        bufs = [[(ctypes.addressof(b), ctypes.sizeof(b)) for b in c] for c in copies]
        return self.inner.write(keys, bufs)


class HalfWrittenPageVisible(_Wrapping):
    """A page whose second half was never written is published as complete (and is
    then a hit with a torn payload)."""

    FAILS: ClassVar[str] = "test_half_written_page_never_a_hit"

    def create_transport(self, config: Any) -> Transport:
        return _HalfWrite(super().create_transport(config), FaultState())


class _Hang(FaultyTransport):
    def _gate(self) -> None:
        while self.state.down:  # blocks for as long as the service is down
            time.sleep(0.05)


_HANG_CLS: Any
_HANG_CLS, _ = memory_with_faults(MemoryStorage)
_HANG_STATE = FaultState()


class HangsWhileDown(_Wrapping):
    """While the service is down, every call blocks until it comes back."""

    FAILS: ClassVar[str] = "test_calls_bounded_while_service_down"
    capabilities = _HANG_CLS.capabilities

    def create_transport(self, config: Any) -> Transport:
        return _Hang(super().create_transport(config), _HANG_STATE)


class _Late(FaultyTransport):
    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        if self.state.delay:
            time.sleep(self.state.delay)  # the read completes long after any deadline
        return self.inner.read(keys, buffers)

    def _gate(self) -> None:
        if self.state.down:
            super()._gate()


_LATE_STATE = FaultState()


class ReadLandsAfterDeadline(_Wrapping):
    """Under a slow service, reads complete (and write the buffer) after their deadline."""

    FAILS: ClassVar[str] = "test_calls_bounded_while_service_slow"
    capabilities = _HANG_CLS.capabilities

    def create_transport(self, config: Any) -> Transport:
        return _Late(super().create_transport(config), _LATE_STATE)


def hooks_for(cls: type) -> Any:
    """The fault hooks that drive ``cls``'s transport (for the suite's L4 tests)."""
    from ..faults import FaultHooks

    states: dict[type, FaultState] = {HangsWhileDown: _HANG_STATE, ReadLandsAfterDeadline: _LATE_STATE}
    state = states.get(cls, FaultState())
    state.down, state.delay = False, 0.0
    return FaultHooks(state)
