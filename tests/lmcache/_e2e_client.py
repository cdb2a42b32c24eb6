"""LMCache's own CPU client (``lmcache bench server``'s ``ServerBenchClient``), driven phase
by phase: ``store`` stores the full chunks of each sequence, ``load`` looks them up,
retrieves them into zeroed KV buffers and reports their checksums. One JSON line per
sequence on stdout: ``{"seq", "hit_chunks", "total_chunks", "checksums", "ok"}``.

Usage: ``python _e2e_client.py RPC_URL HTTP_URL PHASE SEQ [SEQ ...]``
"""

from __future__ import annotations

import argparse
import json
import sys

from lmcache.cli.commands.bench.server_bench.client import ServerBenchClient
from lmcache.cli.commands.bench.server_bench.command import add_server_arguments
from lmcache.cli.commands.bench.server_bench.config import parse_args_to_config

SHAPE = "(2,64,16,2,64):float16:2"


def main() -> int:
    rpc, url, phase, *seqs = sys.argv[1:]
    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    args = parser.parse_args(
        ["--mode", "cpu", "--rpc-url", rpc, "--url", url, "--kvcache-shape-spec", SHAPE,
         "--num-blocks", "64", "--num-tokens", "256", "--start", "0", "--end", "1"]
    )  # fmt: skip
    client = ServerBenchClient(parse_args_to_config(args), lambda m: print(m, file=sys.stderr))
    client.start()
    try:
        for s in map(int, seqs):
            req = client.create_request(s, request_id=f"{phase}-{s}", request_kind=phase)
            assert req is not None
            n = req.num_full_tokens
            lookup = client.lookup(req)
            if phase == "store":
                sums = client.compute_checksums(req, start_token=0, token_count=n)
                res = client.store(req, start_token=lookup.hit_chunks * req.chunk_size,
                                   token_count=n - lookup.hit_chunks * req.chunk_size)  # fmt: skip
            else:
                hit = lookup.hit_chunks * req.chunk_size
                client.zero_destination(req, start_token=0, token_count=n)
                res = client.retrieve(req, start_token=0, token_count=hit)
                sums = client.compute_checksums(req, start_token=0, token_count=n)
            client.end_session(req)
            line = {"seq": s, "hit_chunks": lookup.hit_chunks, "total_chunks": req.total_chunks,
                    "checksums": sums, "ok": bool(res.succeeded) if res is not None else None}  # fmt: skip
            print(json.dumps(line), flush=True)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
