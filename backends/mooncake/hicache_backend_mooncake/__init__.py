"""Mooncake Store backend for hicache-sdk (SGLang MooncakeStore compatible).

Needs the ``mooncake`` module: ``pip install 'hicache-backend-mooncake[cpu]'`` (plus Debian's
``libibverbs1``) or ``[cuda]``. Without it, importing :class:`MooncakeStorage` raises
``ImportError`` naming that command, and ``hicache backends`` lists the backend unavailable.
"""

from .config import MooncakeConfig, parse_size
from .mooncake_transport import MooncakeTransport
from .storage import MooncakeStorage

__all__ = ["MooncakeConfig", "MooncakeStorage", "MooncakeTransport", "parse_size"]
