"""Failure injection for tests: random delays and failures in transport calls.

From code: ``FailureInjector(delay_s=0.05, failure_rate=0.1, ops={"read"}, seed=1)`` passed
to :func:`hicache_sdk.resilience.wrap_transport` (``injector=``) or set later with
``ResilientTransport.set_injector``.

From the environment (read by :meth:`FailureInjector.from_env` when the wrapper is built):

* ``HICACHE_INJECT_DELAY_S``: each selected call first sleeps uniformly in ``0..x`` seconds;
* ``HICACHE_INJECT_FAILURE_RATE``: each selected call fails with this probability
  (a :class:`~hicache_sdk.transport.TransportError` with reason ``"injected"``, which the
  wrapper turns into misses like any I/O failure);
* ``HICACHE_INJECT_OPS``: comma-separated ops to affect (``exists,read,write,delete,health``;
  default ``exists,read,write``);
* ``HICACHE_INJECT_SEED``: seed of the injector's private random generator.

SGLang's own variables ``SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY`` and
``SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE`` are honoured (as delay and failure rate)
**only outside SGLang**: inside SGLang its backend factory already wraps every backend with
its own injector, and applying them twice would square the failure probability. The SGLang
bridge calls :func:`set_inside_sglang` ``(True)`` before building a backend. ``HICACHE_*``
variables win over ``SGLANG_*`` ones.

Injection runs inside the deadline (on the worker thread when a deadline is set), so an
injected delay longer than the deadline exercises the timeout path for real.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from ..sglang.versions import CURRENT
from ..transport import TransportError

__all__ = [
    "ALL_OPS",
    "DEFAULT_OPS",
    "FailureInjector",
    "is_inside_sglang",
    "set_inside_sglang",
]

ALL_OPS = frozenset({"exists", "read", "write", "delete", "health"})
DEFAULT_OPS = frozenset({"exists", "read", "write"})

_inside_sglang = False


def set_inside_sglang(flag: bool) -> None:
    """Declare that this process runs the SDK inside SGLang (set by the SGLang bridge)."""
    global _inside_sglang
    _inside_sglang = bool(flag)


def is_inside_sglang() -> bool:
    return _inside_sglang


def _env_float(env: Mapping[str, str], name: str) -> float | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None


@dataclass
class FailureInjector:
    """Random delay (uniform ``0..delay_s``) and failure (probability ``failure_rate``)
    before each call of an op in ``ops``. Thread-safe. ``sleep`` is injectable for tests."""

    delay_s: float = 0.0
    failure_rate: float = 0.0
    ops: frozenset[str] = DEFAULT_OPS
    seed: int | None = None
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)

    def __post_init__(self) -> None:
        if self.delay_s < 0:
            raise ValueError(f"delay_s must be >= 0, got {self.delay_s!r}")
        if not 0.0 <= self.failure_rate <= 1.0:
            raise ValueError(f"failure_rate must be in [0, 1], got {self.failure_rate!r}")
        ops = frozenset(self.ops)
        unknown = ops - ALL_OPS
        if unknown:
            raise ValueError(f"ops: unknown op(s) {sorted(unknown)}; valid: {sorted(ALL_OPS)}")
        self.ops = ops
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self.injected_failures = 0
        self.injected_delays = 0

    @property
    def active(self) -> bool:
        return bool(self.ops) and (self.delay_s > 0 or self.failure_rate > 0)

    def before(self, op: str) -> None:
        """Called just before the transport's ``op``: may sleep, may raise TransportError."""
        if op not in self.ops:
            return
        with self._lock:
            delay = self._rng.uniform(0.0, self.delay_s) if self.delay_s > 0 else 0.0
            fail = self.failure_rate > 0 and self._rng.random() < self.failure_rate
            self.injected_delays += delay > 0
            self.injected_failures += fail
        if delay > 0:
            self.sleep(delay)
        if fail:
            raise TransportError(f"injected failure in {op}", reason="injected")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> FailureInjector | None:
        """The injector the environment asks for, or ``None`` when none is configured.
        Malformed values raise ``ValueError`` naming the variable."""
        env = os.environ if environ is None else environ
        delay = _env_float(env, "HICACHE_INJECT_DELAY_S")
        rate = _env_float(env, "HICACHE_INJECT_FAILURE_RATE")
        if not _inside_sglang and len(CURRENT.injector_env) == 2:  # releases without them: none
            if delay is None:
                delay = _env_float(env, CURRENT.injector_env[0])
            if rate is None:
                rate = _env_float(env, CURRENT.injector_env[1])
        if not delay and not rate:
            return None
        ops: Iterable[str] = DEFAULT_OPS
        raw_ops = env.get("HICACHE_INJECT_OPS")
        if raw_ops and raw_ops.strip():
            ops = [o.strip() for o in raw_ops.split(",") if o.strip()]
            bad = set(ops) - ALL_OPS
            if bad:
                raise ValueError(f"HICACHE_INJECT_OPS: unknown op(s) {sorted(bad)}; valid: {sorted(ALL_OPS)}")
        seed_raw = env.get("HICACHE_INJECT_SEED")
        try:
            seed = int(seed_raw) if seed_raw and seed_raw.strip() else None
        except ValueError:
            raise ValueError(f"HICACHE_INJECT_SEED must be an integer, got {seed_raw!r}") from None
        return cls(delay_s=delay or 0.0, failure_rate=rate or 0.0, ops=frozenset(ops), seed=seed)
