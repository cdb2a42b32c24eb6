"""``S3Config``: the settings of the ``s3`` backend (environment prefix ``HICACHE_S3_``).

* ``bucket`` (required): an existing bucket, 3..63 characters. A missing bucket or
  rejected credentials fail construction; an unreachable endpoint does not (calls miss,
  the breaker opens, then recovers).
* ``create_bucket`` [false]: create the bucket at construction when it is missing
  (explicit opt-in).
* ``prefix`` ["hicache/"]: every object name is ``prefix + name``; ``clear`` never
  removes anything outside it. It must end with ``/``, so that ``p/`` never reaches
  ``p2/``'s objects; ``""`` is allowed (the whole bucket is ours).
* ``endpoint_url`` [none]: an S3-compatible endpoint (``https://...`` for TLS); none:
  AWS.
* ``region`` ["us-east-1"]: the signing region (and the bucket's ``LocationConstraint``
  with ``create_bucket``).
* ``addressing_style`` ["auto"]: ``"auto"``, ``"path"`` (most self-hosted stores) or
  ``"virtual"``.
* ``access_key_id`` / ``secret_access_key`` / ``session_token`` [none]: explicit
  credentials (secret: never in reprs, logs or errors; the first two together or
  neither); when unset, the standard AWS chain (environment, profile, role) applies.
* ``verify`` [true]: TLS certificate verification (``false`` only for private test
  endpoints).
* ``ca_bundle`` [none]: a PEM CA bundle file for a private endpoint (must exist; not
  with ``verify=false``). A certificate that does not verify is not a construction
  error: a warning names ``verify`` / ``ca_bundle``, and calls miss with reason ``tls``.
* ``max_concurrency`` [16, 1..1024]: the most requests in flight per backend (all
  caller threads together); the connection pool is sized to it.
* ``connect_timeout_s`` / ``read_timeout_s`` [0.5 / 1.0 s]: per attempt (cut to
  ``exists_timeout_s`` for existence queries).
* ``retry_mode`` ["standard"]: botocore's retry mode, ``"standard"`` (throttling, 5xx and
  connection errors, jittered exponential back-off) or ``"adaptive"`` (the same, plus
  client-side rate limiting while the store throttles). ``"legacy"`` is refused: its
  back-off is not the one the deadline budget below is computed from.
* ``max_attempts`` [3, 1..20]: the retry budget, attempts in all (botocore's
  ``total_max_attempts``); the attempts actually used are cut so that every attempt and
  botocore's largest back-off before each retry fit the call's deadline
  (``exists_timeout_s`` / ``transfer_timeout_s``), see :func:`attempts_within`.
* ``conditional_put`` ["auto"]: ``"auto"`` (probe ``If-None-Match: *`` once, at the
  first write), ``"on"`` or ``"off"`` (HEAD-then-PUT, with a race: two writers may both
  PUT the same page; both write the same bytes for the same key, so a reader still sees
  one whole object).
* ``exists_timeout_s`` [**2.0 s**, the shared default is 0.2 s]: an existence query here
  is HEAD requests over the network, not a local lookup: against real S3 a HEAD takes
  tens of ms with a tail in the hundreds, a cold connection adds TCP + TLS handshakes,
  and a batch of pages is several rounds at ``max_concurrency``. At 0.2 s ordinary
  batches would be abandoned (misses counted as ``deadline``, then the breaker opens);
  at 2 s an outage costs at most ``breaker_failures`` calls of 2 s before the breaker
  answers at once. Lower it for a nearby S3-compatible store (e.g. ``0.5``).
* ``transfer_timeout_s`` [5.0 s]: the deadline of a get, set or delete, everything
  included (a half-open probe, retries, reconnects); transfers are staged (a streamed
  body can block inside the client library, so the transport is not cancellable).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from hicache_sdk import BackendConfig, secret_field
from hicache_sdk.config import setting

__all__ = ["RETRY_MODES", "S3Config", "attempts_within", "botocore_backoff_s"]

#: botocore's retry modes this backend accepts (``retry_mode``).
RETRY_MODES = ("standard", "adaptive")


class _Throttled:
    """A throttling detector that calls every error throttling: botocore's largest scale."""

    def is_throttling_error_from_context(self, context: object) -> bool:
        return True

    def is_throttling_error(self, **kwargs: object) -> bool:
        return True


