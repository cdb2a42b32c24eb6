"""Test-only fault injection for the ``memory`` backend, so L4 runs in our own CI.

:func:`memory_with_faults` returns a ``MemoryStorage`` subclass whose transport is
wrapped by :class:`FaultyTransport`, and a factory of hook objects
(:class:`FaultHooks`: ``stop`` / ``start`` / ``add_delay`` / ``clear_delay``) that
drive it. While stopped every transport call raises ``TransportError`` (a refused
connection); with a delay every call sleeps first.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from hicache_sdk.transport import Segments, Transport, TransportError

__all__ = ["FaultState", "FaultHooks", "FaultyTransport", "memory_with_faults"]


class FaultState:
    """Shared switch between hooks and transports: ``down`` and ``delay`` seconds."""

    def __init__(self) -> None:
        self.down = False
        self.delay = 0.0
        self.lock = threading.Lock()


class FaultHooks:
    """The L4 hook protocol: ``stop()``, ``start()``, ``add_delay(s)``, ``clear_delay()``."""

    def __init__(self, state: FaultState) -> None:
        self.state = state

    def stop(self) -> None:
        self.state.down = True

    def start(self) -> None:
        self.state.down = False

    def add_delay(self, seconds: float) -> None:
        self.state.delay = float(seconds)

    def clear_delay(self) -> None:
        self.state.delay = 0.0


class FaultyTransport(Transport):
    """Delegates to ``inner`` unless the shared :class:`FaultState` says otherwise."""

    def __init__(self, inner: Transport, state: FaultState) -> None:
        self.inner = inner
        self.state = state

    def _gate(self) -> None:
        if self.state.delay:
            time.sleep(self.state.delay)
        if self.state.down:
            raise TransportError("service unavailable (injected)", "connection")

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        self._gate()
        return self.inner.exists(keys)

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self._gate()
        return self.inner.read(keys, buffers)

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        self._gate()
        return self.inner.write(keys, buffers)

    def delete(self, keys: Sequence[str]) -> None:
        self._gate()
        self.inner.delete(keys)

    def clear(self, *args: Any) -> None:
        self.inner.clear(*args)

    def close(self) -> None:
        self.inner.close()

    def health(self) -> bool:
        return not self.state.down and self.inner.health()


def memory_with_faults(memory_cls: type) -> tuple[type, Callable[[], FaultHooks]]:
    """(subclass of ``memory_cls`` declaring ``fault_injection``, hooks factory)."""
    state = FaultState()

    class MemoryWithFaults(memory_cls):  # type: ignore[misc]
        capabilities = dataclasses.replace(memory_cls.capabilities, fault_injection=True)  # type: ignore[attr-defined]

        def create_transport(self, config: Any) -> Transport:
            return FaultyTransport(super().create_transport(config), state)

    MemoryWithFaults.__module__ = memory_cls.__module__
    MemoryWithFaults.__qualname__ = memory_cls.__qualname__

    def hooks() -> FaultHooks:
        state.down, state.delay = False, 0.0
        return FaultHooks(state)

    return MemoryWithFaults, hooks


def private_store_config(capacity_bytes: int) -> dict[str, Any]:
    """Capacity config for ``memory``: a private store, so the bound touches no one else."""
    return {"capacity_bytes": capacity_bytes, "store": f"conformance-cap-{uuid.uuid4().hex[:8]}"}
