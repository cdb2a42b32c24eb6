"""``hicache ping NAME``: one real round trip of random pages through a backend.

Steps (each timed): construct the backend by name (``create_backend``, the ``--config``
object merged into ``extra_config`` of a ``HiCacheStorageConfig(model_name="hicache-ping")``),
check that its service answers (:func:`~hicache_sdk.cli.reach.unreachable`: an unreachable
server ends the ping there, with the transport's error and address), register a small bfloat16 MHA host pool, check that fresh keys are absent, write N random
pages (``batch_set_v1``; the legacy ``batch_set`` when v1 is not implemented), check
``batch_exists``, read them back into other slots (``batch_get_v1`` / ``batch_get``),
compare bytes, delete them when the backend has a per-key delete (``batch_delete`` or
``delete``; never ``clear()``, which would drop a whole namespace), close.

Keys are fresh per run (sha256 of a random UUID, then of ``"<run>:<i>"``), so a page
found before the write is a backend bug. Exit: 0 all good, 1 a miss, a mismatch or an
exception in a step, 2 usage / configuration errors (one line on stderr).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..config import parse_config_arg
from ..errors import HiCacheError
from ..registry import create_backend
from ..spec import HiCacheStorageConfig, PoolName
from .memory_guard import check_fits
from .reach import unreachable

HELP = "round-trip a few random pages through a backend and report latencies"
LAYOUTS = ("layer_first", "page_first", "page_first_direct", "page_head")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="backend name (or 'package.module:Class')")
    parser.add_argument(
        "--config", default=None, help="backend settings: a JSON object, or @file (.json, .toml, .yaml)"
    )
    parser.add_argument("--page-size", type=_positive_int, default=16, help="tokens per page (16)")
    parser.add_argument("--layout", choices=LAYOUTS, default="page_first", help="host layout (page_first)")
    parser.add_argument("--pages", type=_positive_int, default=4, help="pages to write and read (4)")
    parser.add_argument("--dist", default=None, help="pick the distribution providing NAME")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


@dataclass(frozen=True)
class Step:
    """One timed step. ``bytes_per_s`` only for the transfers."""

    step: str
    ms: float
    ok: bool
    detail: str
    bytes_per_s: float | None = None


@dataclass
class PingReport:
    backend: str
    pages: int
    page_size: int
    page_bytes: int = 0
    layout: str = ""
    api: str = "v1"
    steps: list[Step] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(s.ok for s in self.steps)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ok"] = self.ok
        return d


class _UsageError(Exception):
    pass


def _timed(report: PingReport, name: str, fn: Callable[[], tuple[bool, str]], nbytes: int = 0) -> bool:
    """Run ``fn`` (returns (ok, detail)); record a step; an exception is a failed step."""
    t0 = time.perf_counter()
    try:
        ok, detail = fn()
    except Exception as e:
        ok, detail = False, f"raised {type(e).__name__}: {e}"
    ms = (time.perf_counter() - t0) * 1e3
    rate = nbytes / (ms / 1e3) if nbytes and ok and ms > 0 else None
    report.steps.append(Step(name, round(ms, 3), ok, detail, rate))
    return ok


def _errors(backend: Any) -> dict[str, int]:
    """The backend's counted failure reasons (``metrics.errors()``), ``{}`` without them."""
    try:
        return dict(backend.metrics.errors())
    except Exception:
        return {}


def _with_reasons(backend: Any, fn: Callable[[], tuple[bool, str]]) -> Callable[[], tuple[bool, str]]:
    """``fn`` whose failed detail ends with the failure reasons counted during the call
    (``FAIL set 0/4 stored; failures: connection x4``)."""

    def go() -> tuple[bool, str]:
        before = _errors(backend)
        ok, detail = fn()
        if not ok:
            after = _errors(backend)
            new = {r: c - before.get(r, 0) for r, c in after.items() if c > before.get(r, 0)}
            if new:
                detail += "; failures: " + ", ".join(f"{r} x{c}" for r, c in sorted(new.items()))
        return ok, detail

    return go


