"""Benchmark: the deadline runner's hop (a call handed to a worker and waited for), with and
without placing the worker on the caller's CPU, in one run.

    .venv/bin/python scripts/bench_runner.py [--gap-us 300] [--rounds 2000]
    .venv/bin/python scripts/bench_runner.py --mooncake [--rounds 600] [--fill N]

Without ``--mooncake``: a no-op call through each runner, back to back and with a sleep of
``--gap-us`` before each call (a caller that did other work in between), medians in µs. With
``--mooncake``: a real ``mooncake_master`` and holder process on loopback (the backend's test
helpers), and a 256-key ``batch_is_exist`` called inline (``raw``) and through each runner,
interleaved by the shared harness; ratio = raw time / variant time. ``--fill N`` makes N more
inline calls, untimed, before each timed one (the worker sleeps longer between hops: its
hand-off costs more the longer it slept). Runners: ``follow`` (the worker placed on the
caller's CPU: the ``follow_caller_cpu`` opt-in, where possible) and ``no-follow`` (the
default).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from collections.abc import Callable

from hicache_sdk.bench import Harness
from hicache_sdk.resilience.deadline import DeadlineRunner, can_follow_cpu


def _median_us(fn: Callable[[], object], rounds: int, gap_s: float) -> float:
    samples = []
    for _ in range(rounds):
        if gap_s:
            time.sleep(gap_s)
        t = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t)
    return statistics.median(samples) / 1e3


def noop(args: argparse.Namespace, runners: dict[str, object]) -> None:
    print(f"no-op call through each runner, median of {args.rounds} (us)")
    for gap in (0.0, args.gap_us / 1e6):
        cells = []
        for name, r in runners.items():
            run = r.run  # type: ignore[attr-defined]
            cells.append(f"{name} {_median_us(lambda run=run: run(int, 1.0), args.rounds, gap):6.1f}")
        print(f"  gap {gap * 1e6:5.0f} us: " + " | ".join(cells))


def mooncake(args: argparse.Namespace, runners: dict[str, object]) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "backends", "mooncake", "tests"))
    os.environ.setdefault("MC_LOG_LEVEL", "ERROR")
    from _servers import MooncakeCluster

    c = MooncakeCluster(holder_bytes=64 << 20)
    try:
        c.start_master()
        c.start_holder()
        raw = c.raw_client()
        names = [f"bench_{i:064x}_0_{kv}" for i in range(128) for kv in "kv"]
        buf = ctypes.create_string_buffer(4096)
        codes = raw.batch_put_from(names, [ctypes.addressof(buf)] * len(names), [4096] * len(names))
        assert codes == [0] * len(names), codes

        def call() -> object:
            return raw.batch_is_exist(names)

        h = Harness("runner-hop", {"keys": len(names)})
        h.add("raw", call)
        for name, r in runners.items():
            run = r.run  # type: ignore[attr-defined]
            h.add(name, lambda run=run: run(call, 5.0))
        fill = [call] * args.fill
        res = h.run(repeats=args.rounds, warmup=10, setup=(lambda: [f() for f in fill]) if fill else None)
        med = res.medians()
        extra = f", {args.fill} untimed inline calls before each" if args.fill else ""
        print(f"256-key batch_is_exist, holder in another process, median of {args.rounds}{extra}")
        print("  " + " | ".join(f"{k} {med[k] * 1e6:7.1f} us ratio {med['raw'] / med[k]:.3f}" for k in med))
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mooncake", action="store_true", help="around a real Mooncake batch_is_exist")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--gap-us", type=float, default=300.0)
    ap.add_argument(
        "--fill", type=int, default=0, help="--mooncake: untimed inline calls before each timed one"
    )
    args = ap.parse_args()
    args.rounds = args.rounds or (600 if args.mooncake else 2000)
    runners: dict[str, object] = {"no-follow": DeadlineRunner(2, follow_caller_cpu=False)}
    if can_follow_cpu():
        runners = {"follow": DeadlineRunner(2, follow_caller_cpu=True), **runners}
    (mooncake if args.mooncake else noop)(args, runners)
    for r in runners.values():
        r.shutdown()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
