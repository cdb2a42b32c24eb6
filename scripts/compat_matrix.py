#!/usr/bin/env python
"""The compatibility matrix: the conformance suite (``contract`` profile) on every SGLang
0.5.23 built-in HiCache storage backend that runs on a CPU machine, each with its real
library or server, built the way SGLang builds it (``StorageBackendFactory`` with SGLang's
default configuration); on our four backends through SGLang's ``dynamic`` backend; and a
construction check of the outside backends published on the package index. Writes
``docs/compatibility.json`` (the run) and ``docs/compatibility.md`` (generated from
it and from ``scripts/compat/findings.py``, the classification of every failure).

Run it with ``tox -e matrix`` (which installs everything), or inside that environment::

    python scripts/compat_matrix.py                    # every row, then write the doc
    python scripts/compat_matrix.py --only file,sim    # some rows (merged into the last run)
    python scripts/compat_matrix.py --render           # regenerate the doc from the last run

Servers (``mooncake_master`` + ``mooncake_client``, ``weed mini``, ``redis-server``,
``moto_server``) start on free 127.0.0.1 ports when a row needs them and are stopped by PID
at the end. Each row runs ``hicache check compat_backends:ROW`` in a child process; its wall
time and peak RSS (``wait4``'s ``ru_maxrss``: the runner and its children) are recorded.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
COMPAT = ROOT / "scripts" / "compat"
sys.path.insert(0, str(COMPAT))

RESULTS = ROOT / "docs" / "compatibility.json"
DOC = ROOT / "docs" / "compatibility.md"
#: Per-row wall-clock limit of the suite run (the whole matrix fits in 20 minutes).
ROW_TIMEOUT_S = 420
#: A row whose runner (with its children) holds more than this is stopped: the machine is
#: shared, and the suite's own bound is 2 GiB.
RSS_CAP_MIB = int(os.environ.get("HICACHE_COMPAT_RSS_CAP_MIB", "6144"))


def _tree_rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants (from /proc), in MiB."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        child, parent = int(entry), int(fields[1])
        children.setdefault(parent, []).append(child)
        rss[child] = int(fields[21])  # resident pages
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def _sglang_version() -> str:
    from importlib import metadata

    return metadata.version("sglang")


def _suite_supports(option: str) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", "from hicache_conformance.cli import console_main; console_main()", "--help"],
        capture_output=True,
        text=True,
    ).stdout
    return option in out


def run_row(row: Any, servers: Any, work: Path, level: list[str]) -> dict[str, Any]:
    """Run the suite on one row in a child process; the row's result document."""
    d = work / row.name
    d.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        extra, env_extra = row.configure(servers, d / "data")
    except Exception as e:
        return {
            "row": row.name,
            "error": f"could not start its server: {type(e).__name__}: {e}",
            "wall_s": 0.0,
        }
    cfg = d / "config.json"
    cfg.write_text(json.dumps(extra), encoding="utf-8")
    report = d / "report.json"
    argv = [
        sys.executable, "-c", "from hicache_conformance.cli import console_main; console_main()",
        f"compat_backends:{row.name}", "--config", f"@{cfg}", "--isolate", "compat_namespace={namespace}",
        "--profile", "contract", "--report", str(report), "--junitxml", str(d / "junit.xml"), "-q",
    ]  # fmt: skip
    # the route SGLang takes for this backend: its paths and the layouts it hands it
    argv += ["--sglang-backend", row.sglang_backend, *row.args]
    if row.declare and _suite_supports("--capabilities"):
        argv += ["--capabilities", ",".join(row.declare)]
    for lv in level:
        argv += ["--level", lv]
    env = {
        **os.environ,
        **env_extra,
        "PYTHONPATH": os.pathsep.join([str(COMPAT), os.environ.get("PYTHONPATH", "")]),
    }
    env["HICACHE_SGLANG_ENV"] = "1"
    with open(d / "output.log", "wb") as log:
        # a session of its own: a stopped row takes its children with it (by process group)
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(d), start_new_session=True
        )
        deadline = started + ROW_TIMEOUT_S
        status, rusage = 0, None
        stopped = ""
        peak_tree = 0.0
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            tree = _tree_rss_mib(proc.pid)
            peak_tree = max(peak_tree, tree)
            if time.monotonic() > deadline:
                stopped = f"stopped: the suite did not finish in {ROW_TIMEOUT_S} s"
            elif tree > RSS_CAP_MIB:
                stopped = f"stopped: the runner held {tree:.0f} MiB (more than {RSS_CAP_MIB} MiB)"
            if stopped:
                os.killpg(proc.pid, signal.SIGKILL)
                _, status, rusage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    doc: dict[str, Any] = {
        "row": row.name,
        "command": "hicache check " + " ".join(shlex.quote(a) for a in argv[3:]),
        "rc": proc.returncode,
        "wall_s": round(wall, 1),
        "maxrss_mib": round(rusage.ru_maxrss / 1024, 1) if rusage else None,
    }
    if stopped:
        doc["error"] = stopped
    doc["peak_tree_rss_mib"] = round(peak_tree, 1)
    if report.exists():
        rep = json.loads(report.read_text(encoding="utf-8"))
        doc["report"] = {k: rep.get(k) for k in ("ok", "levels", "tests", "profile", "capabilities", "error",
                                                 "suite_version", "peak_rss", "sglang", "pools")}  # fmt: skip
    elif "error" not in doc:
        doc["error"] = f"no report (exit {proc.returncode}): " + _tail(d / "output.log")
    return doc


