"""``RedisConfig``: the settings of the ``redis`` backend, and the parsed endpoint.

Environment overrides are ``HICACHE_REDIS_<FIELD>`` (``HICACHE_REDIS_PASSWORD`` ...).
Credentials may come from the URL (``redis://user:pass@host``, or ``?password=`` /
``?username=`` as redis-py reads them) or from the ``username`` / ``password`` fields
(which win); either way they are secret: :func:`redact_url` is the only form of a URL that
ever appears in a repr, a log line or an error.

``redis://``, ``rediss://`` and ``unix://`` URLs are parsed by redis-py
(``redis.connection.parse_url``), so they mean what they mean to redis-py;
``redis+sentinel://`` (which redis-py has no URL form for) is parsed here.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import unquote, urlsplit

from redis.connection import parse_url

from hicache_sdk import BackendConfig, ConfigError, secret_field
from hicache_sdk.config import setting

__all__ = ["Endpoint", "RedisConfig", "parse_endpoint", "redact_url", "tls_context"]

_CRED = re.compile(r"^([a-z0-9+.-]+://)[^@/]*@", re.IGNORECASE)
#: URL query keys honoured (as redis-py reads them); the others name the setting to use.
_QUERY_KEYS = ("db", "username", "password")
_QUERY_HINTS = {
    "socket_timeout": "socket_timeout_s",
    "socket_connect_timeout": "connect_timeout_s",
    "timeout": "socket_timeout_s",
    "max_connections": "pool_size",
    "ssl_ca_certs": "tls_ca_file",
    "ssl_certfile": "tls_cert_file",
    "ssl_keyfile": "tls_key_file",
}


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` part replaced by ``***@``; query strings
    (which may carry ``password=``) are dropped."""
    return _CRED.sub(r"\1***@", url.split("?", 1)[0])


