# ruff: noqa: B023  (every lambda below is called at once, inside its loop iteration)
"""Benchmark: the s3 transport vs raw boto3 at the same concurrency, on a real moto_server
started here (free 127.0.0.1 port, stopped by PID), directly and through a loopback proxy
that adds latency to every request. Prints throughput and ratios measured in this one run.

    .venv/bin/python backends/s3/bench/bench_s3.py [--rounds 3] [--delay-ms 20]

Per size (64 x 256 KiB, 8 x 8 MiB) and op (set / get / exists): ours (S3Transport, page
memory, ``max_concurrency=C``), raw boto3 (a ThreadPoolExecutor of C over put_object /
get_object().read() / head_object on one client) and, through the proxy, a sequential
raw-boto3 loop. Each figure is the median of ``--rounds`` (after one warm-up round); ``spread`` is
the range of the per-round ratios raw/ours. Ours and raw alternate which runs first in a round.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from _proxy import LatencyProxy  # noqa: E402
from _server import CREDS, MotoServer  # noqa: E402
from botocore.config import Config  # noqa: E402
from hicache_backend_s3 import S3Config, S3Transport  # noqa: E402

BUCKET = "bench"


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process: every thread, not the server's)."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def raw_client(url: str, conc: int) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        config=Config(
            max_pool_connections=conc + 4,
            retries={"mode": "standard"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
        **CREDS,
    )


def run(url: str, n: int, size: int, conc: int, rounds: int, sequential: bool) -> dict[str, Any]:
    t = S3Transport(
        S3Config.from_mapping(
            {
                "bucket": BUCKET,
                "endpoint_url": url,
                "max_concurrency": conc,
                "read_timeout_s": 10.0,
                "connect_timeout_s": 2.0,
                "transfer_timeout_s": 0,
                "access_key_id": CREDS["aws_access_key_id"],
                "secret_access_key": CREDS["aws_secret_access_key"],
            },
            environ={},
        )
    )
    c = raw_client(url, conc)
    pool = ThreadPoolExecutor(conc)
    src = (ctypes.c_char * size)()
    ctypes.memset(src, 0x5A, size)
    dst = [(ctypes.c_char * size)() for _ in range(n)]
    data = bytes(src.raw)
    segs = [(ctypes.addressof(src), size)]
    res: dict[str, list[tuple[float, ...]]] = {"set": [], "get": [], "exists": []}

    def put(k: str) -> Any:
        return c.put_object(Bucket=BUCKET, Key=k, Body=data)

    def get(k: str) -> Any:
        return c.get_object(Bucket=BUCKET, Key=k)["Body"].read()

    def head(k: str) -> Any:
        return c.head_object(Bucket=BUCKET, Key=k)

    for rnd in range(rounds + 1):  # round 0 warms both sides up (connections, the write probe)
        tag = uuid.uuid4().hex[:8]
        ours = [f"o{tag}/{i}" for i in range(n)]
        raws = [f"hicache/r{tag}/{i}" for i in range(n)]
        seqs = [f"hicache/s{tag}/{i}" for i in range(n)]
        full_ours = [t.prefix + k for k in ours]
        for d in dst:  # a read that lands nothing must fail the check below
            ctypes.memset(d, 0, size)
        rows: dict[str, dict[str, float]] = {}
        ops: dict[str, dict[str, Callable[[], Any]]] = {
            "set": {
                "ours": lambda: t.write(ours, [segs] * n),
                "raw": lambda: list(pool.map(put, raws)),
                "seq": lambda: [put(k) for k in seqs],
            },
            "get": {
                "ours": lambda: t.read(ours, [[(ctypes.addressof(d), size)] for d in dst]),
                "raw": lambda: list(pool.map(get, full_ours)),
                "seq": lambda: [get(k) for k in full_ours],
            },
            "exists": {
                "ours": lambda: t.exists(ours),
                "raw": lambda: list(pool.map(head, full_ours)),
                "seq": lambda: [head(k) for k in full_ours],
            },
        }
        for op, variants in ops.items():
            # ours and raw alternate which goes first (odd rounds: raw first), so that
            # neither always follows the other's load on the server (e.g. exists after
            # 64 MiB of GETs); the sequential loop, when asked for, runs last.
            first = ["ours", "raw"] if rnd % 2 == 0 else ["raw", "ours"]
            order = first + (["seq"] if sequential else [])
            times = {v: timed(variants[v]) for v in order}
            rows[op] = {
                "ours": times["ours"][0],
                "raw": times["raw"][0],
                "seq": times["seq"][0] if sequential else 0.0,
                "ours_cpu": times["ours"][1],
                "raw_cpu": times["raw"][1],
            }
            if op == "get":
                assert all(bytes(d.raw) == data for d in dst)
        row = {op: (r["ours"], r["raw"], r["seq"], r["ours_cpu"], r["raw_cpu"]) for op, r in rows.items()}
        for k, v in row.items():
            if rnd:
                res[k].append(v)
        t.clear("")
        c.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in raws + seqs]})
    t.close()
    pool.shutdown()
    return res


def report(label: str, n: int, size: int, res: dict[str, Any], sequential: bool) -> None:
    for op, rows in res.items():
        mb = n * size / 1e6
        o = statistics.median(r[0] for r in rows)
        r = statistics.median(r[1] for r in rows)
        ratios = [x[1] / x[0] for x in rows]
        cpu = statistics.median(x[4] for x in rows) / max(statistics.median(x[3] for x in rows), 1e-9)
        line = (
            f"{label:10s} {op:6s} {n:3d} x {size >> 10:5d} KiB  ours {o * 1e3:8.1f} ms"
            f" ({mb / o if op != 'exists' else n / o:8.1f} {'MB/s' if op != 'exists' else 'op/s'})"
            f"  raw {r * 1e3:8.1f} ms  ours/raw {r / o:5.2f} (spread {min(ratios):.2f}..{max(ratios):.2f},"
            f" per-round median {statistics.median(ratios):.2f})  client CPU ours/raw {cpu:4.2f}"
        )
        if sequential:
            s = statistics.median(x[2] for x in rows)
            line += f"  vs sequential {s / o:5.2f}x"
        print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--delay-ms", type=float, default=20.0)
    ap.add_argument("--sizes", default="256k,8m", help="page sizes to run: 256k and/or 8m")
    ap.add_argument("--paths", default="direct,proxy", help="direct and/or proxy (+delay)")
    a = ap.parse_args()
    sizes = {"256k": (64, 256 << 10), "8m": (8, 8 << 20)}
    todo = [sizes[x] for x in a.sizes.split(",")]
    paths = a.paths.split(",")
    srv = MotoServer()
    srv.start()
    proxy = None
    try:
        srv.make_bucket(BUCKET)
        proxy = LatencyProxy(srv.port, a.delay_ms / 1000)
        for n, size in todo:
            if "direct" in paths:
                report("direct", n, size, run(srv.url, n, size, a.concurrency, a.rounds, False), False)
            if "proxy" in paths:
                lbl = f"+{a.delay_ms:g}ms"
                report(lbl, n, size, run(proxy.url, n, size, a.concurrency, a.rounds, True), True)
    finally:
        if proxy is not None:
            proxy.close()
        srv.stop()


if __name__ == "__main__":
    main()
