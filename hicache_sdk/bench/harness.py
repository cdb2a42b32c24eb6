"""A small benchmark harness: interleaved repetitions, medians, ratios, a fixed JSON schema.

Every backend's benchmark script measures *ours* against the *raw* transport and the
machine's *limit* in one run, interleaved so that drift (page cache, thermal, noisy
neighbours) hits every variant alike::

    h = Harness(name="file-warm", params={"pages": 128, "page_bytes": 262144})
    h.add("ours", fn, nbytes=total_bytes_per_call)   # fn() -> None, one repetition
    h.add("raw", fn_raw, nbytes=total_bytes_per_call)
    h.add("limit", fn_limit, nbytes=total_bytes_per_call)
    res = h.run(repeats=7, warmup=1, setup=None)
    res.print_table()
    write_result(res, "bench.json")

Order (``run(order=...)``): ``"balanced"`` (the default) takes each round's order from a
balanced Latin square (Williams design): every variant runs once per round, in every position
equally often, and *after every other variant* equally often (each ordered pair adjacent once per
``n`` rounds, ``2n`` for an odd count). A call's time depends on what ran just before it (warm
caches and threads of a native client: an identical raw call measured 14-22 % faster right after
a raw-like call than after ours in one Mooncake run), so a fixed predecessor biases the ratios;
``"rotate"`` (repetition ``r`` rotated left by ``r``: rep 0 ours, raw, limit; rep 1 raw, limit,
ours; ...) keeps each variant's predecessor fixed and is kept for comparison with older figures.
Warm-up rounds take the first orders of the same sequence and are not recorded. ``setup`` (e.g. drop the page cache) runs before *every* timed or warm-up call
and is not timed.

Latency percentiles (``p50_s``, ``p90_s``, ``p99_s`` per label) are over the timed samples,
linearly interpolated between closest ranks (with few repeats, ``p99`` is close to the max).

Ratios: ``"<first>/<other>"`` for the first-added label against each other label, as the
ratio of median *times* (``ours/raw == 1.25`` means ours takes 25 % longer). Throughput is
``nbytes / median_s / 1e9`` GB/s (``0.0`` when ``nbytes`` is 0).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

__all__ = [
    "PERCENTILES",
    "RUN_SCHEMA",
    "SCHEMA",
    "BenchResult",
    "Harness",
    "percentile",
    "round_orders",
    "write_result",
    "write_run",
]

#: The schema tag of :meth:`BenchResult.to_json`.
SCHEMA = "hicache-bench/1"
#: The schema tag of :func:`write_run`'s file: one benchmark run (its command, date and
#: ``hicache-bench/1`` documents), the input of ``scripts/gen_bench_docs.py``.
RUN_SCHEMA = "hicache-bench-run/1"


#: The latency percentiles every result carries (``p50_s`` ...).
PERCENTILES: tuple[int, ...] = (50, 90, 99)


def percentile(samples: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``samples``, linearly interpolated between
    closest ranks (numpy's default). ``ValueError`` for no samples or ``q`` outside 0..100."""
    if not samples:
        raise ValueError("percentile of no samples")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q!r}")
    s = sorted(samples)
    pos = (len(s) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class _Variant:
    label: str
    fn: Callable[[], object]
    nbytes: int


@dataclass(frozen=True)
class BenchResult:
    """Samples (seconds) per label, in the order the labels were added."""

    name: str
    params: Mapping[str, Any]
    repeats: int
    samples: Mapping[str, tuple[float, ...]]
    nbytes: Mapping[str, int]
    order: tuple[tuple[str, ...], ...] = field(default=())

    @property
    def labels(self) -> list[str]:
        return list(self.samples)

    def medians(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.samples.items()}

    def throughput(self) -> dict[str, float]:
        """GB/s at the median time (0.0 for ``nbytes == 0`` or a zero median)."""
        med = self.medians()
        return {k: (self.nbytes[k] / med[k] / 1e9 if med[k] > 0 and self.nbytes[k] else 0.0) for k in med}

    def percentiles(self) -> dict[str, dict[str, float]]:
        """``{label: {"p50_s": .., "p90_s": .., "p99_s": ..}}`` over the timed samples."""
        return {k: {f"p{q}_s": percentile(v, q) for q in PERCENTILES} for k, v in self.samples.items()}

    def ratio(self, a: str, b: str) -> float:
        """``median(a) / median(b)``; ``inf`` when ``b``'s median is 0 and ``a``'s is not.
        Unknown labels raise ``KeyError``."""
        med = self.medians()
        ma, mb = med[a], med[b]
        if mb == 0:
            return 1.0 if ma == 0 else float("inf")
        return ma / mb

    def ratios(self) -> dict[str, float]:
        labels = self.labels
        if not labels:
            return {}
        first = labels[0]
        return {f"{first}/{o}": self.ratio(first, o) for o in labels[1:]}

    def to_json(self) -> dict[str, Any]:
        """The fixed ``hicache-bench/1`` document."""
        med = self.medians()
        gbps = self.throughput()
        pct = self.percentiles()
        return {
            "schema": SCHEMA,
            "name": self.name,
            "params": dict(self.params),
            "machine": {
                "cpus": os.cpu_count() or 0,
                "python": platform.python_version(),
                "platform": platform.platform(),
            },
            "repeats": self.repeats,
            "results": {
                k: {
                    "median_s": med[k],
                    "min_s": min(v),
                    "max_s": max(v),
                    "samples_s": list(v),
                    "nbytes": self.nbytes[k],
                    "gbps": gbps[k],
                    **pct[k],
                }
                for k, v in self.samples.items()
            },
            "ratios": self.ratios(),
        }

    def print_table(self, file: TextIO | None = None) -> None:
        """A human table: label, median/min/max ms, GB/s, then the ratios."""
        out = file if file is not None else sys.stdout
        med, gbps = self.medians(), self.throughput()
        width = max([len(k) for k in self.samples] + [5])
        params = ", ".join(f"{k}={v}" for k, v in self.params.items())
        print(f"{self.name} ({params}) repeats={self.repeats}", file=out)
        print(f"{'label':<{width}}  {'median ms':>10}  {'min ms':>10}  {'max ms':>10}  {'GB/s':>8}", file=out)
        for k, v in self.samples.items():
            print(
                f"{k:<{width}}  {med[k] * 1e3:>10.3f}  {min(v) * 1e3:>10.3f}  {max(v) * 1e3:>10.3f}  {gbps[k]:>8.3f}",
                file=out,
            )
        for k, r in self.ratios().items():
            print(f"{k}: {r:.3f}", file=out)


class Harness:
    """Collects variants, then runs them interleaved (see the module docs)."""

    def __init__(
        self,
        name: str,
        params: Mapping[str, Any] | None = None,
        *,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not name:
            raise ValueError("name must be a non-empty string")
        self.name = name
        self.params = dict(params or {})
        self._timer = timer
        self._variants: list[_Variant] = []

    def add(self, label: str, fn: Callable[[], object], *, nbytes: int = 0) -> Harness:
        """Add a variant; ``fn()`` is one repetition. Duplicate or empty labels and
        negative ``nbytes`` raise ``ValueError``."""
        if not label:
            raise ValueError("label must be a non-empty string")
        if any(v.label == label for v in self._variants):
            raise ValueError(f"label {label!r} already added")
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes!r}")
        self._variants.append(_Variant(label, fn, nbytes))
        return self

    def run(
        self,
        repeats: int = 7,
        warmup: int = 1,
        setup: Callable[[], object] | None = None,
        *,
        order: str = "balanced",
    ) -> BenchResult:
        """Run ``warmup`` untimed then ``repeats`` timed interleaved rounds (``order``:
        ``"balanced"`` or ``"rotate"``, see the module docs)."""
        if repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {repeats!r}")
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup!r}")
        if order not in ("balanced", "rotate"):
            raise ValueError(f"order must be 'balanced' or 'rotate', got {order!r}")
        if not self._variants:
            raise ValueError("no variants: call add() first")
        n = len(self._variants)
        rows = round_orders(n, balanced=order == "balanced")
        samples: dict[str, list[float]] = {v.label: [] for v in self._variants}
        done: list[tuple[str, ...]] = []
        for rnd in range(warmup + repeats):
            rotated = [self._variants[i] for i in rows[rnd % len(rows)]]
            timed = rnd >= warmup
            if timed:
                done.append(tuple(v.label for v in rotated))
            for v in rotated:
                if setup is not None:
                    setup()
                t0 = self._timer()
                v.fn()
                dt = self._timer() - t0
                if timed:
                    samples[v.label].append(dt)
        return BenchResult(
            name=self.name,
            params=dict(self.params),
            repeats=repeats,
            samples={k: tuple(v) for k, v in samples.items()},
            nbytes={v.label: v.nbytes for v in self._variants},
            order=tuple(done),
        )


