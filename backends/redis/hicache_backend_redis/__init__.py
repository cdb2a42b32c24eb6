"""hicache-backend-redis: the Redis L3 backend.

``RedisStorage`` (the ``redis`` entry point) is the paged adapter over
:class:`RedisTransport`; ``RedisConfig`` documents every setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import RedisConfig, redact_url
from .redis_transport import RedisTransport

if TYPE_CHECKING:
    from .storage import RedisStorage

__all__ = ["RedisConfig", "RedisStorage", "RedisTransport", "redact_url"]


def __getattr__(name: str) -> Any:
    # RedisStorage pulls in the paged adapter (and torch) only when asked for.
    if name == "RedisStorage":
        from .storage import RedisStorage

        return RedisStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
