"""``hicache check TARGET --engine lmcache-l2``: the L2 adapter contract on one target.

TARGET is a hicache-sdk backend name (or ``module:Class`` of one): our
``hicache_sdk.lmcache.L2Adapter`` over it, with ``--config`` as the backend's settings; or
``module:Class`` of any LMCache ``L2AdapterInterface`` subclass, with ``--config`` as its
``adapter_params``; or ``lmcache:TYPE``, one of LMCache's built-in adapter types, with
``--config`` as its keys. Exit codes as for the default engine; 6 when LMCache is not
installed (the reason on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from . import CheckMain, transport_tests_first

__all__ = ["main"]


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
    """Run the suite on ``args.backend`` with ``args.config``: for a hicache-sdk backend
    name, its transport tests first; the exit status."""
    import pytest

    from hicache_sdk.config import parse_config_arg

    from .lmcache_l2 import unavailable

    reason = unavailable()
    if reason is not None:
        print(f"hicache check: --engine lmcache-l2: {reason}", file=sys.stderr)
        return 6
    try:
        config = parse_config_arg(args.config)
    except Exception as e:
        print(f"hicache check: bad --config: {e}", file=sys.stderr)
        return 2
    if ":" not in args.backend:  # a backend by name: our L2Adapter over its transport
        code = transport_tests_first(args, check_main)
        if code != 0:
            return code
    os.environ["HICACHE_ENGINE_TARGET"] = args.backend
    os.environ["HICACHE_ENGINE_CONFIG"] = json.dumps(config)
    os.environ.setdefault("LMCACHE_TRACK_USAGE", "false")
    suite_file = Path(__file__).resolve().parents[1] / "suite" / "lmcache_l2_configured.py"
    pargs = [str(suite_file), "-p", "no:cacheprovider", "-p", "no:hicache_conformance", "-p", "no:warnings", "-rfEs",
             "--rootdir", str(suite_file.parent), "-o", "python_files=lmcache_l2_configured.py"]  # fmt: skip
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
            "engine": "lmcache-l2",
            "backend": {"name": args.backend},
            "ok": code == 0,
            "tests": outcomes.tests,
        }
        Path(args.report).write_text(json.dumps(report, indent=2, sort_keys=True), encoding="utf-8")
    return code
