"""Deprecated: moved to :mod:`hicache_sdk.hiradix.counters` in hicache-sdk 0.2.0 (one warning, then this name is
that module)."""

from hicache_sdk._compat import alias

alias(__name__, "hicache_sdk.hiradix.counters")
