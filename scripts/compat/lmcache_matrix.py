"""The LMCache table of ``docs/compatibility.md``: ``hicache check --engine lmcache-l2`` and
``--engine lmcache-connector`` on LMCache 0.5.x's own L2 adapters and remote connectors that
run on a CPU machine, on the outside LMCache plugins on the package index, and on our four
backends through our bindings.

Run inside the LMCache env (``tox -e lmcache``'s; LMCache cannot share the SGLang env)::

    .tox/lmcache/bin/python scripts/compat_matrix.py --lmcache              # every row
    .tox/lmcache/bin/python scripts/compat_matrix.py --lmcache --only l2_fs  # some rows

Each row runs ``hicache check TARGET --engine E --config @FILE --report R`` in a child
process, with the servers it needs (``redis-server``, ``moto_server``, a ``mooncake_master``
with a holder) on free 127.0.0.1 ports, stopped by PID at the end. Writes
``docs/compatibility_lmcache.json``; :func:`render` gives the section of the doc.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "compatibility_lmcache.json"
#: Per-row wall-clock limit.
ROW_TIMEOUT_S = 420

Configure = Callable[[Any, Path], dict[str, Any]]


@dataclass(frozen=True)
class LRow:
    name: str
    title: str
    engine: str  #: "lmcache-l2" or "lmcache-connector"
    target: Callable[[Any, Path], str]
    configure: Configure
    expected: str  #: the verdict a correct suite gives: "pass" or "fail"
    note: str = ""


@dataclass(frozen=True)
class LOutside:
    dist: str
    version: str
    engine: str
    target: str
    why_not_run: str


def _const(s: str) -> Callable[[Any, Path], str]:
    return lambda _s, _d: s


def _none(_s: Any, _d: Path) -> dict[str, Any]:
    return {}


def _ours_config(name: str) -> Configure:
    def configure(s: Any, d: Path) -> dict[str, Any]:
        if name == "file":
            return {"root": str(d)}
        if name == "redis":
            return {"url": s.redis().url}
        if name == "s3":
            from servers import CREDS

            return {
                "bucket": s.moto_bucket(),
                "endpoint_url": s.moto().url,
                "access_key_id": CREDS["aws_access_key_id"],
                "secret_access_key": CREDS["aws_secret_access_key"],
            }
        cfg: dict[str, Any] = s.mooncake().config()
        return cfg

    return configure


def _redis_host_port(s: Any) -> tuple[str, int]:
    url = s.redis().url  # redis://127.0.0.1:PORT[/0]
    host, _, port = url.split("//", 1)[1].split("/", 1)[0].rpartition(":")
    return host, int(port)


def _redis_url(scheme: str) -> Callable[[Any, Path], str]:
    def target(s: Any, _d: Path) -> str:
        host, port = _redis_host_port(s)
        return f"lmcache:{scheme}://{host}:{port}"

    return target


def _resp_l2(s: Any, _d: Path) -> dict[str, Any]:
    host, port = _redis_host_port(s)
    return {"host": host, "port": port}


FS_NOTE = (
    "LMCache 0.5.6's file-system L2 adapters keep no layout with a chunk and load it into a "
    "buffer of another size: a chunk loads into a smaller buffer, and bf16 bytes into an fp16 "
    "buffer of the same size."
)

CONN_META_NOTE = (
    "LMCache 0.5.6's connector stores a `RemoteMetadata` header with each chunk and allocates "
    "from the stored shape, not from the reading deployment's metadata: under the same key, a "
    "chunk of another size or layout loads as a hit with the writer's shape."
)
REDIS_NOTE = (
    CONN_META_NOTE + " Its `exists_sync` waits for the event loop (`redis_connector.py:275`, "
    "`run_coroutine_threadsafe(...).result()`), and its `close` waits for its executor on the "
    "loop itself (`pq_executor.shutdown(wait=True)`), so it never returns."
)

ROWS: tuple[LRow, ...] = (
    LRow("l2_fs", "LMCache `fs` (Python)", "lmcache-l2", _const("lmcache:fs"),
         lambda s, d: {"base_path": str(d)}, "fail", FS_NOTE),
    LRow("l2_fs_native", "LMCache `fs_native` (C++)", "lmcache-l2", _const("lmcache:fs_native"),
         lambda s, d: {"base_path": str(d)}, "fail", FS_NOTE),
    LRow("l2_resp", "LMCache `resp` (C++, Redis)", "lmcache-l2", _const("lmcache:resp"), _resp_l2, "fail"),
    LRow("l2_mock", "LMCache `mock` (in memory)", "lmcache-l2", _const("lmcache:mock"),
         lambda s, d: {"max_size_gb": 1, "mock_bandwidth_gb": 10}, "fail"),
    *(
        LRow(f"l2_ours_{b}", f"hicache-sdk {b} (`L2Adapter`)", "lmcache-l2", _const(b), _ours_config(b), "pass")
        for b in ("file", "redis", "s3", "mooncake")
    ),
    LRow("conn_fs", "LMCache `fs://`", "lmcache-connector",
         lambda s, d: f"lmcache:fs://localhost:0/{d}", _none, "fail", CONN_META_NOTE),
    LRow("conn_redis", "LMCache `redis://`", "lmcache-connector", _redis_url("redis"), _none, "fail", REDIS_NOTE),
    LRow("conn_resp", "LMCache `resp://` (C++)", "lmcache-connector", _redis_url("resp"), _none, "fail"),
    LRow("conn_mock", "LMCache `mock://` (in memory)", "lmcache-connector", _const("lmcache:mock://1/"),
         _none, "fail"),
    *(
        LRow(f"conn_ours_{b}", f"hicache-sdk {b} (`ConnectorAdapter`)", "lmcache-connector", _const(b),
             _ours_config(b), "pass")
        for b in ("file", "redis", "s3", "mooncake")
    ),
)  # fmt: skip

OUTSIDE: tuple[LOutside, ...] = (
    LOutside(
        "lmcache-kvblockd",
        "0.1.0",
        "lmcache-connector",
        "lmcache_kvblockd.adapter:KvblockdConnectorAdapter",
        "its connector talks to a kvblockd daemon (a Go binary; only its Python client "
        "`kvblockd` is on the package index)",
    ),
    LOutside(
        "memkv-lmcache",
        "1.0.12",
        "lmcache-l2",
        "memkv_lmcache.l2_adapter:MemKVL2Adapter",
        "needs a MemKV cluster and a MinIO licence (proprietary; the client refuses to start without one)",
    ),
)


def _first_failure(tests: dict[str, Any]) -> tuple[str, str] | None:
    for nodeid, t in tests.items():
        if t.get("outcome") == "failed":
            return nodeid.rsplit("::", 1)[-1], str(t.get("reason", ""))
    return None


def run_row(row: LRow, servers: Any, work: Path) -> dict[str, Any]:
    d = work / row.name
    d.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        target = row.target(servers, d / "data")
        config = row.configure(servers, d / "data")
    except Exception as e:
        return {
            "row": row.name,
            "error": f"could not start its server: {type(e).__name__}: {e}",
            "wall_s": 0.0,
        }
    cfg = d / "config.json"
    cfg.write_text(json.dumps(config), encoding="utf-8")
    report = d / "report.json"
    argv = [
        sys.executable, "-c", "from hicache_conformance.cli import console_main; console_main()",
        target, "--engine", row.engine, "--config", f"@{cfg}", "--report", str(report), "-q",
    ]  # fmt: skip
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "MC_LOG_LEVEL": "ERROR"}
    doc: dict[str, Any] = {"row": row.name, "target": target, "engine": row.engine}
    try:
        with open(d / "output.log", "wb") as log:
            proc = subprocess.run(
                argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(d), timeout=ROW_TIMEOUT_S
            )
        doc["rc"] = proc.returncode
    except subprocess.TimeoutExpired:
        doc["error"] = f"stopped: the suite did not finish in {ROW_TIMEOUT_S} s"
    doc["wall_s"] = round(time.monotonic() - started, 1)
    if report.exists():
        rep = json.loads(report.read_text(encoding="utf-8"))
        doc["ok"] = bool(rep.get("ok"))
        doc["tests"] = rep.get("tests", {})
    elif "error" not in doc:
        tail = (d / "output.log").read_text(errors="replace")[-600:]
        doc["error"] = f"no report (exit {doc.get('rc')}): {tail}"
    return doc


def check_outside(o: LOutside) -> dict[str, Any]:
    """Whether the plugin is installed here and importable (it is not run: see ``why_not_run``)."""
    from importlib import metadata

    try:
        version = metadata.version(o.dist)
    except metadata.PackageNotFoundError:
        return {"dist": o.dist, "installed": False}
    module, _, name = o.target.partition(":")
    code = f"import importlib; getattr(importlib.import_module({module!r}), {name!r})"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    res: dict[str, Any] = {
        "dist": o.dist,
        "installed": True,
        "version": version,
        "imports": out.returncode == 0,
    }
    if out.returncode:
        res["error"] = (out.stderr.strip().splitlines() or [""])[-1][:300]
    return res


def run(only: list[str] | None = None) -> int:
    """Run the rows (``only``: some of them, merged into the last run), write the JSON."""
    from importlib import metadata

    from servers import Servers

    wanted = only or [r.name for r in ROWS]
    unknown = sorted(set(wanted) - {r.name for r in ROWS})
    if unknown:
        print(f"--lmcache --only: unknown rows {unknown}; known: {[r.name for r in ROWS]}", file=sys.stderr)
        return 2
    previous: dict[str, Any] = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
    rows: dict[str, Any] = dict(previous.get("rows", {})) if only else {}
    work = Path(tempfile.mkdtemp(prefix="hicache-compat-lmcache-"))
    servers = Servers()
    started = time.monotonic()
    try:
        for row in ROWS:
            if row.name not in wanted:
                continue
            print(f"[lmcache matrix] {row.name} ...", flush=True)
            doc = run_row(row, servers, work)
            rows[row.name] = doc
            first = _first_failure(doc.get("tests", {}))
            verdict = "PASS" if doc.get("ok") else "FAIL"
            print(f"[lmcache matrix] {row.name}: {verdict} in {doc['wall_s']} s"
                  f"{'; first failure ' + first[0] if first else ''}{'; ' + doc['error'] if doc.get('error') else ''}",
                  flush=True)  # fmt: skip
        outside = {o.dist: check_outside(o) for o in OUTSIDE}
    finally:
        servers.stop()
        shutil.rmtree(work, ignore_errors=True)
    total = round(time.monotonic() - started, 1)
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = ".tox/lmcache/bin/python scripts/compat_matrix.py --lmcache"
    run_doc = {
        "command": previous.get("command", command) if only else command,
        "date": previous.get("date", now) if only else now,
        "lmcache": metadata.version("lmcache"),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "total_s": previous.get("total_s") if only else total,
        "rows": rows,
        "outside": outside,
        "partial_runs": [*previous.get("partial_runs", []), {"rows": wanted, "date": now, "total_s": total}]
        if only
        else [],
    }
    RESULTS.write_text(json.dumps(run_doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"[lmcache matrix] total {total:.0f} s; wrote {RESULTS.relative_to(ROOT)}")
    return 0


def _one_line(s: str, n: int = 240) -> str:
    s = " ".join(str(s).split()).replace(str(ROOT) + "/", "").replace("|", "\\|").replace("`", "'")
    return s if len(s) <= n else s[: n - 3] + "..."


def render(_run: dict[str, Any] | None = None) -> str:
    """The LMCache section of ``docs/compatibility.md`` (from ``docs/compatibility_lmcache.json``;
    empty before its first run)."""
    if not RESULTS.exists():
        return ""
    return render_doc(json.loads(RESULTS.read_text(encoding="utf-8")))


def render_doc(doc: dict[str, Any]) -> str:
    """The LMCache section from a run's results (what :func:`run` writes)."""
    out = ["## LMCache: L2 adapters and remote connectors\n"]
    out.append(
        f"The suite's LMCache contracts (`hicache check TARGET --engine lmcache-l2` and "
        f"`--engine lmcache-connector`; rules in [lmcache.md](lmcache.md)) on LMCache "
        f"{doc.get('lmcache')}'s own L2 adapters and remote connectors that run on a CPU machine, "
        "each built by LMCache's own loader over a real server where it needs one, and on our four "
        "backends through `hicache_sdk.lmcache`. A backend by name runs its transport tests first."
    )
    out.append("")
    out.append(
        f"Last run: `{doc.get('command')}` (in the `tox -e lmcache` env) on {doc.get('date')}, "
        f"Python {doc.get('python')}, {doc.get('cpus')} CPU cores, {doc.get('total_s')} s in all."
    )
    for part in doc.get("partial_runs", []):
        out.append(f"Rows {', '.join(part['rows'])} rerun on {part['date']} ({part['total_s']} s).")
    out.append("")
    out.append(
        "| target | engine | passed | failed | skipped | time | verdict | expected | first failing test: reason |"
    )
    out.append("|---|---|---:|---:|---:|---:|---|---|---|")
    notes: list[str] = []
    for row in ROWS:
        r = (doc.get("rows") or {}).get(row.name)
        if r is None:
            out.append(f"| {row.title} | `{row.engine}` | | | | | not run | {row.expected} | |")
            continue
        tests = r.get("tests") or {}
        counts = {
            k: sum(1 for t in tests.values() if t.get("outcome") == k)
            for k in ("passed", "failed", "skipped")
        }
        verdict = "no verdict" if r.get("error") and not tests else "pass" if r.get("ok") else "fail"
        first = _first_failure(tests)
        why = (
            f"`{first[0]}`: {_one_line(first[1])}"
            if first
            else (_one_line(r["error"]) if r.get("error") else "")
        )
        mark = "" if verdict == row.expected else " (differs)"
        out.append(
            f"| {row.title} | `{row.engine}` | {counts['passed']} | {counts['failed']} | {counts['skipped']} | "
            f"{r.get('wall_s')} s | {verdict} | {row.expected}{mark} | {why} |"
        )
        if row.note and verdict == "fail":
            notes.append(f"- **{row.title}**: {row.note}")
    out.append("")
    out.append(
        "*expected*: what a correct suite says about the target. *first failing test*: the "
        "first test that failed, with the suite's reason; `hicache check TARGET --engine ENGINE` "
        "lists every one."
    )
    out.append("")
    out.extend(notes)
    if notes:
        out.append("")
    out.append("### Outside LMCache plugins on the package index\n")
    out.append("| package | class | engine | installed here | suite |")
    out.append("|---|---|---|---|---|")
    for o in OUTSIDE:
        res = (doc.get("outside") or {}).get(o.dist, {})
        if not res:
            inst = "not checked"
        elif not res.get("installed"):
            inst = "no"
        elif res.get("imports"):
            inst = f"{res.get('version')}, imports"
        else:
            inst = f"{res.get('version')}, does not import: `{_one_line(res.get('error', ''))}`"
        out.append(
            f"| `{o.dist}` {o.version} | `{o.target}` | `{o.engine}` | {inst} | not run: {o.why_not_run} |"
        )
    out.append("")
    return "\n".join(out)
