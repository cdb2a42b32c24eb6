"""Failure injection for tests: random delays and failures in transport calls.

From code: ``FailureInjector(delay_s=0.05, failure_rate=0.1, ops={"read"}, seed=1)`` passed
to :func:`hicache_sdk.resilience.wrap_transport` (``injector=``) or set later with
``ResilientTransport.set_injector``.

From the environment, only when asked: :meth:`FailureInjector.from_env` is an explicit call,
and the paged adapter makes it only for a backend whose config opts in
(``inject_failures=true``, or ``HICACHE_INJECT_FAILURES=1``). Nothing reads these variables
otherwise:

* ``HICACHE_INJECT_DELAY_S``: each selected call first sleeps uniformly in ``0..x`` seconds;
* ``HICACHE_INJECT_FAILURE_RATE``: each selected call fails with this probability
  (a :class:`~hicache_sdk.transport.TransportError` with reason ``"injected"``, which the
  wrapper turns into misses like any I/O failure);
* ``HICACHE_INJECT_OPS``: comma-separated ops to affect (``exists,read,write,delete,health``;
  default ``exists,read,write``);
* ``HICACHE_INJECT_SEED``: seed of the injector's private random generator.

SGLang's own variables ``SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY`` and
``SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE`` are SGLang's: inside SGLang its backend
factory wraps every backend with its own injector. They are read (as delay and failure rate)
only by ``from_env(sglang_variables=True)``, for a harness that runs SGLang's fault tests
against a backend outside SGLang; ``HICACHE_*`` variables win over them.

Injection runs inside the deadline (on the worker thread when a deadline is set), so an
injected delay longer than the deadline exercises the timeout path for real.
"""

from __future__ import annotations

import os
import random
import threading
import time
import warnings
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


def set_inside_sglang(flag: bool) -> None:
    """Deprecated, and does nothing: no process-wide flag decides whether SGLang's injector
    variables apply; :meth:`FailureInjector.from_env` reads them only when its caller asks
    (``sglang_variables=True``)."""
    warnings.warn(
        "set_inside_sglang() does nothing since hicache-sdk 0.2.0: SGLang's injector variables are "
        "read only by FailureInjector.from_env(sglang_variables=True)",
        DeprecationWarning,
        stacklevel=2,
    )


def is_inside_sglang() -> bool:
    """Deprecated: always ``False`` (see :func:`set_inside_sglang`)."""
    return False


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
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, sglang_variables: bool = False
    ) -> FailureInjector | None:
        """The injector the environment (``environ``, default ``os.environ``) asks for, or
        ``None`` when none is configured; SGLang's variables too with ``sglang_variables``
        (module docs). Malformed values raise ``ValueError`` naming the variable."""
        env = os.environ if environ is None else environ
        delay = _env_float(env, "HICACHE_INJECT_DELAY_S")
        rate = _env_float(env, "HICACHE_INJECT_FAILURE_RATE")
        if sglang_variables and len(CURRENT.injector_env) == 2:  # releases without them: none
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
