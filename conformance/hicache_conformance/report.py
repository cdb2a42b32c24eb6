"""The JSON report and the per-level summary table.

Report fields: ``suite_version``, ``backend`` (name, class, distribution, version),
``profile``, ``capabilities`` (declared, verified: cap -> "verified" / "failed" /
"untested" / "not declared"; inferred; from_command_line; sources), ``levels`` (level ->
passed / skipped / failed / waived counts, ``status`` and ``skip_reasons``),
``levels_not_selected``, ``groups`` (test group -> the same, every group listed),
``io_paths`` (the same counts per SGLang I/O
path: ``generic``, ``v1``), ``route``, ``classes``, ``sglang`` (version, whose host pools,
whose controller), ``resources`` (peak RSS), ``waivers`` (test -> reason), ``tests``
(nodeid -> outcome, level, io_path, reason, bug), ``config`` (secrets removed), ``ok``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .capabilities import LEVELS

__all__ = ["Outcome", "redact_config", "build_report", "summary_lines", "backend_distribution"]

_SECRET = re.compile(r"(secret|password|passwd|token|credential|salt|auth|access_key|private)", re.I)


def redact_config(config: Mapping[str, Any], backend_cls: Any = None) -> dict[str, Any]:
    """A copy of ``config`` with secrets replaced by ``"***"``: keys whose name looks
    secret, and fields the backend's ``config_cls`` marks secret. Nested mappings too."""
    secret_fields: set[str] = set()
    cfg_cls = getattr(backend_cls, "config_cls", None)
    try:
        import dataclasses

        if cfg_cls is not None and dataclasses.is_dataclass(cfg_cls):
            secret_fields = {f.name for f in dataclasses.fields(cfg_cls) if f.metadata.get("secret")}
    except Exception:
        pass
    out: dict[str, Any] = {}
    for k, v in config.items():
        if isinstance(v, Mapping):
            out[k] = redact_config(v)
        elif (k in secret_fields or _SECRET.search(str(k))) and v not in (None, ""):
            out[k] = "***"
        elif isinstance(v, str) and re.search(r"://[^/@\s]+:[^/@\s]+@", v):
            out[k] = re.sub(r"(://[^/:@\s]+):[^/@\s]+@", r"\1:***@", v)
        else:
            out[k] = v
    return out


@dataclass
class Outcome:
    nodeid: str
    name: str
    level: int | None
    requires: tuple[str, ...]
    outcome: str = "unknown"  # passed / failed / skipped / waived
    reason: str = ""
    #: Set when a strict-only test failed: why its rule matters.
    strict_why: str | None = None
    #: The SGLang I/O path the test ran on (``generic`` / ``v1``), if it is path-specific.
    io_path: str | None = None
    #: The ``BackendSuite`` class the test belongs to.
    suite_class: str = ""
    #: The first bug the backend recorded during the test (site, error, message, traceback).
    bug: dict[str, str] | None = None
    #: The test group (the suite mixin that defines the test: ``transport``, ``pools``, ...).
    group: str = ""
    #: Cleanup after the test: ``None`` when it built no backend through the factory;
    #: ``False`` when the backend cannot delete; ``left``: objects still there afterwards
    #: (``None``: not checked, no transport to ask).
    cleaned: bool | None = None
    left: int | None = None
    cleanup_errors: list[str] = field(default_factory=list)


#: Suite mixin -> the test group the report lists it under.
GROUPS: dict[str, str] = {
    "ShapeTests": "shape",
    "SemanticsTests": "semantics",
    "PoolTests": "pools",
    "RawObjectTests": "raw objects",
    "LifecycleTests": "lifecycle",
    "ConcurrencyTests": "concurrency",
    "FaultTests": "faults",
    "StatefulTests": "stateful",
    "TransportTests": "transport",
}


def group_of(fn: Any) -> str:
    """The test group of a suite test function: its defining mixin's entry in
    :data:`GROUPS`, else that class's name."""
    owner = getattr(fn, "__qualname__", "").split(".")[0]
    return GROUPS.get(owner, owner)


def _tally(outcomes: list[Outcome]) -> dict[str, Any]:
    """passed / skipped / failed / waived counts; ``status``: ``ran`` when a test passed,
    failed or was waived, ``skipped`` when every test was skipped; ``skip_reasons``:
    reason -> how many tests it skipped."""
    counts: dict[str, Any] = {"passed": 0, "skipped": 0, "failed": 0, "waived": 0}
    reasons: dict[str, int] = {}
    for o in outcomes:
        counts[o.outcome if o.outcome in counts else "failed"] += 1
        if o.outcome == "skipped":
            why = o.reason.removeprefix("Skipped: ")
            reasons[why] = reasons.get(why, 0) + 1
    counts["status"] = "skipped" if outcomes and counts["skipped"] == len(outcomes) else "ran"
    counts["skip_reasons"] = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    return counts


