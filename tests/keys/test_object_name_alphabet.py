"""What docs/writing-a-backend.md ("Object names") promises a store that restricts names:
under the ``default`` scheme every object name is made of ``A-Z a-z 0-9 - . _ ~ % /``,
has five ``/``-separated components none of which is empty or starts with ``.``, and is
exactly 87 characters plus the three encoded components (at most ``117 + 3n + 3m`` for a
namespace and a model name of ``n`` and ``m`` ASCII characters); ``clear()``'s prefix is
the first two components."""

from __future__ import annotations

import re

import torch
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk import HiCacheStorageConfig, MHAHostPool, PoolName, make_scheme
from hicache_sdk.hostpool import describe_pool

ALPHABET = re.compile(r"[A-Za-z0-9._~%/-]+")
POOL = describe_pool(MHAHostPool(16, 4, 2, 2, 8, dtype=torch.float16), "kv")
HASH = "cf97adee" + "0" * 56


def _name(namespace: str, model: str | None) -> tuple[str, str]:
    scheme = make_scheme("default", HiCacheStorageConfig(model_name=model), namespace=namespace)
    (obj,) = scheme.page_objects(HASH, POOL)
    assert scheme.page_names([HASH], POOL) == [obj.name]
    return obj.name, scheme.clear_prefix()


def test_the_documented_example() -> None:
    name, prefix = _name("prod", "meta-llama/Llama-3.1-8B")
    assert re.fullmatch(r"prod/meta-llama%2FLlama-3\.1-8B/kv-[0-9a-f]{16}/cf/" + HASH, name), name
    assert len(name) == 118 and prefix == "prod/meta-llama%2FLlama-3.1-8B/"
    assert _name("", None)[0].startswith("_/_/kv-") and _name("_", "_")[0].startswith("%5F/%5F/")
    assert _name(".a..b", "é x")[1] == "%2Ea.%2Eb/%C3%A9%20x/"
    assert max(len(p.value) for p in PoolName) == 28


@given(st.text(max_size=40), st.one_of(st.none(), st.text(max_size=40)))
def test_every_name_keeps_to_the_alphabet_and_the_length(namespace: str, model: str | None) -> None:
    name, prefix = _name(namespace, model)
    assert ALPHABET.fullmatch(name), name
    parts = name.split("/")
    assert len(parts) == 5 and all(p and not p.startswith(".") for p in parts), name
    pool = parts[2][: -len("-0123456789abcdef")]
    assert pool == "kv" and len(name) == 87 + len(parts[0]) + len(parts[1]) + len(pool)
    assert prefix == f"{parts[0]}/{parts[1]}/"
    if namespace.isascii() and (model or "").isascii():
        assert len(name) <= 117 + 3 * len(namespace) + 3 * len(model or "")


@given(st.lists(st.text(max_size=12), min_size=2, max_size=2, unique=True))
def test_two_namespaces_never_share_a_prefix(pair: list[str]) -> None:
    a, b = (_name(ns, "m")[1] for ns in pair)
    assert a != b and not a.startswith(b) and not b.startswith(a)
