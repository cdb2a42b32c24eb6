"""``hicache bench NAME --config ...`` and ``hicache bench plot FILE... -o OUT``.

``hicache bench NAME``: set / get / exists of a backend across page sizes (``--page-bytes``,
human sizes, several) and batch sizes (``--batch``, several), timed by the shared harness
(see :mod:`hicache_sdk.bench.runner`): throughput, median and p50/p90/p99 latency per call,
and the ratio to the machine's memory-copy limit measured in the same run. A progress bar
goes to stderr (``--progress auto``: when stderr is a terminal; ``tqdm`` is used when
installed, a plain bar otherwise). ``--json`` prints the ``hicache-bench/1`` documents (a
JSON list) instead of the table; ``--out FILE`` also writes them; ``--plot OUT.png`` draws
them (needs ``hicache-sdk[plot]``).

``hicache bench NAME --engine sglang-linker``: SGLang's unified cache linker
(:class:`~hicache_sdk.sglang.linker.TransportLinker`) over backend ``NAME`` on SGLang's CPU
device pools (SGLang 0.5.23 or later must be importable): load throughput against a raw
transport read of the same pages, time to the first layer with and without ranged reads,
and offload throughput against a raw write, in one run of ``--repeats`` interleaved rounds
(default 5; see :mod:`hicache_sdk.bench.linker`). ``--pages``, ``--layers`` and
``--tokens-per-page`` set the batch; ``--out FILE`` writes a ``hicache-bench-run/1`` file
(what ``scripts/gen_bench_docs.py`` renders).

``hicache bench plot A.json B.json -o OUT.png``: draws documents of several runs (of this
command or of a backend's benchmark script) side by side, one column per backend, with the
raw-client and limit lines they carry. (A backend cannot be named ``plot`` here.)

Exit: 0 measured (every call reported all pages stored / read / present), 1 some call
missed (``params.failures`` > 0) or the backend failed mid-run, 2 usage or configuration
error, or a missing extra (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from .._extras import MissingExtraError
from ..config import parse_config_arg
from ..config.units import parse_size
from ..errors import HiCacheError
from .memory_guard import check_fits

HELP = "benchmark set/get/exists of a backend (throughput, p50/p90/p99); 'bench plot' draws results"
ENGINES = ("hicache", "sglang-linker")
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Only for the top-level help: ``bench`` parses its own arguments (passthrough)."""
    parser.add_argument("args", nargs=argparse.REMAINDER, help="NAME [options], or: plot FILE... -o OUT")


def _size(text: str) -> int:
    try:
        return parse_size(text, "--page-bytes")
    except HiCacheError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def bench_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hicache bench", description=HELP)
    p.add_argument("name", help="backend name (or 'package.module:Class')")
    p.add_argument("--config", default=None, help="backend settings: JSON object or @file")
    p.add_argument("--dist", default=None, help="pick the distribution providing NAME")
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="hicache",
        help="hicache: the backend's own calls; sglang-linker: SGLang's unified cache linker over it",
    )
    p.add_argument("--ops", default="set,get,exists", help="comma-separated subset of set,get,exists")
    p.add_argument("--page-bytes", nargs="+", type=_size, default=[64 << 10], help="page sizes (64K)")
    p.add_argument("--batch", nargs="+", type=_positive, default=[1, 8, 32], help="pages per call (1 8 32)")
    p.add_argument("--tokens-per-page", type=_positive, default=16, help="tokens per page (16)")
    p.add_argument("--layout", choices=LAYOUTS, default="page_first", help="host layout (page_first)")
    p.add_argument("--repeats", type=_positive, default=None, help="timed calls per cell (10; linker: 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed calls per cell (1)")
    p.add_argument("--pages", type=_positive, default=16, help="linker: pages per batch (16)")
    p.add_argument("--layers", type=_positive, default=32, help="linker: model layers (32)")
    p.add_argument("--no-limit", action="store_true", help="skip the memory-copy limit variant")
    p.add_argument("--progress", choices=("auto", "always", "never"), default="auto")
    p.add_argument("--json", action="store_true", help="print the hicache-bench/1 documents")
    p.add_argument("--out", default=None, help="also write the documents to this JSON file")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="draw the results (hicache-sdk[plot])")
    return p


