"""What construction checks: misconfiguration fails loudly, an unreachable server does not.

Each check is bounded by ``connect_timeout_s``. In order:

1. the sentinels' own credentials (``redis+sentinel://``), asked with redis-py;
2. one data connection (:func:`.pool.dial`): the TLS handshake and trust, ``AUTH`` and
   ``SELECT``. It stays in the pool;
3. redis-py asks what the rights of the user are on ``key_prefix`` (a ``STRLEN`` of a key
   under it), and on a cluster for ``CLUSTER SLOTS``. Without ``cluster``, a node of a
   Redis Cluster is recognised (``MOVED``, or ``cluster_enabled:1`` in ``INFO cluster``).

Refused credentials, an untrusted certificate, a TLS URL for a server that speaks plain
RESP, missing rights or a cluster node used as a single server raise :class:`ConfigError`
naming the setting; a server that does not answer is logged and left to the breaker.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from typing import Any

import redis
import redis.exceptions as rex

from hicache_sdk import ConfigError

from .client import closing, redis_kwargs
from .config import Endpoint, RedisConfig, redact_url
from .pool import Address, DialError, Pool, where

__all__ = ["check_data_connection", "check_rights", "check_sentinels"]

log = logging.getLogger(__name__)

#: The key whose read tells whether the user may read under ``key_prefix``.
PROBE_KEY = b"__hicache_probe__"


def _unreachable(cfg: RedisConfig, why: str) -> None:
    log.warning(
        "redis at %s unreachable at construction (%s); starting with the breaker open",
        redact_url(cfg.url),
        why,
    )


def check_sentinels(sentinel: Any, ep: Endpoint, cfg: RedisConfig) -> None:
    """Ask each sentinel for the master of ``ep.service`` until one answers. None answered
    and one refused the sentinel credentials (or wanted some): :class:`ConfigError`."""
    key = "sentinel_username / sentinel_password" if ep.sentinel_username else "sentinel_password"
    refused: str | None = None
    for client in sentinel.sentinels:
        try:
            client.sentinel_get_master_addr_by_name(ep.service)
            return
        except (rex.AuthenticationError, rex.NoPermissionError) as e:
            # e.g. "WRONGPASS invalid username-password pair ..." (names no secret)
            refused = str(e)
        except rex.ResponseError as e:
            if str(e).startswith(("NOAUTH", "NOPERM", "WRONGPASS")):
                refused = str(e)
        except (rex.ConnectionError, rex.TimeoutError, OSError):
            continue
    if refused is not None:
        raise ConfigError(f"{key}: the sentinels refused them ({refused})")


def check_data_connection(pool: Pool, cfg: RedisConfig) -> bool:
    """Open one data connection (kept in ``pool``); False when the server is unreachable."""
    try:
        with pool.connection():
            return True
    except DialError as e:
        if e.key == "tls_ca_file":
            raise ConfigError(f"tls_ca_file: {e}") from None
        if e.reason == "auth":
            raise ConfigError(f"{e.key}: {e}") from None
        if e.reason == "tls":
            address = pool.resolve()
            if _speaks_plain_resp(address, cfg.connect_timeout_s):
                raise ConfigError(
                    f"url: {e}: the server at {where(address)} answers plain RESP; it does not speak "
                    "TLS on this port (use redis://, or the server's tls-port)"
                ) from None
        _unreachable(cfg, str(e))
    except (OSError, rex.RedisError) as e:  # no master known to any sentinel
        _unreachable(cfg, f"{type(e).__name__}: {e}")
    return False


def _speaks_plain_resp(address: Address, timeout: float) -> bool:
    """Whether the server at ``address`` answers an inline ``PING`` in plain text (a RESP
    reply line: ``+PONG``, ``-NOAUTH ...``)."""
    try:
        family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
        with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as s:
            s.settimeout(timeout)
            s.connect(address)
            s.sendall(b"PING\r\n")
            return s.recv(64)[:1] in (b"+", b"-")
    except OSError:
        return False


def check_rights(
    ep: Endpoint, cfg: RedisConfig, prefix: bytes, *, node: Any = None, cluster: bool = False
) -> None:
    """redis-py reads a key under ``prefix`` (and, on a cluster, the slot map) on ``node``
    (a ``redis.Redis``; default: one made for the endpoint, closed after).

    On a cluster node a ``MOVED`` / ``ASK`` answer passes: Redis checks ACL rights before
    redirecting."""
    client = node if node is not None else redis.Redis(**redis_kwargs(ep, cfg, timeout=cfg.connect_timeout_s))
    shown = redact_url(cfg.url)
    try:
        pipe = client.pipeline(transaction=False)
        pipe.strlen(prefix + PROBE_KEY)
        if cluster:
            pipe.execute_command("CLUSTER SLOTS")
        else:
            pipe.execute_command("INFO", "cluster")
        got = pipe.execute(raise_on_error=False)
    except rex.AuthenticationError as e:
        if ep.password is None:  # NOAUTH (however redis-py words it)
            raise ConfigError(f"password: the server at {shown} requires one and none was given") from None
        key = "username / password" if ep.username else "password"
        raise ConfigError(f"{key}: the server at {shown} refused them ({e})") from None
    except (rex.ConnectionError, rex.TimeoutError, OSError) as e:
        _unreachable(cfg, f"{type(e).__name__}: {e}")
        return
    finally:
        if node is None:
            closing(client)
    read, second = got[0], got[1]
    # a redirect (redis-py 5 raises MovedError from its cluster parser only)
    moved = isinstance(read, rex.AskError) or (
        isinstance(read, rex.ResponseError) and str(read).startswith(("MOVED ", "ASK "))
    )
    if moved and not cluster:
        raise ConfigError(f"cluster: the server at {shown} is a node of a Redis Cluster; set cluster: true")
    if isinstance(read, rex.NoPermissionError):
        raise ConfigError(
            f"username: this ACL user may not read keys under key_prefix {cfg.key_prefix!r} ({read})"
        )
    if isinstance(read, rex.ResponseError) and not moved:
        raise ConfigError(f"url: the server at {shown} refused a read ({read})")
    if cluster and isinstance(second, rex.NoPermissionError):
        raise ConfigError(f"username: this ACL user may not run CLUSTER SLOTS ({second})")
    if cluster and isinstance(second, rex.ResponseError):
        raise ConfigError(f"cluster: the server at {shown} is not a cluster node ({second})")
    if not cluster and isinstance(second, dict) and int(second.get("cluster_enabled", 0)):
        raise ConfigError(f"cluster: the server at {shown} is a node of a Redis Cluster; set cluster: true")
