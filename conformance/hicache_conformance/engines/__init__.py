"""The engines ``hicache check --engine NAME`` certifies a backend for: name -> runner.

``sglang-hicache`` (the default) is SGLang's ``HiCacheStorage`` contract, run by
:func:`hicache_conformance.cli.main` itself (``None`` here). Every other engine is a
``module:function`` taking the parsed arguments and the suite's own entry point (to run the
transport tests first), and returning the exit status. Each engine has its own modules here;
nothing in them is imported unless that engine is asked for, so the engine's library is
needed only then.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence

__all__ = ["DEFAULT_ENGINE", "ENGINES", "CheckMain", "EngineRunner", "engine_runner", "transport_tests_first"]

DEFAULT_ENGINE = "sglang-hicache"

ENGINES: dict[str, str | None] = {
    DEFAULT_ENGINE: None,
    "sglang-linker": "hicache_conformance.engines.sglang_linker:run",
    "lmcache-l2": "hicache_conformance.engines.lmcache_l2_run:main",
    "lmcache-connector": "hicache_conformance.engines.lmcache_l2_run:main_connector",
}

#: ``hicache_conformance.cli.main``: runs ``hicache check`` with ``argv``, returns the status.
CheckMain = Callable[[Sequence[str] | None], int]
#: An engine's runner: ``runner(args, check_main) -> exit status``.
EngineRunner = Callable[[argparse.Namespace, CheckMain], int]


def engine_runner(name: str) -> EngineRunner | None:
    """The runner of engine ``name`` (``None`` for the default); ``KeyError`` when unknown."""
    target = ENGINES[name]
    if target is None:
        return None
    module, _, func = target.partition(":")
    runner: EngineRunner = getattr(importlib.import_module(module), func)
    return runner


def transport_tests_first(args: argparse.Namespace, check_main: CheckMain) -> int:
    """Run the transport tests of backend ``args.backend`` (with ``args.config``) through
    ``hicache check`` itself, before an engine's own contract; the exit status, with the
    failure named on stderr."""
    import sys

    argv = [args.backend, "-k", "transport", "-q"]
    if args.config:
        argv += ["--config", args.config]
    code = check_main(argv)
    if code != 0:
        print(f"hicache check: {args.backend}: the transport tests failed (exit {code})", file=sys.stderr)
    return code
