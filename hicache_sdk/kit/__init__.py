"""The transport kit: what every backend would otherwise rewrite (see ``docs/transport-kit.md``).

* :class:`FailureReasons` -- the sink behind ``Transport.count_failure`` (defined with the
  transport interface, :mod:`hicache_sdk.transport`);
* :mod:`.segments` -- ``(address, nbytes)`` lists: views, coalescing, bulk copies;
* :mod:`.fanout` -- :class:`FanOut`, a bounded thread fan-out of one batch;
* :mod:`.existence` -- :class:`CachedExistence`, the positive-lookup cache with explicit
  invalidation;
* :mod:`.negative` -- :class:`NegativeCache`, objects reported present whose read failed,
  answered absent for a short TTL;
* :mod:`.batches` -- :func:`first_occurrences` (a name given twice: the first copy wins);
* :mod:`.cancel` -- :class:`CancelToken`, for cancellable (zero-copy with deadlines) transports;
* :mod:`.aio` -- :class:`EventLoopThread`, an asyncio-only client library under the
  synchronous transport contract (one event loop thread per transport).

Size and duration parsing lives in the config (:func:`hicache_sdk.config.setting` with
``unit="bytes"`` / ``"seconds"``); capabilities are stated once through
``PagedStorage.transport_cls``.
"""

from __future__ import annotations

from ..transport import FailureReasons
from .aio import EventLoopThread
from .batches import first_occurrences
from .cancel import CancelToken
from .existence import CachedExistence
from .fanout import FanOut
from .negative import NegativeCache
from .segments import coalesce, copy_runs, gather, memoryviews, scatter, total_bytes

__all__ = [
    "CachedExistence",
    "CancelToken",
    "EventLoopThread",
    "FailureReasons",
    "FanOut",
    "NegativeCache",
    "coalesce",
    "first_occurrences",
    "copy_runs",
    "gather",
    "memoryviews",
    "scatter",
    "total_bytes",
]
