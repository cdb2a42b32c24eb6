"""``RedisStorage``: the ``redis`` backend, the paged adapter over :class:`RedisTransport`.

Construction follows SGLang's dynamic loader: ``RedisStorage(storage_config, kwargs)`` with
the settings (:class:`RedisConfig`) in ``storage_config.extra_config``. A bad URL, wrong
credentials, TLS without a CA or an ACL user without rights on the key prefix fail here
with a :class:`~hicache_sdk.ConfigError` naming the key; an unreachable server does not
(the breaker starts open and closes when the server answers).
"""

from __future__ import annotations

from typing import Any, ClassVar

from hicache_sdk import BackendConfig, PagedStorage, Transport

from .config import RedisConfig
from .redis_transport import RedisTransport

__all__ = ["RedisStorage"]


class RedisStorage(PagedStorage):
    """Pages as Redis string values (one value per page under the default key scheme)."""

    config_cls: ClassVar[type[BackendConfig]] = RedisConfig
    transport_cls = RedisTransport  # capabilities derive from it (the cluster transport declares the same)
    backend_name: ClassVar[str] = "redis"

    @classmethod
    def accelerators(cls) -> dict[str, bool]:
        """The optional compiled reader and writer of page bytes, and whether it is built."""
        from .native import NATIVE

        return {"hicache_backend_redis._bulkread": NATIVE}

    def create_transport(self, config: Any) -> Transport:
        if config.cluster:
            from .cluster_transport import RedisClusterTransport

            return RedisClusterTransport(config)
        return RedisTransport(config)