def round_orders(n: int, *, balanced: bool = True) -> list[list[int]]:
    """The cycle of per-round variant orders (indices) for ``n`` variants: the rows of a
    balanced Latin square (``n`` rows; ``2n`` with the mirrored rows for an odd ``n``), or
    the ``n`` left rotations."""
    if not balanced:
        return [list(range(r, n)) + list(range(r)) for r in range(n)]
    first = [0]
    lo, hi = 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        if len(first) % 2:
            first.append(lo)
            lo += 1
        else:
            first.append(hi)
            hi -= 1
    rows = [[(x + r) % n for x in first] for r in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    return rows


def write_result(res: BenchResult, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Write ``res.to_json()`` to ``path``. A ``.jsonl`` path is appended to (one document
    per line); any other path holds a JSON list of documents, and the new one is appended
    to it (a file holding a single document becomes a list; a missing or empty file starts
    a new list). Returns the document written."""
    doc = res.to_json()
    p = Path(path)
    if p.suffix == ".jsonl":
        with p.open("a", encoding="utf-8") as f:
            f.write(json.dumps(doc, sort_keys=True) + "\n")
        return doc
    docs: list[Any] = []
    if p.exists() and p.stat().st_size > 0:
        old = json.loads(p.read_text(encoding="utf-8"))
        docs = old if isinstance(old, list) else [old]
    docs.append(doc)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(docs, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return doc


def write_run(
    results: Sequence[BenchResult | Mapping[str, Any]],
    path: str | os.PathLike[str],
    *,
    command: str | None = None,
    notes: str = "",
) -> dict[str, Any]:
    """Write one benchmark run to ``path`` (replacing it): ``{"schema": RUN_SCHEMA,
    "command": ..., "date": "YYYY-MM-DD" (UTC), "machine": ..., "notes": ..., "results":
    [hicache-bench/1 documents]}``. ``command`` defaults to the running script and its
    arguments (``python <script> <args>``, as run from the repository root). Returns the
    document. ``scripts/gen_bench_docs.py`` renders such files into the docs' tables."""
    docs = [r.to_json() if isinstance(r, BenchResult) else dict(r) for r in results]
    for d in docs:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"write_run: a result is not a {SCHEMA} document")
    if command is None:
        import shlex

        command = shlex.join(["python", *sys.argv])
    run = {
        "schema": RUN_SCHEMA,
        "command": command,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": {
            "cpus": os.cpu_count() or 0,
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        "notes": notes,
        "results": docs,
    }
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    # not sort_keys: a result's variants keep their order (the first is "ours" in the docs' tables)
    tmp.write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return run
