"""``hicache demo``: two engine instances, as separate processes, over one L3 store.

Instance 1 serves a multi-turn workload (shared system prompts) and writes through to the
store; instance 2 starts cold and serves the same prefixes from storage; instance 3 uses a
different KV dtype and must get zero storage hits (the dtype is part of the model identity
in the backend's keys), never wrong bytes. KV is a deterministic function of (prefix, layer)
(:func:`hicache_sdk.hiradix.page_kv`), and every served page is compared with it.

Backend: the local-file backend in a temporary directory by default; ``--backend NAME
--config JSON`` for any installed one. ``--hybrid`` adds a Mamba state pool (TRAILING,
all-or-nothing) and an indexer pool (KV-derived, clamped) next to the KV, written before the
KV and checked byte for byte like it. ``--io-timeout`` bounds every backend call on the
resilience layer's deadline runner (real time; an abandoned call is a miss and its host slots
stay out of reuse until it ends). Exit 0 when every check holds, 1 otherwise, 2 usage.

The summary counts each instance's L3 traffic with SGLang's lifecycle counters (tokens; see
:mod:`hicache_sdk.metrics.lifecycle`): the L3 hit, what was prefetched and backed up, hit
tokens not used (``unfulfilled``) and deferred, by SGLang's reasons, and the prefetches not
attempted (``declined``, ours). Every reason shown is explained once below the table.
Progress goes to stderr; it redraws one line with carriage returns only when both stderr and
stdout are terminals, and otherwise prints a plain line now and then.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from typing import Any

HELP = "serve a multi-turn workload through two engine processes over one store (the main demo)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="file", help="backend name (file)")
    parser.add_argument("--config", default=None, help="backend settings: JSON object or @file")
    parser.add_argument("--conversations", type=int, default=6, help="conversations (6)")
    parser.add_argument("--turns", type=int, default=4, help="turns per conversation (4)")
    parser.add_argument("--page-size", type=int, default=16, help="tokens per page (16)")
    parser.add_argument("--device", default=None, help="device pool on 'cpu' or 'cuda' (auto)")
    parser.add_argument(
        "--io-timeout",
        type=float,
        default=5.0,
        help="bound on every backend call of the read/write path, seconds (5; 0: unbounded)",
    )
    parser.add_argument(
        "--hybrid",
        action="store_true",
        help="a hybrid model: Mamba state (TRAILING) and indexer (KV-derived) sidecar pools",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def workload(conversations: int, turns: int) -> list[tuple[str, list[int]]]:
    """Requests: 2 system prompts of 512 tokens, each conversation adding 96 tokens a turn."""
    systems = [[(7919 * s + 13 * i) % 32000 for i in range(512)] for s in range(2)]
    out = []
    for c in range(conversations):
        hist = list(systems[c % 2])
        for t in range(turns):
            hist += [(104729 * c + 31 * t + 7 * i) % 32000 for i in range(96)]
            out.append((f"c{c}t{t}", list(hist)))
    return out


def _instance(name: str, args: dict[str, Any], dtype_name: str, q: Any) -> None:
    import torch

    from hicache_sdk import HiCacheStorageConfig, create_backend
    from hicache_sdk.hiradix import CacheState, DevicePool, Engine, ReadPathConfig, Sidecar, ThreadRunner
    from hicache_sdk.hostpool import IndexerHostPool, MambaHostPool, MHAHostPool
    from hicache_sdk.spec import PoolHitPolicy

    dtype = getattr(torch, dtype_name)
    ps = args["page_size"]
    geom = {"layer_num": 4, "head_num": 2, "head_dim": 64}
    cfg = ReadPathConfig(page_size=ps, io_timeout_s=args["io_timeout"] or None)
    host = MHAHostPool(8192, ps, dtype=dtype, **geom)  # type: ignore[arg-type]
    dev = DevicePool(4096, ps, dtype=dtype, device=args["device"], **geom)
    model = f"hicache-demo/{dtype_name}/L{geom['layer_num']}H{geom['head_num']}D{geom['head_dim']}"
    storage = create_backend(args["backend"], HiCacheStorageConfig(model_name=model), args["config"])
    storage.register_mem_pool_host(host)
    sidecars = []
    if args["hybrid"]:
        mamba = MambaHostPool(8192 // ps, (2, 16), [(64,)], layer_num=2, dtype=dtype)
        indexer = IndexerHostPool(8192, ps, layer_num=2, index_dim=32)
        sidecars = [
            Sidecar("mamba", mamba, PoolHitPolicy.TRAILING_PAGES, 1),
            Sidecar("indexer", indexer, PoolHitPolicy.ALL_PAGES, kv_derived=True),
        ]
        for sc in sidecars:
            storage.register_mem_host_pool_v2(sc.pool, sc.name)
    state = CacheState(cfg, host, dev, storage, runner=ThreadRunner(), sidecars=sidecars)
    engine = Engine(state)
    tiers = {"gpu": 0, "host": 0, "storage": 0, "computed": 0}
    ok = True
    t0 = time.perf_counter()
    reqs = workload(args["conversations"], args["turns"])
    for i, (rid, toks) in enumerate(reqs):
        r = engine.serve(rid, toks)
        ok = ok and engine.verify(r.nodes) and engine.verify_sidecars()
        tiers["gpu"] += r.gpu_hit
        tiers["host"] += r.host_hit
        tiers["storage"] += r.storage_hit
        tiers["computed"] += r.computed
        q.put(("progress", name, i + 1, len(reqs)))
    engine.flush()
    elapsed = time.perf_counter() - t0
    state.close()
    storage.close()
    q.put(
        (
            "done",
            name,
            {
                "instance": name,
                "dtype": dtype_name,
                "requests": len(reqs),
                "bytes_ok": ok,
                "tiers_tokens": tiers,
                "prefill_tokens_saved": tiers["gpu"] + tiers["host"] + tiers["storage"],
                "pages_written": engine.writer.pages_written,
                "lifecycle_tokens": state.counters.snapshot(),
                "causes": state.counters.causes(),
                "seconds": round(elapsed, 3),
                "device": dev.device,
                "sidecars": [sc.name for sc in sidecars],
            },
        )
    )


def _interactive() -> bool:
    """Redraw progress in place only on a terminal (both streams: a piped stdout means a log)."""
    return sys.stderr.isatty() and sys.stdout.isatty()


def _run_one(name: str, args: dict[str, Any], dtype: str, show: bool) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_instance, args=(name, args, dtype, q))
    p.start()
    result: dict[str, Any] = {}
    redraw = _interactive()
    shown = -1
    while True:
        try:
            msg = q.get(timeout=120)
        except Exception:
            break
        if msg[0] == "progress" and show:
            _, _, i, n = msg
            if redraw:
                bar = "#" * (30 * i // n)
                print(f"\r{name:<12} [{bar:<30}] {i}/{n}", end="", file=sys.stderr, flush=True)
            elif 4 * i // n > shown:  # a plain line at 0 %, 25 %, 50 %, 75 % and the end
                shown = 4 * i // n
                print(f"{name:<12} {i}/{n} requests", file=sys.stderr, flush=True)
        elif msg[0] == "done":
            result = msg[2]
            break
    p.join(timeout=60)
    if show and redraw:
        print(file=sys.stderr)
    if not result:
        result = {"instance": name, "error": f"process exited with {p.exitcode}"}
    return result


def _counted(values: dict[str, int]) -> str:
    shown = {k: v for k, v in values.items() if v}
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "none"


def _print_summary(runs: list[dict[str, Any]]) -> None:
    from ..metrics import lifecycle as lc

    shown: dict[str, None] = {}
    for r in runs:
        if "error" in r:
            print(f"{r['instance']}: {r['error']}")
            continue
        t = r["tiers_tokens"]
        life = r["lifecycle_tokens"]
        print(
            f"{r['instance']:<14} dtype={r['dtype']:<9} gpu={t['gpu']:>6} host={t['host']:>6} "
            f"storage={t['storage']:>6} computed={t['computed']:>6} saved={r['prefill_tokens_saved']:>6} "
            f"written_pages={r['pages_written']:>4} {r['seconds']:.2f}s device={r['device']}"
        )
        pad = " " * 15
        print(
            f"{pad}L3 hit {life[lc.HIT]} tokens, prefetched {life[lc.PREFETCHED]}, "
            f"backed up {life[lc.BACKUPED]}, backup dropped {life[lc.BACKUP_DROPPED]}"
        )
        for label, name in (
            ("hit not used", lc.UNFULFILLED),
            ("hit deferred", lc.DEFERRED),
            ("not attempted", lc.DECLINED),
        ):
            values = life[name]
            print(f"{pad}{label:<14} {_counted(values)}")
            shown.update({k: None for k, v in values.items() if v})
    if shown:
        print(
            "reasons (tokens; sglang:storage_prefetch_*_tokens_total, hicache_prefetch_declined_tokens_total):"
        )
        for k in shown:
            print(f"  {k}: {lc.REASON_TEXT.get(k, k)}")


def run(args: argparse.Namespace) -> int:
    from ..config import parse_config_arg

    try:
        config = parse_config_arg(args.config) if args.config else {}
    except Exception as e:
        print(f"hicache demo: --config: {e}", file=sys.stderr)
        return 2
    tmp = None
    if args.backend == "file" and not config:
        tmp = tempfile.TemporaryDirectory(prefix="hicache-demo-")
        config = {"root": tmp.name}
    common = {
        "backend": args.backend,
        "config": config,
        "page_size": args.page_size,
        "conversations": args.conversations,
        "turns": args.turns,
        "device": args.device,
        "io_timeout": args.io_timeout,
        "hybrid": args.hybrid,
    }
    if args.io_timeout < 0:
        print("hicache demo: --io-timeout must be >= 0", file=sys.stderr)
        return 2
    show = not args.json
    t0 = time.perf_counter()
    try:
        runs = [
            _run_one("1-warm", common, "bfloat16", show),
            _run_one("2-cold-peer", common, "bfloat16", show),
            _run_one("3-other-dtype", common, "float16", show),
        ]
    finally:
        if tmp is not None:
            tmp.cleanup()
    checks = {
        "all_bytes_identical": all(r.get("bytes_ok") for r in runs),
        "cold_peer_served_from_storage": runs[1].get("tiers_tokens", {}).get("storage", 0) > 0,
        "other_dtype_zero_storage_hits": runs[2].get("tiers_tokens", {}).get("storage", -1) == 0,
    }
    report = {
        "backend": args.backend,
        "runs": runs,
        "checks": checks,
        "seconds": round(time.perf_counter() - t0, 2),
    }
    if args.json:
        print(json.dumps(report))
    else:
        _print_summary(runs)
        for k, v in checks.items():
            print(f"{'ok  ' if v else 'FAIL'} {k}")
        print(f"total {report['seconds']:.1f}s")
    return 0 if all(checks.values()) else 1
