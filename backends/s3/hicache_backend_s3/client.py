"""boto3 clients for the ``s3`` backend, the classification of their errors, and the
guard that keeps credentials out of logs.

* :func:`make_client` builds one botocore S3 client: botocore's retry mode ``retry_mode``
  (``standard`` or ``adaptive``: throttling and 5xx, jittered exponential back-off) with the
  given attempts, per-attempt connect /
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
  or missing ``ca_bundle``), ``"connection"``, ``"throttled"``, ``"auth"`` or ``"error"``;
  :func:`describe` says what happened in a few words (``"connection refused"``, ``"read
  timed out"``, ``"HTTP 503 SlowDown"``), for messages that also name the endpoint
  (:func:`endpoint_label`). :data:`IO_ERRORS` are the client library's I/O exception types.
"""

from __future__ import annotations

import logging
import ssl
import threading
import urllib.parse
from typing import Any

import botocore.exceptions as bexc
import botocore.handlers
import botocore.session
import urllib3.exceptions
from botocore.config import Config

from .config import S3Config

__all__ = [
    "IO_ERRORS",
    "classify",
    "describe",
    "endpoint_label",
    "http_status",
    "make_client",
    "quiet_botocore_debug",
]

#: What botocore and urllib3 raise for an I/O failure (connection, timeout, TLS, an error
#: answer of the server): ``S3Transport.io_errors``.
IO_ERRORS: tuple[type[BaseException], ...] = (
    bexc.BotoCoreError,
    bexc.ClientError,
    urllib3.exceptions.HTTPError,
)

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
        retries={"mode": cfg.retry_mode, "total_max_attempts": attempts},
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


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps: causes, contexts, botocore's ``error`` keyword and
    urllib3's ``reason`` (at most 16 links)."""
    out: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo and len(out) < 16:
        e = todo.pop(0)
        if e is None or any(e is seen for seen in out):
            continue
        out.append(e)
        kw = getattr(e, "kwargs", None)
        inner = kw.get("error") if isinstance(kw, dict) else None
        reason = getattr(e, "reason", None)
        todo += [
            e.__cause__,
            e.__context__,
            inner if isinstance(inner, BaseException) else None,
            reason if isinstance(reason, BaseException) else None,
        ]
    return out


def describe(exc: BaseException) -> str:
    """A few words on what failed (see the module docs); never the request's headers."""
    if isinstance(exc, bexc.ClientError):
        code = str(exc.response.get("Error", {}).get("Code", "")) or "error"
        return f"HTTP {http_status(exc)} {code}"
    chain = _chain(exc)
    if _is_tls(exc):
        verify = any(
            isinstance(e, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(e)
            for e in chain
        )
        return "TLS verification failed" if verify else "TLS handshake failed"
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused"
    if any(isinstance(e, (bexc.ConnectTimeoutError, urllib3.exceptions.ConnectTimeoutError)) for e in chain):
        return "connect timed out"
    if any(isinstance(e, (bexc.ReadTimeoutError, urllib3.exceptions.ReadTimeoutError)) for e in chain):
        return "read timed out"
    if any(isinstance(e, TimeoutError) for e in chain):
        return "timed out"
    if any(
        isinstance(
            e, (bexc.ConnectionClosedError, bexc.ResponseStreamingError, urllib3.exceptions.ProtocolError)
        )
        for e in chain
    ):
        return "connection dropped"
    if any(isinstance(e, bexc.EndpointConnectionError) for e in chain):
        return "cannot connect"
    return type(exc).__name__


def endpoint_label(url: str | None) -> str:
    """``scheme://host:port`` of an endpoint URL (no user info, path or query), or
    ``"the AWS endpoint"``."""
    if not url:
        return "the AWS endpoint"
    try:
        u = urllib.parse.urlsplit(url)
        host = u.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        return f"{u.scheme}://{host}" + (f":{u.port}" if u.port else "")
    except ValueError:
        return "the configured endpoint"
