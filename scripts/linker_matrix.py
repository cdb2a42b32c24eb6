#!/usr/bin/env python
"""The linker compatibility table: which linkers serve SGLang 0.5.23's unified cache
linker, with reasons (run in the SGLang env: ``.tox/sglang/bin/python scripts/linker_matrix.py
--docs docs/linker.md``).

Rows:

* ``TransportLinker`` over each of our four backends (file; Redis, S3 and Mooncake against
  a real ``redis-server``, ``moto_server`` and ``mooncake_master`` this script starts and
  stops): every check of ``hicache_conformance.linker_contract``;
* SGLang's own Mooncake linker (``--unified-cache-external-linker-backend mooncake``) on a
  plain MHA model's pools against the real ``mooncake_master``: built by SGLang's factory;
* ``sglang-fs-linker`` 0.1.0, the only outside linker on the package index
  (``--fs-linker DIR``: a folder it is installed into with ``pip install --no-deps
  --target DIR sglang-fs-linker==0.1.0``),
  through the ``dynamic`` factory.

Each verdict is ``certified`` (every check passed), ``fails`` (a check failed: its
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- linker-matrix:start -->", "<!-- linker-matrix:end -->"
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
    from types import SimpleNamespace

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


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", default=None)
    p.add_argument("--fs-linker", default=None, help="folder holding sglang-fs-linker 0.1.0")
    args = p.parse_args()
    _sglang()
    rows: list[tuple[str, str, str, str]] = []
    ours = "hicache_sdk.sglang.linker:TransportLinker"
    for name in ("file", "redis", "s3", "mooncake"):
        with _backend(name) as cfg:
            try:
                verdict, why = _certify(ours, {"backend": name, "backend_config": cfg})
            except Exception as e:
                verdict, why = "fails", f"{type(e).__name__}: {e}"
            rows.append(("hicache-sdk TransportLinker", name, verdict, why))
            if name == "mooncake":
                try:
                    verdict, why = _sglang_mooncake(cfg)
                except Exception:
                    verdict, why = "error", traceback.format_exc().splitlines()[-1]
                rows.append(("SGLang MooncakeDirectLinker", "mooncake (plain MHA model)", verdict, why))
    if args.fs_linker:
        sys.path.insert(0, args.fs_linker)
        with _backend("file") as cfg:
            verdict, why = _certify("sglang_fs_linker.linker:FileSystemLinker", {"root": cfg["root"]})
        rows.append(("sglang-fs-linker 0.1.0", "its own files", verdict, why))
    text = "| linker | store | verdict | reason |\n|---|---|---|---|\n" + "\n".join(
        f"| {a} | {b} | {c} | {d.replace('|', '/')} |" for a, b, c, d in rows
    )
    print(text)
    if args.docs:
        page = Path(args.docs)
        doc = page.read_text(encoding="utf-8")
        i, j = doc.index(START) + len(START), doc.index(END)
        page.write_text(doc[:i] + "\n" + text + "\n" + doc[j:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
