"""Typed backend configuration, settable from a mapping (JSON / ``extra_config``) and the
environment.

Every backend config is a frozen dataclass deriving from :class:`BackendConfig`. Fields
carry their documented defaults; ``metadata={"secret": True}`` hides a field's value in
``repr`` and in :meth:`BackendConfig.redacted`; ``metadata={"env": "NAME"}`` names an
extra environment variable read for that field (SGLang's own names, for instance).

Precedence, lowest first: field default < environment (``HICACHE_<PREFIX>_<FIELD>`` and the
field's own ``env`` names) < the mapping. Keys of SGLang's dynamic loader
(``backend_name``, ``module_path``, ``class_name``, ``interface_v1``) and of the SDK bridge
(``backend``, ``backend_config``) are ignored. Any other unknown key raises
:class:`~hicache_sdk.errors.ConfigError` naming it (with a close match when there is one).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, Union, get_args, get_origin

from .errors import ConfigError

__all__ = [
    "BackendConfig",
    "LOADER_KEYS",
    "parse_config_arg",
    "secret_field",
]

#: Keys SGLang's dynamic loader (and our bridge) put into ``extra_config``.
LOADER_KEYS = frozenset(
    {"backend_name", "module_path", "class_name", "interface_v1", "backend", "backend_config"}
)

C = TypeVar("C", bound="BackendConfig")


def secret_field(default: Any = None, **metadata: Any) -> Any:
    """A config field whose value never appears in reprs, logs or reports."""
    return field(default=default, repr=False, metadata={"secret": True, **metadata})


def parse_config_arg(value: str | None) -> dict[str, Any]:
    """Parse a CLI ``--config`` value: inline JSON, or ``@path`` to a .json/.toml/.yaml
    file (SGLang's extra-config convention). Empty or ``None`` gives ``{}``."""
    if not value:
        return {}
    if value.startswith("@"):
        path = value[1:]
        lower = path.lower()
        if lower.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        elif lower.endswith(".toml"):
            import tomllib

            with open(path, "rb") as f:
                data = tomllib.load(f)
        elif lower.endswith((".yaml", ".yml")):
            try:
                import yaml
            except ImportError as e:  # pragma: no cover - depends on environment
                raise ConfigError(f"{path}: reading YAML needs PyYAML: pip install pyyaml") from e
            with open(path, encoding="utf-8") as f:
                data = yaml.safe_load(f)
        else:
            raise ConfigError(f"config file {path!r}: unsupported extension (use .json, .toml or .yaml)")
    else:
        try:
            data = json.loads(value)
        except json.JSONDecodeError as e:
            raise ConfigError(f"--config is not valid JSON ({e.msg} at column {e.colno})") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config must be a JSON object, got {type(data).__name__}")
    return data


def _coerce(name: str, tp: Any, value: Any) -> Any:
    """Convert ``value`` (from JSON or an env string) to the annotated type ``tp``."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        is_null = value is None or (isinstance(value, str) and value.lower() in ("none", "null"))
        if is_null and type(None) in get_args(tp):
            return None
        last: Exception | None = None
        for a in args:
            try:
                return _coerce(name, a, value)
            except ConfigError as e:
                last = e
        raise last or ConfigError(f"{name}: cannot convert {value!r}")
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if isinstance(value, str) and value.strip().lower() in ("0", "false", "no", "off", ""):
            return False
        raise ConfigError(f"{name}: expected a boolean, got {value!r}")
    if tp is int:
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
        raise ConfigError(f"{name}: expected an integer, got {value!r}")
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{name}: expected a number, got {value!r}")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise ConfigError(f"{name}: expected a number, got {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{name}: expected a string, got {type(value).__name__}")
    if origin in (tuple, list) or tp in (tuple, list):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                value = [v for v in value.split(",") if v]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{name}: expected a list, got {value!r}")
        item_types = get_args(tp)
        inner = item_types[0] if item_types else Any
        return tuple(_coerce(name, inner, v) for v in value)
    if origin is dict or tp is dict:
        if isinstance(value, str):
            value = json.loads(value)
        if not isinstance(value, dict):
            raise ConfigError(f"{name}: expected an object, got {value!r}")
        return dict(value)
    return value


@dataclass(frozen=True, kw_only=True)
class BackendConfig:
    """Settings every backend shares. Subclasses add their own fields; a field without a
    default is a required key (the base's fields are keyword-only, so a subclass may
    declare ``url: str`` with no default), and a missing one is a :class:`ConfigError`
    naming it, like an unknown one.

    * ``key_scheme``: how page hashes map to objects: ``"default"`` (one object per page
      with a header; namespace encodes model, dtype, layout, geometry and parallel
      coordinates), ``"sglang-file"`` or ``"sglang-mooncake"`` (SGLang 0.5.23's exact
      names and raw bytes).
    * ``namespace``: an extra, non-secret namespace component (e.g. a test namespace).
    * ``namespace_salt``: a secret salt that keeps tenants sharing a store apart.
    * ``model_name``: overrides the model name from ``HiCacheStorageConfig``.
    * ``exists_timeout_s`` / ``transfer_timeout_s``: deadlines of existence queries and
      of transfers (``0`` disables the deadline; the transport's own timeouts still apply).
    * ``breaker_failures`` / ``breaker_reset_s``: the circuit breaker opens after that
      many consecutive failures and lets a probe through after that back-off.
    * ``max_abandoned``: abandoned (timed-out, still running) calls allowed before the
      breaker opens.
    * ``staging_bytes``: the most SDK-owned staging memory for deadline-safe I/O.
    * ``checksum``: store and verify a payload checksum (default scheme only).
    """

    env_prefix: ClassVar[str] = ""

    key_scheme: str = "default"
    namespace: str = ""
    namespace_salt: str | None = secret_field(None)
    model_name: str | None = None
    exists_timeout_s: float = 0.2
    transfer_timeout_s: float = 5.0
    breaker_failures: int = 5
    breaker_reset_s: float = 1.0
    max_abandoned: int = 8
    staging_bytes: int = 256 << 20
    checksum: bool = False

    @classmethod
    def from_mapping(
        cls: type[C], mapping: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None
    ) -> C:
        """Build a config from a mapping plus the environment (see the module docs)."""
        env = os.environ if environ is None else environ
        mapping = dict(mapping or {})
        hints = typing.get_type_hints(cls)
        flds = {f.name: f for f in dataclasses.fields(cls) if f.init}
        values: dict[str, Any] = {}
        prefix = f"HICACHE_{cls.env_prefix.upper()}_" if cls.env_prefix else "HICACHE_"
        for name, f in flds.items():
            env_names = [prefix + name.upper()]
            extra = f.metadata.get("env")
            if extra:
                env_names += [extra] if isinstance(extra, str) else list(extra)
            for en in env_names:
                if en in env:
                    values[name] = _coerce(name, hints[name], env[en])
                    break
        unknown = []
        for key, value in mapping.items():
            if key in flds:
                values[key] = _coerce(key, hints[key], value)
            elif key not in LOADER_KEYS and key not in cls.ignored_keys():
                unknown.append(key)
        if unknown:
            msgs = []
            for key in unknown:
                close = difflib.get_close_matches(key, list(flds), n=1)
                msgs.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ConfigError(
                f"{cls.__name__}: unknown config key(s) {', '.join(msgs)}; valid keys: {', '.join(sorted(flds))}"
            )
        missing = [
            n
            for n, f in flds.items()
            if n not in values
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
        ]
        if missing:
            raise ConfigError(
                f"{cls.__name__}: missing required config key(s) "
                + ", ".join(f"{n!r} (or env {prefix}{n.upper()})" for n in missing)
            )
        try:
            return cls(**values)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{cls.__name__}: {e}") from e

    @classmethod
    def ignored_keys(cls) -> frozenset[str]:
        """Keys accepted and ignored besides :data:`LOADER_KEYS` (override to extend)."""
        return frozenset()

    def __post_init__(self) -> None:
        if self.key_scheme not in ("default", "sglang-file", "sglang-mooncake"):
            raise ValueError(
                f"key_scheme must be 'default', 'sglang-file' or 'sglang-mooncake', got {self.key_scheme!r}"
            )
        for n in ("exists_timeout_s", "transfer_timeout_s", "breaker_reset_s"):
            if getattr(self, n) < 0:
                raise ValueError(f"{n} must be >= 0, got {getattr(self, n)!r}")
        if self.breaker_failures < 1:
            raise ValueError(f"breaker_failures must be >= 1, got {self.breaker_failures!r}")
        if self.max_abandoned < 0:
            raise ValueError(f"max_abandoned must be >= 0, got {self.max_abandoned!r}")

    def redacted(self) -> dict[str, Any]:
        """The config as a dict with every secret replaced by ``"***"`` (or ``None``)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = ("***" if v else v) if f.metadata.get("secret") else v
        return out
