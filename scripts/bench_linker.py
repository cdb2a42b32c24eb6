#!/usr/bin/env python
"""The linker benchmark of the docs: ``hicache bench NAME --engine sglang-linker`` (see
:mod:`hicache_sdk.bench.linker`) over the file backend and Mooncake (against a local
``mooncake_master`` this script starts and stops), in one process, written as one
``hicache-bench-run/1`` file that ``scripts/gen_bench_docs.py`` renders into docs/linker.md.

Run in the SGLang env::

    .tox/sglang/bin/python scripts/bench_linker.py --out docs/results/linker.json
    .venv/bin/python scripts/gen_bench_docs.py --write

On a machine without ``triton`` the test stand-ins for SGLang's GPU-only imports are
installed first (as the SGLang tests do).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _sglang() -> None:
    try:
        import triton  # noqa: F401
    except ImportError:  # a CPU machine: SGLang's GPU-only imports need the test stand-ins
        sys.path.insert(0, str(ROOT / "tests" / "sglang"))
        import sglang_standins

        sglang_standins.install()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="file,mooncake")
    p.add_argument("--pages", type=int, default=16)
    p.add_argument("--tokens-per-page", type=int, default=16)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--root", default=None, help="the file backend's folder (default: a temporary one)")
    p.add_argument("--out", default=None, help="write the hicache-bench-run/1 file here")
    args = p.parse_args(argv)
    _sglang()
    from hicache_sdk.bench.harness import BenchResult, write_run
    from hicache_sdk.bench.linker import LinkerPlan, run_linker_bench
    from hicache_sdk.cli.bench import LINKER_NOTES, _print_linker_table

    def plan(backend: str, config: dict[str, Any]) -> LinkerPlan:
        return LinkerPlan(
            backend=backend,
            config=config,
            pages=args.pages,
            tokens_per_page=args.tokens_per_page,
            layers=args.layers,
            repeats=args.repeats,
            warmup=args.warmup,
        )

    results: list[BenchResult] = []
    for backend in args.backends.split(","):
        if backend == "file":
            with tempfile.TemporaryDirectory(prefix="hicache-linker-bench-", dir=args.root) as root:
                results += run_linker_bench(plan("file", {"root": root}))
        elif backend == "mooncake":
            sys.path.insert(0, str(ROOT / "backends" / "mooncake" / "tests"))
            from _servers import MooncakeCluster

            page = plan("mooncake", {}).page_bytes()
            rounds = args.repeats + args.warmup
            cluster = MooncakeCluster(holder_bytes=2 * args.pages * rounds * page + (64 << 20))
            cluster.start()
            try:
                results += run_linker_bench(plan("mooncake", cluster.config()))
            finally:
                cluster.stop()
        else:
            raise SystemExit(f"unknown backend {backend!r} (file, mooncake)")
    docs = [r.to_json() for r in results]
    _print_linker_table(docs)
    if args.out:
        command = shlex.join([".tox/sglang/bin/python", "scripts/bench_linker.py", *(argv or sys.argv[1:])])
        write_run(docs, args.out, command=command, notes=LINKER_NOTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
