"""Typed config of the Mooncake backend: SGLang 0.5.23's ``MooncakeStore`` keys, with
SGLang's meaning, units, defaults and environment fallbacks.

Sources of the Mooncake keys follow SGLang's ``MooncakeStore._load_config``, *by source*,
not field by field:

1. the config mapping (``extra_config`` + kwargs) when it names ``master_server_address``
   or ``client_server_address``. A key it omits gets SGLang's default, **not** the
   environment, except ``protocol`` (``MOONCAKE_PROTOCOL``, then ``"rdma"``);
2. else the JSON file named by ``SGLANG_HICACHE_MOONCAKE_CONFIG_PATH`` (it must name one of
   those two keys); its Mooncake keys replace the mapping's, the same defaults apply;
3. else the environment (``MOONCAKE_MASTER`` or ``MOONCAKE_CLIENT`` must be set;
   ``MOONCAKE_PROTOCOL``, ``MOONCAKE_GLOBAL_SEGMENT_SIZE``, ... for the rest).

Whatever the source, ``local_hostname`` is ``MOONCAKE_LOCAL_HOSTNAME`` when set, else
``LOCAL_HOSTNAME`` when not empty, else the source's value, else ``"localhost"``; an empty
``tenant_id`` is ``"default"``. ``extra_backend_tag`` and ``enable_group_semantics`` are
always read from the mapping, as SGLang reads them from ``extra_config``. Our own
``HICACHE_MOONCAKE_<FIELD>`` variables apply below all of that, and the shared keys
(``key_scheme``, deadlines...) merge field by field as for every backend.

Keys SGLang reads that this backend does not act on (:meth:`MooncakeConfig.unsupported`:
``standalone_storage``, ``client_server_address``, ``enable_group_semantics``) are
accepted, and the backend logs a WARNING naming each one it ignores. Any other unknown key
is a ``ConfigError`` with a close match.
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
from hicache_sdk.config.values import coerce

__all__ = ["MooncakeConfig", "parse_size", "per_rank_segment_size", "SGLANG_ENV", "SOURCE_KEYS"]

C = TypeVar("C", bound="MooncakeConfig")

CONFIG_PATH_ENV = "SGLANG_HICACHE_MOONCAKE_CONFIG_PATH"
#: The keys of SGLang's ``MooncakeStoreConfig`` -> the variable its environment source reads.
SGLANG_ENV: dict[str, str] = {
    "master_server_address": "MOONCAKE_MASTER",
    "client_server_address": "MOONCAKE_CLIENT",
    "metadata_server": "MOONCAKE_TE_META_DATA_SERVER",
    "global_segment_size": "MOONCAKE_GLOBAL_SEGMENT_SIZE",
    "protocol": "MOONCAKE_PROTOCOL",
    "device_name": "MOONCAKE_DEVICE",
    "master_metrics_port": "MOONCAKE_MASTER_METRICS_PORT",
    "check_server": "MOONCAKE_CHECK_SERVER",
    "standalone_storage": "MOONCAKE_STANDALONE_STORAGE",
    "enable_ssd_offload": "MOONCAKE_ENABLE_SSD_OFFLOAD",
    "ssd_offload_path": "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH",
    "tenant_id": "MOONCAKE_TENANT_ID",
    "local_hostname": "MOONCAKE_LOCAL_HOSTNAME",
}
#: The keys that come from one source (module docs).
SOURCE_KEYS = tuple(SGLANG_ENV)
#: Mooncake's protocol names (``tcp``, ``rdma``, ``efa``, ``nvlink_intra``...); which ones a
#: wheel supports is Mooncake's business (an unknown one fails ``setup``, after ~20 s).
_PROTOCOL = re.compile(r"[a-z][a-z0-9_]*")
_BOOL_KEYS = ("check_server", "standalone_storage", "enable_ssd_offload")


def parse_size(value: Any, name: str = "size") -> int:
    """Bytes from an int or a size string, read as the core reads every ``bytes`` setting:
    SGLang's forms mean what they mean there (an int or a digit string is bytes, ``"<N>gb"``
    in any case is ``N * 2**30``), plus ``"512mb"``, ``"1 GB"``, ``"64KiB"`` (binary) and SI
    ``"200M"``. Raises ``ConfigError`` naming ``name``."""
    size = coerce(name, int, value, "bytes")
    if size < 0:
        raise ConfigError(f"{name}: must be >= 0, got {value!r}")
    return int(size)


def per_rank_segment_size(total: int, storage_config: Any) -> int:
    """SGLang's split: ``global_segment_size // (tp_size * pp_size)`` (DP and CP not in it)."""
    tp = int(getattr(storage_config, "tp_size", 1) or 1)
    pp = int(getattr(storage_config, "pp_size", 1) or 1)
    return total // (tp * pp)


