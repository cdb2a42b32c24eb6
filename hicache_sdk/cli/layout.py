"""``hicache layout NAME``: print a backend's L3 object layout as JSON.

The answer of ``describe_l3_object_layout(sidecar_pool_specs=..., swa_trailing_pages=...,
page_size=...)`` (SGLang 0.5.23's ``MooncakeStore`` method; see
:mod:`hicache_sdk.keys.l3_layout`) for a deployment described by the options: the backend
is built from ``--config`` as SGLang would build it for one rank (``--model``, ``--mla``,
``--tp-rank`` ...), small host pools of ours stand for the KV pool and each ``--pool``
sidecar (names do not depend on pool sizes), and nothing is read or written. SGLang serves
the same JSON at ``/get_hicache_l3_cache_layout`` only for its own ``MooncakeStore``; a
backend of ours loaded through ``dynamic`` is answered "Mooncake storage is not attached"
there, so this command is how an operator gets it.

Exit: 0 printed, 1 the backend has no layout method, 2 usage or configuration errors.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..config import parse_config_arg
from ..errors import HiCacheError
from ..registry import create_backend
from ..spec import HiCacheStorageConfig, PoolHitPolicy, PoolName, SidecarPoolSpec

HELP = "print a backend's L3 object layout (SGLang's /get_hicache_l3_cache_layout) as JSON"
SIDECARS = ("indexer", "swa", "mamba", "draft")
POLICIES = tuple(p.value for p in PoolHitPolicy)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="backend name (or 'package.module:Class')")
    parser.add_argument("--config", default=None, help="backend settings: a JSON object, or @file")
    parser.add_argument("--model", default="", help="the served model name (SGLang's model_name)")
    parser.add_argument("--mla", action="store_true", help="an MLA model (rank-replicated KV)")
    parser.add_argument("--page-size", type=int, default=64, help="engine page size in tokens (64)")
    for opt, default in (("--tp-rank", 0), ("--tp-size", 1), ("--pp-rank", 0), ("--pp-size", 1)):
        parser.add_argument(opt, type=int, default=default, help=f"({default})")
    parser.add_argument(
        "--pool",
        action="append",
        default=[],
        metavar="NAME[:POLICY]",
        help=f"a registered sidecar pool ({', '.join(SIDECARS)}; mamba with one conv state), "
        f"with its hit policy ({', '.join(POLICIES)}) when the engine gives one",
    )
    parser.add_argument("--swa-trailing-pages", type=int, default=None, help="the SWA window in pages")


def _pool(kind: str, mla: bool, page_size: int) -> Any:
    import torch

    from ..hostpool import IndexerHostPool, MambaHostPool, MHAHostPool, MLAHostPool  # type: ignore[attr-defined]

    size = 2 * page_size
    if kind == "kv-mla" or (kind == "draft" and mla):
        return MLAHostPool(size, page_size, 1, 8, 4, dtype=torch.bfloat16)
    if kind in ("kv-mha", "swa", "draft"):
        return MHAHostPool(size, page_size, 1, 1, 8, dtype=torch.bfloat16)
    if kind == "indexer":
        return IndexerHostPool(size, page_size, 1, 8)
    return MambaHostPool(2, (2,), [(2,)], layer_num=1)


def _specs(pools: list[str]) -> tuple[list[tuple[str, str | None]], list[SidecarPoolSpec]]:
    out, specs = [], []
    for item in pools:
        name, _, policy = item.partition(":")
        if name not in SIDECARS:
            raise ValueError(f"--pool {item!r}: the pool must be one of {', '.join(SIDECARS)}")
        if policy and policy not in POLICIES:
            raise ValueError(f"--pool {item!r}: the policy must be one of {', '.join(POLICIES)}")
        out.append((name, policy or None))
        if policy:
            source = PoolName.KV if policy == "all_pages" else PoolName(name)
            specs.append(SidecarPoolSpec(PoolName(name), source, PoolHitPolicy(policy)))
    return out, specs


def run(args: argparse.Namespace) -> int:
    try:
        config = parse_config_arg(args.config)
        pools, specs = _specs(args.pool)
        if args.page_size < 1:
            raise ValueError(f"--page-size must be >= 1, got {args.page_size}")
        storage_config = HiCacheStorageConfig(
            tp_rank=args.tp_rank,
            tp_size=args.tp_size,
            pp_rank=args.pp_rank,
            pp_size=args.pp_size,
            is_mla_model=args.mla,
            model_name=args.model,
        )
        backend = create_backend(args.name, storage_config, config)
    except (HiCacheError, ValueError, TypeError, OSError) as e:
        print(f"hicache layout: {e}", file=sys.stderr)
        return 2
    try:
        describe = getattr(backend, "describe_l3_object_layout", None)
        if describe is None:
            print(
                f"hicache layout: backend {args.name!r} does not describe an L3 object layout "
                "(mooncake under key scheme sglang-mooncake does; file under sglang-file)",
                file=sys.stderr,
            )
            return 1
        backend.register_mem_pool_host(_pool("kv-mla" if args.mla else "kv-mha", args.mla, args.page_size))
        for name, _ in pools:
            backend.register_mem_host_pool_v2(_pool(name, args.mla, args.page_size), PoolName(name))
        layout = describe(
            sidecar_pool_specs=specs, swa_trailing_pages=args.swa_trailing_pages, page_size=args.page_size
        )
    except (HiCacheError, ValueError) as e:
        print(f"hicache layout: {e}", file=sys.stderr)
        return 2
    finally:
        getattr(backend, "close", lambda: None)()
    print(json.dumps(layout, indent=2))
    return 0
