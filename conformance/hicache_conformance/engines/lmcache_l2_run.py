"""``hicache check TARGET --engine lmcache-l2`` (and ``lmcache-connector``): an LMCache
contract on one target.

``lmcache-l2``: TARGET is a hicache-sdk backend name (or ``module:Class`` of one): our
``hicache_sdk.lmcache.L2Adapter`` over it, with ``--config`` as the backend's settings; or
``module:Class`` of any LMCache ``L2AdapterInterface`` subclass, with ``--config`` as its
``adapter_params``; or ``lmcache:TYPE``, one of LMCache's built-in adapter types, with
``--config`` as its keys.

``lmcache-connector``: TARGET is a hicache-sdk backend name: our
``hicache_sdk.lmcache.ConnectorAdapter`` over it; ``module:Class`` of a ``ConnectorAdapter``
or ``RemoteConnector`` subclass, with ``--config`` as LMCache configuration keys (and
``plugin``, its plugin name), or as ``adapter_params`` for a subclass of ours; or
``lmcache:URL``, LMCache's built-in connector for that URL.

A backend name runs its transport tests first. Exit codes as for the default engine; 6
when LMCache is not installed (the reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import CheckMain, transport_tests_first

__all__ = ["main", "main_connector"]


class _Outcomes:
    """A pytest plugin that records each test's outcome (and the first line of a failure)."""

    def __init__(self) -> None:
        self.tests: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or report.outcome != "passed":
            entry: dict[str, Any] = {"outcome": report.outcome}
            if report.failed:
                entry["reason"] = str(
                    (getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message)
                    or report.longrepr
                )[:500]
            elif report.skipped and isinstance(report.longrepr, tuple):
                entry["reason"] = str(report.longrepr[2])
            self.tests.setdefault(report.nodeid.split("::", 1)[-1], entry)


def main(args: argparse.Namespace, check_main: CheckMain) -> int:
    """``--engine lmcache-l2``: the L2 adapter contract on ``args.backend``."""
    from .lmcache_l2 import unavailable

    return _run(args, check_main, "lmcache-l2", "lmcache_l2_configured.py", unavailable)


def main_connector(args: argparse.Namespace, check_main: CheckMain) -> int:
    """``--engine lmcache-connector``: the in-process connector contract on ``args.backend``."""
    from .lmcache_connector import unavailable

    return _run(args, check_main, "lmcache-connector", "lmcache_connector_configured.py", unavailable)


def _run(args: argparse.Namespace, check_main: CheckMain, engine: str, suite: str, unavailable: Any) -> int:
    """Run the suite module ``suite`` on ``args.backend`` with ``args.config``: for a
    hicache-sdk backend name, its transport tests first; the exit status."""
    import pytest

    from hicache_sdk.config import parse_config_arg

    reason = unavailable()
    if reason is not None:
        print(f"hicache check: --engine {engine}: {reason}", file=sys.stderr)
        return 6
    try:
        config = parse_config_arg(args.config)
    except Exception as e:
        print(f"hicache check: bad --config: {e}", file=sys.stderr)
        return 2
    if ":" not in args.backend:  # a backend by name: our binding over its transport
        code = transport_tests_first(args, check_main)
        if code != 0:
            return code
    os.environ["HICACHE_ENGINE_TARGET"] = args.backend
    os.environ["HICACHE_ENGINE_CONFIG"] = json.dumps(config)
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    suite_file = Path(__file__).resolve().parents[1] / "suite" / suite
    pargs = [str(suite_file), "-p", "no:cacheprovider", "-p", "no:hicache_conformance", "-p", "no:warnings", "-rfEs",
             "--rootdir", str(suite_file.parent), "-o", f"python_files={suite}"]  # fmt: skip
    if args.junitxml:
        pargs += ["--junitxml", os.path.abspath(args.junitxml)]
    if args.keyword:
        pargs += ["-k", args.keyword]
    if args.quiet:
        pargs += ["-q"]
    outcomes = _Outcomes()
    code = int(pytest.main(pargs, plugins=[outcomes]))
    if args.report:
        report = {
            "engine": engine,
            "backend": {"name": args.backend},
            "ok": code == 0,
            "tests": outcomes.tests,
        }
        Path(args.report).write_text(json.dumps(report, indent=2, sort_keys=True), encoding="utf-8")
    return code
