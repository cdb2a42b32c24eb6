"""``hicache check ...``: hand over to the conformance suite (distribution
``hicache-conformance``), which owns the arguments."""

from __future__ import annotations

import argparse
import sys

HELP = "run the conformance suite against a backend (needs hicache-conformance)"
INSTALL_HINT = "hicache check needs the conformance suite: pip install hicache-conformance"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Only for ``hicache --help``: arguments are passed through unparsed."""
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the conformance suite")


def run(argv: list[str]) -> int:
    """Call ``hicache_conformance.cli.main(argv)`` and return its exit code.

    Exit 2 with the install hint when the suite is not installed; a ``None`` result is 0.
    """
    try:
        from hicache_conformance.cli import main as check_main  # type: ignore[import-not-found]
    except ModuleNotFoundError as e:
        if e.name and (e.name == "hicache_conformance" or e.name.startswith("hicache_conformance.")):
            print(INSTALL_HINT, file=sys.stderr)
        else:
            print(f"hicache check: the conformance suite cannot be imported: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"hicache check: the conformance suite cannot be imported: {e}", file=sys.stderr)
        return 2
    code = check_main(list(argv))
    if code is None:
        return 0
    return int(code)
