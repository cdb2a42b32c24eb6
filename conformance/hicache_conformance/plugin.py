"""The pytest plugin (``pytest11`` entry point ``hicache_conformance``).

Inert unless asked: with no ``--hicache-backend`` it adds options and nothing else, so
installing the package never changes anyone else's test run. With
``--hicache-backend NAME|module:Class`` (and ``--hicache-config JSON|@file``) it runs the
whole suite against that backend, with no test code. ``--hicache-level`` selects levels;
``--hicache-report PATH`` writes the JSON report (also for ``BackendSuite`` subclasses
collected the ordinary way); a per-level table is printed at the end.

A failing test whose backend recorded a bug (an exception a transport raised that is not
an I/O failure, ``backend.metrics.bugs()``) shows the first one's traceback under the
failure, in the JSON report (``tests[id].bug``) and in the JUnit XML (property
``hicache_bug`` and the failure text). After each test the frames of a failure's
traceback are cleared, so a traceback never keeps that test's backends alive.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import traceback
from pathlib import Path
from typing import Any

import pytest

from .capabilities import (
    LEVELS,
    PROFILES,
    mla_not_certified,
    parse_capabilities,
    parse_levels,
    strict_reason,
    test_level,
    test_requires,
)
from .report import Outcome, build_report, group_of, summary_lines

_SUITE_FILE = Path(__file__).with_name("suite") / "test_configured.py"
#: The configured backend of the innermost running ``--hicache-backend`` session (read
#: when ``suite/test_configured.py`` is imported).
_active: dict[str, Any] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("hicache", "hicache-sdk conformance")
    g.addoption(
        "--hicache-backend",
        default=os.environ.get("HICACHE_CONFORMANCE_BACKEND"),
        help="backend under test: entry-point name or module:Class",
    )
    g.addoption("--hicache-config", default=None, help="backend extra_config: inline JSON or @file")
    g.addoption(
        "--hicache-level", action="append", default=None, help="levels to run (L0..L4, stateful, all)"
    )
    g.addoption(
        "--hicache-profile",
        default=None,
        choices=list(PROFILES),
        help="contract (what SGLang requires) or strict (plus the SDK's promises); default: strict "
        "for PagedStorage backends, contract otherwise",
    )
    g.addoption(
        "--hicache-isolate",
        action="append",
        default=None,
        help="KEY=TEMPLATE: extra-config key that isolates each test namespace, {namespace} "
        "replaced (for key schemes without a namespace), repeatable",
    )
    g.addoption("--hicache-report", default=None, help="write the JSON conformance report here")
    g.addoption(
        "--hicache-matrix",
        default=None,
        choices=["full", "pairwise", "minimal"],
        help="host-pool matrix (default: full for memory, pairwise otherwise)",
    )
    g.addoption(
        "--hicache-capabilities",
        action="append",
        default=None,
        help="capabilities to declare (comma-separated; -name takes one away), e.g. mla,persistent",
    )
    g.addoption(
        "--hicache-sglang-backend",
        default=None,
        help="how SGLang loads the backend: dynamic (default) or a built-in name (mooncake, file, ...); "
        "decides the I/O paths and host layouts certified",
    )
    g.addoption(
        "--hicache-io-backend",
        default=None,
        choices=["kernel", "direct"],
        help="SGLang's --hicache-io-backend (host layouts SGLang hands the backend); default kernel",
    )
    g.addoption(
        "--hicache-geometry",
        default=None,
        choices=["small", "block"],
        help="the pools' model geometry: small (default) or block (every page a multiple of 4 KiB, "
        "for backends that transfer with O_DIRECT)",
    )
    g.addoption(
        "--hicache-sglang-version",
        default=None,
        help="the SGLang release to certify against (must be the installed one's release line; "
        "without SGLang, picks that release's contract profile)",
    )
    g.addoption(
        "--hicache-pools",
        default=None,
        choices=["auto", "sglang", "sdk"],
        help="whose host pools: auto (SGLang's when installed), sglang, sdk",
    )


def parse_isolate(items: list[str] | None) -> dict[str, str]:
    """``["root=/tmp/cc/{namespace}"]`` -> ``{"root": "/tmp/cc/{namespace}"}``. Raises
    ``pytest.UsageError`` naming ``--isolate`` for an item without ``=`` or without
    ``{namespace}`` (every test namespace would share one store)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, template = item.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"--isolate: expected KEY=TEMPLATE, got {item!r}")
        if "{namespace}" not in template:
            raise pytest.UsageError(
                f"--isolate {key}: the template must contain {{namespace}}, got {template!r}"
            )
        out[key.strip()] = template
    return out