def backend_distribution(cls: Any) -> tuple[str | None, str | None]:
    """(distribution, version) that provides ``cls``'s top-level package, if any."""
    try:
        from importlib import metadata

        top = cls.__module__.split(".")[0]
        dists = metadata.packages_distributions().get(top) or []
        if dists:
            return dists[0], metadata.version(dists[0])
    except Exception:
        pass
    return None, None


def build_report(
    *,
    suite_version: str,
    backend_name: str,
    backend_cls: Any,
    declared: Mapping[str, bool],
    outcomes: list[Outcome],
    waivers: Mapping[str, str],
    config: Mapping[str, Any],
) -> dict[str, Any]:
    dist, version = backend_distribution(backend_cls)
    outcomes = [o for o in outcomes if o.outcome != "unknown"]  # not run (deselected, -x)
    by_level: dict[str, list[Outcome]] = {}
    by_group: dict[str, list[Outcome]] = {g: [] for g in GROUPS.values()}
    for o in outcomes:
        by_level.setdefault(LEVELS.get(o.level if o.level is not None else -1, "other"), []).append(o)
        by_group.setdefault(o.group or "other", []).append(o)
    levels = {name: _tally(os_) for name, os_ in by_level.items()}
    groups = {
        name: _tally(os_) if os_ else {**_tally([]), "status": "not selected"}
        for name, os_ in by_group.items()
    }
    verified: dict[str, str] = {}
    for cap, on in declared.items():
        if not on:
            verified[cap] = "not declared"
            continue
        # A capability is exercised by the tests that require it and by the parametrised
        # cases named after it (the ``mla`` pool cases of the round-trip tests).
        relevant = [o for o in outcomes if cap in o.requires or _param_mentions(o.nodeid, cap)]
        if any(o.outcome == "failed" for o in relevant):
            verified[cap] = "failed"
        elif any(o.outcome == "passed" for o in relevant):
            verified[cap] = "verified"
        else:
            verified[cap] = "untested"
    paths: dict[str, dict[str, int]] = {}
    for o in outcomes:
        if o.io_path:
            counts = paths.setdefault(o.io_path, {"passed": 0, "skipped": 0, "failed": 0, "waived": 0})
            counts[o.outcome if o.outcome in counts else "failed"] += 1
    failed = sum(c["failed"] for c in levels.values())
    passed = sum(c["passed"] for c in levels.values())
    return {
        "suite_version": suite_version,
        "backend": {
            "name": backend_name,
            "class": f"{backend_cls.__module__}:{backend_cls.__qualname__}"
            if backend_cls is not None
            else None,
            "distribution": dist,
            "version": version,
        },
        "capabilities": {"declared": dict(declared), "verified": verified},
        "levels": dict(sorted(levels.items())),
        "levels_not_selected": [n for n in LEVELS.values() if n not in levels],
        "groups": groups,
        "io_paths": dict(sorted(paths.items())),
        "waivers": dict(waivers),
        "config": redact_config(config, backend_cls),
        "tests": {o.nodeid: _test_entry(o) for o in outcomes},
        "cleanup": cleanup_summary(outcomes),
        # a run in which no test passed certifies nothing (a session that errored before
        # or after its tests, a selection that ran none)
        "ok": failed == 0 and passed > 0,
    }


def cleanup_summary(outcomes: list[Outcome]) -> dict[str, Any]:
    """What the suite left in the store. ``status``: ``nothing left`` (every object written
    through the backend's transport was checked and is gone), ``N object(s) left``,
    ``cleanup impossible: no delete`` (the backend declares no ``delete``), or ``not
    checked`` (cleared, but no transport to ask what is left); ``left``: the count;
    ``tests``: test id -> objects it left; ``errors``: a failed clear or check."""
    built = [o for o in outcomes if o.cleaned is not None]
    if built and not any(o.cleaned for o in built):
        return {"status": "cleanup impossible: no delete", "left": None, "tests": {}, "errors": []}
    checked = [o for o in built if o.left is not None]
    left = sum(o.left or 0 for o in checked)
    errors = [e for o in built for e in o.cleanup_errors][:5]
    if not checked:
        status = "not checked"
    elif left:
        status = f"{left} object(s) left"
    else:
        status = "nothing left"
    return {
        "status": status,
        "left": left if checked else None,
        "tests": {o.nodeid: o.left for o in checked if o.left},
        "errors": errors,
    }


