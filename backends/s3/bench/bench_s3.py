"""Benchmark: the ``s3`` backend against raw boto3 at the same concurrency, on one S3 server
(a ``moto_server`` started here on a free 127.0.0.1 port and stopped by PID, or
``--endpoint URL`` for a server of yours, such as SeaweedFS ``weed mini``).

    python backends/s3/bench/bench_s3.py [--repeats 5] [--out docs/results/s3.json]

Per page size (64 x 256 KiB, 8 x 8 MiB) and op, one interleaved harness run
(:class:`hicache_sdk.bench.Harness`, ``--repeats`` timed rounds after a warm-up):

* ``ours``: ``S3Storage`` with its default settings (``max_concurrency`` 16, 5 s transfer
  deadline with staging, 2 s existence deadline) on a bfloat16 MHA host pool
  (``page_first``): ``batch_set_v1`` of fresh pages, ``batch_get_v1`` of stored ones,
  ``batch_exists`` of stored ones;
* ``raw_boto3``: one boto3 client, a thread pool of the same 16 over ``put_object`` (the
  page as ``bytes``), ``get_object()["Body"].read()``, ``head_object``;
* ``transport``: the backend's ``S3Transport`` alone, called inline on the same page
  memory (no adapter, no deadline, no staging): what the layers above it cost.

Against a local server both sides are bound by the server, so the wall-clock ratio alone
proves little: each case is also timed with the process's CPU clock (``-cpu`` cases: the
client's CPU seconds, every thread of this process, none of the server's). There "ours vs
raw" above 1 means ours spends less CPU per byte. ``--out`` writes the run with
:func:`hicache_sdk.bench.harness.write_run` (``scripts/gen_bench_docs.py`` renders it).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from _server import CREDS, MotoServer  # noqa: E402
from botocore.config import Config  # noqa: E402
from hicache_backend_s3 import S3Storage  # noqa: E402

from hicache_sdk.bench import Harness  # noqa: E402
from hicache_sdk.bench.harness import BenchResult, write_run  # noqa: E402
from hicache_sdk.hostpool import MHAHostPool  # noqa: E402
from hicache_sdk.spec import HiCacheStorageConfig  # noqa: E402

BUCKET = "bench"
CONCURRENCY = 16  # S3Config.max_concurrency's default: raw boto3 gets the same
TOKENS = 16
HEADS, HEAD_DIM = 8, 128  # bytes per token and layer: 2 (K, V) * 8 * 128 * 2 (bfloat16) = 4 KiB


def raw_client(url: str) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=url,
        region_name="us-east-1",
        config=Config(
            max_pool_connections=CONCURRENCY + 4,
            retries={"mode": "standard"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
        **CREDS,
    )


def fresh_hashes(tag: str, n: int) -> Iterator[list[str]]:
    """Endless batches of page hashes never used before (a set of a stored page is a no-op)."""
    k = 0
    while True:
        k += 1
        yield [hashlib.sha256(f"{tag}-{k}-{i}".encode()).hexdigest() for i in range(n)]


def bench_size(url: str, n: int, page_bytes: int, repeats: int) -> list[BenchResult]:
    layers = page_bytes // (2 * HEADS * HEAD_DIM * 2 * TOKENS)
    pool = MHAHostPool(
        n * TOKENS,
        TOKENS,
        layers,
        HEADS,
        HEAD_DIM,
        dtype=torch.bfloat16,
        layout="page_first",
        pin_memory=False,
    )
    pool.kv_buffer.view(torch.uint8).copy_(
        torch.randint(0, 256, pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8)
    )
    idx = torch.arange(n * TOKENS, dtype=torch.int64)
    run = uuid.uuid4().hex[:8]
    cfg = {
        "bucket": BUCKET,
        "endpoint_url": url,
        "prefix": f"bench-{run}/",
        "access_key_id": CREDS["aws_access_key_id"],
        "secret_access_key": CREDS["aws_secret_access_key"],
    }
    s = S3Storage(HiCacheStorageConfig(model_name="bench/model", extra_config=cfg), {})
    s.register_mem_pool_host(pool)
    c = raw_client(url)
    workers = ThreadPoolExecutor(CONCURRENCY)
    body = bytes(pool.kv_buffer.view(torch.uint8).flatten()[:page_bytes].numpy())
    stored = [hashlib.sha256(f"{run}-stored-{i}".encode()).hexdigest() for i in range(n)]
    assert s.batch_set_v1(stored, idx) == [True] * n
    raw_stored = [f"raw-{run}/stored/{i}" for i in range(n)]
    list(workers.map(lambda k: c.put_object(Bucket=BUCKET, Key=k, Body=body), raw_stored))
    ours_new, raw_new = fresh_hashes(f"{run}-ours", n), fresh_hashes(f"{run}-raw", n)
    written_raw: list[str] = []

    def ours_set() -> None:
        assert s.batch_set_v1(next(ours_new), idx) == [True] * n

    def raw_set() -> None:
        keys = [f"raw-{run}/{h}" for h in next(raw_new)]
        written_raw.extend(keys)
        list(workers.map(lambda k: c.put_object(Bucket=BUCKET, Key=k, Body=body), keys))

    def ours_get() -> None:
        assert s.batch_get_v1(stored, idx) == [True] * n

    def raw_get() -> None:
        got = list(workers.map(lambda k: c.get_object(Bucket=BUCKET, Key=k)["Body"].read(), raw_stored))
        assert all(len(g) == page_bytes for g in got)

    def ours_exists() -> None:
        assert s.batch_exists(stored) == n

    t = s.raw_transport
    page_segs = [[(pool.kv_buffer.data_ptr() + i * page_bytes, page_bytes)] for i in range(n)]
    t_stored = [f"transport/{h}" for h in stored]
    assert t.write(t_stored, page_segs) == [True] * n
    t_new = fresh_hashes(f"{run}-transport", n)

    def transport_set() -> None:
        assert t.write([f"transport/{h}" for h in next(t_new)], page_segs) == [True] * n

    def transport_get() -> None:
        assert t.read(t_stored, page_segs) == [True] * n

    def transport_exists() -> None:
        assert None not in t.exists(t_stored)

    def raw_exists() -> None:
        list(workers.map(lambda k: c.head_object(Bucket=BUCKET, Key=k), raw_stored))

    params = {
        "pages": n,
        "page_bytes": page_bytes,
        "concurrency": CONCURRENCY,
        "server": "moto_server" if "127.0.0.1" in url else url,
    }
    ops: list[tuple[str, Callable[[], None], Callable[[], None], Callable[[], None], int]] = [
        ("set", ours_set, raw_set, transport_set, n * page_bytes),
        ("get", ours_get, raw_get, transport_get, n * page_bytes),
        ("exists", ours_exists, raw_exists, transport_exists, 0),
    ]
    kib = page_bytes >> 10
    out: list[BenchResult] = []
    for op, ours, raw, transport, nbytes in ops:
        for suffix, timer in (("", time.perf_counter), ("-cpu", time.process_time)):
            h = Harness(f"s3-{op}-{kib}KiB{suffix}", params, timer=timer)
            h.add("ours", ours, nbytes=nbytes)
            h.add("raw_boto3", raw, nbytes=nbytes)
            h.add("transport", transport, nbytes=nbytes)
            res = h.run(repeats=repeats, warmup=1)
            res.print_table()
            print(flush=True)
            out.append(res)
    s.clear()
    t.clear("transport/")
    for i in range(0, len(written_raw) + n, 1000):
        chunk = (written_raw + raw_stored)[i : i + 1000]
        if chunk:
            c.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in chunk]})
    s.close()
    workers.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--sizes", default="256k,8m", help="page sizes: 256k (64 pages) and/or 8m (8 pages)")
    ap.add_argument("--endpoint", default="", help="an S3 server of yours (bucket 'bench' must exist)")
    ap.add_argument("--out", default="", help="write the run here (hicache-bench-run/1)")
    a = ap.parse_args()
    sizes = {"256k": (64, 256 << 10), "8m": (8, 8 << 20)}
    srv = None
    url = a.endpoint
    if not url:
        srv = MotoServer()
        srv.start()
        srv.make_bucket(BUCKET)
        url = srv.url
    try:
        results: list[BenchResult] = []
        for name in a.sizes.split(","):
            n, size = sizes[name]
            results += bench_size(url, n, size, a.repeats)
    finally:
        if srv is not None:
            srv.stop()
    if a.out:
        server = "a moto_server started by the script" if srv is not None else "the server at --endpoint"
        write_run(
            results,
            a.out,
            notes=(
                f"Against {server}, on the same machine. `-cpu` cases time the client's CPU "
                "(every thread of the benchmark process; the server's excluded): there "
                "'ours vs this' above 1 means ours spends less CPU for the same pages."
            ),
        )


if __name__ == "__main__":
    main()