@dataclass(frozen=True)
class RedisConfig(BackendConfig):
    """Settings of the ``redis`` backend (environment prefix ``HICACHE_REDIS_``).

    * ``url``: ``redis://[user:pass@]host:port/db``, ``rediss://`` (TLS),
      ``unix:///path.sock?db=N`` or ``redis+sentinel://h1:p1[,h2:p2]/service[/db]``; the
      query keys ``db``, ``username`` and ``password`` are honoured as redis-py does.
    * ``username`` / ``password``: ACL credentials (secret; override the URL's).
    * ``sentinel_username`` / ``sentinel_password``: credentials of the sentinels
      themselves (``redis+sentinel://`` only; secret), separate from the master's.
    * ``db``: database number (``-1``: the URL's, else 0).
    * ``key_prefix``: prepended to every key; empty or ending with ``:``, so that one
      prefix never holds another's keys (``p:`` and ``p2:``). Give a restricted ACL user
      ``~<key_prefix>*``.
    * ``connect_timeout_s``: bounds every connect, a wait for a free connection, and the
      checks at construction.
    * ``socket_timeout_s``: bounds every wait for reply bytes.
    * ``pool_size``: the most data connections held per server (callers beyond it wait, at
      most ``connect_timeout_s``).
    * ``parallel_connections``: a read or write batch of at least 4 MiB is split into up to
      this many parts of at least 2 MiB, each on its own pooled connection, run
      concurrently (extra connections are used only when free at once).
    * ``write_window``: how many writes of values of at least 32 KiB each connection has in
      flight (``SETNX``, value last, when there is no TTL); ``0``: all of a part pipelined
      at once. ``1`` (the default) is fastest against a Redis on the same host: a pipelined
      big value is copied once more inside Redis. Over a network with a long round trip,
      ``0`` may be faster.
    * ``ttl_s``: expiry of written pages in seconds (``0``: none).
    * ``recv_buffer_bytes``: ``SO_RCVBUF`` of each TCP data connection (``0``: the kernel's
      autotuning). Set only where ``net.core.rmem_max`` allows that much; below it the
      kernel's autotuning is kept (logged once). Against a Redis on the same host a fixed
      buffer made batch reads of 256 KiB values faster and steadier than autotuned ones.
    * ``max_command_bytes``: the most value bytes one ``MGET`` may return; larger batches
      are split into several commands, all pipelined in one round trip. A single page larger
      than this still goes in a command of its own.
    * ``tls_ca_file``: the CA that signed the server's certificate (``rediss://`` needs it).
    * ``tls_cert_file`` / ``tls_key_file``: a client certificate, when the server asks for
      one (both or neither).
    * ``cluster``: the URL names a node of a Redis Cluster. Every setting above applies to
      each master as to a standalone server (``pool_size`` per master; a batch's masters
      share ``parallel_connections``, each at least one); the URL must be ``redis://`` or
      ``rediss://`` with database 0.
    * ``startup_nodes``: more cluster nodes (``"host:port"``) to learn the topology from
      (a JSON list, or comma-separated in the environment); only with ``cluster``.
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
    """Where and how to connect: what redis-py made of the URL, with this config's
    overrides (secrets excluded from the repr)."""

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

    @property
    def address(self) -> str:
        """``host:port`` or the socket path (no secret)."""
        return self.unix_path or f"{self.host}:{self.port}"

    def __repr__(self) -> str:
        where = f"sentinel {self.service}" if self.sentinels else self.address
        return f"Endpoint({'tls ' if self.tls else ''}{where} db={self.db})"


def parse_endpoint(cfg: RedisConfig) -> Endpoint:
    """Validate the URL, the key prefix and the TLS settings; raises :class:`ConfigError`
    naming the key. Never connects."""
    if cfg.key_prefix and not cfg.key_prefix.endswith(":"):
        raise ConfigError(
            f"key_prefix: must be empty or end with ':' (got {cfg.key_prefix!r}), so that no "
            f"other prefix's keys start with it (as 'p2...' starts with 'p'); e.g. {cfg.key_prefix + ':'!r}"
        )
    shown = redact_url(cfg.url)
    if cfg.url.lower().startswith("redis+sentinel://"):
        return _sentinel_endpoint(cfg, shown)
    if cfg.sentinel_password is not None or cfg.sentinel_username is not None:
        raise ConfigError(
            f"sentinel_username / sentinel_password are set but url {shown!r} is not redis+sentinel://"
        )
    scheme = cfg.url.split("://", 1)[0].lower() if "://" in cfg.url else ""
    if scheme not in ("redis", "rediss", "unix"):
        raise ConfigError(
            f"url: scheme must be redis://, rediss://, unix:// or redis+sentinel://, got {shown!r}"
        )
    try:
        kw = parse_url(scheme + cfg.url[len(scheme) :])  # type: ignore[no-untyped-call]
        path = urlsplit(cfg.url).path
    except ValueError:
        raise ConfigError(f"url: cannot parse {shown!r}") from None
    for key in kw:
        if key not in ("host", "port", "path", "connection_class", *_QUERY_KEYS):
            hint = _QUERY_HINTS.get(key)
            instead = f"set {hint!r} instead" if hint else f"the URL query may set {', '.join(_QUERY_KEYS)}"
            raise ConfigError(f"url: query parameter {key!r} is not supported here ({instead})")
    if scheme == "unix":
        if not kw.get("path"):
            raise ConfigError(f"url: a unix:// URL needs a socket path, got {shown!r}")
    else:
        if not kw.get("host"):
            raise ConfigError(f"url: no host in {shown!r}")
        if path.strip("/") and "db" not in kw:
            raise ConfigError(f"url: database must be a number, got {shown!r}")
    try:
        db = int(kw.get("db", 0))
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
        host=str(kw.get("host", "")),
        port=int(kw.get("port", 6379)),
        unix_path=str(kw["path"]) if scheme == "unix" else None,
        tls=tls,
        db=db,
        username=cfg.username if cfg.username is not None else kw.get("username"),
        password=cfg.password if cfg.password is not None else kw.get("password"),
    )


def _sentinel_endpoint(cfg: RedisConfig, shown: str) -> Endpoint:
    """``redis+sentinel://[user:pass@]h1:p1[,h2:p2...]/service[/db]``: the URL's credentials
    are the master's; the sentinels' own are ``sentinel_username`` / ``sentinel_password``
    (none: sentinels are asked without authentication)."""
    rest = cfg.url.split("://", 1)[1]
    if "?" in rest:
        raise ConfigError("url: a redis+sentinel:// URL takes no query (set password, db ... as settings)")
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


def tls_context(cfg: RedisConfig) -> ssl.SSLContext:
    """The data connections' TLS context: the server verified against ``tls_ca_file``,
    hostname included (as redis-py's own connections are told to). A file that cannot be
    loaded is a :class:`ConfigError` naming it."""
    try:
        ctx = ssl.create_default_context(cafile=cfg.tls_ca_file)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"tls_ca_file: cannot load it ({type(e).__name__})") from None
    if cfg.tls_cert_file and cfg.tls_key_file:
        try:
            ctx.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(
                f"tls_cert_file / tls_key_file: cannot load them ({type(e).__name__})"
            ) from None
    return ctx
