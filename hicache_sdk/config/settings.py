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
import math
import os
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field
from typing import Any, ClassVar, TypeVar

from ..errors import ConfigError
from ..sglang.versions import CURRENT
from .units import describe_value, format_number
from .values import coerce

__all__ = [
    "BackendConfig",
    "LOADER_KEYS",
    "parse_config_arg",
    "secret_field",
    "setting",
]

#: Keys SGLang's dynamic loader (and our bridge) put into ``extra_config`` (``interface_v1``
#: too on releases whose loader does not read it: the bridge's documented config holds it).
LOADER_KEYS = frozenset(CURRENT.dynamic_loader_keys) | {"interface_v1", "backend", "backend_config"}

C = TypeVar("C", bound="BackendConfig")


def setting(
    default: Any = MISSING,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    allow: tuple[Any, ...] = (),
    unit: str | None = None,
    secret: bool = False,
    env: str | tuple[str, ...] | None = None,
) -> Any:
    """A config field with its documented range, unit and sources.

    * ``default``: omit it for a required field (configs are keyword-only, so a required
      field may follow optional ones); a missing one is a :class:`ConfigError` naming it.
    * ``ge`` / ``gt`` / ``le`` / ``lt``: the range, checked for every value however it was
      given; ``allow`` lists special values accepted outside it (``-1`` = "forever").
      Numbers are always finite: NaN and infinities are refused.
    * ``unit``: ``"bytes"`` accepts human sizes (``"4gb"``, ``"200M"``, ``"64Ki"``),
      ``"seconds"`` human durations (``"250ms"``); see :mod:`hicache_sdk.config.units`.
    * ``secret``: never shown in reprs, logs, errors or reports.
    * ``env``: extra environment variable name(s) read for this field (SGLang's own names).
    """
    meta: dict[str, Any] = {}
    if any(b is not None for b in (ge, gt, le, lt)):
        meta["range"] = (ge, gt, le, lt)
    if allow:
        meta["allow"] = tuple(allow)
    if unit is not None:
        if unit not in ("bytes", "seconds"):
            raise ValueError(f"setting: unit must be 'bytes' or 'seconds', got {unit!r}")
        meta["unit"] = unit
    if secret:
        meta["secret"] = True
    if env is not None:
        meta["env"] = env
    return field(default=default, repr=not secret, metadata=meta)


def secret_field(default: Any = None, **metadata: Any) -> Any:
    """A config field whose value never appears in reprs, logs or reports."""
    return field(default=default, repr=False, metadata={"secret": True, **metadata})


def _range_text(rng: tuple[float | None, ...], allow: tuple[Any, ...], unit: str | None = None) -> str:
    ge, gt, le, lt = rng
    parts = []
    for sign, bound in ((">=", ge), (">", gt), ("<=", le), ("<", lt)):
        if bound is not None:
            parts.append(f"{sign} {format_number(bound, unit)}")
    text = " and ".join(parts)
    return text + (f" (or {', '.join(repr(a) for a in allow)})" if allow else "")