def botocore_backoff_s(retry: int) -> float:
    """The longest sleep botocore's standard / adaptive retry modes take before retry number
    ``retry`` (1-based): botocore's own ``ExponentialBackoff`` asked with its random draw at
    its maximum and the error a throttling one (its largest base). A server's
    ``x-amz-retry-after`` header may stretch one back-off further; the call's deadline still
    bounds it (the call is abandoned)."""
    from botocore.retries import standard

    try:
        backoff = standard.ExponentialBackoff(random=lambda: 1.0, throttling_detector=_Throttled())
    except TypeError:  # a botocore whose back-off has no throttling scale
        backoff = standard.ExponentialBackoff(random=lambda: 1.0)
    return float(backoff.delay_amount(standard.RetryContext(attempt_number=retry)))


def attempts_within(deadline_s: float, per_attempt_s: float, budget: int) -> int:
    """The most attempts (``1..budget``) whose worst case -- every attempt timing out,
    plus botocore's largest back-off before each retry (:func:`botocore_backoff_s`) -- fits
    ``deadline_s``. A deadline of ``0`` (disabled) allows the whole ``budget``; at least one
    attempt is always made."""
    if deadline_s <= 0:
        return budget
    n = 1
    while n < budget:
        worst = (n + 1) * per_attempt_s + sum(botocore_backoff_s(i) for i in range(1, n + 1))
        if worst > deadline_s:
            break
        n += 1
    return n


@dataclass(frozen=True)
class S3Config(BackendConfig):
    """Settings of the ``s3`` backend (see the module docs)."""

    env_prefix: ClassVar[str] = "s3"

    bucket: str = ""
    prefix: str = "hicache/"
    endpoint_url: str | None = None
    region: str = "us-east-1"
    access_key_id: str | None = secret_field(None)
    secret_access_key: str | None = secret_field(None)
    session_token: str | None = secret_field(None)
    addressing_style: str = "auto"
    verify: bool = True
    ca_bundle: str | None = None
    create_bucket: bool = False
    max_concurrency: int = setting(16, ge=1, le=1024)
    connect_timeout_s: float = setting(0.5, gt=0, le=3600, unit="seconds")
    read_timeout_s: float = setting(1.0, gt=0, le=3600, unit="seconds")
    retry_mode: str = "standard"
    max_attempts: int = setting(3, ge=1, le=20)
    conditional_put: str = "auto"
    #: Raised from the shared 0.2 s (see the module docs); same range and unit.
    exists_timeout_s: float = setting(2.0, ge=0, le=3600, unit="seconds")
    transfer_timeout_s: float = setting(5.0, ge=0, le=3600, unit="seconds")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.retry_mode not in RETRY_MODES:
            raise ValueError(
                f"retry_mode must be one of {', '.join(RETRY_MODES)} (botocore's retry modes), "
                f"got {self.retry_mode!r}"
            )
        if not self.bucket:
            raise ValueError(
                "bucket is required (an existing bucket name; set create_bucket=true to create it)"
            )
        if not 3 <= len(self.bucket) <= 63:
            raise ValueError(f"bucket must be 3..63 characters, got {self.bucket!r}")
        if self.prefix.startswith("/"):
            raise ValueError(f"prefix must not start with '/', got {self.prefix!r}")
        if self.prefix and not self.prefix.endswith("/"):
            raise ValueError(
                f"prefix must end with '/' (or be empty), got {self.prefix!r}: use {self.prefix + '/'!r}. "
                "A prefix that ends inside a name would also match its neighbours' objects "
                "(clearing 'p' would remove 'p2/...')"
            )
        if self.addressing_style not in ("auto", "path", "virtual"):
            raise ValueError(
                f"addressing_style must be 'auto', 'path' or 'virtual', got {self.addressing_style!r}"
            )
        if self.conditional_put not in ("auto", "on", "off"):
            raise ValueError(f"conditional_put must be 'auto', 'on' or 'off', got {self.conditional_put!r}")
        if self.ca_bundle is not None:
            if not self.verify:
                raise ValueError("ca_bundle is set but verify is false: set one or the other")
            if not os.path.isfile(self.ca_bundle):
                raise ValueError(f"ca_bundle must be a readable CA bundle file, got {self.ca_bundle!r}")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("access_key_id and secret_access_key must be given together (or neither)")
