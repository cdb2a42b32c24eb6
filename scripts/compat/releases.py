"""The matrix by release: our four backends through each SGLang release line's own
``dynamic`` loader, one release per contract profile (``scripts/compat_matrix.py
--releases``). Writes ``docs/compatibility-releases.json``; :func:`section` renders it into
``docs/compatibility.md``.

Run it with ``tox -e matrix -- --releases all`` (or in the env of ``tox -e sglang``). Each
release line is installed once: the running env's own release is used as it is, and so is an
existing ``.tox/sglang-X.Y.Z`` (``.tox/sglang`` for the newest); any other release is
installed into the running env with ``scripts/sglang_release_env.py`` (the install logic of
``tox -e sglang-X.Y.Z``), and the release that was there is put back at the end. For each release, in that env:

* ``scripts/compat/release_probe.py``: the four backends load through the release's
  ``StorageBackendFactory``, round-trip through its ``HiCacheController`` (or, where it
  cannot be driven, the release's ``batch_set``/``batch_get`` call shape: the cell says
  which), and the release's ``StorageMetricsCollector`` logs the bridge's stats
  (``--enable-metrics``); a release whose storage modules do not import under this torch
  is "not run: torch";
* ``tests/sglang/test_sglang_profile.py``: the release matches its contract profile (read at
  run time; no code shared with ``scripts/gen_sglang_profiles.py``), plus the profile's
  ``has_unified_cache_linker`` against the installed package;
* ``hicache check NAME --profile contract`` per backend (the report names the profile).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "compatibility-releases.json"
PROBE = ROOT / "scripts" / "compat" / "release_probe.py"
BACKENDS = ("file", "redis", "s3", "mooncake")
#: Wall-clock limits (s): the probe of one release, one ``hicache check``.
PROBE_TIMEOUT_S = 600
CHECK_TIMEOUT_S = 900

__all__ = ["RESULTS", "main", "section"]


def _lines() -> list[str]:
    sys.path.insert(0, str(ROOT))
    from hicache_sdk.sglang.profiles import PROFILES

    return [p.sglang_version for p in PROFILES]


def _profile(line: str) -> Any:
    from hicache_sdk.sglang.versions import profile_for

    return profile_for(line)


def _tox_python(line: str) -> Path | None:
    env = "sglang" if line == _lines()[-1] else f"sglang-{line}"
    py = ROOT / ".tox" / env / "bin" / "python"
    # the running env is not "another" env: its release changes under this run
    return py if py.exists() and py.parent.parent.resolve() != Path(sys.prefix).resolve() else None


def _installed() -> str | None:
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def _release_line(version: str) -> str:
    from hicache_sdk.sglang.versions import release_line

    return release_line(version)


def _install_here(line: str) -> tuple[float, str]:
    """Install release ``line`` into the running env; (seconds, error or "")."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "sglang_release_env.py"), line],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
    )
    err = "" if proc.returncode == 0 else (proc.stdout + proc.stderr)[-800:]
    return round(time.monotonic() - started, 1), err


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["HICACHE_SGLANG_ENV"] = "1"
    env["MC_LOG_LEVEL"] = "ERROR"
    env.pop("PYTHONPATH", None)
    return env


def _probe(py: Path, configs: dict[str, Any], work: Path) -> dict[str, Any]:
    cfg = work / "configs.json"
    cfg.write_text(json.dumps(configs), encoding="utf-8")
    try:
        proc = subprocess.run(
            [str(py), str(PROBE), str(cfg)],
            capture_output=True,
            text=True,
            env=_child_env(),
            cwd=str(work),
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the probe did not finish in {PROBE_TIMEOUT_S} s"}
    for line in proc.stdout.splitlines():
        if line.startswith("PROBE "):
            return dict(json.loads(line[len("PROBE ") :]))
    return {"error": f"the probe printed no result (exit {proc.returncode}): {proc.stderr[-800:]}"}


def _pytest(py: Path, work: Path, target: str, name: str) -> dict[str, Any]:
    """``pytest TARGET`` in the release's env: passed/failed/skipped counts."""
    junit = work / f"{name}.xml"
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", f"--junitxml={junit}", target],
            capture_output=True, text=True, env=_child_env(), cwd=str(ROOT), timeout=CHECK_TIMEOUT_S,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"rc": None, "error": f"did not finish in {CHECK_TIMEOUT_S} s"}
    out: dict[str, Any] = {"rc": proc.returncode, "wall_s": round(time.monotonic() - started, 1)}
    m = re.search(r"<testsuite [^>]*", junit.read_text(encoding="utf-8")) if junit.exists() else None
    if m:
        attrs = dict(re.findall(r'(\w+)="([^"]*)"', m.group(0)))
        total, failed = (
            int(attrs.get("tests", 0)),
            int(attrs.get("failures", 0)) + int(attrs.get("errors", 0)),
        )
        skipped = int(attrs.get("skipped", 0))
        out |= {"passed": total - failed - skipped, "failed": failed, "skipped": skipped}
    if proc.returncode != 0:
        out["failures"] = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)[:10] or [proc.stdout[-600:]]
    return out