def _env_bool(var: str, text: str) -> bool:
    """SGLang's ``EnvBool``: true/1/yes/y or false/0/no/n, any case."""
    v = text.strip().lower()
    if v in ("true", "1", "yes", "y"):
        return True
    if v in ("false", "0", "no", "n"):
        return False
    raise ConfigError(f"{var}: {text!r} is not a valid boolean value")


@dataclass(frozen=True)
class MooncakeConfig(BackendConfig):
    """Mooncake Store settings: SGLang 0.5.23's keys, defaults and units unless marked *ours*.

    * ``master_server_address``: ``host:port`` of ``mooncake_master`` (required).
    * ``metadata_server``: ``"P2PHANDSHAKE"`` (no metadata server) or an HTTP metadata URL.
    * ``global_segment_size``: memory this process gives the cluster, divided per rank by
      ``tp_size * pp_size``; bytes, or SGLang's ``"<N>gb"``. ``0``: a pure client, whose
      pages live in other processes (a ``mooncake_client`` holder); more than ``0``: pages
      may live in this process's own segment, and go away with it.
    * ``protocol``: the transfer protocol passed to Mooncake (``"rdma"``, ``"tcp"``, ...).
    * ``device_name``: RDMA device(s), ``""`` for auto; a JSON object maps tp ranks to
      devices (``{"0": "mlx5_0", "1": "mlx5_1"}``), as in SGLang.
    * ``local_hostname``: the address this client's transfer engine advertises (its
      listeners bind all interfaces whatever it says: Mooncake's behaviour).
    * ``master_metrics_port``: the master's HTTP port, used only when ``check_server``.
    * ``check_server``: probe the master's HTTP ``/health`` on ``master_metrics_port`` before
      ``setup`` (SGLang polls ``/get_all_segments`` there for up to 10 minutes instead); a
      failed probe is in the error of every call until setup succeeds, and counted.
    * ``standalone_storage`` / ``client_server_address``: SGLang's dummy client attached to
      a local ``mooncake_client`` process; not supported here (WARNING, ignored).
    * ``enable_ssd_offload`` / ``ssd_offload_path``: Mooncake's SSD offload, passed to
      ``setup`` as SGLang does (each rank in its own ``rank_<dp>_<tp>_<pp>_<cp>`` folder).
    * ``tenant_id``: the Mooncake tenant (empty: ``"default"``).
    * ``extra_backend_tag``: SGLang's object-key prefix tag (``sglang-mooncake`` scheme).
    * ``enable_group_semantics``: SGLang's replica-group puts; not supported (WARNING, ignored).
    * ``local_buffer_size`` (*ours*): Mooncake's client-side transfer buffer (SGLang: 16 MiB).
    * ``setup_timeout_s`` (*ours*): how long construction waits for the first probe of the
      master and Mooncake's ``setup``; past it the backend starts with its breaker open and
      finishes setup in the background.
    * ``probe_timeout_s`` (*ours*): the bound on one probe of the master before ``setup``
      (its ``/health`` with ``check_server``, else a TCP connect to ``master_server_address``).
    """

    env_prefix: ClassVar[str] = "MOONCAKE"

    master_server_address: str = ""
    metadata_server: str = "P2PHANDSHAKE"
    global_segment_size: int = setting("4gb", ge=0, unit="bytes")
    protocol: str = "rdma"
    device_name: str = ""
    local_hostname: str = "localhost"
    master_metrics_port: int = setting(9003, ge=1, le=65535)
    check_server: bool = False
    standalone_storage: bool = False
    client_server_address: str | None = None
    enable_ssd_offload: bool = False
    ssd_offload_path: str | None = None
    tenant_id: str = "default"
    extra_backend_tag: str | None = None
    enable_group_semantics: bool = False
    local_buffer_size: int = setting("16mb", ge=0, unit="bytes")
    setup_timeout_s: float = setting(2.0, gt=0, le=600, unit="seconds")
    probe_timeout_s: float = setting(0.5, gt=0, le=600, unit="seconds")

    def __post_init__(self) -> None:
        super().__post_init__()
        if not _PROTOCOL.fullmatch(self.protocol):
            raise ConfigError(
                f"protocol: must be a Mooncake transfer protocol such as 'rdma' or 'tcp', got {self.protocol!r}"
            )
        tenant = str(self.tenant_id).strip() if self.tenant_id is not None else ""
        object.__setattr__(self, "tenant_id", tenant or "default")

    @property
    def segment_bytes(self) -> int:
        return int(self.global_segment_size)

    @property
    def buffer_bytes(self) -> int:
        return int(self.local_buffer_size)

    def unsupported(self) -> list[str]:
        """One message per key SGLang reads that this backend ignores with its value here."""
        out = []
        if self.standalone_storage:
            out.append(
                "standalone_storage=true (SGLang's dummy client attached to a local mooncake_client) is "
                "not supported by hicache-backend-mooncake: ignored, this backend runs a full Mooncake client"
            )
        if self.client_server_address:
            out.append(
                "client_server_address is not supported by hicache-backend-mooncake (no dummy client): ignored"
            )
        if self.enable_group_semantics:
            out.append(
                "enable_group_semantics=true (Mooncake replica groups) is not supported by "
                "hicache-backend-mooncake: ignored, pages are put one object at a time"
            )
        return out

    @classmethod
    def from_mapping(
        cls: type[C], mapping: Mapping[str, Any] | None = None, *, environ: Mapping[str, str] | None = None
    ) -> C:
        """Build the config with SGLang's source precedence for the Mooncake keys (module docs)."""
        env = os.environ if environ is None else environ
        merged = {k: v for k, v in dict(mapping or {}).items() if not k.startswith("_")}
        if _names_a_server(merged):
            source = {k: merged[k] for k in SOURCE_KEYS if k in merged}
        elif env.get(CONFIG_PATH_ENV) is not None:
            source = _read_file(env[CONFIG_PATH_ENV])
            if not _names_a_server(source):
                raise ConfigError(
                    f"{CONFIG_PATH_ENV}={env[CONFIG_PATH_ENV]!r}: the file names neither "
                    "master_server_address nor client_server_address"
                )
        else:
            source = _from_env(env)
        for k in SOURCE_KEYS:
            merged.pop(k, None)
        if "protocol" not in source and "MOONCAKE_PROTOCOL" in env:
            source["protocol"] = env["MOONCAKE_PROTOCOL"]
        hostname = source.pop("local_hostname", None)
        if "MOONCAKE_LOCAL_HOSTNAME" in env:
            hostname = env["MOONCAKE_LOCAL_HOSTNAME"]
        elif env.get("LOCAL_HOSTNAME"):
            hostname = env["LOCAL_HOSTNAME"]
        if hostname:
            source["local_hostname"] = hostname
        merged.update({k: v for k, v in source.items() if v is not None})  # None: the default
        cfg = super().from_mapping(merged, environ=env)
        if not cfg.master_server_address:
            extra = (
                " (client_server_address alone is SGLang's standalone mode, which this backend does not support)"
                if cfg.client_server_address
                else ""
            )
            raise ConfigError(
                "MooncakeConfig: master_server_address is required (config key, the JSON file named by "
                f"{CONFIG_PATH_ENV}, or MOONCAKE_MASTER){extra}"
            )
        return cfg


def _names_a_server(d: Mapping[str, Any]) -> bool:
    return d.get("master_server_address") is not None or d.get("client_server_address") is not None


def _read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as f:
            loaded = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"{CONFIG_PATH_ENV}={path!r}: cannot read JSON ({e})") from e
    if not isinstance(loaded, dict):
        raise ConfigError(f"{CONFIG_PATH_ENV}={path!r}: expected a JSON object")
    return {k: v for k, v in loaded.items() if k in SGLANG_ENV}


def _from_env(env: Mapping[str, str]) -> dict[str, Any]:
    if "MOONCAKE_MASTER" not in env and "MOONCAKE_CLIENT" not in env:
        raise ConfigError(
            "MooncakeConfig: master_server_address is required (config key, the JSON file named by "
            f"{CONFIG_PATH_ENV}, or MOONCAKE_MASTER)"
        )
    out: dict[str, Any] = {}
    for key, var in SGLANG_ENV.items():
        if var in env:
            out[key] = _env_bool(var, env[var]) if key in _BOOL_KEYS else env[var]
    return out
