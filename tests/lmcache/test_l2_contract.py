"""The suite's L2 adapter contract (``L2AdapterTests``) on our adapter over real backends,
and the broken bindings of ``hicache_conformance.broken.lmcache_l2``, each failing the one
test it names."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hicache_conformance.broken import lmcache_l2 as broken
from hicache_conformance.engines.lmcache_l2 import Driver, adapter_spec, build
from hicache_conformance.suite.lmcache_l2_tests import L2AdapterTests


def _frozen(redis_server: Any) -> Callable[[], contextlib.AbstractContextManager[None]]:
    return _frozen_pid(redis_server.proc.pid)


def _frozen_pid(pid: int) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """``freeze()``: the process ``pid`` stopped (SIGSTOP: every request to it hangs) while
    the block runs, then continued."""

    @contextlib.contextmanager
    def freeze() -> Iterator[None]:
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(pid, signal.SIGCONT)

    return freeze


class TestOursOnFile(L2AdapterTests):
    @pytest.fixture
    def l2_spec(self, backend_config: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        return adapter_spec("file", backend_config("file"))


class TestOursOnRedis(L2AdapterTests):
    @pytest.fixture
    def l2_spec(self, backend_config: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        cfg = {**backend_config("redis"), "exists_timeout_s": 0.3, "transfer_timeout_s": 1.0}
        return adapter_spec("redis", cfg, task_timeout_s=3.0)

    @pytest.fixture
    def freeze(self, redis_server: Any) -> Callable[[], contextlib.AbstractContextManager[None]]:
        return _frozen(redis_server)


class TestOursOnS3(L2AdapterTests):
    @pytest.fixture
    def l2_spec(self, backend_config: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        return adapter_spec("s3", backend_config("s3"))


class TestOursOnMooncake(L2AdapterTests):
    @pytest.fixture
    def l2_spec(self, backend_config: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        return adapter_spec("mooncake", backend_config("mooncake"))

    @pytest.fixture
    def freeze(self, mooncake_cluster: Any) -> Callable[[], contextlib.AbstractContextManager[None]]:
        return _frozen_pid(mooncake_cluster.master.pid)  # the real mooncake_master


BROKEN = [
    broken.PrefixLookupL2Adapter,
    broken.SaltBlindL2Adapter,
    broken.ForgetfulStoreL2Adapter,
    broken.HangsWhenDownL2Adapter,
]


@pytest.mark.parametrize("cls", BROKEN, ids=lambda c: c.__name__)
def test_each_broken_binding_fails_its_test(
    cls: type, backend_config: Callable[[str], dict[str, Any]], redis_server: Any, adapters: list[Any]
) -> None:
    cfg = {**backend_config("redis"), "exists_timeout_s": 0.3, "transfer_timeout_s": 1.0}
    spec = adapter_spec(f"{cls.__module__}:{cls.__name__}", {"backend": "redis", "backend_config": cfg})

    def make() -> Any:
        a = build(spec)
        adapters.append(a)
        return a

    suite = L2AdapterTests()
    name, _, param = cls.FAILS.partition("[")  # type: ignore[attr-defined]
    test = getattr(suite, name)
    if name == "test_every_task_completes_while_the_service_is_stalled":
        import hicache_conformance.suite.lmcache_l2_tests as T

        old, T.STALLED_DEADLINE_S = T.STALLED_DEADLINE_S, 2.0
        try:
            with pytest.raises(AssertionError, match="did not complete"):
                test(make, _frozen(redis_server))
        finally:
            T.STALLED_DEADLINE_S = old
        return
    args: list[Any] = [Driver(make(), 30.0)]
    if param:
        args.append(param.rstrip("]"))
    with pytest.raises(AssertionError):
        test(*args)
    # ... and the same test passes on our adapter over the same store
    ours = Driver(make_ours(spec, adapters), 30.0)
    test(ours, *args[1:])


def make_ours(spec: dict[str, Any], adapters: list[Any]) -> Any:
    params = dict(spec["adapter_params"])
    ns = dict(params["backend_config"])
    ns["namespace"] = ns.get("namespace", "") + "-ours"
    a = build(adapter_spec(params["backend"], ns))
    adapters.append(a)
    return a
