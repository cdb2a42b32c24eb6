"""The engines ``hicache check --engine NAME`` certifies a backend for: name -> runner.

``sglang-hicache`` (the default) is SGLang's ``HiCacheStorage`` contract, run by
:func:`hicache_conformance.cli.main` itself (``None`` here). Every other engine is a
``module:function`` taking the parsed arguments and returning the exit status.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable

__all__ = ["DEFAULT_ENGINE", "ENGINES", "engine_runner"]

DEFAULT_ENGINE = "sglang-hicache"

ENGINES: dict[str, str | None] = {
    DEFAULT_ENGINE: None,
    "sglang-linker": "hicache_conformance.engines.sglang_linker:run",
}


def engine_runner(name: str) -> Callable[[argparse.Namespace], int] | None:
    """The runner of engine ``name`` (``None`` for the default); ``KeyError`` when unknown."""
    target = ENGINES[name]
    if target is None:
        return None
    module, _, func = target.partition(":")
    runner: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(module), func)
    return runner