def _tail(path: Path, n: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def check_outside(o: Any) -> dict[str, Any]:
    """Construct an outside backend with SGLang's own factory and default configuration
    (``dynamic``, the extra config naming its class only, a small SGLang MHA host pool)."""
    code = f"""
import sys, json
sys.path.insert(0, {str(COMPAT)!r})
import compat_backends  # stand-ins for triton / torchvision, SGLang imported
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from compat_backends import sglang_storage_config
from types import SimpleNamespace
cfg = sglang_storage_config(SimpleNamespace(model_name="org/model"),
    {{"backend_name": {o.dist!r}, "module_path": {o.module!r}, "class_name": {o.cls!r}}})
try:
    b = StorageBackendFactory.create_backend("dynamic", cfg, None)
    print(json.dumps({{"constructed": True, "class": type(b).__module__ + ":" + type(b).__qualname__}}))
except BaseException as e:
    print(json.dumps({{"constructed": False, "error": type(e).__name__ + ": " + str(e)}}))
"""
    from importlib import metadata

    try:
        version = metadata.version(o.dist)
    except metadata.PackageNotFoundError:
        return {"dist": o.dist, "installed": False}
    env = {**os.environ, "HICACHE_SGLANG_ENV": "1"}
    for k in [k for k in env if k.startswith(("MEMKV_", "MINIO_", "AISTOR_", "KVBLOCKD_"))]:
        del env[k]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"constructed": False, "error": out.stderr[-400:]}
    return {"dist": o.dist, "installed": True, "version": version, **result}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=None, help="comma-separated rows (default: all)")
    p.add_argument("--level", action="append", default=[], help="suite levels (default: all)")
    p.add_argument("--render", action="store_true", help="only regenerate the doc from the last run")
    p.add_argument("--no-write", action="store_true", help="run, but write neither results nor the doc")
    p.add_argument("--linker", action="store_true", help="only the linker rows (compat/linker_table.py)")
    p.add_argument(
        "--lmcache", action="store_true", help="the LMCache rows (in the LMCache env), then the doc"
    )
    p.add_argument("--releases", metavar="LINES", help="all or 0.5.9,...: scripts/compat/releases.py")
    args = p.parse_args(argv)
    if args.releases:
        return __import__("releases").main(args.releases, args.only, args.level)
    if args.linker:
        return int(__import__("linker_table").run_linker())
    if args.lmcache:
        return __import__("lmcache_matrix").run(args.only and args.only.split(",")) or main(["--render"])

    from render import render

    if args.render:
        DOC.write_text(render(json.loads(RESULTS.read_text(encoding="utf-8"))), encoding="utf-8")
        print(f"wrote {DOC.relative_to(ROOT)}")
        return 0

    from rows import OUTSIDE, ROWS
    from servers import Servers

    wanted = [r.strip() for r in args.only.split(",")] if args.only else [r.name for r in ROWS]
    unknown = sorted(set(wanted) - {r.name for r in ROWS})
    if unknown:
        p.error(f"--only: unknown rows {unknown}; known: {[r.name for r in ROWS]}")
    previous: dict[str, Any] = {}
    if RESULTS.exists() and args.only:
        previous = json.loads(RESULTS.read_text(encoding="utf-8"))
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="hicache-compat-"))
    servers = Servers()
    results: dict[str, Any] = dict(previous.get("rows", {}))
    try:
        for row in ROWS:
            if row.name not in wanted:
                continue
            print(f"[matrix] {row.name} ...", flush=True)
            doc = run_row(row, servers, work, args.level)
            results[row.name] = doc
            rep = doc.get("report") or {}
            print(
                f"[matrix] {row.name}: {'PASS' if rep.get('ok') else 'FAIL'} in {doc['wall_s']} s, "
                f"peak RSS {doc.get('maxrss_mib')} MiB{'; ' + doc['error'] if doc.get('error') else ''}",
                flush=True,
            )
        outside = (
            {o.dist: check_outside(o) for o in OUTSIDE} if not args.only else previous.get("outside", {})
        )
    finally:
        servers.stop()
        shutil.rmtree(work, ignore_errors=True)
    total = time.monotonic() - started
    run = {
        "command": "tox -e matrix"
        + (
            " -- " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
            if (argv or sys.argv[1:])
            else ""
        ),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "sglang": _sglang_version(),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "total_s": round(total, 1) if not args.only else previous.get("total_s"),
        "rows": results,
        "outside": outside,
    }
    if args.only:
        run["partial_runs"] = [
            *previous.get("partial_runs", []),
            {"rows": wanted, "date": run["date"], "total_s": round(total, 1)},
        ]
        run["command"] = previous.get("command", run["command"])
        run["date_full"] = previous.get("date_full", previous.get("date"))
    else:
        run["date_full"] = run["date"]
    print(f"[matrix] total {total:.0f} s")
    if args.no_write:
        return 0
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(run, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    DOC.write_text(render(run), encoding="utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
