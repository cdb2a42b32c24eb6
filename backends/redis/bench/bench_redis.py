"""Benchmark of the redis backend against LMCache's native RESP client and raw redis-py on
the same data, in one run.

    pip download lmcache==0.5.6 --no-deps -d /tmp/lmc && (cd /tmp/lmc && unzip -q lmcache-0.5.6-*.whl 'lmcache/*')
    python backends/redis/bench/bench_redis.py --lmcache-dir /tmp/lmc --repeats 11 --record docs/results/redis.json
    options: --page-kib 256 8192  --pages 128 32  --repeats 5  --out FILE (the results as a JSON list)

Starts its own ``redis-server`` (free loopback port, no persistence; killed at the end).
Variants (ratios are of median times; ours/raw <= 1.11 means >= 90 % of raw throughput):
* get: ``batch_get_v1`` into a real MHA host pool vs redis-py ``MGET`` (hiredis parser) and a
  copy of each value into a preallocated buffer;
* set: ``batch_set_v1`` vs a redis-py pipeline of ``SET`` (memoryview values, no
  transaction); the database is flushed before every call (untimed);
* exists: ``batch_exists`` vs a redis-py pipeline of ``EXISTS``;
* ``ours_inline``: the same with ``transfer_timeout_s = 0`` (no deadline: no worker hop and
  no cancel token);
* ``--lmcache-dir DIR`` (an unpacked ``lmcache-0.5.6`` wheel; ``pip download lmcache==0.5.6
  --no-deps`` then unzip): the peer, LMCache's native RESP client, on the same keys and buffers;
* ``--cluster``: get and set over a 3-master cluster vs redis-py's ``RedisCluster``;
* ``redis-benchmark -t set,get -d <page bytes> -P 16 -c 4`` for context.

Each operation is two tables measured one after the other in the same run: ours,
``ours_inline`` and the peer in interleaved rounds, then ours against raw redis-py (table name
``...-vs-raw``). Raw redis-py's ``MGET`` of a whole batch makes the single-threaded server
build one 32 MiB reply, which slowed whichever call came next by 10-40 % (ours and the peer
alike, by how much varied run to run); in its own table it cannot tilt the comparison with the
peer. ``--one-table`` puts all four in the same rounds.

``--record docs/results/redis.json`` writes the run (``hicache_sdk.bench.harness.write_run``:
the command, the date, every case) for ``scripts/gen_bench_docs.py`` to render into
``docs/backends/redis.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import select
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import redis
import torch
from hicache_backend_redis import RedisStorage

from hicache_sdk.bench import Harness
from hicache_sdk.bench.harness import write_run
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.spec import HiCacheStorageConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _redis_servers import RedisClusterServers, RedisServer

TOKENS = 64

#: A benchmark variant: label, the call, bytes moved per call (0: none counted).
Variant = tuple[str, Callable[[], object], int]


def storage(url: str, pool: Any, **extra: Any) -> RedisStorage:
    cfg = {"url": url, "key_prefix": "b:", **extra}
    sc = HiCacheStorageConfig(model_name="meta-llama/Llama-3-8B", extra_config=cfg)
    s = RedisStorage(sc, {})
    s.register_mem_pool_host(pool)
    return s


class Peer:
    """LMCache 0.5.6's native RESP client (``lmcache.lmcache_redis.LMCacheRedisClient``, the
    engine of its ``resp://`` connector), loaded by path from an unpacked wheel: nothing is
    installed. Synchronous use the way LMCache's ``batch_get_sync`` does it: submit, then wait
    on its eventfd and drain completions."""

    def __init__(self, lmcache_dir: str, port: int, workers: int) -> None:
        import glob
        import importlib.util

        so = glob.glob(os.path.join(lmcache_dir, "lmcache", "lmcache_redis*.so"))[0]
        spec = importlib.util.spec_from_file_location("lmcache_redis", so)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        self.client = mod.LMCacheRedisClient("127.0.0.1", port, workers)
        self.fd = self.client.event_fd()

    def wait(self, fid: int) -> Any:
        while True:
            for item in self.client.drain_completions():
                if int(item[0]) == fid:
                    assert item[1], item[2]
                    return item[3]
            select.select([self.fd], [], [], 1.0)

    def get(self, names: list[str], views: list[memoryview]) -> None:
        self.wait(int(self.client.submit_batch_get(names, views)))

    def set(self, names: list[str], views: list[memoryview]) -> None:
        self.wait(int(self.client.submit_batch_set(names, views)))

    def exists(self, names: list[str]) -> Any:
        return self.wait(int(self.client.submit_batch_exists(names)))


def bench_page(args: argparse.Namespace, srv: RedisServer, page_kib: int, n: int) -> list[Any]:
    layers = page_kib * 1024 // (2 * 8 * 128 * 2 * TOKENS)
    pool = MHAHostPool(
        n * TOKENS, TOKENS, layers, 8, 128, dtype=torch.bfloat16, layout="page_first", pin_memory=False
    )
    pool.kv_buffer.view(torch.uint8).copy_(
        torch.randint(0, 256, pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8)
    )
    idx = torch.arange(n * TOKENS, dtype=torch.int64)
    keys = [hashlib.sha256(f"{page_kib}-{i}".encode()).hexdigest() for i in range(n)]
    r = redis.Redis(host="127.0.0.1", port=srv.port)
    r.flushdb()
    s = storage(srv.url, pool)
    s_inline = storage(srv.url, pool, transfer_timeout_s=0)
    assert s.batch_set_v1(keys, idx) == [True] * n
    names = sorted(k.decode() for k in r.scan_iter("b:*", count=1000))
    assert len(names) == n
    size = int(r.strlen(names[0]))
    total = size * n
    arena = np.empty(total, np.uint8)
    mv = memoryview(arena)
    params = {"pages": n, "page_bytes": size, "model": "Llama-3-8B MHA bf16, 64 tok/page", "layers": layers}

    def ours_get() -> None:
        assert s.batch_get_v1(keys, idx) == [True] * n

    def ours_get_inline() -> None:
        assert s_inline.batch_get_v1(keys, idx) == [True] * n

    def raw_get() -> None:
        for i, v in enumerate(r.mget(names)):
            mv[i * size : (i + 1) * size] = v

    peer = Peer(args.lmcache_dir, srv.port, args.peer_workers) if args.lmcache_dir else None
    views = [mv[i * size : (i + 1) * size] for i in range(n)]
    results: list[Any] = []

    def compare(op: str, raw: Variant, rest: list[Variant], repeats: int, setup: Any = None) -> None:
        """``ours`` against the others of ``rest`` in one harness and against ``raw`` in a
        second (``--one-table``: all in one, as before): a raw redis-py call makes the server
        build one reply of the whole batch, which slows whatever runs next."""
        groups = [[rest[0], raw, *rest[1:]]] if args.one_table else [rest, [rest[0], raw]]
        for i, group in enumerate(groups):
            suffix = "-vs-raw" if i == 1 else ""
            h = Harness(f"redis-{op}-{page_kib}KiB{suffix}", params)
            for label, fn, nbytes in group:
                h.add(label, fn, nbytes=nbytes)
            results.append(h.run(repeats=repeats, warmup=1, setup=setup))

    peer_get = [("peer_lmcache_resp", lambda: peer.get(names, views), total)] if peer is not None else []
    compare(
        "get",
        ("raw_redis_py_mget", raw_get, total),
        [("ours", ours_get, total), ("ours_inline", ours_get_inline, total), *peer_get],
        args.repeats,
    )

    def ours_exists() -> None:
        assert s.batch_exists(keys) == n

    def raw_exists() -> None:
        p = r.pipeline(transaction=False)
        for k in names:
            p.exists(k)
        assert sum(p.execute()) == n

    peer_exists = [("peer_lmcache_resp", lambda: peer.exists(names), 0)] if peer is not None else []
    compare(
        "exists",
        ("raw_redis_py_pipeline_exists", raw_exists, 0),
        [("ours", ours_exists, 0), *peer_exists],
        args.repeats,
    )

    def ours_set() -> None:
        assert s.batch_set_v1(keys, idx) == [True] * n

    def ours_set_inline() -> None:
        assert s_inline.batch_set_v1(keys, idx) == [True] * n

    def raw_set() -> None:
        p = r.pipeline(transaction=False)
        for i, k in enumerate(names):
            p.set(k, mv[i * size : (i + 1) * size])
        p.execute()

    peer_set = [("peer_lmcache_resp", lambda: peer.set(names, views), total)] if peer is not None else []
    compare(
        "set",
        ("raw_redis_py_pipeline_set", raw_set, total),
        [("ours", ours_set, total), ("ours_inline", ours_set_inline, total), *peer_set],
        max(2, args.repeats),
        setup=r.flushdb,
    )
    s.close()
    s_inline.close()
    r.flushdb()
    r.close()
    if shutil.which("redis-benchmark"):
        nreq = max(64, min(2000, (256 << 20) // size))
        cmd = ["redis-benchmark", "-h", "127.0.0.1", "-p", str(srv.port), "-t", "set,get", "-d", str(size),
               "-n", str(nreq), "-r", str(n), "-P", "16", "-c", "4", "-q"]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
        print(f"# {' '.join(cmd[:1] + cmd[3:4] + ['PORT'] + cmd[5:])}")
        for line in out.replace("\r", "\n").splitlines():
            if "requests per second" in line:
                rps = float(line.split(":")[1].split()[0])
                print(f"#   {line.strip()}  = {rps * size / 1e9:.2f} GB/s")
        r2 = redis.Redis(host="127.0.0.1", port=srv.port)
        r2.flushdb()
        r2.close()
    return results


def bench_cluster(args: argparse.Namespace, page_kib: int, n: int) -> list[Any]:
    """Ours over a 3-master cluster vs redis-py's ``RedisCluster`` (``mget_nonatomic``: per-node
    pipelined MGETs, then a copy into a preallocated buffer; a non-transactional pipeline of
    ``SET`` split per node)."""
    from redis.cluster import ClusterNode, RedisCluster

    cl = RedisClusterServers()
    cl.start()
    try:
        layers = page_kib * 1024 // (2 * 8 * 128 * 2 * TOKENS)
        pool = MHAHostPool(
            n * TOKENS, TOKENS, layers, 8, 128, dtype=torch.bfloat16, layout="page_first", pin_memory=False
        )
        pool.kv_buffer.view(torch.uint8).copy_(
            torch.randint(0, 256, pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8)
        )
        idx = torch.arange(n * TOKENS, dtype=torch.int64)
        keys = [hashlib.sha256(f"c{page_kib}-{i}".encode()).hexdigest() for i in range(n)]
        s = storage(cl.url, pool, cluster=True)
        r = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", cl.nodes[0].port)])
        assert s.batch_set_v1(keys, idx) == [True] * n
        names = sorted(k.decode() for k in r.scan_iter(match="b:*", count=1000))
        assert len(names) == n
        size = int(r.strlen(names[0]))
        total = size * n
        mv = memoryview(np.empty(total, np.uint8))
        params = {"pages": n, "page_bytes": size, "masters": 3}

        def ours_get() -> None:
            assert s.batch_get_v1(keys, idx) == [True] * n

        def raw_get() -> None:
            for i, v in enumerate(r.mget_nonatomic(names)):
                mv[i * size : (i + 1) * size] = v

        def ours_set() -> None:
            assert s.batch_set_v1(keys, idx) == [True] * n

        def raw_set() -> None:
            p = r.pipeline(transaction=False)
            for i, k in enumerate(names):
                p.set(k, mv[i * size : (i + 1) * size])
            p.execute()

        def flush() -> None:
            for node in cl.nodes:
                cl.cli(node, "flushall")

        out = []
        h = Harness(f"redis-cluster-get-{page_kib}KiB", params)
        h.add("ours", ours_get, nbytes=total)
        h.add("raw_redis_py_cluster_mget_nonatomic", raw_get, nbytes=total)
        out.append(h.run(repeats=args.repeats, warmup=1))
        h = Harness(f"redis-cluster-set-{page_kib}KiB", params)
        h.add("ours", ours_set, nbytes=total)
        h.add("raw_redis_py_cluster_pipeline_set", raw_set, nbytes=total)
        out.append(h.run(repeats=args.repeats, warmup=1, setup=flush))
        s.close()
        r.close()
        return out
    finally:
        cl.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--page-kib", type=int, nargs="+", default=[256, 8192])
    ap.add_argument("--pages", type=int, nargs="+", default=[128, 32], help="pages per batch, per page size")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=None, help="write the results here as a JSON list")
    ap.add_argument(
        "--record", default=None, help="write the run for the docs (e.g. docs/results/redis.json)"
    )
    ap.add_argument("--lmcache-dir", default=None, help="an unpacked lmcache-0.5.6 wheel: adds the peer")
    ap.add_argument("--peer-workers", type=int, default=4)
    ap.add_argument("--cluster", action="store_true", help="also a 3-master cluster, first page size only")
    ap.add_argument(
        "--one-table",
        action="store_true",
        help="raw redis-py in the same rounds as ours and the peer (default: a head-to-head table of its own)",
    )
    args = ap.parse_args()
    counts = args.pages + [args.pages[-1]] * (len(args.page_kib) - len(args.pages))
    srv = RedisServer()
    srv.start()
    results = []
    try:
        t0 = time.monotonic()
        for kib, n in zip(args.page_kib, counts):
            for res in bench_page(args, srv, kib, n):
                res.print_table()
                results.append(res)
        if args.cluster:
            for res in bench_cluster(args, args.page_kib[0], counts[0]):
                res.print_table()
                results.append(res)
        print(f"# total {time.monotonic() - t0:.1f} s")
    finally:
        srv.close()
    if args.out:
        with open(args.out, "w") as f:
            json.dump([r.to_json() for r in results], f, indent=1)
    if args.record:
        peer = "LMCache 0.5.6's native RESP client (4 workers)" if args.lmcache_dir else "no peer"
        argv = ["LMCACHE_DIR" if a == args.lmcache_dir else a for a in sys.argv]  # no local path in the docs
        write_run(
            results,
            args.record,
            command=shlex.join(["python", *argv]),
            notes=f"redis-server on loopback, started by the script; peer: {peer}; raw: redis-py "
            f"{redis.__version__} (hiredis); LMCACHE_DIR: an unpacked lmcache-0.5.6 wheel. Each operation "
            "is two tables of the same run: ours, ours_inline (no deadline) and the peer in interleaved "
            "rounds, then ours against raw redis-py.",
        )


if __name__ == "__main__":
    main()
