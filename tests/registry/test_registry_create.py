"""``create_backend`` (construction as SGLang's dynamic loader does it) and the allow-list
rule over its input space."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from registry_helpers import Recorder

from hicache_sdk import registry
from hicache_sdk.registry import create_backend, register_backend
from hicache_sdk.spec import HiCacheStorageConfig


@dataclass
class SGLangLikeConfig:
    """Shaped like SGLang 0.5.23's dataclass ``HiCacheStorageConfig`` (no defaults there)."""

    tp_rank: int
    tp_size: int
    is_mla_model: bool
    model_name: str | None
    extra_config: dict[str, Any] | None = None
    other: list[int] = field(default_factory=list)


@pytest.fixture(autouse=True)
def recorder() -> None:
    register_backend("recorder", Recorder)


def test_caller_config_and_dict_are_not_mutated() -> None:
    extra = {"a": 1, "nested": {"x": 1}}
    cfg = HiCacheStorageConfig(tp_rank=1, tp_size=2, model_name="m", extra_config=extra)
    before = copy.deepcopy(extra)
    backend: Any = create_backend("recorder", cfg, {"b": 2, "a": 5})
    assert cfg.extra_config is extra and extra == before
    got = backend.storage_config
    assert got is not cfg and isinstance(got, HiCacheStorageConfig)
    assert got.extra_config == {"a": 5, "nested": {"x": 1}, "b": 2}
    assert (got.tp_rank, got.tp_size, got.model_name) == (1, 2, "m")
    assert backend.kwargs == {}


def test_default_storage_config() -> None:
    backend: Any = create_backend("recorder")
    assert backend.storage_config == HiCacheStorageConfig(extra_config={})
    backend = create_backend("recorder", None, {"k": "v"})
    assert backend.storage_config.extra_config == {"k": "v"}


def test_none_extra_config_and_none_config() -> None:
    cfg = HiCacheStorageConfig(extra_config=None)
    backend: Any = create_backend("recorder", cfg, None)
    assert backend.storage_config.extra_config == {}
    assert cfg.extra_config is None


def test_sglang_style_config_is_copied_not_mutated() -> None:
    cfg = SGLangLikeConfig(0, 1, False, "model", {"backend_name": "x"})
    backend: Any = create_backend("recorder", cfg, {"store": "s"})
    got = backend.storage_config
    assert type(got) is SGLangLikeConfig and got is not cfg
    assert got.extra_config == {"backend_name": "x", "store": "s"}
    assert cfg.extra_config == {"backend_name": "x"}
    assert got.model_name == "model"


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="config must be a mapping"):
        create_backend("recorder", None, [("a", 1)])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="storage_config has no extra_config"):
        create_backend("recorder", object())
    with pytest.raises(ValueError, match="extra_config must be a mapping"):
        create_backend("recorder", HiCacheStorageConfig(extra_config="{}"))  # type: ignore[arg-type]


def test_constructor_errors_propagate() -> None:
    class Picky(Recorder):
        def __init__(self, storage_config: Any, kwargs: Any) -> None:
            raise ValueError("bad key 'x'")

    register_backend("picky", Picky)
    with pytest.raises(ValueError, match="bad key 'x'"):
        create_backend("picky", None, {"x": 1})


_NAMES = ["alpha", "beta", "gamma", "delta"]


@given(
    allowed=st.lists(st.sampled_from([*_NAMES, "unknown"]), unique=True),
    pads=st.lists(st.sampled_from(["", " ", "  ", "\t"]), min_size=10, max_size=10),
    trailing=st.booleans(),
)
def test_allow_list_visibility(allowed: list[str], pads: list[str], trailing: bool) -> None:
    """Visible entry points are exactly the discovered ones on the list (an empty list:
    all of them), whatever the whitespace and empty items."""
    cands = {n: [registry._discovery.Candidate(n, f"m_{n}:C", f"d-{n}", "1", (), None)] for n in _NAMES}  # type: ignore[arg-type]
    raw = ",".join(f"{pads[i % 10]}{n}{pads[(i + 3) % 10]}" for i, n in enumerate(allowed))
    raw += "," if trailing else ""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(registry._discovery, "_entry_points", cands)
        mp.setenv(registry.ALLOW_LIST_ENV, raw)
        visible, hidden = registry._discovery.visible()
    expected = set(_NAMES) & set(allowed) if allowed else set(_NAMES)
    assert set(visible) == expected
    assert set(hidden) == (set(_NAMES) - expected)
