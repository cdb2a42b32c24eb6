"""L4 faults through the backend's hooks: ``fault_hooks`` is an object with
``stop()`` / ``start()`` (the service goes away / comes back) and optionally
``add_delay(seconds)`` / ``clear_delay()``.

While the service is down or slow, every call returns within ``call_deadline_s`` with
misses / ``False``, never an exception; after a restart the *same* backend object
recovers by itself within ``recovery_s``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from .. import pools as P
from ..base import Attached, BackendFactory, SuiteBase
from ..capabilities import level, requires
from ..matrix import PoolCase
from ..watchdog import bounded_call


class FaultTests(SuiteBase):
    def _hooks(self, fault_hooks: Any, *need: str) -> Any:
        if fault_hooks is None:
            pytest.skip("no fault_hooks fixture provided by the backend's test module")
        for n in need:
            if not callable(getattr(fault_hooks, n, None)):
                pytest.skip(f"fault_hooks has no {n}()")
        return fault_hooks

    def _calls(self, att: Attached, keys: list[str]) -> list[tuple[str, Callable[[], Any], Any]]:
        """(name, call, acceptable results) while the service is unavailable: the calls
        SGLang makes on this backend's I/O paths (``strict`` adds the single-key ``exists``)."""
        b = att.backend
        idx = P.host_indices(att.kv, 0, len(keys))
        paths = self.io_paths()
        out: list[tuple[str, Callable[[], Any], Any]] = [("batch_exists", lambda: b.batch_exists(keys), (0,))]
        if "generic" in paths:
            dummies = [att.kv.get_dummy_flat_data_page() for _ in keys]
            pages = [att.kv.get_data_page(i * att.kv.page_size, flat=True) for i in range(len(keys))]
            out.append(("batch_get", lambda: b.batch_get(keys, dummies), ([None] * len(keys), 0, None)))
            out.append(("batch_set", lambda: b.batch_set(keys, pages), (False, True)))
        if "v1" in paths:
            out.append(("batch_get_v1", lambda: b.batch_get_v1(keys, idx), ([False] * len(keys),)))
            out.append(("batch_set_v1", lambda: b.batch_set_v1(keys, idx), None))
        if self.active_profile() == "strict":
            out.append(("exists", lambda: b.exists(keys[0]), (False,)))
        return out

    def _run_all(self, att: Attached, keys: list[str]) -> None:
        for name, call, ok in self._calls(att, keys):
            start = time.monotonic()
            try:
                result = bounded_call(call, timeout=self.call_deadline_s, label=name)
            except AssertionError:
                raise
            except Exception as e:
                pytest.fail(f"{name} raised {type(e).__name__} while the service was unavailable: {e}")
            took = time.monotonic() - start
            assert took <= self.call_deadline_s, f"{name} took {took:.1f} s"
            if ok is not None:
                assert result in ok, f"{name} returned {result!r} while the service was unavailable"

    @level(4)
    @requires("fault_injection")
    def test_calls_bounded_while_service_down(
        self, backend_factory: BackendFactory, fault_hooks: Any
    ) -> None:
        hooks = self._hooks(fault_hooks, "stop", "start")
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        keys = self.keys(backend_factory.namespace, "down", 3)
        P.fill_page(att.kv, 0, "x")
        hooks.stop()
        try:
            self._run_all(att, keys)
        finally:
            hooks.start()

    @level(4)
    @requires("fault_injection")
    def test_calls_bounded_while_service_slow(
        self, backend_factory: BackendFactory, fault_hooks: Any
    ) -> None:
        hooks = self._hooks(fault_hooks, "add_delay", "clear_delay")
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        keys = self.keys(backend_factory.namespace, "slow", 3)
        hooks.add_delay(self.call_deadline_s * 1.5)
        try:
            for name, call, _ok in self._calls(att, keys):
                try:
                    bounded_call(call, timeout=self.call_deadline_s, label=name)
                except AssertionError:
                    raise
                except Exception as e:
                    pytest.fail(f"{name} raised {type(e).__name__} while the service was slow: {e}")
        finally:
            hooks.clear_delay()

    @level(4)
    @requires("fault_injection")
    def test_same_object_recovers_after_restart(
        self, backend_factory: BackendFactory, fault_hooks: Any
    ) -> None:
        hooks = self._hooks(fault_hooks, "stop", "start")
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        before = self.keys(backend_factory.namespace, "before", 2)
        self.write(att, before, 0)
        hooks.stop()
        try:
            bounded_call(att.backend.batch_exists, before, timeout=self.call_deadline_s)
        finally:
            hooks.start()
        after = self.keys(backend_factory.namespace, "after", 2)
        deadline = time.monotonic() + self.recovery_s
        while True:
            ok, data = bounded_call(self.write, att, after, 0, timeout=self.call_deadline_s)
            if (
                ok == [True, True]
                and bounded_call(self.read, att, after, 10, timeout=self.call_deadline_s) == data
            ):
                return
            if time.monotonic() > deadline:
                pytest.fail(f"the backend did not recover within {self.recovery_s:g} s of the restart")
            time.sleep(0.2)
