"""The ``hicache`` command line: a dispatch table of subcommands.

Exit codes, for every subcommand: ``0`` success, ``1`` the operation ran and failed (a
miss, a mismatch, an unimportable backend), ``2`` usage or configuration error (a
one-line message on stderr, no traceback).

Add a subcommand by appending a :class:`Command` to :data:`COMMANDS`. A command with
``passthrough=True`` receives the raw argument list after its name (``hicache check``
hands it to the conformance suite's own parser).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import backends as _backends
from . import bench as _bench
from . import check as _check
from . import demo as _demo
from . import layout as _layout
from . import lmcache_args as _lmcache_args
from . import ping as _ping
from . import sglang_args as _sglang_args
from . import stats as _stats

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, one-line help, argument setup and runner.

    ``run`` gets the parsed namespace (or, for ``passthrough`` commands, the raw list of
    arguments after the command name) and returns the exit code.
    """

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[..., int]
    passthrough: bool = False


COMMANDS: tuple[Command, ...] = (
    Command("demo", _demo.HELP, _demo.add_arguments, _demo.run),
    Command("backends", _backends.HELP, _backends.add_arguments, _backends.run),
    Command("ping", _ping.HELP, _ping.add_arguments, _ping.run),
    Command("check", _check.HELP, _check.add_arguments, _check.run, passthrough=True),
    Command("sglang-args", _sglang_args.HELP, _sglang_args.add_arguments, _sglang_args.run),
    Command("lmcache-args", _lmcache_args.HELP, _lmcache_args.add_arguments, _lmcache_args.run),
    Command("bench", _bench.HELP, _bench.add_arguments, _bench.run, passthrough=True),
    Command("stats", _stats.HELP, _stats.add_arguments, _stats.run),
    Command("layout", _layout.HELP, _layout.add_arguments, _layout.run),
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hicache-sdk")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per entry of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="hicache", description="Tools for HiCache L3 storage backends (hicache-sdk)."
    )
    parser.add_argument("--version", action="version", version=f"hicache (hicache-sdk) {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        cmd.add_arguments(p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``hicache`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    Never raises ``SystemExit``: argparse's exits (``--help``, ``--version``, usage
    errors) come back as return codes, so the function can be called in-process.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if args:
            for cmd in COMMANDS:
                if cmd.passthrough and args[0] == cmd.name:
                    return cmd.run(args[1:])
        parser = build_parser()
        ns = parser.parse_args(args)
        if ns.command is None:
            parser.print_help(sys.stderr)
            return 2
        chosen = next(c for c in COMMANDS if c.name == ns.command)
        return chosen.run(ns)
    except SystemExit as e:
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("hicache: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # stdout closed early (``hicache backends | head``)
        _silence_stdout()
        return 1


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout not a real file
        pass
