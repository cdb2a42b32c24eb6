"""``hicache check NAME --config JSON|@file --report r.json [--junitxml x.xml] [--level L]``.

Runs the suite (``pytest.main`` over the plugin's configured suite, isolated from the
caller's pytest configuration) and returns pytest's exit status: 0 when every test of a
declared capability passed, non-zero on any failure. ``hicache-conformance`` is the same
command as a standalone script.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

__all__ = ["main", "console_main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hicache check", description="Run the hicache conformance suite on a backend."
    )
    p.add_argument("backend", help="backend name (entry point) or module:Class")
    p.add_argument(
        "--config", default=None, help="backend extra_config: inline JSON or @file (.json/.toml/.yaml)"
    )
    p.add_argument("--report", default=None, help="write the JSON report here")
    p.add_argument("--junitxml", default=None, help="write JUnit XML here")
    p.add_argument(
        "--level", action="append", default=None, help="levels: L0..L4, stateful, all (repeatable)"
    )
    p.add_argument("--matrix", choices=["full", "pairwise", "minimal"], default=None, help="host-pool matrix")
    p.add_argument("-k", dest="keyword", default=None, help="only tests matching this pytest -k expression")
    p.add_argument("-q", "--quiet", action="store_true", help="less output")
    return p


def _plugin_autoloaded() -> bool:
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.value == "hicache_conformance.plugin" for ep in metadata.entry_points(group="pytest11"))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; return the exit status (0 pass, 1 test failures, 2+ usage/internal)."""
    import pytest

    args = _parser().parse_args(list(argv) if argv is not None else None)
    if args.level:
        from .capabilities import parse_levels

        try:
            parse_levels(args.level)
        except ValueError as e:
            print(f"hicache check: {e}", file=sys.stderr)
            return 2
    suite_file = Path(__file__).with_name("suite") / "test_configured.py"
    with tempfile.TemporaryDirectory(prefix="hicache-check-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n", encoding="utf-8")
        pargs = [str(suite_file), "-c", str(ini), "--rootdir", tmp, "-p", "no:cacheprovider", "-rfEs"]
        if not _plugin_autoloaded():
            pargs += ["-p", "hicache_conformance.plugin"]
        pargs += ["--hicache-backend", args.backend]
        if args.config:
            pargs += ["--hicache-config", args.config]
        if args.report:
            pargs += ["--hicache-report", os.path.abspath(args.report)]
        if args.junitxml:
            pargs += ["--junitxml", os.path.abspath(args.junitxml)]
        for lv in args.level or []:
            pargs += ["--hicache-level", lv]
        if args.matrix:
            pargs += ["--hicache-matrix", args.matrix]
        if args.keyword:
            pargs += ["-k", args.keyword]
        if args.quiet:
            pargs += ["-q"]
        # a previous in-process run may have cached the configured suite module
        sys.modules.pop("hicache_conformance.suite.test_configured", None)
        try:
            return int(pytest.main(pargs))
        finally:
            sys.modules.pop("hicache_conformance.suite.test_configured", None)


def console_main() -> None:
    raise SystemExit(main())
