"""Typed config of the Mooncake backend, under SGLang 0.5.23's key names and defaults.

Sources of the Mooncake keys follow SGLang's ``MooncakeStore._load_config`` precedence,
*by source*, not field by field:

1. the config mapping (``extra_config`` + kwargs) when it names ``master_server_address``;
2. else the JSON file named by ``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH`` (its Mooncake keys
   replace the mapping's);
3. else the environment (``MOONCAKE_MASTER``, ``MOONCAKE_PROTOCOL``, ...).

Inside the chosen source a missing key falls back to its ``MOONCAKE_*`` variable, then to
SGLang's default (``protocol`` ``"rdma"``, ``global_segment_size`` ``"4gb"``, ...), exactly
as SGLang reads them. Where this differs from the core's field-by-field merge: a file only
counts when the mapping has no ``master_server_address``, and then it wins over the
mapping's other Mooncake keys. ``HICACHE_MOONCAKE_<FIELD>`` variables (ours) still apply
under everything, as for every backend; the shared keys (``key_scheme``, deadlines...)
merge field by field as usual.

Ours, not SGLang's: ``local_buffer_size`` (SGLang hard-codes 16 MiB), ``probe_timeout_s``
(how long construction may probe the master), and human sizes beyond SGLang's ``"<N>gb"``
(``"512mb"``, ``"1 GB"``, ``"64KiB"``).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from hicache_sdk import BackendConfig, ConfigError
from hicache_sdk.config import setting

__all__ = ["MooncakeConfig", "parse_size", "per_rank_segment_size"]

C = TypeVar("C", bound="MooncakeConfig")

CONFIG_PATH_ENV = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"
#: Mooncake keys -> the SGLang environment variable read when the chosen source omits them.
SGLANG_ENV: dict[str, str] = {
    "master_server_address": "MOONCAKE_MASTER",
    "metadata_server": "MOONCAKE_TE_META_DATA_SERVER",
    "protocol": "MOONCAKE_PROTOCOL",
    "device_name": "MOONCAKE_DEVICE",
    "global_segment_size": "MOONCAKE_GLOBAL_SEGMENT_SIZE",
    "master_metrics_port": "MOONCAKE_MASTER_METRICS_PORT",
    "tenant_id": "MOONCAKE_TENANT_ID",
}
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$", re.IGNORECASE)


def parse_size(value: Any, name: str = "size") -> int:
    """Bytes from an int or a human size: ``"4gb"`` (SGLang's form, 2^30), ``"512 MiB"``,
    ``"1 GB"``, ``"65536"``. Units are binary. Raises ``ConfigError`` naming ``name``."""
    if isinstance(value, bool):
        raise ConfigError(f"{name}: expected a size, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ConfigError(f"{name}: must be >= 0, got {value}")
        return value
    m = _SIZE.match(str(value))
    if not m:
        raise ConfigError(f"{name}: not a size: {value!r} (use bytes or e.g. '4gb', '512mb')")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def per_rank_segment_size(total: int, storage_config: Any) -> int:
    """SGLang's split: ``global_segment_size // (tp_size * pp_size)`` (DP and CP not in it)."""
    tp = int(getattr(storage_config, "tp_size", 1) or 1)
    pp = int(getattr(storage_config, "pp_size", 1) or 1)
    return total // (tp * pp)


@dataclass(frozen=True)
class MooncakeConfig(BackendConfig):
    """Mooncake Store settings (SGLang names and defaults unless marked *ours*).

    * ``master_server_address``: ``host:port`` of ``mooncake_master`` (required).
    * ``metadata_server``: ``"P2PHANDSHAKE"`` (default, no metadata server) or an HTTP URL.
    * ``protocol``: ``"rdma"`` (SGLang's default) or ``"tcp"``.
    * ``device_name``: RDMA device(s), ``""`` for auto.
    * ``global_segment_size``: memory this process contributes to the cluster, divided per
      rank by ``tp_size * pp_size``; ``0`` contributes none (a pure client).
    * ``local_hostname``: the address this client's transfer engine advertises. Its listeners
      bind all interfaces whatever this says (Mooncake's behaviour).
    * ``master_metrics_port``: the master's HTTP port (``/health``), probed before setup.
    * ``tenant_id``: Mooncake tenant.
    * ``extra_backend_tag``: SGLang's key-prefix tag (``sglang-mooncake`` scheme only).
    * ``local_buffer_size`` (*ours*): Mooncake's client-side transfer buffer.
    * ``probe_timeout_s`` (*ours*): the bound on construction's master probe; with the
      master away the backend starts with its breaker open and finishes setup in the
      background.
    """

    env_prefix: ClassVar[str] = "MOONCAKE"

    master_server_address: str = ""
    metadata_server: str = "P2PHANDSHAKE"
    protocol: str = "rdma"
    device_name: str = ""
    global_segment_size: int | str = "4gb"
    local_hostname: str = "localhost"
    master_metrics_port: int = 9003
    tenant_id: str = "default"
    extra_backend_tag: str | None = None
    local_buffer_size: int | str = "16mb"
    probe_timeout_s: float = setting(0.5, gt=0, le=600, unit="seconds")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.protocol not in ("rdma", "tcp"):
            raise ConfigError(f"protocol: must be 'rdma' or 'tcp', got {self.protocol!r}")
        parse_size(self.global_segment_size, "global_segment_size")
        parse_size(self.local_buffer_size, "local_buffer_size")

    @property
    def segment_bytes(self) -> int:
        return parse_size(self.global_segment_size, "global_segment_size")

    @property
    def buffer_bytes(self) -> int:
        return parse_size(self.local_buffer_size, "local_buffer_size")

    @classmethod
    def from_mapping(
        cls: type[C], mapping: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None
    ) -> C:
        """Build the config with SGLang's source precedence for the Mooncake keys (module docs)."""
        env = os.environ if environ is None else environ
        merged = {k: v for k, v in dict(mapping or {}).items() if not k.startswith("_")}
        source: dict[str, Any] = {}
        if merged.get("master_server_address") is None:
            path = env.get(CONFIG_PATH_ENV)
            if path:
                try:
                    with open(path, encoding="utf-8") as f:
                        loaded = json.load(f)
                except (OSError, ValueError) as e:
                    raise ConfigError(f"{CONFIG_PATH_ENV}={path!r}: cannot read JSON ({e})") from e
                if not isinstance(loaded, dict):
                    raise ConfigError(f"{CONFIG_PATH_ENV}={path!r}: expected a JSON object")
                source = {k: v for k, v in loaded.items() if k in SGLANG_ENV or k == "local_hostname"}
                merged.update(source)
        for key, var in SGLANG_ENV.items():
            if merged.get(key) is None and var in env:
                merged[key] = env[var]
        # SGLang: MOONCAKE_LOCAL_HOSTNAME > LOCAL_HOSTNAME > config > "localhost".
        for var in ("MOONCAKE_LOCAL_HOSTNAME", "LOCAL_HOSTNAME"):
            if env.get(var):
                merged["local_hostname"] = env[var]
                break
        if merged.get("master_server_address") is None:
            merged.pop("master_server_address", None)
        cfg = super().from_mapping(merged, environ=env)
        if not cfg.master_server_address:
            raise ConfigError(
                "MooncakeConfig: master_server_address is required (config key, the JSON file named by "
                f"{CONFIG_PATH_ENV}, or MOONCAKE_MASTER)"
            )
        return cfg
