"""Everything but the payload goes through redis-py: the clients, and what their failures mean.

:func:`redis_kwargs` turns an :class:`~.config.Endpoint` and the settings into the keyword
arguments of ``redis.Redis`` (and of the clients a ``Sentinel`` or ``RedisCluster`` makes),
so redis-py's connections and our data connections (:mod:`.pool`) reach the same server with
the same credentials, database and TLS trust. redis-py retries nothing here: the resilience
layer above the transport owns deadlines and retries, and a retry inside a call would only
hold its worker longer.

:func:`transport_error` maps an exception of either kind (redis-py's, or a data
connection's ``OSError`` / :class:`~.pool.DialError`) to the
:class:`~hicache_sdk.TransportError` the adapter counts: a stable reason token, and a message
with the address and no secret.
"""

from __future__ import annotations

import inspect
import ssl
from typing import Any

import redis
import redis.exceptions as rex
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import MasterNotFoundError, Sentinel

from hicache_sdk import TransportError

from .config import Endpoint, RedisConfig
from .frames import ProtocolError, ReplyError
from .pool import DialError

__all__ = ["IO_ERRORS", "closing", "redis_kwargs", "run_commands", "sentinel", "transport_error"]

#: redis-py's exceptions that mean an I/O failure (the transport's ``io_errors``): a
#: connection refused, reset or timed out, a server still loading, credentials refused, no
#: master known to any sentinel, a cluster that cannot be reached or is down.
IO_ERRORS: tuple[type[BaseException], ...] = (
    rex.ConnectionError,  # AuthenticationError, BusyLoadingError, MasterNotFoundError ...
    rex.TimeoutError,
    rex.ClusterError,  # ClusterDownError, MasterDownError
    rex.TryAgainError,
    rex.RedisClusterException,
    MasterNotFoundError,
)


#: What redis-py does on connect beyond the handshake, turned off where this redis-py has
#: it: ``CLIENT SETINFO`` (a round trip; ``driver_info=None`` in newer versions,
#: ``lib_name`` / ``lib_version`` before), and maintenance notifications (a round trip, and
#: a "relaxed" socket timeout during a server's maintenance that would outlast deadlines).
_QUIET: dict[str, Any] = (
    {"driver_info": None}
    if "driver_info" in inspect.signature(redis.Redis.__init__).parameters
    else {"lib_name": None, "lib_version": None}
)
try:
    from redis.maint_notifications import MaintNotificationsConfig
except ImportError:  # pragma: no cover - older redis-py
    pass
else:
    _QUIET["maint_notifications_config"] = MaintNotificationsConfig(enabled=False)


def redis_kwargs(ep: Endpoint, cfg: RedisConfig, *, timeout: float | None = None) -> dict[str, Any]:
    """``redis.Redis(**kwargs)`` for the endpoint: its address (none for a sentinel's
    master), credentials, database and TLS trust; ``socket_timeout`` ``timeout`` (default
    ``socket_timeout_s``), ``socket_connect_timeout`` ``connect_timeout_s``; no retries, none
    of the extra round trips of :data:`_QUIET`."""
    kw: dict[str, Any] = {
        "username": ep.username,
        "password": ep.password,
        "db": ep.db,
        "socket_timeout": cfg.socket_timeout_s if timeout is None else timeout,
        "socket_connect_timeout": cfg.connect_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        **_QUIET,
    }
    if ep.unix_path:
        kw["unix_socket_path"] = ep.unix_path
    elif not ep.sentinels:
        kw["host"], kw["port"] = ep.host, ep.port
    if ep.tls:
        kw.update(
            ssl=True,
            ssl_ca_certs=cfg.tls_ca_file,
            ssl_certfile=cfg.tls_cert_file,
            ssl_keyfile=cfg.tls_key_file,
            ssl_cert_reqs="required",
            ssl_check_hostname=True,
        )
    return kw


