"""Typed backend settings: :class:`BackendConfig`, :func:`setting`, :func:`secret_field`,
:func:`parse_config_arg` (:mod:`.settings`), value coercion (:mod:`.values`), sizes and
durations (:mod:`.units`) and SGLang's ``HiCacheStorageConfig`` (:mod:`.storage`)."""

from __future__ import annotations

from .settings import LOADER_KEYS, BackendConfig, parse_config_arg, secret_field, setting
from .storage import HiCacheStorageConfig
from .units import describe_value, parse_duration, parse_size

__all__ = [
    "LOADER_KEYS",
    "BackendConfig",
    "HiCacheStorageConfig",
    "describe_value",
    "parse_config_arg",
    "parse_duration",
    "parse_size",
    "secret_field",
    "setting",
]
