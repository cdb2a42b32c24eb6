"""The pytest plugin (``pytest11`` entry point ``hicache_conformance``).

Inert unless asked: with no ``--hicache-backend`` it adds options and nothing else, so
installing the package never changes anyone else's test run. With
``--hicache-backend NAME|module:Class`` (and ``--hicache-config JSON|@file``) it runs the
whole suite against that backend, with no test code. ``--hicache-level`` selects levels;
``--hicache-report PATH`` writes the JSON report (also for ``BackendSuite`` subclasses
collected the ordinary way); a per-level table is printed at the end.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from .capabilities import PROFILES, parse_levels, strict_reason, test_level, test_requires
from .report import Outcome, build_report, summary_lines

_SUITE_FILE = Path(__file__).with_name("suite") / "test_configured.py"
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
    from .suite import BackendSuite

    name = _active["backend"]
    attrs: dict[str, Any] = {
        "backend": name,
        "config": _active["config"],
        "matrix": _active["matrix"] or ("full" if name == "memory" else "pairwise"),
        "profile": _active.get("profile"),
        "isolate": _active.get("isolate") or {},
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
    from hicache_sdk import PagedStorage

    from .suite import TransportTests

    cls = resolve_backend_class(attrs["backend"])
    # a PagedStorage backend's own transport is certified too, below the adapter
    bases: tuple[type, ...] = (BackendSuite,)
    if isinstance(cls, type) and issubclass(cls, PagedStorage):
        bases = (BackendSuite, TransportTests)
    return type("TestConfiguredBackend", bases, attrs)


def _memory_fault_hooks(cls: type) -> Any:
    try:
        from .faults import memory_with_faults
    except ImportError:
        return None
    return memory_with_faults(cls)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hicache_level(n): conformance level of a suite test")
    backend = config.getoption("--hicache-backend")
    config._hicache_outcomes = {}  # type: ignore[attr-defined]
    if not backend:
        return
    from hicache_sdk.config import parse_config_arg

    _active.update(
        backend=backend,
        config=parse_config_arg(config.getoption("--hicache-config")),
        matrix=config.getoption("--hicache-matrix"),
        profile=config.getoption("--hicache-profile"),
        isolate=parse_isolate(config.getoption("--hicache-isolate")),
    )
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
            config._hicache_outcomes[item.nodeid] = Outcome(  # type: ignore[attr-defined]
                item.nodeid,
                item.originalname if isinstance(item, pytest.Function) else item.name,
                info[0],
                info[1],
            )
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed strict-only test says why its rule matters (after pytest's own report)."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    fn = getattr(item, "function", None)
    why = strict_reason(fn) if fn is not None and _suite_info(item) is not None else None
    if why and report.failed and report.when == "call":
        report.sections.append(("hicache strict rule", f"strict-only rule: {why}"))
        outcomes = getattr(item.config, "_hicache_outcomes", {})
        if item.nodeid in outcomes:
            outcomes[item.nodeid].strict_why = why


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    outcomes = getattr(_config_holder.get("config"), "_hicache_outcomes", None)
    if not outcomes or report.nodeid not in outcomes:
        return
    o = outcomes[report.nodeid]
    if hasattr(report, "wasxfail"):
        o.outcome, o.reason = "waived", str(report.wasxfail)
    elif report.failed:
        o.outcome = "failed"
        o.reason = str(report.longrepr)[-500:] if report.longrepr else ""
        why = getattr(o, "strict_why", None)
        if why:
            o.reason = f"[strict rule: {why}] {o.reason}"
    elif report.skipped and o.outcome == "unknown":
        o.outcome = "skipped"
        lr = report.longrepr
        o.reason = lr[2] if isinstance(lr, tuple) else str(lr)
    elif report.when == "call" and report.passed and o.outcome == "unknown":
        o.outcome = "passed"


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
        _suite_classes.clear()


def _report(config: pytest.Config) -> dict[str, Any] | None:
    outcomes: dict[str, Outcome] = getattr(config, "_hicache_outcomes", {})
    if not outcomes:
        return None
    from . import __version__
    from .base import resolve_backend_class

    items = list(outcomes.values())
    name = _active.get("backend") or "(BackendSuite subclass)"
    cls: Any = None
    declared: dict[str, bool] = {}
    inferred: tuple[str, ...] = ()
    profile = "unknown"
    waivers: dict[str, str] = {}
    suite_cfg: dict[str, Any] = dict(_active.get("config") or {})
    suite_cls = _suite_classes.get("last")
    if suite_cls is not None:
        try:
            cls = resolve_backend_class(suite_cls.backend)
            declared = suite_cls.capabilities_of().to_dict()
            inferred = suite_cls.inferred_capabilities()
            profile = suite_cls.active_profile()
        except Exception:
            pass
        waivers = dict(suite_cls.waivers)
        suite_cfg = dict(suite_cls.config) or suite_cfg
        if not _active.get("backend"):
            name = getattr(cls, "backend_name", None) or (cls.__name__ if cls else name)
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
    return report


_suite_classes: dict[str, Any] = {}


def pytest_itemcollected(item: pytest.Item) -> None:
    if _suite_info(item) is not None:
        _suite_classes["last"] = item.cls  # type: ignore[attr-defined]


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
