"""The rows of the compatibility matrix: what runs, with which configuration, and what the
verdict should be; the backends that cannot run here, and why; the outside backends on the
package index."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servers import CREDS, Servers

#: How a row's suite run is configured: ``(servers, private_dir) -> (extra_config, env)``.
Configure = Callable[[Servers, Path], tuple[dict[str, Any], dict[str, str]]]


@dataclasses.dataclass(frozen=True)
class Row:
    name: str  #: attribute of compat_backends
    title: str
    group: str  #: "sglang" (SGLang's built-in) or "ours" (through SGLang's dynamic backend)
    configure: Configure
    #: "pass" or "fail": the verdict a correct suite gives (see findings.py for why)
    expected: str
    #: Extra capabilities the backend supports but that cannot be inferred from its methods.
    declare: tuple[str, ...] = ()
    note: str = ""
    #: More ``hicache check`` options for this row.
    args: tuple[str, ...] = ()

    @property
    def sglang_backend(self) -> str:
        """``--hicache-storage-backend`` for this row: the built-in's factory name (which
        decides SGLang's I/O path and host layouts), ``dynamic`` for ours."""
        return "dynamic" if self.group == "ours" else self.name.removesuffix("_direct")


def _root(d: Path) -> dict[str, Any]:
    return {"compat_root": str(d)}


def _file(s: Servers, d: Path) -> tuple[dict[str, Any], dict[str, str]]:
    return _root(d), {}


def _none(s: Servers, d: Path) -> tuple[dict[str, Any], dict[str, str]]:
    return {}, {}


def _mooncake(s: Servers, d: Path) -> tuple[dict[str, Any], dict[str, str]]:
    c = s.mooncake()
    # the settings an operator must give (where the master is, the transport this machine
    # has); everything else (global_segment_size 4gb, ...) at SGLang's defaults
    return {
        "master_server_address": c.address,
        "protocol": "tcp",
        "local_hostname": "127.0.0.1",
        "metadata_server": "P2PHANDSHAKE",
    }, {"MC_LOG_LEVEL": "ERROR"}


def _nixl(direct: bool) -> Configure:
    def configure(s: Servers, d: Path) -> tuple[dict[str, Any], dict[str, str]]:
        return {**_root(d), "plugin": {"posix": {"active": True}}, "use_direct_io": direct}, {}

    return configure