def _check(py: Path, name: str, extra: dict[str, Any], work: Path, levels: list[str]) -> dict[str, Any]:
    """``hicache check NAME --profile contract`` in the release's env."""
    d = work / f"check-{name}"
    d.mkdir(parents=True, exist_ok=True)
    report = d / "report.json"
    # the backend's own settings (``hicache sglang-args`` nests them in ``backend_config``)
    config = dict(extra.get("backend_config") or {})
    argv = [name, "--config", json.dumps(config), "--profile", "contract", "--report", str(report), "-q"]
    for lv in levels:
        argv += ["--level", lv]
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [str(py), "-c", "from hicache_conformance.cli import console_main; console_main()", *argv],
            capture_output=True, text=True, env=_child_env(), cwd=str(d), timeout=CHECK_TIMEOUT_S,
        )  # fmt: skip
        rc: int | None = proc.returncode
        tail = (proc.stdout + proc.stderr)[-600:]
    except subprocess.TimeoutExpired:
        rc, tail = None, f"did not finish in {CHECK_TIMEOUT_S} s"
    shown = ["hicache", "check", name, "--config", "'{...}'", *argv[3:]]
    out: dict[str, Any] = {
        "command": " ".join(shlex.quote(a) if "{" not in a else a for a in shown).replace(str(report), "R"),
        "rc": rc,
        "wall_s": round(time.monotonic() - started, 1),
    }
    if report.exists():
        rep = json.loads(report.read_text(encoding="utf-8"))
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        for lv in (rep.get("levels") or {}).values():
            for k in counts:
                counts[k] += int(lv.get(k, 0))
        reasons = sorted(
            {
                str(t.get("reason") or t.get("message") or "")[:200]
                for t in (rep.get("tests") or {}).values()
                if t.get("outcome") == "skipped"
                and "controller model" in str(t.get("reason") or t.get("message"))
            }
        )
        out |= counts | {"ok": bool(rep.get("ok")), "profile": (rep.get("sglang") or {}).get("profile")}
        out["report_profile"] = rep.get("profile")
        if reasons:
            out["controller_skip_reason"] = reasons[0]
        if not rep.get("ok"):
            out["failed_tests"] = [
                k.rsplit("::", 1)[-1]
                for k, t in (rep.get("tests") or {}).items()
                if t.get("outcome") == "failed"
            ][:10]
    else:
        out["error"] = tail
    return out


def run_release(line: str, servers: Any, work: Path, args: Any) -> dict[str, Any]:
    from rows import _ours

    doc: dict[str, Any] = {"line": line, "wheel": _profile(line).wheel_version}
    py = _tox_python(line)
    here = _installed()
    if here is not None and _release_line(here) == line:
        py = Path(sys.executable)
        doc["env"] = "the running env (already this release)"
    elif py is not None:
        doc["env"] = f"reused {py.parent.parent.relative_to(ROOT)}"
    else:
        secs, err = _install_here(line)
        doc["env"] = "installed into the running env"
        doc["install_s"] = secs
        if err:
            doc["error"] = f"install failed: {err}"
            return doc
        py = Path(sys.executable)
    d = work / line
    d.mkdir(parents=True, exist_ok=True)
    configs: dict[str, Any] = {}
    for name in args.backends:
        try:
            configs[name] = _ours(name)(servers, d / name)[0]
        except Exception as e:
            doc.setdefault("config_errors", {})[name] = f"{type(e).__name__}: {e}"
    started = time.monotonic()
    doc["probe"] = _probe(py, configs, d)
    doc["probe_s"] = round(time.monotonic() - started, 1)
    if doc["probe"].get("import_error") or doc["probe"].get("error"):
        return doc
    doc["profile_check"] = _pytest(py, d, "tests/sglang/test_sglang_profile.py", "profile")
    if args.suite:
        # what `tox -e sglang-X.Y.Z` runs, in the same packages
        doc["suite"] = _pytest(py, d, "tests/sglang", "suite")
        print(f"[releases] {line} tests/sglang: {_pytest_cell(doc['suite'])}", flush=True)
    if not args.no_check:
        doc["check"] = {}
        for name in args.backends:
            if name not in configs:
                continue
            # a fresh extra config (new root / bucket / model) for the suite
            extra = _ours(name)(servers, d / f"{name}-check")[0]
            doc["check"][name] = _check(py, name, extra, d, args.level)
            print(f"[releases] {line} check {name}: {_verdict(doc['check'][name])}", flush=True)
    return doc