def configured_suite() -> type | None:
    """The suite class for the backend given on the command line, or ``None``."""
    if not _active.get("backend"):
        return None
    from .base import resolve_backend_class
    from .sglang_path import Route
    from .suite import BackendSuite

    name = _active["backend"]
    attrs: dict[str, Any] = {
        "backend": name,
        "config": _active["config"],
        "matrix": _active["matrix"] or ("full" if name == "memory" else "pairwise"),
        "profile": _active.get("profile"),
        "isolate": _active.get("isolate") or {},
        "extra_capabilities": _active.get("capabilities") or (),
        "route": Route(_active.get("sglang_backend") or "dynamic", _active.get("io_backend") or "kernel"),
        "host_pools": _active.get("pools") or "auto",
        "geometry": _active.get("geometry") or "small",
    }
    hooks_factory = _memory_fault_hooks(resolve_backend_class(name)) if name == "memory" else None
    if hooks_factory is not None:
        backend_cls, make_hooks = hooks_factory
        attrs["backend"] = backend_cls
        attrs["config"] = {"transfer_timeout_s": 1.0, **_active["config"]}
        attrs["call_deadline_s"] = 3.0

        @pytest.fixture
        def fault_hooks(self: Any) -> Any:
            return make_hooks()

        attrs["fault_hooks"] = fault_hooks

        def capacity_config(self: Any, capacity_bytes: int) -> dict[str, Any]:
            from .faults import private_store_config

            return private_store_config(capacity_bytes)

        attrs["capacity_config"] = capacity_config
    # BackendSuite holds the transport tests too: the same tests as a test file's subclass
    return type("TestConfiguredBackend", (BackendSuite,), attrs)


def _memory_fault_hooks(cls: type) -> Any:
    try:
        from .faults import memory_with_faults
    except ImportError:
        return None
    return memory_with_faults(cls)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hicache_level(n): conformance level of a suite test")
    config._hicache_outcomes = {}  # type: ignore[attr-defined]
    config._hicache_classes = {}  # type: ignore[attr-defined]
    config._hicache_active = {}  # type: ignore[attr-defined]
    from . import release

    requested = config.getoption("--hicache-sglang-version")
    if requested:
        why = release.check_requested(requested)
        if why is not None:
            raise pytest.UsageError(why)
    release.set_release(requested or None)
    backend = config.getoption("--hicache-backend")
    if not backend:
        return
    from hicache_sdk.config import parse_config_arg

    try:
        capabilities = parse_capabilities(config.getoption("--hicache-capabilities"))
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    _active.clear()
    _active.update(
        backend=backend,
        config=parse_config_arg(config.getoption("--hicache-config")),
        matrix=config.getoption("--hicache-matrix"),
        profile=config.getoption("--hicache-profile"),
        isolate=parse_isolate(config.getoption("--hicache-isolate")),
        capabilities=capabilities,
        sglang_backend=config.getoption("--hicache-sglang-backend"),
        io_backend=config.getoption("--hicache-io-backend"),
        pools=config.getoption("--hicache-pools"),
        geometry=config.getoption("--hicache-geometry"),
    )
    config._hicache_active = dict(_active)  # type: ignore[attr-defined]
    if str(_SUITE_FILE) not in config.args:
        explicit = config.args_source == pytest.Config.ArgsSource.ARGS
        config.args = [*config.args, str(_SUITE_FILE)] if explicit else [str(_SUITE_FILE)]


def _suite_info(item: pytest.Item) -> tuple[int | None, tuple[str, ...]] | None:
    from .base import SuiteBase

    cls = getattr(item, "cls", None)
    fn = getattr(item, "function", None)
    if cls is None or fn is None or not issubclass(cls, SuiteBase):
        return None
    return test_level(fn), test_requires(fn)