def sentinel(ep: Endpoint, cfg: RedisConfig, timeout: float | None = None) -> Sentinel:
    """redis-py's ``Sentinel`` over ``ep.sentinels``: the sentinels are asked with their own
    credentials; the clients it makes for the master get the master's."""
    t = cfg.socket_timeout_s if timeout is None else timeout
    own = {
        "username": ep.sentinel_username,
        "password": ep.sentinel_password,
        "socket_timeout": t,
        "socket_connect_timeout": cfg.connect_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        **_QUIET,
    }
    return Sentinel(list(ep.sentinels), sentinel_kwargs=own, **redis_kwargs(ep, cfg, timeout=timeout))  # type: ignore[no-untyped-call]


#: ``ConnectionPool.get_connection`` takes no arguments from redis-py 5.1 on (a command
#: name before, required).
_GET_CONNECTION_ARGS: tuple[str, ...] = (
    ()
    if inspect.signature(redis.ConnectionPool.get_connection).parameters["command_name"].default
    is not inspect.Parameter.empty
    else ("PING",)
)


def run_commands(client: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``commands`` on one of ``client``'s connections, sent in one write (redis-py
    encodes them), and return every reply in order; an error reply (``MOVED``, ``NOPERM``)
    is returned as its ``ResponseError`` in its place. A pipeline would do the same with a
    write per 6 KB of commands and a Python call chain per reply: twice the time of a
    128-key query here. Any other failure disconnects the connection and raises."""
    pool = client.connection_pool
    conn = pool.get_connection(*_GET_CONNECTION_ARGS)
    try:
        conn.send_packed_command([b"".join(conn.pack_commands(commands))])
        out: list[Any] = []
        for _ in commands:
            try:
                out.append(conn.read_response())
            except rex.ResponseError as e:
                out.append(e)
        return out
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def _text(e: BaseException) -> str:
    """What went wrong, in a few words: an ``OSError``'s own (``connection refused``),
    also when redis-py wrapped it in its ``ConnectionError``."""
    cause = e.__cause__ or e.__context__
    if not isinstance(e, OSError) and isinstance(cause, OSError):
        e = cause
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    return str(e) or type(e).__name__


def transport_error(e: BaseException, what: str, where: str) -> TransportError:
    """The :class:`TransportError` for ``e`` (raised by ``what``, talking to ``where``).
    Reasons: ``auth``, ``permission``, ``tls``, ``timeout``, ``connection``, ``server``,
    ``cluster``, ``protocol``; a :class:`TransportError` is returned as it is."""
    if isinstance(e, TransportError):
        return e
    at = f" ({where})" if where else ""
    if isinstance(e, DialError):
        reason = "tls" if e.reason == "tls_verify" else e.reason
        return TransportError(f"redis {what}: {e}", reason=reason)
    if isinstance(e, rex.AuthenticationError):
        return TransportError(f"redis {what}: credentials refused{at}: {e}", reason="auth")
    if isinstance(e, (ssl.SSLError, ssl.CertificateError)):
        return TransportError(f"redis {what}: TLS failed{at}: {_text(e)}", reason="tls")
    if isinstance(e, (TimeoutError, rex.TimeoutError)):
        return TransportError(f"redis {what}: timed out{at}", reason="timeout")
    if isinstance(e, ProtocolError):
        return TransportError(f"redis {what}: {e}{at}", reason="protocol")
    if isinstance(e, (rex.ClusterError, rex.RedisClusterException, rex.TryAgainError)):
        return TransportError(f"redis {what}: {e}{at}", reason="cluster")
    if isinstance(e, (OSError, rex.ConnectionError, MasterNotFoundError)):
        return TransportError(f"redis {what}: {_text(e)}: {where}", reason="connection")
    if isinstance(e, (ReplyError, rex.ResponseError)):
        msg = str(e)
        reason = (
            "permission" if msg.startswith("NOPERM") or isinstance(e, rex.NoPermissionError) else "server"
        )
        return TransportError(f"redis {what}: the server refused it{at}: {msg}", reason=reason)
    return TransportError(f"redis {what}: {type(e).__name__}: {e}{at}", reason="io")


def closing(client: Any) -> None:
    """Close a redis-py client, ignoring errors (it may be half set up)."""
    try:
        client.close()
    except Exception:  # closing never fails the caller
        pass