def _leading(results: Any, n: int, what: str) -> tuple[bool, str]:
    flags = [bool(r) for r in results] if isinstance(results, (list, tuple)) else []
    good = sum(flags)
    ok = len(flags) == n and good == n
    extra = "" if len(flags) == n else f" (got {len(flags)} results for {n} keys)"
    return ok, f"{good}/{n} {what}{extra}"


def _run_ping(args: argparse.Namespace, config: dict[str, Any], report: PingReport) -> None:
    try:
        import torch

        from ..hostpool import MHAHostPool  # type: ignore[attr-defined]
    except ImportError as e:
        raise _UsageError(f"ping needs torch and hicache_sdk.hostpool: {e}") from e
    n, ps = args.pages, args.page_size
    # the pool: 2 * n pages of ps tokens, 2 layers x 2 heads x 64 dims, K and V, bfloat16
    too_big = check_fits(2 * n * ps * 2 * 2 * 64 * 2 * 2, f"--pages {n} of --page-size {ps}")
    if too_big:
        raise _UsageError(too_big)
    try:
        pool = MHAHostPool(
            size=2 * n * ps,
            page_size=ps,
            layer_num=2,
            head_num=2,
            head_dim=64,
            dtype=torch.bfloat16,
            layout=args.layout,
        )
    except ValueError as e:
        raise _UsageError(f"host pool: {e}") from e
    storage_config = HiCacheStorageConfig(
        model_name="hicache-ping", is_page_first_layout=args.layout == "page_first"
    )
    t0 = time.perf_counter()
    try:
        backend = create_backend(args.name, storage_config, config, dist=args.dist)
    except (HiCacheError, ValueError, TypeError) as e:
        raise _UsageError(str(e)) from e
    except Exception as e:
        ms = (time.perf_counter() - t0) * 1e3
        report.steps.append(Step("construct", round(ms, 3), False, f"raised {type(e).__name__}: {e}"))
        return
    ms = (time.perf_counter() - t0) * 1e3
    report.steps.append(Step("construct", round(ms, 3), True, type(backend).__name__))

    def reachable() -> tuple[bool, str]:
        why = unreachable(backend)
        return why is None, why or "the service answers"

    try:
        # a backend without its own transport (not built on PagedStorage) cannot be probed
        probe = getattr(backend, "raw_transport", None) is not None
        if not probe or _timed(report, "reach", reachable):
            _round_trip(backend, pool, torch, n, ps, report)
    finally:

        def close() -> tuple[bool, str]:
            backend.close()
            return True, "closed"

        _timed(report, "close", close)


