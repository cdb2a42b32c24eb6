"""Targeted check of ``exists`` (a batch of HEADs) against raw boto3, with less noise than
the full benchmark: one real moto_server (free 127.0.0.1 port, stopped by PID), N pages
written once, then ours (``S3Transport.exists``), ours' own client through ``pool.map``
and raw boto3 (``pool.map`` of ``head_object``, same concurrency) measured in rotating
order, each timed call optionally preceded by untimed 8-page GETs from both sides (as in
the benchmark, where exists follows the transfers).

    .venv/bin/python backends/s3/bench/exists_check.py [--pages 8] [--size-mib 8] [--reps 16] [--idle]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)
from _server import CREDS, MotoServer  # noqa: E402
from bench_s3 import BUCKET, raw_client  # noqa: E402
from hicache_backend_s3 import S3Config, S3Transport  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=8)
    ap.add_argument("--size-mib", type=float, default=8)
    ap.add_argument("--reps", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--idle", action="store_true", help="no GETs between the timed calls")
    a = ap.parse_args()
    srv = MotoServer()
    srv.start()
    try:
        srv.make_bucket(BUCKET)
        cfg = {
            "bucket": BUCKET,
            "endpoint_url": srv.url,
            "max_concurrency": a.concurrency,
            "read_timeout_s": 10.0,
            "connect_timeout_s": 2.0,
            "transfer_timeout_s": 0,
            "access_key_id": CREDS["aws_access_key_id"],
            "secret_access_key": CREDS["aws_secret_access_key"],
        }
        t = S3Transport(S3Config.from_mapping(cfg, environ={}))
        c = raw_client(srv.url, a.concurrency)
        pool = ThreadPoolExecutor(a.concurrency)
        n, size = a.pages, int(a.size_mib * (1 << 20))
        keys = [f"k{i}" for i in range(n)]
        full = [t.prefix + k for k in keys]
        src = (ctypes.c_char * size)()
        assert t.write(keys, [[(ctypes.addressof(src), size)]] * n) == [True] * n
        dst = [(ctypes.c_char * size)() for _ in range(n)]

        def busy() -> None:
            t.read(keys, [[(ctypes.addressof(d), size)] for d in dst])
            list(pool.map(lambda k: c.get_object(Bucket=BUCKET, Key=k)["Body"].read(), full))

        fns = {
            "ours": lambda: t.exists(keys),
            "ours-client-map": lambda: list(
                t._pool.map(lambda k: t._fast.head_object(Bucket=BUCKET, Key=k), full)
            ),
            "raw": lambda: list(pool.map(lambda k: c.head_object(Bucket=BUCKET, Key=k), full)),
        }
        res: dict[str, list[float]] = {k: [] for k in fns}
        for f in fns.values():
            f()
        for r in range(a.reps):
            items = list(fns.items())
            items = items[r % len(items) :] + items[: r % len(items)]
            for k, f in items:
                if not a.idle:
                    busy()
                t0 = time.perf_counter()
                f()
                res[k].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) for k, v in res.items()}
        for k, v in med.items():
            print(f"{k:16s} {v * 1e3:8.2f} ms  raw/this {med['raw'] / v:5.2f}")
        t.close()
        pool.shutdown()
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
