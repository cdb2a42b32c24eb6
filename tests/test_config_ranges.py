"""Every numeric config field has a range, checked by the one config parser (issue 10, item 4),
and type errors never echo a string value (item 6)."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from hicache_sdk.config import BackendConfig
from hicache_sdk.config.units import parse_duration, parse_size
from hicache_sdk.errors import ConfigError, HiCacheError
from hicache_sdk.spec import HiCacheStorageConfig


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("exists_timeout_s", float("nan")),
        ("exists_timeout_s", "nan"),
        ("exists_timeout_s", "inf"),
        ("exists_timeout_s", 1e300),
        ("transfer_timeout_s", "nan"),
        ("transfer_timeout_s", -1),
        ("breaker_failures", 0),
        ("staging_bytes", -1),
        ("staging_bytes", 1 << 50),
        ("exists_cache_ttl_s", -2),
    ],
)
def test_out_of_range_names_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=key) as e:
        BackendConfig.from_mapping({key: value})
    assert isinstance(e.value, HiCacheError)


def test_direct_construction_is_checked_too() -> None:
    with pytest.raises(ConfigError, match="transfer_timeout_s"):
        BackendConfig(transfer_timeout_s=float("nan"))


def test_human_units() -> None:
    c = BackendConfig.from_mapping({"staging_bytes": "4gb", "transfer_timeout_s": "250ms"})
    assert c.staging_bytes == 4 << 30
    assert c.transfer_timeout_s == pytest.approx(0.25)
    assert BackendConfig.from_mapping({"exists_cache_ttl_s": -1}).exists_cache_ttl_s == -1
    assert parse_size("200M", "k") == 200_000_000
    assert parse_size("64Ki", "k") == 65536
    assert parse_duration("2m", "k") == 120.0


def test_type_error_never_echoes_a_string() -> None:
    secret = "s3cr3t-token-value"
    with pytest.raises(ConfigError) as e:
        BackendConfig.from_mapping({"breaker_failures": secret})
    assert secret not in str(e.value)
    assert "breaker_failures" in str(e.value)


def test_extra_config_repr_redacts_any_mapping() -> None:
    salt = "very-secret-salt"
    cfg = HiCacheStorageConfig(extra_config=MappingProxyType({"namespace_salt": salt}))
    assert salt not in repr(cfg)
    assert "namespace_salt" in repr(cfg)


def test_limits_print_with_units() -> None:
    """A byte limit reads as a size (``1 TiB``), a duration in seconds, a count in full."""
    with pytest.raises(ConfigError) as e:
        BackendConfig.from_mapping({"staging_bytes": 1 << 50})
    assert str(e.value) == "staging_bytes: must be >= 0 bytes and <= 1 TiB, got 1024 TiB"
    with pytest.raises(ConfigError) as e:
        BackendConfig.from_mapping({"transfer_timeout_s": 5000})
    assert str(e.value) == "transfer_timeout_s: must be >= 0 s and <= 3600 s, got 5000 s"
    with pytest.raises(ConfigError) as e:
        BackendConfig.from_mapping({"breaker_failures": 2_000_000})
    assert str(e.value) == "breaker_failures: must be >= 1 and <= 1000000, got 2000000"
    from hicache_sdk.config.units import format_size

    assert [format_size(n) for n in (8 << 20, 1536, 1, 0, 3 << 30)] == [
        "8 MiB",
        "1536 bytes",
        "1 byte",
        "0 bytes",
        "3 GiB",
    ]
