"""A key scheme refuses what its transport cannot store: the transport's ``check_names``
rule, adopted by ``KeyScheme.bind_transport``, applies to every name the scheme makes
(``ValueError`` naming the page hash, before any I/O); without a rule nothing changes."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from hicache_sdk.hostpool.layout import PoolLayout
from hicache_sdk.keys.schemes import SCHEMES, make_scheme
from hicache_sdk.spec import HiCacheStorageConfig

MHA = PoolLayout(
    "kv", "mha", "page_first", "bfloat16", 64, (4096, 4096), (0, 1), (("head_num", 8), ("layer_num", 4))
)
H = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"


class NoDotsShort:
    """A transport rule: no name starting with ``.``, none over 40 chars."""

    def __init__(self) -> None:
        self.calls = 0

    def check_names(self, names: Sequence[str]) -> None:
        self.calls += 1
        for i, n in enumerate(names):
            if n.startswith(".") or len(n) > 40:
                raise ValueError(f"names[{i}]: refused {n!r}")


def scheme(name: str, rule: object | None):
    s = make_scheme(name, HiCacheStorageConfig(model_name="m"))
    if rule is not None:
        s.bind_transport(rule)
    return s


@pytest.mark.parametrize("bad", [".bad", "x" * 300])
def test_sglang_file_refuses_what_the_transport_cannot_store(bad: str) -> None:
    s = scheme("sglang-file", NoDotsShort())
    assert s.page_names(["good"], MHA) == ["good_m_0_1.bin"]
    with pytest.raises(ValueError, match=r"page_hash '(\.bad|x{300})'.*cannot store") as e:
        s.page_names(["good", bad], MHA)
    assert "refused" in str(e.value)  # the transport's own reason is carried
    with pytest.raises(ValueError, match="page_hash"):
        s.page_objects(bad, MHA)


def test_without_a_rule_every_plain_name_is_accepted() -> None:
    s = scheme("sglang-file", None)
    assert s.page_names([".bad"], MHA) == [".bad_m_0_1.bin"]
    s.bind_transport(object())  # a transport without check_names: no rule either
    assert s.page_objects(".bad", MHA)[0].name == ".bad_m_0_1.bin"


@pytest.mark.parametrize("name", sorted(SCHEMES))
def test_every_scheme_passes_its_names_through_the_rule(name: str) -> None:
    rule = NoDotsShort()
    s = scheme(name, rule)
    # every name of these schemes is longer than 40 chars with a 64-char hash
    with pytest.raises(ValueError, match="page_hash"):
        s.page_objects(H, MHA)
    assert rule.calls >= 1
