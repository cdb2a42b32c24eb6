"""``hicache check NAME --engine sglang-linker``: certify a linker for SGLang's unified cache
linker (SGLang 0.5.23 on).

``NAME`` is either a hicache-sdk backend (then the linker is
``hicache_sdk.sglang.linker:TransportLinker`` over it, ``--config`` being the backend's
settings, and the backend's transport tests run first: ``hicache check NAME -k
transport``), or ``module:Class`` of any ``UnifiedCacheLinker`` subclass (``--config``
being its ``linker_extra_config``). Then every check of
:mod:`hicache_conformance.linker_contract` runs against SGLang's real CPU device pools,
each linker built by SGLang's own factory.

Exit: 0 every check passed; 1 a check (or a transport test) failed; 2 bad arguments;
6 SGLang (0.5.23 or later) or the linker cannot be imported.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any

from . import CheckMain, transport_tests_first

__all__ = ["run"]

_OURS = "hicache_sdk.sglang.linker:TransportLinker"


def _linker_class(name: str) -> type | None:
    """The class ``name`` points at when it is ``module:Class`` of a class, else ``None``."""
    module, sep, cls = name.partition(":")
    if not sep:
        return None
    try:
        obj = getattr(importlib.import_module(module), cls, None)
    except ImportError:
        return None
    return obj if inspect.isclass(obj) else None


def _is_linker(obj: type | None) -> bool:
    try:
        from sglang.srt.mem_cache.unified_cache.unified_cache_linker import UnifiedCacheLinker
    except ImportError:
        return False
    return obj is not None and issubclass(obj, UnifiedCacheLinker)


def run(args: argparse.Namespace, check_main: CheckMain) -> int:
    from hicache_sdk.config import parse_config_arg

    try:
        config = parse_config_arg(args.config)
    except Exception as e:
        print(f"hicache check: bad --config: {e}", file=sys.stderr)
        return 2
    try:
        importlib.import_module("sglang.srt.mem_cache.unified_cache.linker_factory")
        from .. import linker_contract
    except Exception as e:
        print(
            f"hicache check: --engine sglang-linker needs SGLang 0.5.23 or later, importable here "
            f"({type(e).__name__}: {e})",
            file=sys.stderr,
        )
        return 6
    target = _linker_class(args.backend)
    if _is_linker(target):
        linker, extra = args.backend, dict(config)
    else:
        code = transport_tests_first(args, check_main)
        if code != 0:
            return code
        linker, extra = _OURS, {"backend": args.backend, "backend_config": dict(config)}
    env = linker_contract.linker_env(linker, extra)
    results: dict[str, dict[str, Any]] = {}
    failed = 0
    for name, check in linker_contract.CHECKS.items():
        if args.keyword and args.keyword not in name:
            continue
        t0 = time.perf_counter()
        try:
            check(env)
            outcome, reason = "passed", ""
        except AssertionError as e:
            outcome, reason = "failed", str(e).splitlines()[0] if str(e) else "assertion failed"
        except Exception as e:
            outcome, reason = "failed", f"{type(e).__name__}: {e}"
        finally:
            env.close()
        failed += outcome == "failed"
        results[name] = {"outcome": outcome, "reason": reason, "seconds": round(time.perf_counter() - t0, 3)}
        print(f"{'PASS' if outcome == 'passed' else 'FAIL'} {name}" + (f": {reason}" if reason else ""))
    print(f"linker {linker}: {len(results) - failed} passed, {failed} failed")
    if args.report:
        doc = {"engine": "sglang-linker", "linker": linker, "checks": results}
        Path(args.report).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 1 if failed else 0
