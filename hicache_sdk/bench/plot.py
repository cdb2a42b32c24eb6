"""Plots of ``hicache-bench/1`` documents: several backends side by side, with the raw-client
and machine-limit lines their documents carry.

Reads the documents of ``hicache bench --json`` and of every backend's benchmark script
alike (``load_docs``: a JSON list, a single document, or ``.jsonl``). Each document's results
become series (:func:`series`), keyed by backend, op, page size and label:

* backend: ``params["backend"]``, else the document name up to its first ``-``;
* op: ``params["op"]``, else the first of ``set``/``get``/``exists`` among the name's parts
  (documents with neither are skipped);
* x: ``params["batch"]``, else ``params["pages"]`` (pages per call);
* y: GB/s when the label moved bytes, else keys per second (``x / median_s``);
* kind, from the label: ``ours*`` -> ``ours`` (solid), ``raw*``/``peer*`` -> ``raw``
  (dashed), ``limit*`` -> ``limit`` (dotted), anything else ``other`` (dash-dot).

:func:`plot` draws one row per op and one column per backend (rows share their y scale), one
line per (page size, label); a series with a single x becomes a horizontal line when it is a
raw or limit reference. Needs matplotlib: ``pip install 'hicache-sdk[plot]'``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._extras import require
from .harness import SCHEMA

__all__ = ["Series", "load_docs", "plot", "series"]

_OPS = ("set", "get", "exists")
_STYLE = {"ours": "-", "raw": "--", "limit": ":", "other": "-."}


@dataclass
class Series:
    backend: str
    op: str
    page_bytes: int | None
    label: str
    kind: str
    unit: str  # "GB/s" or "keys/s"
    points: list[tuple[float, float]] = field(default_factory=list)


def load_docs(paths: Iterable[str | os.PathLike[str]]) -> list[dict[str, Any]]:
    """Every ``hicache-bench/1`` document in ``paths``; ``ValueError`` naming the file for
    unreadable JSON or a document of another schema."""
    docs: list[dict[str, Any]] = []
    for p in paths:
        path = Path(p)
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix == ".jsonl":
                found: list[Any] = [json.loads(line) for line in text.splitlines() if line.strip()]
            else:
                data = json.loads(text)
                found = data if isinstance(data, list) else [data]
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from e
        for i, doc in enumerate(found):
            if not isinstance(doc, Mapping) or doc.get("schema") != SCHEMA:
                got = doc.get("schema") if isinstance(doc, Mapping) else type(doc).__name__
                raise ValueError(f"{path}: document {i} is not a {SCHEMA} result (schema {got!r})")
            docs.append(dict(doc))
    return docs


def _kind(label: str) -> str:
    if label.startswith("ours"):
        return "ours"
    if label.startswith(("raw", "peer")):
        return "raw"
    if label.startswith("limit"):
        return "limit"
    return "other"


def series(docs: Iterable[Mapping[str, Any]]) -> list[Series]:
    """The documents' results as series (see the module docs), points sorted by x."""
    out: dict[tuple[str, str, int | None, str], Series] = {}
    for doc in docs:
        params = doc.get("params", {})
        name = str(doc.get("name", ""))
        op = params.get("op") or next((p for p in name.split("-") if p in _OPS), None)
        x = params.get("batch", params.get("pages"))
        if op is None or not isinstance(x, (int, float)):
            continue
        backend = str(params.get("backend") or name.split("-")[0])
        pb = params.get("page_bytes")
        for label, r in doc.get("results", {}).items():
            med = float(r.get("median_s", 0.0))
            moved = bool(r.get("nbytes"))
            y = float(r.get("gbps", 0.0)) if moved else (x / med if med > 0 else 0.0)
            key = (backend, op, pb, label)
            s = out.get(key)
            if s is None:
                s = out[key] = Series(backend, op, pb, label, _kind(label), "GB/s" if moved else "keys/s")
            s.points.append((float(x), y))
    for s in out.values():
        s.points.sort()
    return list(out.values())


def _human(n: int | None) -> str:
    if n is None:
        return "?"
    from .runner import human_bytes

    return human_bytes(int(n))


def plot(docs: Iterable[Mapping[str, Any]], out: str | os.PathLike[str], *, title: str = "") -> Path:
    """Draw ``docs`` into ``out`` (format from the suffix: .png, .svg, .pdf); returns the path.
    ``ValueError`` when no document has a recognisable op; ``MissingExtraError`` naming
    ``hicache-sdk[plot]`` without matplotlib."""
    mpl = require("matplotlib", "plot", what="--plot")
    mpl.use("Agg")
    plt = require("matplotlib.pyplot", "plot", what="--plot")
    all_series = series(docs)
    if not all_series:
        raise ValueError("nothing to plot: no result names a set/get/exists op")
    ops = [op for op in _OPS if any(s.op == op for s in all_series)]
    backends = sorted({s.backend for s in all_series})
    fig, axes = plt.subplots(
        len(ops), len(backends), figsize=(5 * len(backends), 3.6 * len(ops)), squeeze=False, sharey="row"
    )
    sizes = sorted({s.page_bytes for s in all_series if s.page_bytes is not None})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for r, op in enumerate(ops):
        for c, backend in enumerate(backends):
            ax = axes[r][c]
            mine = [s for s in all_series if s.op == op and s.backend == backend]
            for s in mine:
                color = colors[(sizes.index(s.page_bytes) if s.page_bytes in sizes else 0) % len(colors)]
                label = f"{_human(s.page_bytes)} {s.label}"
                xs = [p[0] for p in s.points]
                ys = [p[1] for p in s.points]
                if len(xs) == 1 and s.kind in ("raw", "limit"):
                    ax.axhline(ys[0], linestyle=_STYLE[s.kind], color=color, label=f"{label} (x={xs[0]:g})")
                else:
                    ax.plot(xs, ys, linestyle=_STYLE[s.kind], marker="o", color=color, label=label)
            ys_all = [p[1] for s in mine for p in s.points]
            if ys_all and min(ys_all) > 0:
                ax.set_yscale("log")
            xs_all = {p[0] for s in mine for p in s.points}
            if len(xs_all) > 1:
                ax.set_xscale("log", base=2)
            ax.set_title(f"{backend}: {op}")
            ax.set_xlabel("pages per call")
            units = {s.unit for s in mine}
            ax.set_ylabel(" / ".join(sorted(units)) if units else "")
            ax.grid(True, alpha=0.3)
            if mine:
                ax.legend(fontsize="x-small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(out)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