def plot_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hicache bench plot", description="draw hicache-bench/1 results")
    p.add_argument("files", nargs="+", help="result files (.json list/document or .jsonl)")
    p.add_argument("-o", "--out", required=True, help="image to write (.png, .svg, .pdf)")
    p.add_argument("--title", default="", help="figure title")
    return p


def run(argv: Sequence[str]) -> int:
    """Dispatch ``plot`` or a benchmark run; see the module docs for exit codes."""
    argv = list(argv)
    if argv and argv[0] == "plot":
        return _run_plot(plot_parser().parse_args(argv[1:]))
    args = bench_parser().parse_args(argv)
    if args.engine == "sglang-linker":
        return _run_linker(args)
    return _run_bench(args)


def _fail(msg: str, code: int = 2) -> int:
    print(f"hicache bench: {msg}", file=sys.stderr)
    return code


def _run_plot(args: argparse.Namespace) -> int:
    from ..bench.plot import load_docs, plot

    try:
        path = plot(load_docs(args.files), args.out, title=args.title)
    except (MissingExtraError, ValueError, OSError) as e:
        return _fail(str(e))
    print(f"wrote {path}", file=sys.stderr)
    return 0


def _run_bench(args: argparse.Namespace) -> int:
    from ..bench.progress import Progress
    from ..bench.runner import BenchPlan, human_bytes, run_plan

    if args.plot:  # fail before measuring, not after
        try:
            from .._extras import require

            require("matplotlib", "plot", what="--plot")
        except MissingExtraError as e:
            return _fail(str(e))
    try:
        config = parse_config_arg(args.config)
        plan = BenchPlan(
            backend=args.name,
            config=config,
            ops=tuple(o.strip() for o in args.ops.split(",") if o.strip()),
            page_bytes=tuple(args.page_bytes),
            batches=tuple(args.batch),
            tokens_per_page=args.tokens_per_page,
            layout=args.layout,
            repeats=args.repeats or 10,
            warmup=max(0, args.warmup),
            limit=not args.no_limit,
            dist=args.dist,
        )
    except (HiCacheError, ValueError, OSError) as e:
        return _fail(str(e))
    too_big = check_fits(
        plan.host_bytes(), f"--batch {max(plan.batches)} of --page-bytes {human_bytes(max(plan.page_bytes))}"
    )
    if too_big:
        return _fail(too_big)
    show = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    bar = Progress(plan.total_calls(), enabled=show)
    try:
        results = run_plan(plan, bar)
    except (HiCacheError, ValueError, TypeError) as e:
        bar.close()
        return _fail(str(e))
    except Exception as e:
        bar.close()
        return _fail(f"{args.name} failed mid-run: {type(e).__name__}: {e}", 1)
    docs = [r.to_json() for r in results]
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(docs, f, indent=1, sort_keys=True)
    if args.json:
        json.dump(docs, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        _print_table(docs)
    if args.plot:
        from ..bench.plot import plot

        try:
            plot(docs, args.plot, title=f"hicache bench {args.name}")
        except (MissingExtraError, ValueError, OSError) as e:
            return _fail(str(e))
    failed = sum(int(d["params"].get("failures", 0)) for d in docs)
    if failed:
        print(f"hicache bench: {failed} call(s) did not report every page (params.failures)", file=sys.stderr)
    return 1 if failed else 0


def _run_linker(args: argparse.Namespace) -> int:
    from ..bench.harness import write_run
    from ..bench.linker import LinkerPlan, run_linker_bench
    from ..bench.progress import Progress
    from ..bench.runner import human_bytes

    if args.plot:
        return _fail("--plot: not for --engine sglang-linker")
    try:
        import sglang.srt.mem_cache.unified_cache.linker_factory  # noqa: F401
    except Exception as e:
        return _fail(
            f"--engine sglang-linker needs SGLang 0.5.23 or later, importable here ({type(e).__name__}: {e})"
        )
    try:
        plan = LinkerPlan(
            backend=args.name,
            config=parse_config_arg(args.config),
            pages=args.pages,
            tokens_per_page=args.tokens_per_page,
            layers=args.layers,
            repeats=args.repeats or 5,
            warmup=max(0, args.warmup),
        )
    except (HiCacheError, ValueError, OSError) as e:
        return _fail(str(e))
    too_big = check_fits(plan.host_bytes(), f"--pages {plan.pages} of {human_bytes(plan.page_bytes())}")
    if too_big:
        return _fail(too_big)
    show = args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty())
    bar = Progress(plan.warmup + plan.repeats, enabled=show)
    try:
        results = run_linker_bench(plan, bar.tick)
    except (HiCacheError, ValueError, TypeError) as e:
        return _fail(str(e))
    except Exception as e:
        return _fail(f"{args.name} failed mid-run: {type(e).__name__}: {e}", 1)
    finally:
        bar.close()
    docs = [r.to_json() for r in results]
    if args.out:
        write_run(docs, args.out, notes=LINKER_NOTES)
    if args.json:
        json.dump(docs, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        _print_linker_table(docs)
    return 0


#: The notes of a linker run file.
LINKER_NOTES = (
    "TransportLinker on SGLang's CPU MHATokenToKVPool (8 KV heads of 128, bfloat16), built by "
    "SGLang's factory (dynamic). load: load + start_layer_wise_loading until "
    "finish_layer_wise_loading returns True; 'linker' is the default (layer by layer through "
    "ranged reads where the transport reads ranges cheaply), 'raw read' the raw transport "
    "reading the same objects into the same memory (ours vs raw read: the load's fraction of "
    "the raw read); 'raw ranged read' the raw transport reading the same byte ranges into the "
    "same memory as the layer-by-layer load (one ranged read per layer group for every page), "
    "nothing else; load-page-by-page: the same with ranged_reads false, against the same raw "
    "read samples. layer0: from start_layer_wise_loading until wait_until(0) returns. "
    "offload: offload until its result pops, against the raw transport writing as many "
    "objects of the same size. Rounds interleaved in a balanced order."
)


def _print_linker_table(docs: list[dict[str, Any]]) -> None:
    print(f"{'case':<24}{'variant':<24}{'median ms':>11}{'GB/s':>8}{'ours vs this':>14}")
    for d in docs:
        labels = list(d["results"])
        med0 = d["results"][labels[0]]["median_s"]
        for i, label in enumerate(labels):
            r = d["results"][label]
            vs = f"{r['median_s'] / med0:.2f}" if i and med0 else ""
            gbps = f"{r['gbps']:.2f}" if r["gbps"] else ""
            name = d["name"] if i == 0 else ""
            print(f"{name:<24}{label:<24}{r['median_s'] * 1e3:>11.2f}{gbps:>8}{vs:>14}")


def _print_table(docs: list[dict[str, Any]]) -> None:
    from ..bench.runner import human_bytes

    head = (
        f"{'op':<7}{'page':>8}{'batch':>6}  {'label':<13}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'rate':>14}"
    )
    print(head)
    for d in docs:
        p = d["params"]
        for label, r in d["results"].items():
            if r["nbytes"]:
                rate = f"{r['gbps']:.3f} GB/s"
            else:
                rate = f"{p['batch'] / r['median_s']:.0f} keys/s" if r["median_s"] > 0 else "-"
            print(
                f"{p['op']:<7}{human_bytes(p['page_bytes']):>8}{p['batch']:>6}  {label:<13}"
                f"{r['p50_s'] * 1e3:>9.3f}{r['p90_s'] * 1e3:>9.3f}{r['p99_s'] * 1e3:>9.3f}{rate:>14}"
            )
        for k, v in d["ratios"].items():
            print(f"{'':<23}{k}: {v:.2f}")