def main(spec: str, only: str | None = None, levels: list[str] | None = None) -> int:
    """``--releases LINES`` (``all``, or ``0.5.9,0.5.14``): run those release lines (``only``:
    some of the four backends; ``levels``: the suite levels of ``hicache check``; the
    environment variable ``HICACHE_RELEASES_NO_CHECK=1`` skips ``hicache check``,
    ``HICACHE_RELEASES_SUITE=1`` also runs ``pytest tests/sglang``, the command of
    ``tox -e sglang-X.Y.Z``), merge them
    into the last run's JSON, write it and regenerate the doc."""
    import types

    args = types.SimpleNamespace(
        backends=[b.strip() for b in (only or ",".join(BACKENDS)).split(",") if b.strip()],
        level=list(levels or []),
        no_check=os.environ.get("HICACHE_RELEASES_NO_CHECK") == "1",
        suite=os.environ.get("HICACHE_RELEASES_SUITE") == "1",
    )
    if set(args.backends) - set(BACKENDS):
        print(f"--releases --only: our backends are {', '.join(BACKENDS)}", file=sys.stderr)
        return 2
    lines = _lines() if spec == "all" else [x.strip() for x in spec.split(",") if x.strip()]
    unknown = sorted(set(lines) - set(_lines()))
    if unknown:
        print(f"--releases: no profile for {unknown}; known: {_lines()}", file=sys.stderr)
        return 2
    from servers import Servers

    previous = json.loads(RESULTS.read_text(encoding="utf-8")) if RESULTS.exists() else {}
    rows: dict[str, Any] = dict(previous.get("releases", {}))
    original = _installed()
    servers = Servers()
    work = Path(tempfile.mkdtemp(prefix="hicache-releases-"))
    try:
        for line in lines:
            started = time.monotonic()
            print(f"[releases] {line} ...", flush=True)
            doc = run_release(line, servers, work, args)
            doc["total_s"] = round(time.monotonic() - started, 1)
            doc["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
            doc["command"] = "python scripts/compat_matrix.py --releases " + line
            rows[line] = doc
            print(f"[releases] {line}: {_row_verdict(doc)} in {doc['total_s']} s", flush=True)
            _write(previous, rows)
    finally:
        servers.stop()
        shutil.rmtree(work, ignore_errors=True)
        if original is not None and _installed() != original:
            from hicache_sdk.sglang.versions import release_line

            secs, err = _install_here(release_line(original))
            print(f"[releases] put SGLang {original} back ({secs} s){': ' + err if err else ''}", flush=True)
    return 0


def _write(previous: dict[str, Any], rows: dict[str, Any]) -> None:
    import platform

    import torch

    doc = {
        **previous,
        "command": "python scripts/compat_matrix.py --releases " + ",".join(rows),
        "releases": rows,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
    }
    RESULTS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    from render import render

    base = ROOT / "docs" / "compatibility.json"
    if base.exists():
        (ROOT / "docs" / "compatibility.md").write_text(
            render(json.loads(base.read_text(encoding="utf-8"))), encoding="utf-8"
        )


# -- rendering --------------------------------------------------------------------------------
def _verdict(check: dict[str, Any]) -> str:
    if "passed" not in check:
        return f"no verdict: {_one(check.get('error', ''))}"
    v = "pass" if check.get("ok") else "fail"
    return f"{v} ({check['passed']}/{check['failed']}/{check['skipped']})"


def _one(s: str, n: int = 200) -> str:
    s = " ".join(str(s).split()).replace(str(ROOT) + "/", "").replace("|", "\\|").replace("`", "'")
    return s if len(s) <= n else s[: n - 3] + "..."


def _not_run(doc: dict[str, Any]) -> str | None:
    probe = doc.get("probe") or {}
    if doc.get("error"):
        return f"not run: {_one(doc['error'])}"
    if probe.get("import_error"):
        kind = "torch" if "torch" in probe.get("import_trace", probe["import_error"]) else "import"
        return f"not run: {kind} (`{_one(probe['import_error'])}`)"
    if probe.get("error"):
        return f"not run: {_one(probe['error'])}"
    return None


def _cell(doc: dict[str, Any], name: str) -> str:
    cell = ((doc.get("probe") or {}).get("backends") or {}).get(name)
    if cell is None:
        why = (doc.get("config_errors") or {}).get(name, "not run")
        return _one(why, 80)
    parts = []
    load = cell.get("load") or {}
    parts.append("load ✓" if load.get("ok") else f"load ✗ `{_one(load.get('error', ''), 120)}`")
    rt = cell.get("round_trip")
    if rt:
        via = "controller" if rt.get("via") == "controller" else "call shape"
        parts.append(f"round trip ({via}) {'✓' if rt.get('ok') else '✗'}")
    met = cell.get("metrics")
    if met:
        parts.append("metrics ✓" if met.get("ok") else f"metrics ✗ `{_one(met.get('error', ''), 100)}`")
    chk = (doc.get("check") or {}).get(name)
    if chk:
        parts.append(f"check {_verdict(chk)}")
    return "; ".join(parts)


def _row_verdict(doc: dict[str, Any]) -> str:
    nr = _not_run(doc)
    if nr:
        return nr
    cells = ((doc.get("probe") or {}).get("backends") or {}).values()
    ok = all(
        c.get("load", {}).get("ok") and c.get("round_trip", {}).get("ok") and c.get("metrics", {}).get("ok")
        for c in cells
    )
    ok = ok and all(c.get("ok") for c in (doc.get("check") or {}).values())
    ok = ok and (doc.get("profile_check") or {}).get("failed", 1) == 0
    ok = ok and (doc.get("suite") or {}).get("failed", 0) == 0 and (doc.get("suite") or {}).get("rc", 0) == 0
    return "pass" if ok and cells else "fail"


def _draft(doc: dict[str, Any], line: str) -> str:
    """The draft-page key form the release's controller produced, against its profile."""
    seen = ((doc.get("probe") or {}).get("observed") or {}).get("draft_key")
    if not seen:
        return "-"
    if seen.get("error"):
        return f"not observed: `{_one(seen['error'], 80)}`"
    suffix = seen.get("suffix")
    shown = f"`<hash>{suffix}`" if suffix else "none"
    same = suffix == _profile(line).draft_key_suffix
    return shown + ("" if same else " (profile differs)")


def _linker(doc: dict[str, Any], line: str) -> str:
    """Whether ``TransportLinker`` can serve this release: "n/a" before
    :data:`~hicache_sdk.sglang.linker.FIRST_SGLANG_RELEASE` (SGLang's own linkers only, where
    the release ships ``unified_cache/`` at all)."""
    from hicache_sdk.sglang.linker import FIRST_SGLANG_RELEASE

    probe = doc.get("probe") or {}
    if "unified_cache_linker" not in probe:
        return "-"
    if _key(line) >= _key(FIRST_SGLANG_RELEASE):
        return "TransportLinker (see the linker table)"
    return "n/a (SGLang's own linkers only)" if probe["unified_cache_linker"] else "n/a"


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version)[:3])


