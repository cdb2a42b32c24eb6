"""``hicache stats TARGET``: a running backend's metrics, read from its Prometheus endpoint.

``TARGET`` is the endpoint URL (``http://host:port/metrics``), ``host:port`` or a bare port
(``127.0.0.1``). The endpoint is the one :mod:`hicache_sdk.metrics.prometheus` serves -- inside SGLang,
the bridge's ``metrics_port`` (rank ``r`` on ``metrics_port + r``). Reading needs no extra:
the exposition text is parsed here.

Per (backend, rank): each op's calls, failures, pages, bytes, mean latency and p50/p90/p99
*estimated* from the latency histogram (linear inside a bucket, as Prometheus'
``histogram_quantile``; a quantile in the last, unbounded bucket reports the largest finite
bound), the errors by reason, the breaker state, the named counters and the gauges.
``--json`` prints that as one object ``{"<backend> <rank>": {...}}``.

Exit: 0 shown, 1 the endpoint could not be read or holds no hicache metrics, 2 usage.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import urllib.error
import urllib.request
from typing import Any

HELP = "show a running backend's metrics (from its Prometheus endpoint, see metrics_port)"

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="endpoint URL, host:port, or port (on 127.0.0.1)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for the endpoint (5)")


def endpoint_url(target: str) -> str:
    """``http://127.0.0.1:PORT/metrics`` for a port, ``http://HOST:PORT/metrics`` for
    ``host:port``; a URL is kept (``/metrics`` appended when it has no path)."""
    if target.isdigit():
        return f"http://127.0.0.1:{target}/metrics"
    if "://" not in target:
        return f"http://{target}/metrics"
    scheme, rest = target.split("://", 1)
    return target if "/" in rest else f"{scheme}://{rest}/metrics"


def _unescape(v: str) -> str:
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The samples of a Prometheus text exposition: ``(name, labels, value)``; comments and
    malformed lines are skipped."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        labels = {k: _unescape(v) for k, v in _LABEL.findall(m.group(3) or "")}
        try:
            value = float(m.group(4))
        except ValueError:
            continue
        out.append((m.group(1), labels, value))
    return out


def quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """``histogram_quantile(q)`` over cumulative ``(upper_bound, count)`` buckets (sorted,
    the last ``inf``); ``None`` without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    prev_bound, prev_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return prev_bound
            if count == prev_count:
                return bound
            return prev_bound + (bound - prev_bound) * (rank - prev_count) / (count - prev_count)
        prev_bound, prev_count = bound, count
    return prev_bound  # pragma: no cover - the last bucket holds every observation


def summarize(samples: list[tuple[str, dict[str, str], float]]) -> dict[str, dict[str, Any]]:
    """Group the ``hicache_*`` samples by ``"<backend> <rank>"`` (see the module docs)."""
    views: dict[str, dict[str, Any]] = {}
    buckets: dict[tuple[str, str], list[tuple[float, float]]] = {}

    def view(labels: dict[str, str]) -> dict[str, Any]:
        key = f"{labels.get('backend', '?')} {labels.get('rank', '?')}"
        return views.setdefault(key, {"ops": {}, "errors": {}, "breaker": None, "events": {}, "gauges": {}})

    def op(labels: dict[str, str]) -> dict[str, Any]:
        ops: dict[str, dict[str, Any]] = view(labels)["ops"]
        return ops.setdefault(labels.get("op", "?"), {})

    for name, labels, value in samples:
        if not name.startswith("hicache_"):
            continue
        if name == "hicache_op_latency_seconds_bucket":
            key = f"{labels.get('backend', '?')} {labels.get('rank', '?')}"
            le = labels.get("le", "+Inf")
            bound = math.inf if le in ("+Inf", "Inf") else float(le)
            buckets.setdefault((key, labels.get("op", "?")), []).append((bound, value))
        elif name == "hicache_op_latency_seconds_count":
            op(labels)["calls"] = int(value)
        elif name == "hicache_op_latency_seconds_sum":
            op(labels)["seconds"] = value
        elif name in ("hicache_op_failures_total", "hicache_op_pages_total", "hicache_op_bytes_total"):
            op(labels)[name[len("hicache_op_") : -len("_total")]] = int(value)
        elif name == "hicache_errors_total":
            view(labels)["errors"][labels.get("reason", "?")] = int(value)
        elif name == "hicache_breaker_state" and value == 1:
            view(labels)["breaker"] = labels.get("state")
        elif name == "hicache_events_total":
            view(labels)["events"][labels.get("name", "?")] = int(value)
        elif name == "hicache_gauge":
            view(labels)["gauges"][labels.get("name", "?")] = value
    for (key, op_name), bs in buckets.items():
        st = views[key]["ops"].setdefault(op_name, {})
        bs.sort()
        for q in (50, 90, 99):
            st[f"p{q}_s"] = quantile(q / 100, bs)
    for v in views.values():
        for st in v["ops"].values():
            calls, secs = st.get("calls", 0), st.get("seconds", 0.0)
            st["mean_s"] = secs / calls if calls else None
    return views


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.3f}"


def _print(views: dict[str, dict[str, Any]], url: str) -> None:
    print(f"hicache stats {url}")
    for key in sorted(views):
        v = views[key]
        print(f"{key}  breaker {v['breaker'] or '-'}")
        print(
            f"  {'op':<10}{'calls':>9}{'fail':>7}{'pages':>10}{'bytes':>14}"
            f"{'mean ms':>10}{'~p50 ms':>10}{'~p90 ms':>10}{'~p99 ms':>10}"
        )
        for name in sorted(v["ops"]):
            st = v["ops"][name]
            print(
                f"  {name:<10}{st.get('calls', 0):>9}{st.get('failures', 0):>7}{st.get('pages', 0):>10}"
                f"{st.get('bytes', 0):>14}{_ms(st.get('mean_s')):>10}{_ms(st.get('p50_s')):>10}"
                f"{_ms(st.get('p90_s')):>10}{_ms(st.get('p99_s')):>10}"
            )
        for title in ("errors", "events", "gauges"):
            items = v[title]
            if items:
                print(f"  {title}: " + ", ".join(f"{k} {items[k]:g}" for k in sorted(items)))


def run(args: argparse.Namespace) -> int:
    """Read the endpoint and print it; see the module docs for exit codes."""
    url = endpoint_url(args.target)
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as e:
        print(f"hicache stats: cannot read {url}: {getattr(e, 'reason', e)}", file=sys.stderr)
        return 1
    views = summarize(parse_exposition(text))
    if not views:
        print(f"hicache stats: {url} holds no hicache_* metrics", file=sys.stderr)
        return 1
    if args.json:
        json.dump(views, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    else:
        _print(views, url)
    return 0
