"""L0 shape: the contract's methods exist with compatible signatures, unsupported
v1 / v2 methods raise (never return ``None``), and construction works the way
SGLang's dynamic loader does it."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from hicache_sdk.spec import HiCacheStorage, HiCacheStorageConfig

from ..base import NAMESPACE_PREFIX, BackendFactory, SuiteBase
from ..capabilities import level, strict_only
from ..matrix import PoolCase

CONTRACT_METHODS = (
    "get",
    "batch_get",
    "set",
    "batch_set",
    "exists",
    "batch_exists",
    "batch_get_v1",
    "batch_set_v1",
    "batch_exists_v2",
    "batch_get_v2",
    "batch_set_v2",
    "register_mem_pool_host",
    "register_mem_host_pool_v2",
    "clear",
    "get_stats",
)


#: Parameters SGLang 0.5.23's controller always passes, so a backend may leave them
#: without a default (SGLang's own ``HiCacheFile.get(key, target_location, ...)`` does).
ALWAYS_PASSED = frozenset({"target_location", "target_locations"})


def signature_problems(cls: type[Any], name: str, strict: bool = True) -> list[str]:
    """Why ``cls.name`` cannot be called the way SGLang calls the contract method.
    ``strict=False`` (the ``contract`` profile) accepts no default on the parameters of
    :data:`ALWAYS_PASSED`; ``strict`` wants every default the contract's signature has."""
    impl = getattr(cls, name, None)
    if impl is None or not callable(impl):
        return [f"{name}: missing"]
    want = list(inspect.signature(getattr(HiCacheStorage, name)).parameters.values())[1:]
    try:
        have = list(inspect.signature(impl).parameters.values())[1:]
    except (TypeError, ValueError):
        return []
    if any(p.kind is p.VAR_POSITIONAL for p in have) and any(p.kind is p.VAR_KEYWORD for p in have):
        return []
    problems = []
    positional = [p for p in have if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, w in enumerate(want):
        if i >= len(positional):
            if not any(p.kind is p.VAR_POSITIONAL for p in have):
                problems.append(f"{name}: missing parameter {w.name!r}")
            continue
        h = positional[i]
        if h.name != w.name and h.kind is not h.POSITIONAL_ONLY:
            problems.append(f"{name}: parameter {i + 1} is {h.name!r}, SGLang passes {w.name!r}")
        exempt = not strict and w.name in ALWAYS_PASSED
        if w.default is not inspect.Parameter.empty and h.default is inspect.Parameter.empty and not exempt:
            problems.append(f"{name}: parameter {h.name!r} needs a default (SGLang may omit it)")
    for h in positional[len(want) :]:
        if h.default is inspect.Parameter.empty:
            problems.append(f"{name}: extra required parameter {h.name!r}")
    return problems


class ShapeTests(SuiteBase):
    @level(0)
    def test_contract_methods_have_compatible_signatures(self) -> None:
        cls = self.backend_class()
        strict = self.active_profile() == "strict"
        problems = [p for m in CONTRACT_METHODS for p in signature_problems(cls, m, strict=strict)]
        assert not problems, "contract methods incompatible with SGLang 0.5.23:\n" + "\n".join(problems)

    @level(0)
    def test_constructs_like_sglang_dynamic_loader(self, backend_factory: BackendFactory) -> None:
        extra = backend_factory.extra_config(
            backend_name="conformance", module_path="x.y", class_name="Z", interface_v1=1
        )
        sc = HiCacheStorageConfig(model_name="conformance/model", extra_config=extra)
        backend = self.backend_class()(sc, {})
        backend_factory.created.append(backend)
        assert hasattr(backend, "batch_exists")

    @level(0)
    def test_unsupported_v1_v2_answer_like_sglang_base(self, backend_factory: BackendFactory) -> None:
        """An unsupported v1 call raises or returns ``None`` (SGLang's base class body is
        ``pass``); an unsupported v2 call raises (the base raises ``NotImplementedError``).
        SGLang calls only what a backend supports, so either answer is safe."""
        self._unsupported_calls(backend_factory, v1_none_ok=True)

    @level(0)
    @strict_only(
        "a v1 method that returns None instead of raising looks like a result to any caller that "
        "does not first check capabilities (the SDK's own tools and bridges); raising names the gap"
    )
    def test_unsupported_v1_v2_raise_rather_than_return_none(self, backend_factory: BackendFactory) -> None:
        self._unsupported_calls(backend_factory, v1_none_ok=False)

    def _unsupported_calls(self, backend_factory: BackendFactory, v1_none_ok: bool) -> None:
        caps = self.capabilities_of()
        att = self.attach(backend_factory(), PoolCase())
        import torch

        empty = torch.empty(0, dtype=torch.int64)
        calls: list[tuple[str, Any]] = []
        if not caps.zero_copy:
            calls += [("batch_get_v1", lambda: att.backend.batch_get_v1(["k"], empty))]
            calls += [("batch_set_v1", lambda: att.backend.batch_set_v1(["k"], empty))]
        if not caps.hybrid_pools:
            calls += [("batch_exists_v2", lambda: att.backend.batch_exists_v2(["k"], []))]
            calls += [("batch_get_v2", lambda: att.backend.batch_get_v2([]))]
        for name, call in calls:
            try:
                result = call()
            except Exception:
                continue
            if result is None and v1_none_ok and name.endswith("_v1"):
                continue
            pytest.fail(f"{name} is not declared but returned {result!r} instead of raising")

    @level(0)
    @strict_only(
        "SGLang's base class has no close(), but the SDK closes backends from several owners "
        "(bridge shutdown, CLI, test teardown): a second close() that raises or hangs breaks shutdown"
    )
    def test_close_is_idempotent(self, backend_factory: BackendFactory) -> None:
        b = backend_factory()
        b.close()
        b.close()

    @level(0)
    def test_runs_only_in_its_own_namespace(self, backend_factory: BackendFactory) -> None:
        assert backend_factory.namespace.startswith(NAMESPACE_PREFIX)
        with pytest.raises(pytest.UsageError):
            backend_factory(namespace="production")