def _pytest_cell(pc: dict[str, Any] | None, good: str = "green", bad: str = "red") -> str:
    if not pc:
        return "-"
    if "passed" not in pc:
        why = pc.get("error") or f"exit {pc.get('rc')}"
        return f"no verdict ({_one(why, 80)})"
    mark = good if pc.get("failed") == 0 and pc.get("rc") == 0 else bad
    return f"{mark} ({pc['passed']} passed, {pc['failed']} failed, {pc['skipped']} skipped)"


def _profile_cell(doc: dict[str, Any]) -> str:
    return _pytest_cell(doc.get("profile_check"), "matches", "differs")


def _via(doc: dict[str, Any]) -> str:
    cells = ((doc.get("probe") or {}).get("backends") or {}).values()
    vias = sorted({(c.get("round_trip") or {}).get("via", "-") for c in cells})
    return ", ".join(
        "release's HiCacheController (generic + zero-copy)" if v == "controller" else v for v in vias
    )


def section(_run: dict[str, Any] | None = None) -> str:
    """The by-release table of ``docs/compatibility.md`` ("" before the first run)."""
    if not RESULTS.exists():
        return ""
    run = json.loads(RESULTS.read_text(encoding="utf-8"))
    rows = run.get("releases") or {}
    first_linker = next(
        (line for line in _lines() if (rows.get(line, {}).get("probe") or {}).get("unified_cache_linker")),
        None,
    )
    out = [
        "## Our backends on every SGLang release\n",
        "Our four backends through each SGLang release line's own `dynamic` loader (the last "
        "`.postN` of the line, the wheel its contract profile was read from), on CPU with "
        f"torch {run.get('torch')}, Python {run.get('python')}, {run.get('cpus')} CPU cores. "
        'Per release: *load* (the release\'s `StorageBackendFactory.create_backend("dynamic", '
        "...)` builds the bridge from what `hicache sglang-args NAME` prints); *round trip* (pages "
        "written by the release's own `HiCacheController._page_backup` and read back by its "
        "`_page_transfer`, on the generic and the zero-copy path, byte-exact; *controller* when "
        "the release's controller code ran, *call shape* when it could not be driven and the "
        "release's `batch_set`/`batch_get` call shape was used instead); *metrics* (what "
        "`--enable-metrics` does: `get_stats()` is the release's `StorageMetrics` and the "
        "release's `StorageMetricsCollector` logs it); *check* (`hicache check NAME --profile "
        "contract` under that release: pass or fail (passed/failed/skipped); the contract tests "
        "that drive a controller the suite does not model skip with the reason). *profile*: "
        "`tests/sglang/test_sglang_profile.py` in that env, the release read at run time against "
        "its contract profile (no code shared with the generator). *linker*: whether our "
        "`TransportLinker` serves the release's unified cache linker; it needs the `dynamic` "
        "linker backend of SGLang 0.5.23 (the release ships `sglang/srt/mem_cache/unified_cache/` "
        + (f"from {first_linker} on, " if first_linker else "")
        + "but before 0.5.23 only SGLang's own linkers load; [linker.md](linker.md)).",
        "",
        "Reproduce: `tox -e matrix -- --releases all` (or `--releases 0.5.9,0.5.14`, `--only "
        "file,redis`), or `python scripts/compat_matrix.py --releases all` in the env of `tox -e "
        "sglang` (the rows here): each release line is installed once into the running env "
        "(`scripts/sglang_release_env.py`, the install step of `tox -e sglang-X.Y.Z`; an existing "
        "`.tox/sglang-X.Y.Z` is used as it is) and the release that was there is put back at the "
        "end. *env*: "
        "the seconds that install took; *total*: the whole release (install, probe, profile, "
        "four checks). *tests/sglang*: what `tox -e sglang-X.Y.Z` runs (`pytest tests/sglang`) in that "
        "env, where the run included it (`HICACHE_RELEASES_SUITE=1`). *draft keys (observed)*: the "
        "key the release's own controller gives a speculative-decoding draft page, seen by a "
        "recording backend (`set_draft_kv_pool`, then `_page_backup`), against the profile.\n",
        "| SGLang | profile | tests/sglang | "
        + " | ".join(BACKENDS)
        + " | draft keys (observed) | linker | env | total | verdict |",
        "|---|---|---|" + "---|" * len(BACKENDS) + "---|---|---:|---:|---|",
    ]
    for line in _lines():
        doc = rows.get(line)
        if doc is None:
            out.append(f"| {line} | | | " + " | ".join("" for _ in BACKENDS) + " | | | | | not run yet |")
            continue
        nr = _not_run(doc)
        env = f"{doc['install_s']} s" if "install_s" in doc else doc.get("env", "-")
        if nr:
            out.append(
                f"| {doc.get('wheel', line)} | - | - | " + " | ".join("-" for _ in BACKENDS)
                + f" | - | {_linker(doc, line)} | {env} | {doc.get('total_s')} s | {nr} |"
            )  # fmt: skip
            continue
        out.append(
            f"| {doc.get('wheel', line)} | {_profile_cell(doc)} | {_pytest_cell(doc.get('suite'))} | "
            + " | ".join(_cell(doc, b) for b in BACKENDS)
            + f" | {_draft(doc, line)} | {_linker(doc, line)} | {env} | {doc.get('total_s')} s | {_row_verdict(doc)} |"
        )
    out.append("")
    vias = sorted({_via(d) for d in rows.values() if not _not_run(d)})
    if vias:
        out.append(f"Round trips ran through: {'; '.join(vias)}.")
    reasons = sorted(
        {
            c.get("controller_skip_reason", "")
            for d in rows.values()
            for c in (d.get("check") or {}).values()
            if c.get("controller_skip_reason")
        }
    )
    if reasons:
        out.append(f'Skipped contract tests say, e.g.: "{_one(reasons[0], 300)}".')
    dates = sorted({d.get("date", "") for d in rows.values()})
    if dates:
        out.append(
            f"Rows run between {dates[0]} and {dates[-1]} (`{run.get('command', 'compat_matrix.py --releases')}`)."
        )
    out.append("")
    return "\n".join(out)