def _seaweedfs(s: Servers, d: Path) -> tuple[dict[str, Any], dict[str, str]]:
    # weed mini runs with auth off; boto3 still signs, so the client gets any credentials
    return {"endpoint": s.weed().url}, {
        "AWS_ACCESS_KEY_ID": "compat",
        "AWS_SECRET_ACCESS_KEY": "compat-secret",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def _aibrix(s: Servers, d: Path) -> tuple[dict[str, Any], dict[str, str]]:
    # aibrix-kvcache with its local RocksDB L2 connector (per-namespace root, set by
    # compat_backends) and its L1 (host DRAM) tier off: the L1 tier would duplicate
    # SGLang's own host pool, with a 10 GB default
    return _root(d), {
        "AIBRIX_KV_CACHE_OL_L1_CACHE_ENABLED": "0",
        "AIBRIX_KV_CACHE_OL_L2_CACHE_BACKEND": "ROCKSDB",
    }


def _ours(name: str) -> Configure:
    def configure(s: Servers, d: Path) -> tuple[dict[str, Any], dict[str, str]]:
        cfg: dict[str, Any]
        if name == "file":
            cfg = {"root": str(d)}
        elif name == "redis":
            cfg = {"url": s.redis().url}
        elif name == "s3":
            cfg = {
                "bucket": s.moto_bucket(),
                "endpoint_url": s.moto().url,
                "access_key_id": CREDS["aws_access_key_id"],
                "secret_access_key": CREDS["aws_secret_access_key"],
            }
        else:
            cfg = s.mooncake().config()  # what our Mooncake backend's own tests use
        return sglang_args(name, cfg, d / "extra-config.json"), {"MC_LOG_LEVEL": "ERROR"}

    return configure


def sglang_args(name: str, config: dict[str, Any], secret_file: Path) -> dict[str, Any]:
    """The extra config ``hicache sglang-args NAME --config JSON`` gives an operator (read
    back from ``secret_file`` when the config holds a secret: then the flag is ``@FILE``)."""
    secret_file.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "from hicache_sdk.cli import main; raise SystemExit(main())",
            "sglang-args",
            name,
            "--config",
            json.dumps(config),
            "--secret-file",
            str(secret_file),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:  # the message names no setting (the config may hold a secret)
        raise RuntimeError(f"hicache sglang-args {name} failed: {proc.stderr.strip()[-300:]}")
    out = proc.stdout.strip()
    import shlex

    value = shlex.split(out)[3]
    if value.startswith("@"):
        value = Path(value[1:]).read_text(encoding="utf-8")
    return dict(json.loads(value))


ROWS: tuple[Row, ...] = (
    Row("file", "file (HiCacheFile)", "sglang", _file, "pass", ("mla",)),
    Row("sim", "sim (SimHiCacheStorage)", "sglang", _none, "fail", ("mla",)),
    Row("shm", "shm (HiCacheShm)", "sglang", _none, "fail"),
    Row(
        "mooncake",
        "mooncake (MooncakeStore)",
        "sglang",
        _mooncake,
        "fail",
        ("mla",),
        note="With SGLang's default `global_segment_size` (4gb) each `MooncakeStore` mounts a 4 GB "
        "segment; the suite closes every backend before it builds the next, so the row's peak RSS "
        "stays near that of one store.",
    ),
    Row("hf3fs", "hf3fs (HiCacheHF3FS, mock client)", "sglang", _file, "fail"),
    Row("nixl", "nixl (HiCacheNixl, POSIX)", "sglang", _nixl(False), "pass", ("mla",)),
    Row(
        "nixl_direct",
        "nixl (HiCacheNixl, POSIX, O_DIRECT)",
        "sglang",
        _nixl(True),
        "pass",
        ("mla",),
        note="O_DIRECT moves whole blocks: the row runs with `--geometry block` (every page a "
        "multiple of 4 KiB, as a real model's pages are).",
        args=("--geometry", "block"),
    ),
    Row("seaweedfs", "seaweedfs (SeaweedFSStore, weed mini)", "sglang", _seaweedfs, "pass", ("mla",)),
    Row(
        "aibrix",
        "aibrix (AibrixKVCacheStorage, RocksDB L2)",
        "sglang",
        _aibrix,
        "pass",
        note="Not a contract failure, but a lost hit: `batch_get` asserts that every key of the "
        "batch was found (`aibrix_kvcache_storage.py:85`, `assert len(kv_blocks) == "
        "len(target_locations)`), so a batch whose tail is missing (evicted after "
        "`batch_exists`, or still being backed up) raises `AssertionError` instead of returning "
        "its leading hits. SGLang's controller logs it and counts the whole batch as 0 hits "
        "(`managers/cache_controller.py`, `_page_transfer`). A `batch_get` of one stored and one "
        "absent page raises it; returning the leading blocks would keep those hits.",
    ),
    Row("ours_file", "hicache-sdk file (dynamic)", "ours", _ours("file"), "pass"),
    Row("ours_redis", "hicache-sdk redis (dynamic)", "ours", _ours("redis"), "pass"),
    Row("ours_s3", "hicache-sdk s3 (dynamic)", "ours", _ours("s3"), "pass"),
    Row("ours_mooncake", "hicache-sdk mooncake (dynamic)", "ours", _ours("mooncake"), "pass"),
)

#: SGLang 0.5.23's registered built-ins that cannot run on this machine, and why.
NOT_RUNNABLE: dict[str, str] = {
    "npu_memcache": (
        "Ascend MemCache: SGLang's `NpuMemcacheStore` initialises `memcache_hybrid`'s store on an "
        "Ascend NPU device (`store.init(device_id, ...)`, the device id from `torch.npu`) and needs "
        "a deployed MetaService / LocalService; `memcache_hybrid` is on the package index, but a CPU-only "
        "host has no NPU and torch there has no `npu` device."
    ),
    "eic": (
        "Volcano Engine EIC: its client library `eic` is not published on the package index, and "
        "the service it talks to is a cloud service (the backend maps each CUDA device to a NIC)."
    ),
    "simm": (
        "Scitix SiMM: `simm.kv` is built from SiMM's own repository; the package named `simm` on "
        "the index is an unrelated project with no `simm.kv` module."
    ),
    "mori": (
        "AMD MORI UMBP (`UMBPStore`): needs `mori.umbp`, from a MORI build with `BUILD_UMBP=ON` "
        "for ROCm GPUs; not on the package index."
    ),
    "tensorcast": "TensorCast: its client library `tensorcast` is not published on the package index.",
}


@dataclasses.dataclass(frozen=True)
class Outside:
    """A HiCacheStorage backend published by someone else on the package index."""

    dist: str
    version: str
    module: str
    cls: str
    why_not_run: str


OUTSIDE: tuple[Outside, ...] = (
    Outside(
        "sglang-kvblockd",
        "0.1.0",
        "sglang_kvblockd.backend",
        "KvblockdHiCacheStorage",
        "fails at construction under SGLang's defaults: `keymap.py:86` does `int(tp_lcm_size)`, and "
        "SGLang's `HiCacheStorageConfig.tp_lcm_size` is `None` unless the operator sets it "
        "(`_generate_storage_config` pops it from the extra config); past that it needs a running "
        "kvblockd daemon (a Go binary; only its Python client `kvblockd` is on the package index)",
    ),
    Outside(
        "memkv-sglang",
        "1.0.12",
        "memkv_sglang.backend",
        "MemKVHiCacheStorage",
        "needs a MemKV cluster and a MinIO licence (proprietary; the client refuses to start without one)",
    ),
)
