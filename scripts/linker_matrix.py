#!/usr/bin/env python
"""The linker rows of the compatibility matrix: which linkers serve SGLang 0.5.23's unified
cache linker, with reasons. Run by ``python scripts/compat_matrix.py --linker`` (which renders
them into docs/compatibility.md, see ``scripts/compat/linker_table.py``), or alone in an env
with SGLang and the servers: ``python scripts/linker_matrix.py`` prints the table, ``--json``
prints the rows as one JSON line.

Rows:

* ``TransportLinker`` over each of our four backends (file; Redis, S3 and Mooncake against
  a real ``redis-server``, ``moto_server`` and ``mooncake_master`` this script starts and
  stops): every check of ``hicache_conformance.linker_contract``;
* SGLang's own Mooncake linker (``--unified-cache-external-linker-backend mooncake``) against
  the real ``mooncake_master``, built by SGLang's factory: on a plain MHA model's pools (it
  refuses them), and on a hybrid Mamba model's pools (a ``HybridLinearKVPool`` over an MLA
  pool and a ``MambaPool``, the model its view builder serves), where the contract's
  ``mamba_windows`` check runs (the other checks build plain models). SGLang publishes the
  runtime context the linker reads (``get_parallel()``, ``get_memory()``, ``get_model()``)
  from full server arguments at start-up; here the few fields it reads stand in for it;
* ``sglang-fs-linker`` 0.1.0, the only outside linker on the package index, through the
  ``dynamic`` factory: installed with ``pip install --no-deps --target DIR
  sglang-fs-linker==0.1.0`` into a throwaway folder (``--fs-linker DIR``: one it is
  already in).

Each verdict is ``certified`` (every check passed), ``passes`` (the checks named in the
reason passed: the others build models it does not serve), ``fails`` (a check failed: its
reason) or ``refused`` (the factory or the linker's constructor refused the model: its
reason).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FS_LINKER = "sglang-fs-linker==0.1.0"
for sub in ("redis", "s3", "mooncake"):
    sys.path.insert(0, str(ROOT / "backends" / sub / "tests"))


def _sglang() -> None:
    try:
        import triton  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "tests" / "sglang"))
        import sglang_standins

        sglang_standins.install()


@contextmanager
def _backend(name: str) -> Iterator[dict[str, Any]]:
    if name == "file":
        with tempfile.TemporaryDirectory(prefix="hicache-linker-matrix-") as root:
            yield {"root": root}
    elif name == "redis":
        from _redis_servers import RedisServer

        srv = RedisServer()
        srv.start()
        try:
            yield {"url": srv.url}
        finally:
            srv.close()
    elif name == "s3":
        from _server import CREDS, MotoServer

        moto = MotoServer()
        moto.start()
        try:
            moto.make_bucket("linker-matrix")
            yield {
                "bucket": "linker-matrix",
                "endpoint_url": moto.url,
                "access_key_id": CREDS["aws_access_key_id"],
                "secret_access_key": CREDS["aws_secret_access_key"],
            }
        finally:
            moto.stop()
    else:
        from _servers import MooncakeCluster

        cluster = MooncakeCluster(holder_bytes=64 << 20)
        cluster.start()
        try:
            yield cluster.config()
        finally:
            cluster.stop()


def _certify(linker: str, extra: dict[str, Any]) -> tuple[str, str]:
    from hicache_conformance import linker_contract as lc

    env = lc.linker_env(linker, extra)
    failed = []
    for name, check in lc.CHECKS.items():
        try:
            check(env)
        except AssertionError as e:
            failed.append(f"{name}: {str(e).splitlines()[0]}")
        except ValueError as e:  # the factory's own refusal
            return "refused", f"{type(e).__name__}: {e}"
        except Exception as e:
            failed.append(f"{name}: {type(e).__name__}: {e}")
        finally:
            env.close()
    if failed:
        return "fails", "; ".join(failed)
    return "certified", f"all {len(lc.CHECKS)} checks of the linker contract pass"


def _sglang_mooncake(cfg: dict[str, Any]) -> tuple[str, str]:
    from hicache_conformance import linker_contract as lc
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_cache.linker_factory import create_unified_cache_linker

    pool = lc.device_pool("mha")
    params = CacheInitParams(
        disable=False,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool),
        page_size=lc.PAGE,
    )
    mc = {
        "master_server_address": cfg["master_server_address"],
        "metadata_server": cfg.get("metadata_server", "P2PHANDSHAKE"),
        "protocol": "tcp",
        "global_segment_size": 0,
    }
    try:
        linker = create_unified_cache_linker(
            SimpleNamespace(model_path="m", tp_size=1, enable_linker_mla_dedup=False),
            params,
            backend="mooncake",
            config=mc,
            components={ComponentType.FULL},
        )
    except Exception as e:
        return "refused", f"plain MHA pool: {type(e).__name__}: {str(e).splitlines()[0]}"
    linker.close()
    return "built", "built on a plain MHA pool"


@contextmanager
def _sglang_runtime() -> Iterator[SimpleNamespace]:
    """The fields of SGLang's runtime context that its Mooncake linker and pool-view
    builder read, stood in (one TP rank, no DCP, no unified memory); yields the model
    bag, whose ``model_path`` the caller sets per linker."""
    import sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler as assembler
    import sglang.srt.mem_cache.storage.mooncake_store.mooncake_direct_linker as direct

    model = SimpleNamespace(model_path="m")
    stand_ins = {
        "get_parallel": lambda: SimpleNamespace(tp_size=1, attn_dcp_size=1),
        "get_memory": lambda: SimpleNamespace(enable_unified_memory=False),
        "get_model": lambda: model,
    }
    saved = [(m, n, getattr(m, n)) for m in (assembler, direct) for n in stand_ins if hasattr(m, n)]
    for m, n, _ in saved:
        setattr(m, n, stand_ins[n])
    try:
        yield model
    finally:
        for m, n, value in saved:
            setattr(m, n, value)


def _sglang_mooncake_mamba(cfg: dict[str, Any]) -> tuple[str, str]:
    """SGLang's Mooncake linker on a hybrid Mamba model: the contract's Mamba check."""
    from hicache_conformance import linker_contract as lc
    from sglang.srt.mem_cache.cache_init_params import CacheInitParams
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType
    from sglang.srt.mem_cache.unified_cache.linker_factory import create_unified_cache_linker

    mc = {
        "master_server_address": cfg["master_server_address"],
        "metadata_server": cfg.get("metadata_server", "P2PHANDSHAKE"),
        "protocol": "tcp",
        "global_segment_size": 0,
    }
    with _sglang_runtime() as model_bag:

        class _MooncakeEnv(lc.LinkerEnv):
            def build(
                self,
                pool: Any,
                model: str,
                *,
                components: set[str] | None = None,
                req_pool: Any = None,
                **extra: Any,
            ) -> Any:
                params = CacheInitParams(
                    disable=False,
                    req_to_token_pool=req_pool,
                    token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: pool),
                    page_size=lc.PAGE,
                )
                vars(model_bag).update(model_path=model)  # what get_model().model_path reads
                linker = create_unified_cache_linker(
                    SimpleNamespace(model_path=model, tp_size=1, enable_linker_mla_dedup=False),
                    params,
                    backend="mooncake",
                    config=dict(mc),
                    components={ComponentType[name] for name in (components or {"FULL"})},
                )
                self.made.append(linker)
                return linker

        env = _MooncakeEnv("sglang.srt.mem_cache.storage.mooncake_store", "MooncakeDirectLinker", mc, [])
        try:
            lc.check_mamba_windows(env)
        except AssertionError as e:
            return "fails", f"mamba_windows: {str(e).splitlines()[0]}"
        except Exception as e:
            return "refused", f"hybrid Mamba model: {type(e).__name__}: {str(e).splitlines()[0]}"
        finally:
            env.close()
    return "passes", (
        "the mamba_windows check of the linker contract passes (sparse lookup over the Mamba "
        "window, KV pages and state restored byte for byte); the other checks build plain "
        "models, which it refuses"
    )


def _fs_linker_folder(given: str | None, tmp: str) -> tuple[str | None, str]:
    """(the folder holding sglang-fs-linker, or None; why not)."""
    if given:
        return given, ""
    import subprocess

    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", tmp, FS_LINKER]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        return None, f"pip install {FS_LINKER} failed: {done.stderr.strip().splitlines()[-1:]}"
    return tmp, ""


def rows(fs_linker: str | None) -> list[dict[str, str]]:
    """Every row: ``{"linker", "store", "verdict", "reason"}``."""
    _sglang()
    out: list[dict[str, str]] = []

    def add(linker: str, store: str, verdict: str, reason: str) -> None:
        out.append({"linker": linker, "store": store, "verdict": verdict, "reason": reason})

    ours = "hicache_sdk.sglang.linker:TransportLinker"
    for name in ("file", "redis", "s3", "mooncake"):
        with _backend(name) as cfg:
            try:
                verdict, why = _certify(ours, {"backend": name, "backend_config": cfg})
            except Exception as e:
                verdict, why = "fails", f"{type(e).__name__}: {e}"
            add("hicache-sdk TransportLinker", f"{name} (plain, SWA and Mamba models)", verdict, why)
            if name == "mooncake":
                try:
                    verdict, why = _sglang_mooncake(cfg)
                except Exception:
                    verdict, why = "error", traceback.format_exc().splitlines()[-1]
                add("SGLang MooncakeDirectLinker", "mooncake (plain MHA model)", verdict, why)
                try:
                    verdict, why = _sglang_mooncake_mamba(cfg)
                except Exception:
                    verdict, why = "error", traceback.format_exc().splitlines()[-1]
                add(
                    "SGLang MooncakeDirectLinker",
                    "mooncake (hybrid Mamba model: MLA + Mamba)",
                    verdict,
                    why,
                )
    with tempfile.TemporaryDirectory(prefix="hicache-fs-linker-") as tmp:
        folder, why_not = _fs_linker_folder(fs_linker, tmp)
        if folder is None:
            add("sglang-fs-linker 0.1.0", "its own files", "not run", why_not)
        else:
            sys.path.insert(0, folder)
            with _backend("file") as cfg:
                verdict, why = _certify("sglang_fs_linker.linker:FileSystemLinker", {"root": cfg["root"]})
            add("sglang-fs-linker 0.1.0", "its own files", verdict, why)
    return out


def main() -> int:
    import json

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print the rows as one JSON line")
    p.add_argument("--fs-linker", default=None, help="a folder already holding sglang-fs-linker 0.1.0")
    args = p.parse_args()
    table = rows(args.fs_linker)
    if args.json:
        from importlib import metadata

        doc = {"sglang": metadata.version("sglang"), "python": sys.version.split()[0], "rows": table}
        print(json.dumps(doc))
        return 0
    print("| linker | store | verdict | reason |\n|---|---|---|---|")
    for r in table:
        print(f"| {r['linker']} | {r['store']} | {r['verdict']} | {r['reason'].replace('|', '/')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
