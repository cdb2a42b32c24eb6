"""Conversion of one config value (from JSON or an environment string) to its field's type.

Errors are :class:`~hicache_sdk.errors.ConfigError` naming the key and the expected type; a
string value is described by its length only (:func:`~hicache_sdk.config.units.describe_value`),
since a secret pasted into the wrong key must not be printed.
"""

from __future__ import annotations

import json
import types
from typing import Any, Union, get_args, get_origin

from ..errors import ConfigError
from .units import describe_value, parse_duration, parse_size

__all__ = ["coerce"]


def coerce(name: str, tp: Any, value: Any, unit: str | None = None) -> Any:
    """Convert ``value`` (from JSON or an env string) to the annotated type ``tp``.

    ``unit`` (``"bytes"`` or ``"seconds"``) accepts human forms (``"4gb"``, ``"250ms"``).
    """
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        is_null = value is None or (isinstance(value, str) and value.lower() in ("none", "null"))
        if is_null and type(None) in get_args(tp):
            return None
        last: Exception | None = None
        for a in args:
            try:
                return coerce(name, a, value, unit)
            except ConfigError as e:
                last = e
        raise last or ConfigError(f"{name}: cannot convert {describe_value(value)}")
    if tp is Any:
        return value
    if unit == "bytes" and tp is int:
        return parse_size(value, name)
    if unit == "seconds" and tp is float:
        return parse_duration(value, name)
    if tp is bool:
        return _bool(name, value)
    if tp is int:
        return _int(name, value)
    if tp is float:
        return _float(name, value)
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{name}: expected a string, got {describe_value(value)}")
    if origin in (tuple, list) or tp in (tuple, list):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}: expected a list, got {describe_value(value)}")
        item_types = get_args(tp)
        inner = item_types[0] if item_types else Any
        return tuple(coerce(name, inner, v) for v in value)
    if origin is dict or tp is dict:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(f"{name}: expected a JSON object, got {describe_value(value)}") from None
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected an object, got {describe_value(value)}")
        return dict(value)
    return value


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off", ""):
        return False
    raise ConfigError(f"{name}: expected a boolean, got {describe_value(value)}")


def _int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip(), 0)
        except ValueError:
            pass
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ConfigError(f"{name}: expected an integer, got {describe_value(value)}")


def _float(name: str, value: Any) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            pass
    raise ConfigError(f"{name}: expected a number, got {describe_value(value)}")
