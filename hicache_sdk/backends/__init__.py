"""Backends shipped in core. ``memory`` (:mod:`hicache_sdk.backends.memory`) is the
in-process reference backend; it is registered through the ``hicache_sdk.backends`` entry
point like any other backend and imported only when asked for."""
