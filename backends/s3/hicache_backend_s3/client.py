"""boto3 clients for the ``s3`` backend, the classification of their errors, and the
guard that keeps credentials out of logs.

* :func:`make_client` builds one botocore S3 client: ``standard`` retry mode (throttling
  and 5xx, jittered exponential back-off) with the given attempts, per-attempt connect /
  read timeouts, a connection pool sized to the concurrency, and payload checksums only
  where S3 requires them (a CRC over every page is CPU the SigV4 hash already spends).
  botocore's ``Expect: 100-continue`` header on every PUT of a file-like body is turned
  off: one more round trip per page, and a 1 s stall per PUT against a server or proxy
  that never answers ``100`` (raw boto3 with a ``bytes`` body does not send it either).
* :func:`quiet_botocore_debug` drops DEBUG records of every ``botocore``/``boto3``/
  ``s3transfer``/``urllib3`` logger: botocore's DEBUG output prints request headers
  (``Authorization``, ``X-Amz-Security-Token``) and canonical requests. INFO and above pass.
* :func:`classify` maps an exception of a call to ``"missing"``, ``"exists"`` (a failed
  precondition), ``"tls"`` (the TLS handshake failed: certificate verification, a wrong
  or missing ``ca_bundle``), ``"connection"``, ``"throttled"``, ``"auth"`` or ``"error"``.
"""

from __future__ import annotations

import logging
import ssl
import threading
from typing import Any

import botocore.exceptions as bexc
import botocore.handlers
import botocore.session
import urllib3.exceptions
from botocore.config import Config

from .config import S3Config

__all__ = ["classify", "http_status", "make_client", "quiet_botocore_debug"]

_LOG_ROOTS = ("botocore", "boto3", "s3transfer", "urllib3")


class _NoDebug(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


_NO_DEBUG = _NoDebug()

# One botocore session per process: it caches the loaded service models and endpoint
# rules, which makes a client cost milliseconds instead of ~0.3 s. Creating clients from
# one session is not thread-safe, hence the lock. Credentials are passed per client.
_SESSION: Any = None
_SESSION_LOCK = threading.Lock()


def quiet_botocore_debug() -> None:
    """Attach the DEBUG-dropping filter to every existing logger of the AWS stack
    (idempotent; called again after each client is built, since botocore creates loggers
    lazily on import). A logger filter applies to records logged on that logger."""
    names = [n for n in logging.root.manager.loggerDict if n.split(".", 1)[0] in _LOG_ROOTS]
    for name in [*_LOG_ROOTS, *names]:
        lg = logging.getLogger(name)
        if _NO_DEBUG not in lg.filters:
            lg.addFilter(_NO_DEBUG)


def make_client(cfg: S3Config, *, attempts: int, connect_s: float, read_s: float) -> Any:
    """A botocore S3 client for ``cfg`` with these per-attempt limits (see module docs)."""
    bc = Config(
        retries={"mode": "standard", "total_max_attempts": attempts},
        connect_timeout=connect_s,
        read_timeout=read_s,
        max_pool_connections=max(10, cfg.max_concurrency + 4),
        s3={"addressing_style": cfg.addressing_style},
        request_checksum_calculation="when_required",
        response_checksum_validation="when_required",
        tcp_keepalive=True,
    )
    verify: bool | str = cfg.ca_bundle if cfg.ca_bundle else cfg.verify
    global _SESSION
    with _SESSION_LOCK:
        if _SESSION is None:
            _SESSION = botocore.session.get_session()
        client = _SESSION.create_client(
            "s3",
            region_name=cfg.region,
            endpoint_url=cfg.endpoint_url,
            verify=verify,
            aws_access_key_id=cfg.access_key_id,
            aws_secret_access_key=cfg.secret_access_key,
            aws_session_token=cfg.session_token,
            config=bc,
        )
    client.meta.events.unregister("before-call.s3", botocore.handlers.add_expect_header)
    quiet_botocore_debug()
    return client


def http_status(exc: BaseException) -> int:
    """The HTTP status of a ``ClientError`` (``0`` for anything else)."""
    if isinstance(exc, bexc.ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    return 0


def _is_tls(exc: BaseException) -> bool:
    """botocore's ``SSLError`` (handshake / verification), or an ``ssl.SSLError`` from a
    read wrapped by urllib3 (its ``SSLError``) or raw."""
    if isinstance(exc, (bexc.SSLError, ssl.SSLError, urllib3.exceptions.SSLError)):
        return True
    return isinstance(getattr(exc, "error", None), (ssl.SSLError, urllib3.exceptions.SSLError))


def classify(exc: BaseException) -> str:
    """See the module docs."""
    if isinstance(exc, bexc.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = http_status(exc)
        if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
            return "missing"
        if status == 412 or code == "PreconditionFailed":
            return "exists"
        if status in (401, 403) or code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return "auth"
        if status in (429, 503) or "Throttl" in code or code == "SlowDown":
            return "throttled"
        if status >= 500:
            return "connection"
        return "error"
    if _is_tls(exc):
        return "tls"
    if isinstance(exc, (bexc.HTTPClientError, bexc.EndpointConnectionError, ConnectionError, TimeoutError)):
        return "connection"
    if isinstance(exc, (bexc.BotoCoreError, urllib3.exceptions.HTTPError)):
        return "connection"
    return "error"