def check_field(f: dataclasses.Field[Any], value: Any) -> None:
    """Check one field's value against its declared range (and finiteness)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{f.name}: must be a finite number, got {value!r}")
    allow = f.metadata.get("allow", ())
    rng = f.metadata.get("range")
    if rng is None or value in allow:
        return
    ge, gt, le, lt = rng
    if (
        (ge is not None and value < ge)
        or (gt is not None and value <= gt)
        or (le is not None and value > le)
        or (lt is not None and value >= lt)
    ):
        unit = f.metadata.get("unit")
        got = format_number(value, unit) if unit else repr(value)
        raise ConfigError(f"{f.name}: must be {_range_text(rng, allow, unit)}, got {got}")


def _read_config_file(path: str) -> Any:
    lower = path.lower()
    if lower.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    if lower.endswith(".toml"):
        import tomllib

        with open(path, "rb") as f:
            return tomllib.load(f)
    if lower.endswith((".yaml", ".yml")):
        try:
            import yaml
        except ImportError as e:  # pragma: no cover - depends on environment
            raise ConfigError(f"{path}: reading YAML needs PyYAML: pip install pyyaml") from e
        with open(path, encoding="utf-8") as f:
            try:
                return yaml.safe_load(f)
            except yaml.YAMLError as e:
                raise ValueError(str(e)) from None
    raise ConfigError(f"config file {path!r}: unsupported extension (use .json, .toml or .yaml)")


def parse_config_arg(value: str | None) -> dict[str, Any]:
    """Parse a CLI ``--config`` value: inline JSON, or ``@path`` to a .json/.toml/.yaml
    file (SGLang's extra-config convention). Empty or ``None`` gives ``{}``."""
    if not value:
        return {}
    if value.startswith("@"):
        path = value[1:]
        try:
            data = _read_config_file(path)
        except ConfigError:
            raise
        except OSError as e:
            raise ConfigError(f"--config @{path}: {e.strerror or e}") from None
        except ValueError as e:  # JSON, TOML and YAML syntax errors
            raise ConfigError(f"--config @{path}: not valid: {str(e).splitlines()[0]}") from None
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


@dataclass(frozen=True, kw_only=True)
class BackendConfig:
    """Settings every backend shares. Subclasses add their own fields (declare them with
    :func:`setting` to give a range, a unit or a secret flag; a field with no default is
    required). Defaults and ranges:

    * ``key_scheme`` ["default"]: how page hashes map to objects: ``"default"`` (one object
      per page with a header; the namespace encodes model, dtype, layout, geometry and
      parallel coordinates), ``"sglang-file"`` or ``"sglang-mooncake"`` (SGLang 0.5.23's
      exact names and raw bytes).
    * ``namespace`` [""]: an extra, non-secret namespace component (e.g. a test namespace).
    * ``namespace_salt`` [None, secret]: keeps tenants sharing a store apart.
    * ``model_name`` [None]: overrides the model name from ``HiCacheStorageConfig``.
    * ``exists_timeout_s`` [0.2, 0..3600 s] / ``transfer_timeout_s`` [5.0, 0..3600 s]:
      deadlines of existence queries and of transfers (``0`` disables the deadline; the
      transport's own timeouts still apply).
    * ``breaker_failures`` [5, 1..10^6] / ``breaker_reset_s`` [1.0, 0..3600 s]: the circuit
      breaker opens after that many consecutive failures and lets a probe through after that
      back-off.
    * ``max_abandoned`` [8, 0..10^5]: abandoned (timed-out, still running) calls allowed
      before the breaker opens.
    * ``staging_bytes`` [256 MiB, 0..1 TiB]: the most SDK-owned staging memory for
      deadline-safe I/O (human sizes accepted).
    * ``exists_cache_ttl_s`` [0, 0..10^9 s or -1]: positive existence answers are remembered
      this long (``0`` off, ``-1`` forever); see ``docs/transport-kit.md``.
    * ``checksum`` [False]: store and verify a payload checksum (default scheme only).
    * ``negative_cache_ttl_s`` [0, 0..3600 s]: objects the store reports present but whose
      read failed are answered absent this long (``0`` off); see ``docs/transport-kit.md``.
    * ``inject_failures`` [False]: tests only. Read the failure-injection variables
      (``HICACHE_INJECT_DELAY_S``, ``HICACHE_INJECT_FAILURE_RATE``, ...) when the backend is
      built; without it nothing reads them.
    * ``follow_caller_cpu`` [False]: wake a call's worker thread on the caller's CPU (Linux;
      see ``docs/resilience.md``, Workers). Off, no thread's CPU affinity is changed.
    """

    env_prefix: ClassVar[str] = ""

    key_scheme: str = "default"
    namespace: str = ""
    namespace_salt: str | None = secret_field(None)
    model_name: str | None = None
    exists_timeout_s: float = setting(0.2, ge=0, le=3600, unit="seconds")
    transfer_timeout_s: float = setting(5.0, ge=0, le=3600, unit="seconds")
    breaker_failures: int = setting(5, ge=1, le=1_000_000)
    breaker_reset_s: float = setting(1.0, ge=0, le=3600, unit="seconds")
    max_abandoned: int = setting(8, ge=0, le=100_000)
    staging_bytes: int = setting(256 << 20, ge=0, le=1 << 40, unit="bytes")
    exists_cache_ttl_s: float = setting(0.0, ge=0, le=1e9, allow=(-1,), unit="seconds")
    checksum: bool = False
    negative_cache_ttl_s: float = setting(0.0, ge=0, le=3600, unit="seconds")
    inject_failures: bool = setting(False, env="HICACHE_INJECT_FAILURES")
    follow_caller_cpu: bool = setting(False, env="HICACHE_FOLLOW_CPU")

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
                    values[name] = coerce(name, hints[name], env[en], f.metadata.get("unit"))
                    break
        unknown = []
        for key, value in mapping.items():
            if key in flds:
                values[key] = coerce(key, hints[key], value, flds[key].metadata.get("unit"))
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
            if n not in values and f.default is MISSING and f.default_factory is MISSING
        ]
        if missing:
            hint = ", ".join(f"{n!r} (or {prefix}{n.upper()})" for n in missing)
            raise ConfigError(f"{cls.__name__}: missing required config key(s) {hint}")
        try:
            return cls(**values)
        except ConfigError:
            raise
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{cls.__name__}: {e}") from e

    @classmethod
    def ignored_keys(cls) -> frozenset[str]:
        """Keys accepted and ignored besides :data:`LOADER_KEYS` (override to extend)."""
        return frozenset()

    def exists_cache_ttl(self) -> float:
        """The TTL of the adapter's existence cache (:class:`~hicache_sdk.kit.existence.CachedExistence`):
        ``exists_cache_ttl_s`` (``0``: no cache, ``-1``: forever). A backend with its own
        legacy setting for it (the file backend's ``enable_metadata_cache``) overrides this."""
        return float(self.exists_cache_ttl_s)

    def __post_init__(self) -> None:
        hints: dict[str, Any] | None = None
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            unit = f.metadata.get("unit")
            if unit is not None and isinstance(value, str):
                hints = hints or typing.get_type_hints(type(self))
                value = coerce(f.name, hints[f.name], value, unit)
                object.__setattr__(self, f.name, value)
            check_field(f, value)
        if self.key_scheme not in ("default", "sglang-file", "sglang-mooncake"):
            raise ConfigError(
                "key_scheme: must be 'default', 'sglang-file' or 'sglang-mooncake', "
                f"got {describe_value(self.key_scheme)}"
            )

    def redacted(self) -> dict[str, Any]:
        """The config as a dict with every secret replaced by ``"***"`` (or ``None``)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            out[f.name] = ("***" if v else v) if f.metadata.get("secret") else v
        return out
