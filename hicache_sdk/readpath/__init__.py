"""Deprecated: this package moved to :mod:`hicache_sdk.hiradix` in hicache-sdk 0.2.0 (one warning, then
every name is ``hicache_sdk.hiradix``'s; each submodule has a stub of its own)."""

from hicache_sdk._compat import forward

__getattr__ = forward(__name__, "hicache_sdk.hiradix")
