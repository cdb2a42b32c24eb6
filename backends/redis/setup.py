"""The optional compiled part of the Redis backend (everything else is in pyproject.toml).

``hicache_backend_redis._bulkread`` receives a part's streamed MGET replies straight into page
memory and sends a part's writes, with the GIL released once per run. It is optional: without
a compiler the build skips it and the transport uses its Python reader and writer (same
results, more interpreter time per value); ``hicache backends`` says which one is in use.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "hicache_backend_redis._bulkread",
            sources=["hicache_backend_redis/_bulkread.c", "hicache_backend_redis/_bulkread_wire.c"],
            depends=["hicache_backend_redis/_bulkread.h"],
            optional=True,
        )
    ]
)
