"""L2 lifecycle (persistence, capacity bound, scoped clear) and L3 concurrency
(threads on overlapping keys: no torn page, no lost write; two processes on one store)."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hicache_sdk.errors import ClearRefusedError

from .. import pools as P
from ..base import BackendFactory, SuiteBase
from ..capabilities import level, requires, strict_only
from ..child import ChildJob, digest, run_child
from ..explain import describe_page
from ..matrix import PoolCase


class LifecycleTests(SuiteBase):
    def capacity_config(self, capacity_bytes: int) -> dict[str, Any]:
        """Extra-config overrides that set a byte capacity bound (``capacity_bound``
        backends): the backend class's own ``capacity_config(nbytes)`` classmethod when it
        has one (``PagedStorage`` does), else ``{"capacity_bytes": nbytes}``. Override in
        the test class for anything else (e.g. a private directory per bound)."""
        hook = getattr(self.backend_class(), "capacity_config", None)
        if callable(hook):
            return dict(hook(capacity_bytes))
        return {"capacity_bytes": capacity_bytes}

    @level(2)
    @requires("persistent")
    def test_persists_across_reinstantiation(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        sc = self.storage_config_for(case)
        first = self.attach(backend_factory(storage_config=sc), case)
        keys = self.keys(backend_factory.namespace, "persist", 3)
        data = self.store(first, keys, 0)
        self.expect_pages(first, keys, data, 5, what="pages written, read by the same instance")
        backend_factory.release(first.backend)
        second = self.attach(backend_factory(storage_config=sc), case)
        self.expect_pages(
            second, keys, data, 10, what="pages written by an instance since closed, read by a new one"
        )

    @level(2)
    @requires("capacity_bound")
    def test_capacity_bound_is_enforced(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        probe = P.make_kv_pool(case)
        page = len(P._as_bytes(probe.get_dummy_flat_data_page()))
        cap_pages, batch = 8, 4
        att = self.attach(
            backend_factory(
                storage_config=self.storage_config_for(case), **self.capacity_config(cap_pages * page)
            ),
            case,
        )
        written: list[str] = []
        for round_ in range(6):
            keys = self.keys(backend_factory.namespace, f"cap{round_}", batch)
            self.write(att, keys, 0)
            written += keys
            present = sum(att.backend.batch_exists([k]) for k in written)
            assert present <= cap_pages + batch, f"{present} pages stored with a bound of {cap_pages}"
        assert len(written) > cap_pages + batch

    @level(2)
    @requires("delete")
    def test_clear_is_scoped_to_the_namespace(self, backend_factory: BackendFactory) -> None:
        """``clear()`` removes this namespace's pages and no other namespace's (or refuses,
        removing nothing). Both namespaces' pages are read back first, so a backend that
        stores nothing is told so rather than blamed for the clear."""
        case = PoolCase()
        mine = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        other_ns = backend_factory.new_namespace()
        other = self.attach(
            backend_factory(namespace=other_ns, storage_config=self.storage_config_for(case)), case
        )
        keys = self.keys(backend_factory.namespace, "clear", 2)
        own = self.store(mine, keys, 0)
        data = self.store(other, keys, 2, seeds=[f"other-{k}" for k in keys])
        self.expect_pages(mine, keys, own, 20, what="this namespace's pages, before clear()")
        self.expect_pages(other, keys, data, 10, what="another namespace's pages, before clear()")
        if not _clear(mine.backend):
            # the key scheme cannot scope clear(): it must refuse and remove nothing
            self.expect_pages(mine, keys, own, 20, what="clear() refused, yet this namespace's pages")
            self.expect_pages(other, keys, data, 10, what="clear() refused, yet another namespace's pages")
            return
        left = mine.backend.batch_exists(keys)
        assert left == 0, f"after clear() batch_exists still reports {left} of this namespace's 2 pages"
        self.expect_pages(
            other, keys, data, 10, what="after clear() of another namespace, this namespace's pages"
        )

    @level(2)
    @requires("delete")
    @strict_only(
        "one store and namespace often serve several models (an operator's key prefix, a shared "
        "bucket): a clear() for one model that also removes a neighbour's pages (model 'm' and "
        "'m_x') wipes a cache that another deployment relies on"
    )
    def test_clear_is_scoped_to_the_model(self, backend_factory: BackendFactory) -> None:
        case = PoolCase()
        keys = self.keys(backend_factory.namespace, "clear-model", 2)
        models = ("conformance/m", "conformance/m_x", "conformance/m/x", "")
        atts = [
            self.attach(backend_factory(storage_config=self.storage_config_for(case, model_name=m)), case)
            for m in models
        ]
        data = [self.store(att, keys, 0, seeds=[f"{m}:{k}" for k in keys]) for att, m in zip(atts, models)]
        for att, d, m in zip(atts, data, models):
            self.expect_pages(att, keys, d, 20, what=f"model {m!r}'s pages, before clear()")
        if not _clear(atts[0].backend):
            for att, d, m in zip(atts, data, models):
                self.expect_pages(att, keys, d, 20, what=f"clear() refused, yet model {m!r}'s pages")
            return
        assert atts[0].backend.batch_exists(keys) == 0, "clear() left this model's pages"
        for att, d, m in zip(atts[1:], data[1:], models[1:]):
            self.expect_pages(
                att, keys, d, 20, what=f"after clear() of model {models[0]!r}, model {m!r}'s pages"
            )


def _clear(backend: Any) -> bool:
    """``backend.clear()``; ``False`` when it refused (``ClearRefusedError``: the key scheme
    cannot scope it, so it removes nothing)."""
    try:
        backend.clear()
    except ClearRefusedError:
        return False
    return True


class ConcurrencyTests(SuiteBase):
    threads: int = 4
    rounds: int = 6

    @level(3)
    def test_sglang_threads_no_torn_page_no_lost_write(self, backend_factory: BackendFactory) -> None:
        """SGLang's concurrency on one backend: a rank's cache controller calls it from
        three threads at once, one per kind of call (``cache_controller.py``
        ``prefetch_thread_func``: ``batch_exists``; ``prefetch_io_aux_func``: gets;
        ``backup_thread_func``: sets), each through SGLang's own controller functions (so
        a call that raises is what SGLang makes of it: a batch of no hits, a backup that
        stops). While they overlap on the same keys, no page SGLang commits may be torn or
        foreign, and no page a backup completed may be lost."""
        att, keys, expected = self._twelve_pages(backend_factory, "sgl-threads")
        written: set[str] = set()
        problems: list[str] = []
        lock = threading.Lock()
        chunks = [keys[r % 3 :: 3][:4] for r in range(self.rounds * 2)]
        done = threading.Event()

        def backup() -> None:  # host pages 0..: SGLang's backup of finished requests
            ctl = self.controller(att)
            try:
                for chunk in chunks:
                    for i, k in enumerate(chunk):
                        P.fill_page(att.kv, i, k)
                    n = ctl.backup(chunk, 0)
                    with lock:
                        written.update(chunk[:n])
            finally:
                done.set()

        def rounds() -> Iterator[list[str]]:
            """The chunks, over and over until the backups are done (so reads overlap
            every write), at most ``rounds`` times over."""
            for r in range(self.rounds * len(chunks)):
                if done.is_set() and r >= len(chunks):
                    return
                yield chunks[-1 - r % len(chunks)]

        def prefetch_io() -> None:  # host pages 40..: the prefetch I/O thread's gets
            ctl = self.controller(att)
            for chunk in rounds():
                for i in range(len(chunk)):
                    P.zero_page(att.kv, 40 + i)
                n = ctl.prefetch(chunk, 40)
                for i, k in enumerate(chunk[:n]):
                    got = P.page_bytes(att.kv, 40 + i)
                    if got != expected[k]:
                        with lock:
                            problems.append(
                                describe_page(
                                    f"a page SGLang committed during backups, {k[:12]}…", expected[k], got
                                )
                            )

        def prefetch_query() -> None:  # the prefetch thread's hit queries over the span
            ctl = self.controller(att)
            for _ in rounds():
                n = ctl.hit_query(keys)
                if not 0 <= n <= len(keys):
                    with lock:
                        problems.append(f"batch_exists over {len(keys)} keys returned {n}")

        self._run_threads([backup, prefetch_io, prefetch_query], problems)
        ctl = self.controller(att)

        def prefetched(k: str) -> bool:
            P.zero_page(att.kv, 250)
            return ctl.prefetch([k], 250) == 1 and P.page_bytes(att.kv, 250) == expected[k]

        self._no_lost_write(
            written,
            prefetched,
            "pages a backup completed are lost (SGLang's prefetch reads other bytes or none)",
            ctl.story,
        )

    @level(3)
    @strict_only(
        "SGLang calls a backend from one thread per kind of call (see "
        "test_sglang_threads_no_torn_page_no_lost_write); several gets or sets at once come from "
        "other callers sharing one instance (a server, a benchmark), and then no page may tear"
    )
    def test_threads_mixing_ops_no_torn_page_no_lost_write(self, backend_factory: BackendFactory) -> None:
        att, keys, expected = self._twelve_pages(backend_factory, "conc")
        written: set[str] = set()
        problems: list[str] = []
        lock = threading.Lock()

        def worker(t: int) -> None:
            base = t * 40
            for r in range(self.rounds):
                chunk = keys[(t + r) % 4 :: 2][:6]
                ok, _ = self.write(att, chunk, base)
                with lock:
                    written.update(k for k, o in zip(chunk, ok) if o)
                got = self.read(att, chunk, base + 10)
                for k, g in zip(chunk, got):
                    if g is not None and g != expected[k]:
                        with lock:
                            problems.append(describe_page(f"thread {t}, {k[:12]}…", expected[k], g))
                att.backend.batch_exists(chunk)

        self._run_threads([lambda t=t: worker(t) for t in range(self.threads)], problems)
        self._no_lost_write(
            written,
            lambda k: self.read(att, [k], 250) == [expected[k]],
            "acknowledged writes lost (read back other bytes or none)",
        )

    def _twelve_pages(
        self, backend_factory: BackendFactory, label: str
    ) -> tuple[Any, list[str], dict[str, bytes]]:
        """A backend attached to the default pool case, 12 keys, and each key's page bytes."""
        case = PoolCase()
        att = self.attach(backend_factory(storage_config=self.storage_config_for(case)), case)
        keys = self.keys(backend_factory.namespace, label, 12)
        nbytes = len(P._as_bytes(att.kv.get_dummy_flat_data_page()))
        return att, keys, {k: P.pattern(k, nbytes) for k in keys}

    @staticmethod
    def _run_threads(bodies: list[Any], problems: list[str]) -> None:
        """Run ``bodies`` at once; a raise from a batch call is itself a failure."""
        lock = threading.Lock()

        def guarded(i: int) -> None:
            try:
                bodies[i]()
            except Exception as e:
                where = traceback.extract_tb(e.__traceback__)[-1]
                with lock:
                    problems.append(
                        f"thread {i} ({getattr(bodies[i], '__name__', 'worker')}): {type(e).__name__}: {e} "
                        f"(at {Path(where.filename).name}:{where.lineno}: {where.line})"
                    )

        ts = [threading.Thread(target=guarded, args=(i,)) for i in range(len(bodies))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not problems, "\n".join(problems[:5])

    def _no_lost_write(
        self,
        written: set[str],
        reads_back: Callable[[str], bool],
        what: str,
        story: Callable[[], str] = lambda: "",
    ) -> None:
        """Every written key ``reads_back`` whole (unless the backend may evict)."""
        lost = [k[:12] for k in sorted(written) if not reads_back(k)]
        if not self.capabilities_of().eviction:
            more = story()
            assert not lost, f"{len(lost)} {what}: {lost[:5]}" + (f"\n{more}" if more else "")

    @level(3)
    @requires("shared_across_processes")
    def test_two_processes_share_one_store(self, backend_factory: BackendFactory) -> None:
        """A child process built from the same backend reference and config reads the
        parent's pages byte-exact, and the parent reads the child's while the child still
        runs (a store may keep pages in the writing process's memory); when the backend
        declares ``persistent``, once more after the child has exited."""
        if backend_factory.backend_ref is None:
            pytest.skip(
                "the backend class cannot be rebuilt in a child process "
                "(set backend to a name or 'module:Class', or override child_backend_ref)"
            )
        case = PoolCase()
        sc = self.storage_config_for(case)
        att = self.attach(backend_factory(storage_config=sc), case)
        ns = backend_factory.namespace
        mine, theirs = self.keys(ns, "parent", 3), self.keys(ns, "child", 3)
        data = self.store(att, mine, 0)
        job = ChildJob(
            backend=backend_factory.backend_ref,
            storage_config=backend_factory.storage_config(storage_config=sc),
            case=case,
            zero_copy=self.primary_path() == "v1",
            pool_source=self.host_pools,
            geometry=self.geometry,
            read=tuple(mine),
            write=tuple(theirs),
        )
        nbytes = len(P._as_bytes(att.kv.get_dummy_flat_data_page()))
        expected = [P.pattern(k, nbytes) for k in theirs]

        def parent_reads(result: dict[str, Any]) -> None:
            assert result["write"] == [True] * 3, f"the child's writes failed: {result['write']}"
            self.expect_pages(
                att, theirs, expected, 10, what="pages the child process wrote (child still running)"
            )

        result = run_child(job, timeout=max(10.0, self.test_timeout_s / 2), while_alive=parent_reads)
        assert result["read"] == [digest(d) for d in data], (
            "the child did not read the parent's pages exactly"
        )
        assert result["write"] == [True] * 3, f"the child's writes failed: {result['write']}"
        if self.capabilities_of().persistent:  # the child has exited: its pages outlive it
            self.expect_pages(att, theirs, expected, 10, what="pages the child process wrote")