def _test_entry(o: Outcome) -> dict[str, Any]:
    entry: dict[str, Any] = {"outcome": o.outcome, "level": o.level, "reason": o.reason}
    if o.io_path:
        entry["io_path"] = o.io_path
    if o.bug:
        entry["bug"] = dict(o.bug)
    return entry


def _param_mentions(nodeid: str, cap: str) -> bool:
    """Whether the test's parameter id names ``cap`` as a word (``[mla-page_first]``)."""
    if "[" not in nodeid:
        return False
    return cap in re.split(r"[\[\]\-_,]", nodeid.split("[", 1)[1])


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """One screen: one row per level with pass / skip / fail / waived, under it each
    failed test by rule (test name, ``[strict]`` for a strict-only rule), then the
    verdict with profile and inferred capabilities."""
    rows = [f"{'level':<16}{'passed':>8}{'skipped':>9}{'failed':>8}{'waived':>8}"]
    tests = report.get("tests", {})
    for name, c in report["levels"].items():
        rows.append(f"{name:<16}{c['passed']:>8}{c['skipped']:>9}{c['failed']:>8}{c['waived']:>8}")
        failed: dict[str, int] = {}
        for nodeid, t in tests.items():
            if t["outcome"] == "failed" and LEVELS.get(t["level"] if t["level"] is not None else -1) == name:
                rule = nodeid.rsplit("::", 1)[-1].split("[", 1)[0]
                if str(t.get("reason", "")).startswith("[strict rule"):
                    rule += " [strict]"
                failed[rule] = failed.get(rule, 0) + 1
        for rule, n in sorted(failed.items()):
            rows.append(f"  FAIL {rule}" + (f" (x{n})" if n > 1 else ""))
    for name, g in (report.get("groups") or {}).items():
        if g.get("status") == "skipped":
            why = next(iter(g.get("skip_reasons") or {}), "")
            rows.append(f"{name} tests skipped ({g['skipped']}): {why}")
    cleanup = report.get("cleanup") or {}
    if cleanup.get("status"):
        status = str(cleanup["status"])
        head = status if status.startswith("cleanup") else f"cleanup: {status}"
        errors = cleanup.get("errors") if status != "nothing left" else None  # in the JSON still
        rows.append(head + (f" ({errors[0][:200]})" if errors else ""))
    paths = report.get("io_paths") or {}
    if paths:
        rows.append(
            "SGLang I/O paths: "
            + "; ".join(f"{p} {c['passed']} passed, {c['failed']} failed" for p, c in paths.items())
        )
    bugs = [t["bug"] for t in tests.values() if t.get("bug")]
    if bugs:
        b = bugs[0]
        rows.append(
            f"backend bugs recorded in {len(bugs)} test(s); first: {b.get('error')}: {b.get('message')}"
        )
    sglang = report.get("sglang") or {}
    if sglang.get("profile"):
        installed = sglang.get("installed")
        if sglang.get("sglang_code_ran"):
            ran = f"SGLang {installed}'s controller code ran"
        elif installed:
            ran = f"SGLang {installed} is installed, but no SGLang code ran"
        else:
            ran = "SGLang is not installed: no SGLang code ran"
        rows.append(f"SGLang contract profile {sglang['profile']} ({ran}); {sglang.get('controller_model')}")
        if not sglang.get("controller_modelled"):
            rows.append("the tests that drive SGLang's controller were skipped, with that reason")
    pools = sglang.get("host_pools") or {}
    if pools:
        rows.append(
            f"host pools: {pools.get('kv')} ({pools.get('why')}); controller: {sglang.get('controller')}"
        )
    rss = (report.get("resources") or {}).get("peak_rss_bytes") or {}
    if rss:
        rows.append(
            f"peak RSS: runner {rss.get('runner', 0) / 2**20:.0f} MiB, children {rss.get('children', 0) / 2**20:.0f} MiB"
        )
    verdict = "PASS" if report["ok"] else "FAIL"
    levels = report.get("levels") or {}
    if not report["ok"] and not any(c.get("passed") or c.get("failed") for c in levels.values()):
        rows.append("no test passed or failed: nothing was certified (see the errors above)")
    extra = f" (profile {report.get('profile', 'unknown')}"
    caps = report.get("capabilities", {})
    inferred = caps.get("inferred") or []
    cli = caps.get("from_command_line") or []
    if inferred:
        extra += f"; inferred capabilities: {', '.join(inferred)}"
    if cli:
        extra += f"; declared on the command line: {', '.join(cli)}"
    for why in (caps.get("not_certified") or {}).values():
        rows.append(str(why))
    rows.append(f"{report['backend']['name']}: {verdict}{extra})")
    return rows