def _round_trip(backend: Any, pool: Any, torch: Any, n: int, ps: int, report: PingReport) -> None:
    def register() -> tuple[bool, str]:
        backend.register_mem_pool_host(pool)
        backend.register_mem_host_pool_v2(pool, PoolName.KV)
        backend.on_host_pools_registered()
        return True, "kv host pool registered"

    if not _timed(report, "register", register):
        return
    run_id = hashlib.sha256(uuid.uuid4().bytes).hexdigest()
    keys = [hashlib.sha256(f"{run_id}:{i}".encode()).hexdigest() for i in range(n)]
    src = [i * ps for i in range(n)]
    dst = [(n + i) * ps for i in range(n)]
    expected: list[Any] = []

    def fill() -> tuple[bool, str]:
        for slot in src:
            page = pool.get_data_page(slot, flat=True)
            data = torch.randint(0, 256, (page.numel() * page.element_size(),), dtype=torch.uint8)
            pool.set_from_flat_data_page(slot, data.view(page.dtype))
            expected.append(data)
        report.page_bytes = expected[0].numel()
        return True, f"{n} random pages in host slots {src[0]}..{src[-1] + ps - 1}"

    if not _timed(report, "fill", fill):
        return
    total = report.page_bytes * n

    def exists(want: int) -> Callable[[], tuple[bool, str]]:
        def go() -> tuple[bool, str]:
            got = backend.batch_exists(keys)
            return got == want, f"{got}/{n} present (expected {want})"

        return go

    def put() -> tuple[bool, str]:
        try:
            results = backend.batch_set_v1(keys, torch.tensor(_slots(src, ps), dtype=torch.int64))
        except NotImplementedError:
            report.api = "legacy"
            ok = backend.batch_set(keys, [pool.get_data_page(s, flat=True) for s in src])
            return bool(ok), "stored" if ok else "batch_set returned False"
        return _leading(results, n, "stored")

    def get() -> tuple[bool, str]:
        if report.api == "v1":
            results = backend.batch_get_v1(keys, torch.tensor(_slots(dst, ps), dtype=torch.int64))
            return _leading(results, n, "read")
        targets = [torch.empty_like(pool.get_data_page(s, flat=True)) for s in dst]
        got = backend.batch_get(keys, targets)
        got = got if isinstance(got, list) else []
        for slot, page in zip(dst, got):
            if page is not None:
                pool.set_from_flat_data_page(slot, page)
        return _leading([p is not None for p in got], n, "read")

    def compare() -> tuple[bool, str]:
        bad = []
        for i, slot in enumerate(dst):
            page = pool.get_data_page(slot, flat=True).contiguous().view(torch.uint8)
            if not torch.equal(page, expected[i]):
                bad.append(i)
        if bad:
            return False, f"{n - len(bad)}/{n} identical; pages {bad} differ"
        return True, f"{n}/{n} identical"

    _timed(report, "exists_before", exists(0))
    _timed(report, "set", _with_reasons(backend, put), total)
    _timed(report, "exists_after", exists(n))
    _timed(report, "get", _with_reasons(backend, get), total)
    _timed(report, "compare", compare)
    _cleanup(backend, keys, report)


def _slots(starts: list[int], ps: int) -> list[int]:
    return [s + j for s in starts for j in range(ps)]


def _cleanup(backend: Any, keys: list[str], report: PingReport) -> None:
    """Delete the run's pages if the backend can; a failure here is noted, not fatal."""
    t0 = time.perf_counter()
    try:
        if callable(getattr(backend, "batch_delete", None)):
            backend.batch_delete(keys)
            detail = f"deleted {len(keys)} pages"
        elif callable(getattr(backend, "delete", None)):
            for k in keys:
                backend.delete(k)
            detail = f"deleted {len(keys)} pages"
        else:
            detail = "skipped: no per-key delete (pages stay under model 'hicache-ping')"
    except Exception as e:
        detail = f"failed (ignored): {type(e).__name__}: {e}"
    ms = (time.perf_counter() - t0) * 1e3
    report.steps.append(Step("cleanup", round(ms, 3), True, detail))


def _print_human(report: PingReport) -> None:
    print(
        f"hicache ping {report.backend}: {report.pages} pages x {report.page_size} tokens, "
        f"{report.page_bytes} B/page, {report.layout}, bfloat16, api {report.api}"
    )
    for s in report.steps:
        rate = f"  {s.bytes_per_s / 1e6:.1f} MB/s" if s.bytes_per_s else ""
        mark = "ok  " if s.ok else "FAIL"
        print(f"  {mark} {s.step:<14} {s.ms:>10.3f} ms  {s.detail}{rate}")
    print("OK" if report.ok else "FAILED")


def run(args: argparse.Namespace) -> int:
    """Run the ping; print a report (``--json``: one JSON object) and return the exit code."""
    report = PingReport(args.name, args.pages, args.page_size, layout=args.layout)
    try:
        config = parse_config_arg(args.config)
        _run_ping(args, config, report)
    except (_UsageError, ValueError, OSError) as e:
        print(f"hicache ping: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        _print_human(report)
    return 0 if report.ok else 1
