"""Issue 8: every construction failure of every shipped backend is a ``HiCacheError``
subclass whose message names the key (or the cause), never a bare ValueError/TypeError/
OverflowError, and never echoes a secret."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

from hicache_sdk.errors import ConfigError, HiCacheError
from hicache_sdk.registry import resolve_backend
from hicache_sdk.spec import HiCacheStorageConfig

SECRET = "s3cr3t-do-not-print"

# Failures every backend shares (the one config parser).
COMMON: list[tuple[dict[str, Any], str]] = [
    ({"no_such_setting": 1}, "no_such_setting"),
    ({"exists_timeout_s": "nan"}, "exists_timeout_s"),
    ({"transfer_timeout_s": float("inf")}, "transfer_timeout_s"),
    ({"staging_bytes": -1}, "staging_bytes"),
    ({"breaker_failures": "many"}, "breaker_failures"),
    ({"key_scheme": "no-such-scheme"}, "key_scheme"),
    ({"exists_cache_ttl_s": -5}, "exists_cache_ttl_s"),
    ({"namespace": ["not", "a", "str"]}, "namespace"),
]

# Backend-specific failures: (extra_config, what the message must name).
SPECIFIC: dict[str, list[tuple[dict[str, Any], str]]] = {
    "memory": [({"capacity_bytes": "lots"}, "capacity_bytes")],
    "file": [
        ({"root": __file__}, "root"),  # a regular file, not a directory
        ({"max_bytes": "12 parsecs"}, "max_bytes"),
        ({"io_threads": 0}, "io_threads"),
    ],
    "redis": [
        ({"url": "ftp://127.0.0.1:1"}, "url"),
        ({"pool_size": 0}, "pool_size"),
        ({"url": f"redis://user:{SECRET}@127.0.0.1:1/zz"}, "url"),
    ],
    "s3": [({"bucket": ""}, "bucket"), ({"max_concurrency": 0}, "max_concurrency")],
    "mooncake": [
        ({"master_server_address": ""}, "master_server_address"),
        ({"global_segment_size": "4 quarts"}, "global_segment_size"),
    ],
}

BASE: dict[str, dict[str, Any]] = {
    "s3": {"bucket": "bucket-ok", "endpoint_url": "http://127.0.0.1:1"},
    "mooncake": {"master_server_address": "127.0.0.1:1", "protocol": "tcp"},
}


def _cases() -> list[Any]:
    out = []
    for name, specific in SPECIFIC.items():
        for cfg, key in [*COMMON, *specific]:
            out.append(pytest.param(name, cfg, key, id=f"{name}-{key}-{next(iter(cfg.values()))!s:.12}"))
    return out


@pytest.mark.parametrize(("name", "cfg", "key"), _cases())
def test_construction_failure_is_a_hicache_error_naming_the_key(
    name: str, cfg: dict[str, Any], key: str
) -> None:
    try:
        cls = resolve_backend(name)
    except HiCacheError as e:  # not installed here: that too is a HiCacheError
        pytest.skip(f"{name}: {e}")
    extra = {**BASE.get(name, {}), **cfg}
    if name == "file" and "root" not in cfg:
        extra["root"] = tempfile.mkdtemp()
    with pytest.raises(HiCacheError) as info:
        backend = cls(HiCacheStorageConfig(extra_config=extra), {})
        backend.close()
    msg = str(info.value)
    assert key in msg, msg
    assert SECRET not in msg and SECRET not in repr(info.value)
    assert isinstance(info.value, ConfigError), type(info.value)
