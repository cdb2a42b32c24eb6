"""``hicache check --engine``: the default stays SGLang's HiCache contract; an engine whose
library is missing exits 6 with the reason, before anything runs."""

from __future__ import annotations

import importlib.util

import pytest
from hicache_conformance.cli import DEFAULT_ENGINE, ENGINES, _parser, main


def test_default_engine_and_choices() -> None:
    assert DEFAULT_ENGINE == "sglang-hicache" and ENGINES[DEFAULT_ENGINE] is None
    assert _parser().parse_args(["memory"]).engine == "sglang-hicache"
    assert _parser().parse_args(["file", "--engine", "lmcache-l2"]).engine == "lmcache-l2"
    assert _parser().parse_args(["file", "--engine", "lmcache-connector"]).engine == "lmcache-connector"
    with pytest.raises(SystemExit):
        _parser().parse_args(["file", "--engine", "no-such-engine"])


@pytest.mark.skipif(importlib.util.find_spec("lmcache") is not None, reason="LMCache is installed here")
@pytest.mark.parametrize("engine", ["lmcache-l2", "lmcache-connector"])
def test_lmcache_engines_without_lmcache_exit_6_with_the_reason(
    engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["file", "--engine", engine]) == 6
    err = capsys.readouterr().err
    assert f"--engine {engine}: LMCache is not importable" in err and "hicache-sdk[lmcache]" in err