def _skip_outside_class_levels(item: pytest.Item, level: int | None) -> None:
    """Skip a test whose level its class leaves out (``BackendSuite.levels``)."""
    only = getattr(item.cls, "levels", None)  # type: ignore[attr-defined]
    if only is None or level is None or level in (parse_levels(list(only)) or ()):
        return
    name = LEVELS.get(level, str(level))
    item.add_marker(
        pytest.mark.skip(
            reason=f"{item.cls.__name__}.levels = {tuple(only)} leaves out {name}"  # type: ignore[attr-defined]
        )
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    levels = parse_levels(config.getoption("--hicache-level"))
    keep, drop = [], []
    for item in items:
        info = _suite_info(item)
        if info is not None and levels is not None and info[0] not in levels:
            drop.append(item)
            continue
        keep.append(item)
        if info is not None:
            _skip_outside_class_levels(item, info[0])
            callspec = getattr(item, "callspec", None)
            params = callspec.params if callspec is not None else {}
            outcome = Outcome(
                item.nodeid,
                item.originalname if isinstance(item, pytest.Function) else item.name,
                info[0],
                info[1],
            )
            outcome.io_path = params.get("io_path")
            outcome.group = group_of(getattr(item, "function", None))
            outcome.suite_class = item.cls.__name__  # type: ignore[attr-defined]
            config._hicache_outcomes[item.nodeid] = outcome  # type: ignore[attr-defined]
            config._hicache_classes[item.cls.__name__] = item.cls  # type: ignore[attr-defined]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _bug_text(bug: dict[str, str]) -> str:
    head = f"{bug.get('error')}: {bug.get('message')} (at {bug.get('site')})"
    return f"{head}\n{bug.get('traceback', '').rstrip()}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed strict-only test says why its rule matters; a failed test whose backend
    recorded a bug shows the bug's traceback; then the failure's frames are cleared."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if _suite_info(item) is None:
        return
    fn = getattr(item, "function", None)
    outcomes = getattr(item.config, "_hicache_outcomes", {})
    o = outcomes.get(item.nodeid)
    why = strict_reason(fn) if fn is not None else None
    if why and report.failed and report.when == "call":
        report.sections.append(("hicache strict rule", f"strict-only rule: {why}"))
        if o is not None:
            o.strict_why = why
    factory = (getattr(item, "funcargs", None) or {}).get("backend_factory")
    if factory is not None and report.when == "teardown" and o is not None:
        o.cleaned = bool(getattr(item, "cls", None) and item.cls.capabilities_of().delete)  # type: ignore[attr-defined]
        o.left = factory.left
        o.cleanup_errors = list(factory.cleanup_errors)
    if factory is not None and report.when == "call":
        bugs = factory.bugs()
        if bugs and o is not None:
            o.bug = bugs[0]
        if bugs and report.failed:
            text = _bug_text(bugs[0])
            more = f" ({len(bugs) - 1} more)" if len(bugs) > 1 else ""
            title = f"hicache: the backend recorded a bug{more}, the first one"
            addsection = getattr(report.longrepr, "addsection", None)
            if callable(addsection):
                addsection(title, text)
            elif isinstance(report.longrepr, str):
                report.longrepr = f"{report.longrepr}\n\n{title}:\n{text}"
            else:
                report.sections.append((title, text))
            item.user_properties.append(("hicache_bug", text))
    if call.excinfo is not None and call.excinfo.tb is not None:
        traceback.clear_frames(call.excinfo.tb)  # locals (backends, pools) go now
        if getattr(sys, "last_traceback", None) is call.excinfo.tb:
            sys.last_traceback = None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    config = _config_holder.get("config")
    outcomes = getattr(config, "_hicache_outcomes", None)
    if not outcomes or report.nodeid not in outcomes:
        return
    o = outcomes[report.nodeid]
    if hasattr(report, "wasxfail"):
        o.outcome, o.reason = "waived", str(report.wasxfail)
    elif report.failed:
        o.outcome = "failed"
        o.reason = _failure_text(report)
        why = getattr(o, "strict_why", None)
        if why:
            o.reason = f"[strict rule: {why}] {o.reason}"
    elif report.skipped and o.outcome == "unknown":
        o.outcome = "skipped"
        lr = report.longrepr
        o.reason = lr[2] if isinstance(lr, tuple) else str(lr)
    elif report.when == "call" and report.passed and o.outcome == "unknown":
        o.outcome = "passed"


def _failure_text(report: pytest.TestReport) -> str:
    """The failure's message (the assertion's text), not only its last lines."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        return str(message)[:4000]
    return str(report.longrepr)[:4000] if report.longrepr else ""


_config_holder: dict[str, Any] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _config_holder.setdefault("stack", []).append(_config_holder.get("config"))
    _config_holder["config"] = session.config


def pytest_unconfigure(config: pytest.Config) -> None:
    if _config_holder.get("config") is config:
        stack = _config_holder.get("stack") or [None]
        _config_holder["config"] = stack.pop()
    if config.getoption("--hicache-backend", None):
        _active.clear()


def peak_rss() -> dict[str, int]:
    """Peak resident set size (``ru_maxrss``) in bytes of this process and of its
    (waited-for) children."""
    scale = 1 if sys.platform == "darwin" else 1024  # Linux reports KiB, macOS bytes
    return {
        "runner": int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * scale,
        "children": int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) * scale,
    }


def _not_certified(declared: dict[str, bool], from_command_line: tuple[str, ...]) -> dict[str, str]:
    why = mla_not_certified(declared, from_command_line)
    return {"mla": why} if why else {}


def _class_info(suite_cls: Any) -> dict[str, Any]:
    backend = suite_cls.backend_class()
    caps = suite_cls.capabilities_of()
    return {
        "backend": f"{backend.__module__}:{backend.__qualname__}",
        "profile": suite_cls.active_profile(),
        "route": suite_cls.route.describe(caps.zero_copy),
        "capabilities": {
            "declared": caps.to_dict(),
            "inferred": list(suite_cls.inferred_capabilities()),
            "from_command_line": list(suite_cls.extra_capabilities),
            "sources": suite_cls.capability_sources(),
            "not_certified": _not_certified(caps.to_dict(), suite_cls.extra_capabilities),
        },
        "host_pools": suite_cls.host_pools,
        "geometry": suite_cls.geometry,
    }


def _report(config: pytest.Config) -> dict[str, Any] | None:
    outcomes: dict[str, Outcome] = getattr(config, "_hicache_outcomes", {})
    if not outcomes:
        return None
    from . import __version__
    from . import pools as P
    from .base import resolve_backend_class
    from .sglang_path import sglang_controller_available

    active: dict[str, Any] = getattr(config, "_hicache_active", {})
    items = list(outcomes.values())
    ran = {o.suite_class for o in items if o.outcome != "unknown"}
    classes: dict[str, Any] = {
        n: c for n, c in getattr(config, "_hicache_classes", {}).items() if n in ran or not ran
    }
    infos: dict[str, dict[str, Any]] = {}
    for n, c in classes.items():
        try:
            infos[n] = _class_info(c)
        except Exception as e:  # an unusable class: say so rather than lose the report
            infos[n] = {"error": f"{type(e).__name__}: {e}"}
    name = active.get("backend") or "(BackendSuite subclass)"
    cls: Any = None
    declared: dict[str, bool] = {}
    inferred: list[str] = []
    waivers: dict[str, str] = {}
    suite_cfg: dict[str, Any] = dict(active.get("config") or {})
    profiles = sorted({i["profile"] for i in infos.values() if "profile" in i})
    profile = (
        profiles[0] if len(profiles) == 1 else ("mixed: " + ", ".join(profiles) if profiles else "unknown")
    )
    first = next(iter(classes.values()), None)
    if first is not None:
        info = infos[first.__name__]
        try:
            cls = resolve_backend_class(first.backend)
        except Exception:
            cls = None
        if "capabilities" in info:
            declared = info["capabilities"]["declared"]
            inferred = info["capabilities"]["inferred"]
        waivers = dict(first.waivers)
        suite_cfg = dict(first.config) or suite_cfg
        if not active.get("backend"):
            if len(classes) == 1:
                name = getattr(cls, "backend_name", None) or (cls.__name__ if cls else name)
            else:
                name = f"{len(classes)} BackendSuite classes"
    report = build_report(
        suite_version=__version__,
        backend_name=name,
        backend_cls=cls,
        declared=declared,
        outcomes=items,
        waivers=waivers,
        config=suite_cfg,
    )
    report["profile"] = profile
    report["capabilities"]["inferred"] = list(inferred)
    if first is not None and "capabilities" in infos[first.__name__]:
        caps = infos[first.__name__]["capabilities"]
        report["capabilities"]["from_command_line"] = caps["from_command_line"]
        report["capabilities"]["sources"] = caps["sources"]
        report["capabilities"]["not_certified"] = caps["not_certified"]
        report["route"] = infos[first.__name__]["route"]
        report["geometry"] = infos[first.__name__].get("geometry", "small")
    report["classes"] = infos
    ctl_ok, ctl_why = sglang_controller_available()
    pools = P.source_info()
    from . import release

    report["sglang"] = {
        **release.describe(),
        "version": pools["sglang_version"],
        "host_pools": pools,
        "controller": "sglang" if ctl_ok else "hicache-conformance",
        "controller_why": ctl_why,
    }
    report["resources"] = {"peak_rss_bytes": peak_rss()}
    return report


def pytest_itemcollected(item: pytest.Item) -> None:
    if _suite_info(item) is not None:
        getattr(item.config, "_hicache_classes", {})[item.cls.__name__] = item.cls  # type: ignore[attr-defined]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    path = session.config.getoption("--hicache-report")
    if not path:
        return
    report = _report(session.config)
    if report is None:
        return
    Path(path).write_text(json.dumps(report, indent=2, sort_keys=True, default=str), encoding="utf-8")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    report = _report(config)
    if report is None:
        return
    terminalreporter.section("hicache conformance")
    for line in summary_lines(report):
        terminalreporter.write_line(line)
