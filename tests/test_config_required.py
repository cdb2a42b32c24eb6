"""Required config fields (no default) in a backend's ``BackendConfig`` subclass."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hicache_sdk import BackendConfig, ConfigError


@dataclass(frozen=True)
class _UrlConfig(BackendConfig):
    env_prefix = "URLTEST"
    url: str
    pool_size: int = 4


def test_required_field_is_accepted_and_read() -> None:
    cfg = _UrlConfig.from_mapping({"url": "redis://127.0.0.1:1/0"}, environ={})
    assert cfg.url == "redis://127.0.0.1:1/0" and cfg.pool_size == 4 and cfg.key_scheme == "default"
    assert _UrlConfig.from_mapping({}, environ={"HICACHE_URLTEST_URL": "x"}).url == "x"


def test_missing_required_field_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"_UrlConfig: missing required config key\(s\) 'url'") as e:
        _UrlConfig.from_mapping({"pool_size": 2}, environ={})
    assert "HICACHE_URLTEST_URL" in str(e.value)


def test_unknown_key_message_is_unchanged() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key\(s\) 'ulr' \(did you mean 'url'\?\)"):
        _UrlConfig.from_mapping({"url": "x", "ulr": "y"}, environ={})
