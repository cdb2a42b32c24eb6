"""A second process on the same store: the L3 ``shared_across_processes`` test's child.

The parent describes the backend with a picklable :class:`ChildJob` (the backend class
as an importable reference, the full ``HiCacheStorageConfig`` with its ``extra_config``,
the host-pool case and which I/O path to use); :func:`run_child` runs
:func:`main` with ``JOB OUT`` in a fresh interpreter, with the parent's ``sys.path``. The
child builds the backend the way SGLang's loader does, registers a KV pool, **reads**
``job.read`` (reporting the sha256 of each hit's bytes, ``None`` for a miss), then
**writes** ``job.write`` with the suite's deterministic page pattern of each key
(``pools.pattern(key, page_bytes)``), writes a JSON result and closes the backend (with
``while_alive``, only once the parent is done reading).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hicache_sdk.spec import HiCacheStorageConfig, PoolName

from .matrix import PoolCase

__all__ = ["ChildJob", "run_child", "digest"]


@dataclass(frozen=True)
class ChildJob:
    """What the child does. ``backend``: an entry-point name or ``"module:Class"``;
    ``zero_copy``: use ``batch_*_v1`` (else the legacy ``batch_get`` / ``batch_set``);
    ``pool_source``, ``geometry``: whose host pools and their geometry
    (``pools.set_source``, ``pools.set_geometry``), as in the parent."""

    backend: str
    storage_config: HiCacheStorageConfig
    case: PoolCase
    zero_copy: bool
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    pool_source: str = "auto"
    geometry: str = "small"


# Not ``-m hicache_conformance.child``: that would make a second, ``__main__`` copy of
# this module, whose ChildJob is not the pickled one's class.
_ENTRY = "import sys; from hicache_conformance.child import main; sys.exit(main(sys.argv[1:]))"


def digest(data: bytes) -> str:
    """The sha256 hex digest the child reports for a page it read."""
    return hashlib.sha256(data).hexdigest()


def run_child(
    job: ChildJob, timeout: float = 60.0, while_alive: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run ``job`` in a fresh interpreter; its result ``{"read": [digest | None, ...],
    "write": [bool, ...]}``. Raises ``AssertionError`` with the child's output when it
    fails, and ``subprocess.TimeoutExpired`` past ``timeout`` seconds.

    ``while_alive(result)``, when given, runs in this process while the child still holds
    its backend open (after its writes, before its ``close()``): a store whose pages live
    in the writing process's memory (a Mooncake client with a segment of its own) serves
    them only while that process lives. An exception from it propagates once the child
    has ended."""
    with tempfile.TemporaryDirectory(prefix="hicache-conformance-child-") as tmp:
        job_path = os.path.join(tmp, "job.pickle")
        out_path = os.path.join(tmp, "out.json")
        with open(job_path, "wb") as fh:
            pickle.dump(job, fh)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        argv = [sys.executable, "-c", _ENTRY, job_path, out_path] + (["hold"] if while_alive else [])
        log_path = os.path.join(tmp, "child.log")
        with (
            open(log_path, "w+", encoding="utf-8", errors="replace") as log,
            subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=log, stderr=log, text=True, env=env) as proc,
        ):
            assert proc.stdin is not None
            deadline = time.monotonic() + timeout
            failure: BaseException | None = None
            try:
                if while_alive is not None:
                    while not os.path.exists(out_path) and proc.poll() is None:
                        if time.monotonic() > deadline:
                            raise subprocess.TimeoutExpired(argv, timeout)
                        time.sleep(0.02)
                    if os.path.exists(out_path):
                        with open(out_path, encoding="utf-8") as fh:
                            early: dict[str, Any] = json.load(fh)
                        try:
                            while_alive(early)
                        except Exception as e:  # raised once the child has ended cleanly
                            failure = e
                proc.stdin.close()  # the child closes its backend and exits
                proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
            except BaseException:
                proc.kill()
                proc.wait()
                raise
            if failure is not None:
                raise failure
            log.seek(0)
            output = log.read()
        if proc.returncode != 0 or not os.path.exists(out_path):
            raise AssertionError(f"the child process failed (exit {proc.returncode}):\n{output[-5000:]}")
        with open(out_path, encoding="utf-8") as fh:
            result: dict[str, Any] = json.load(fh)
        return result


def _run(job: ChildJob, publish: Callable[[dict[str, Any]], None]) -> None:
    from . import pools as P
    from .base import resolve_backend_class

    P.set_source(job.pool_source)
    P.set_geometry(job.geometry)
    backend = resolve_backend_class(job.backend)(job.storage_config, {})
    try:
        kv = P.make_kv_pool(job.case)
        backend.register_mem_pool_host(kv)
        backend.register_mem_host_pool_v2(kv, PoolName.KV)
        hook = getattr(backend, "on_host_pools_registered", None)
        if hook is not None:
            hook()
        reads: list[str | None] = []
        if job.read:
            n = len(job.read)
            for i in range(n):
                P.zero_page(kv, i)
            if job.zero_copy:
                ok = list(backend.batch_get_v1(list(job.read), P.host_indices(kv, 0, n)))
                reads = [digest(P.page_bytes(kv, i)) if hit else None for i, hit in enumerate(ok)]
            else:
                got = backend.batch_get(list(job.read), [kv.get_dummy_flat_data_page() for _ in job.read])
                reads = [None if t is None else digest(P._as_bytes(t)) for t in got]
        writes: list[bool] = []
        if job.write:
            n = len(job.write)
            base = len(job.read)
            for i, key in enumerate(job.write):
                P.fill_page(kv, base + i, key)
            if job.zero_copy:
                writes = [bool(x) for x in backend.batch_set_v1(list(job.write), P.host_indices(kv, base, n))]
            else:
                values = [kv.get_data_page((base + i) * kv.page_size, flat=True) for i in range(n)]
                writes = [bool(backend.batch_set(list(job.write), values))] * n
        publish({"read": reads, "write": writes})  # before close(): the backend is still open
    finally:
        getattr(backend, "close", lambda: None)()  # SGLang's base class has no close()


def main(argv: list[str]) -> int:
    """``JOB OUT [hold]``: with ``hold``, the result is written before the backend is
    closed, and the child waits for its stdin to close first (see :func:`run_child`)."""
    if len(argv) not in (2, 3) or argv[2:] not in ([], ["hold"]):
        print("usage: main([JOB_PICKLE, OUT_JSON, ['hold']])", file=sys.stderr)
        return 2
    with open(argv[0], "rb") as fh:
        job = pickle.load(fh)
    if not isinstance(job, ChildJob):
        print(f"not a ChildJob: {type(job).__name__}", file=sys.stderr)
        return 2

    def publish(result: dict[str, Any]) -> None:
        tmp = argv[1] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(result, fh)
        os.replace(tmp, argv[1])  # the parent never sees a partial result
        if len(argv) == 3:
            sys.stdin.read()  # until the parent is done with this process's pages

    _run(job, publish)
    return 0
