"""``RedisConfig``: the settings of the ``redis`` backend, and the parsed endpoint.

Environment overrides are ``HICACHE_REDIS_<FIELD>`` (``HICACHE_REDIS_PASSWORD`` ...).
Credentials may come from the URL (``redis://user:pass@host``) or from the ``username`` /
``password`` fields (which win); either way they are secret: :func:`redact_url` is the only
form of a URL that ever appears in a repr, a log line or an error.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

from hicache_sdk import BackendConfig, ConfigError, secret_field
from hicache_sdk.config import setting

__all__ = ["Endpoint", "RedisConfig", "parse_endpoint", "redact_url"]

_CRED = re.compile(r"^([a-z0-9+.-]+://)[^@/]*@", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` part replaced by ``***@``; query strings
    (which may carry ``password=``) are dropped."""
    return _CRED.sub(r"\1***@", url.split("?", 1)[0])


@dataclass(frozen=True)
class RedisConfig(BackendConfig):
    """Settings of the ``redis`` backend (environment prefix ``HICACHE_REDIS_``).

    * ``url``: ``redis://host:port/db``, ``rediss://`` (TLS) or ``unix:///path.sock``.
    * ``username`` / ``password``: ACL credentials (secret; override the URL's).
    * ``sentinel_username`` / ``sentinel_password``: credentials of the sentinels
      themselves (``redis+sentinel://`` only; secret), separate from the master's.
    * ``db``: database number (``-1``: the URL's, else 0).
    * ``key_prefix``: prepended to every object name (a restricted ACL user's ``~prefix*``).
    * ``connect_timeout_s`` / ``socket_timeout_s``: per-connect and per-reply bounds.
    * ``pool_size``: the most connections held (callers beyond it wait, bounded).
    * ``parallel_connections``: a read or write batch of at least 4 MiB is split into up to
      this many parts of at least 2 MiB, each on its own pooled connection, run
      concurrently (extra connections are used only when free at once).
    * ``write_window``: how many writes of values of at least 32 KiB each connection has in
      flight (``SETNX``, value last, when there is no TTL); ``0``: all of a part pipelined
      at once. ``1`` (the default) is fastest against a Redis on the same host: a pipelined
      big value is copied once more inside Redis (see ``docs/backends/redis.md``). Over a
      network with a long round trip, ``0`` may be faster.
    * ``ttl_s``: expiry of written pages in seconds (``0``: none).
    * ``recv_buffer_bytes``: ``SO_RCVBUF`` of each TCP data connection (``0``: the kernel's
      autotuning). Set only where ``net.core.rmem_max`` allows that much; below it the
      kernel's autotuning is kept (logged once). Against a Redis on the same host a fixed
      buffer made batch reads of 256 KiB values about 15 % faster on average, and steadier,
      than autotuned ones (``docs/backends/redis.md``, Performance).
    * ``max_command_bytes``: the most value bytes one ``MGET`` may return; larger batches
      are split into several commands, all pipelined in one round trip. A single page larger
      than this still goes in a command of its own.
    * ``tls_ca_file`` / ``tls_cert_file`` / ``tls_key_file``: TLS trust and client
      certificate (``rediss://`` needs ``tls_ca_file``).
    * ``cluster``: the URL names a Redis Cluster node; ``startup_nodes`` (``"host:port"``)
      are more nodes to learn the topology from.
    """

    env_prefix: ClassVar[str] = "redis"

    url: str = "redis://127.0.0.1:6379/0"
    username: str | None = secret_field(None)
    password: str | None = secret_field(None)
    sentinel_username: str | None = secret_field(None)
    sentinel_password: str | None = secret_field(None)
    db: int = setting(-1, ge=0, le=1 << 20, allow=(-1,))
    key_prefix: str = "hicache:"
    connect_timeout_s: float = setting(2.0, gt=0, le=3600, unit="seconds")
    socket_timeout_s: float = setting(5.0, gt=0, le=3600, unit="seconds")
    pool_size: int = setting(8, ge=1, le=4096)
    parallel_connections: int = setting(4, ge=1, le=256)
    write_window: int = setting(1, ge=0, le=1 << 20)
    ttl_s: int = setting(0, ge=0, le=1 << 40, unit="seconds")
    recv_buffer_bytes: int = setting(4 << 20, ge=0, le=1 << 30, unit="bytes")
    max_command_bytes: int = setting(64 << 20, ge=1 << 16, le=1 << 40, unit="bytes")
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    cluster: bool = False
    startup_nodes: tuple[str, ...] = ()

    def redacted(self) -> dict[str, Any]:
        """Secrets as ``"***"`` and the URL without its credentials."""
        out = super().redacted()
        out["url"] = redact_url(self.url)
        return out

    def __repr__(self) -> str:
        return f"RedisConfig(url={redact_url(self.url)!r}, key_prefix={self.key_prefix!r}, db={self.db})"


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect (secrets excluded from the repr)."""

    host: str
    port: int
    unix_path: str | None
    tls: bool
    db: int
    username: str | None
    password: str | None
    #: ``redis+sentinel://``: the sentinels to ask for the master of ``service``.
    sentinels: tuple[tuple[str, int], ...] = ()
    service: str = ""
    #: Credentials for the sentinels (not the master's).
    sentinel_username: str | None = None
    sentinel_password: str | None = None

    def __repr__(self) -> str:
        where = self.unix_path or (
            f"sentinel {self.service}" if self.sentinels else f"{self.host}:{self.port}"
        )
        return f"Endpoint({'tls ' if self.tls else ''}{where} db={self.db})"


def parse_endpoint(cfg: RedisConfig) -> Endpoint:
    """Validate the URL and the TLS settings; raises :class:`ConfigError` naming the key.
    Never connects."""
    shown = redact_url(cfg.url)
    if cfg.url.lower().startswith("redis+sentinel://"):
        return _sentinel_endpoint(cfg, shown)
    if cfg.sentinel_password is not None or cfg.sentinel_username is not None:
        raise ConfigError(
            f"sentinel_username / sentinel_password are set but url {shown!r} is not redis+sentinel://"
        )
    try:
        parts = urlsplit(cfg.url)
        port = parts.port
    except ValueError as e:
        raise ConfigError(f"url: cannot parse {shown!r} ({e})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"url: scheme must be redis://, rediss://, unix:// or redis+sentinel://, got {shown!r}"
        )
    user = unquote(parts.username) if parts.username else None
    pw = unquote(parts.password) if parts.password else None
    db = 0
    path = parts.path or ""
    if scheme == "unix":
        if not path:
            raise ConfigError(f"url: a unix:// URL needs a socket path, got {shown!r}")
        m = re.search(r"(?:^|&)db=(\d+)", parts.query)
        db = int(m.group(1)) if m else 0
    else:
        if not parts.hostname:
            raise ConfigError(f"url: no host in {shown!r}")
        if path.strip("/"):
            try:
                db = int(path.strip("/"))
            except ValueError:
                raise ConfigError(f"url: database must be a number, got {shown!r}") from None
    if cfg.db >= 0:
        db = cfg.db
    tls = scheme == "rediss"
    if tls and not cfg.tls_ca_file:
        raise ConfigError(
            "tls_ca_file: a rediss:// (TLS) url needs tls_ca_file (the CA that signed the server)"
        )
    if not tls and cfg.tls_ca_file:
        raise ConfigError(f"tls_ca_file is set but url {shown!r} is not rediss://")
    if bool(cfg.tls_cert_file) != bool(cfg.tls_key_file):
        raise ConfigError("tls_cert_file and tls_key_file must be given together")
    return Endpoint(
        host=parts.hostname or "",
        port=port or 6379,
        unix_path=path if scheme == "unix" else None,
        tls=tls,
        db=db,
        username=cfg.username if cfg.username is not None else user,
        password=cfg.password if cfg.password is not None else pw,
    )


def _sentinel_endpoint(cfg: RedisConfig, shown: str) -> Endpoint:
    """``redis+sentinel://[user:pass@]h1:p1[,h2:p2...]/service[/db]``: the URL's credentials
    are the master's; the sentinels' own are ``sentinel_username`` / ``sentinel_password``
    (none: sentinels are asked without authentication)."""
    rest = cfg.url.split("://", 1)[1].split("?", 1)[0]
    netloc, _, path = rest.partition("/")
    user = pw = None
    if "@" in netloc:
        cred, _, netloc = netloc.rpartition("@")
        u, _, p = cred.partition(":")
        user, pw = (unquote(u) or None), (unquote(p) or None)
    sentinels: list[tuple[str, int]] = []
    for hp in netloc.split(","):
        host, _, port = hp.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"url: sentinel addresses must be host:port, got {shown!r}")
        sentinels.append((host, int(port)))
    parts = [x for x in path.split("/") if x]
    if not parts or len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise ConfigError(f"url: expected redis+sentinel://host:port[,...]/service[/db], got {shown!r}")
    if cfg.tls_ca_file:
        raise ConfigError("tls_ca_file: TLS through sentinel is not supported")
    db = int(parts[1]) if len(parts) == 2 else 0
    return Endpoint(
        host=sentinels[0][0],
        port=0,
        unix_path=None,
        tls=False,
        db=cfg.db if cfg.db >= 0 else db,
        username=cfg.username if cfg.username is not None else user,
        password=cfg.password if cfg.password is not None else pw,
        sentinels=tuple(sentinels),
        service=parts[0],
        sentinel_username=cfg.sentinel_username,
        sentinel_password=cfg.sentinel_password,
    )
