"""Benchmark SGLang-compatible page hashing (hicache_sdk.keys.hashing).

Prints the median time to hash N tokens at a page size, for several input types, and
the ratio to a hashlib-only lower bound (the same SHA-256 chain over bytes packed in
advance: the work no implementation in Python can avoid).

    .venv/bin/python scripts/bench_hash.py [--tokens 131072] [--page-size 64] [--repeats 25]
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import time
from array import array
from typing import Any, Callable

import numpy as np

from hicache_sdk.keys.hashing import get_hash_str


def median_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm up
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(samples)


def lower_bound(packed: bytes, page_bytes: int) -> list[str]:
    prior = b""
    out = []
    mv = memoryview(packed)
    for off in range(0, len(packed), page_bytes):
        h = hashlib.sha256(prior)
        h.update(mv[off : off + page_bytes])
        prior = h.digest()
        out.append(prior.hex())
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=131072)
    ap.add_argument("--page-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=25)
    args = ap.parse_args()

    rng = random.Random(0)
    tokens = [rng.randrange(152064) for _ in range(args.tokens)]
    packed = np.asarray(tokens, dtype="<u4").tobytes()
    assert lower_bound(packed, 4 * args.page_size) == get_hash_str(tokens, None, args.page_size)

    base = median_ms(lambda: lower_bound(packed, 4 * args.page_size), args.repeats)
    inputs = {
        "list[int]": tokens,
        "array('q')": array("q", tokens),
        "numpy int64": np.asarray(tokens, dtype=np.int64),
    }
    print(
        f"{args.tokens} tokens, page {args.page_size}, {args.tokens // args.page_size} pages, median of {args.repeats}"
    )
    print(f"  hashlib-only lower bound : {base:7.2f} ms")
    for label, value in inputs.items():
        ms = median_ms(lambda v=value: get_hash_str(v, None, args.page_size), args.repeats)
        print(f"  get_hash_str {label:12s}: {ms:7.2f} ms  ({ms / base:.2f}x lower bound)")
    wide = list(tokens)
    wide[len(wide) // 2] = 2**40
    ms = median_ms(lambda: get_hash_str(wide, None, args.page_size), args.repeats)
    print(f"  one wide token (list)    : {ms:7.2f} ms  ({ms / base:.2f}x lower bound)")


if __name__ == "__main__":
    main()
