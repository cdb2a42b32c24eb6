"""Backend construction for the suite: :class:`BackendFactory` builds every backend of a
test inside a conformance namespace of its own, proves the namespace empty first (when an
out-of-band view exists), and closes, clears and releases what it built at teardown.

Cleanup goes through the backend: each namespace is cleared once per model a backend was
built for in it (``clear()`` is scoped to one model), then, for a backend built on
``PagedStorage``, every object written through its transport (recorded as it is written)
that is still there is deleted through the transport, and what is left after that is
counted (:attr:`BackendFactory.left`).

The suite bounds its own footprint: a backend is closed and dropped as soon as its test
(or its stateful example, :meth:`BackendFactory.release`) ends, including after a
failure (the plugin clears a failure's traceback frames), so a run never holds more than
one test's backends.
"""

from __future__ import annotations

import copy
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from hicache_sdk.spec import HiCacheStorage, HiCacheStorageConfig

__all__ = ["NAMESPACE_PREFIX", "BackendFactory", "resolve_backend_class", "backend_bugs"]

#: Every namespace the suite writes into starts with this.
NAMESPACE_PREFIX = "hicache-conformance-"


def resolve_backend_class(backend: Any) -> type[Any]:
    """A class as is; ``"module:Class"`` or an entry-point name through the registry."""
    if isinstance(backend, type):
        return backend
    if not isinstance(backend, str) or not backend:
        raise ValueError(f"backend must be a class, 'module:Class' or a backend name, got {backend!r}")
    from hicache_sdk.registry import resolve_backend

    return resolve_backend(backend)


def backend_bugs(backend: Any) -> list[dict[str, str]]:
    """The programming errors a backend recorded (``backend.metrics.bugs()``: exceptions a
    transport raised that are not I/O failures), as dicts with ``site``, ``error``,
    ``message`` and ``traceback``; ``[]`` for a backend without them (any non-SDK backend)."""
    metrics = getattr(backend, "metrics", None)
    bugs = getattr(metrics, "bugs", None)
    if not callable(bugs):
        return []
    try:
        records = list(bugs())
    except Exception:
        return []
    out = []
    for r in records:
        out.append({k: str(getattr(r, k, "") or "") for k in ("site", "error", "message", "traceback")})
    return out


def _close(backend: Any) -> None:
    close = getattr(backend, "close", None)  # SGLang's base class has no close()
    try:
        if close is not None:
            close()
    except Exception:
        pass


class BackendFactory:
    """Builds backends for one test; every backend lives in a conformance namespace.

    ``factory()`` builds one in the test's own namespace; ``factory(namespace=ns)`` in
    another (from :meth:`new_namespace`); ``storage_config=`` sets the parallel identity;
    keyword ``overrides`` are merged into ``extra_config``. At teardown every backend is
    closed and every namespace used is cleared (when the backend declares ``delete``).
    """

    def __init__(
        self,
        build: Callable[[HiCacheStorageConfig], HiCacheStorage],
        config: Mapping[str, Any],
        namespace: str,
        namespace_config: Callable[[str], Mapping[str, Any]] | None = None,
        backend_ref: str | None = None,
        probe: Callable[[HiCacheStorage, str], int] | None = None,
    ) -> None:
        self._build = build
        self._config = dict(config)
        self._namespace_config = namespace_config or (lambda ns: {"namespace": ns})
        #: How a child process rebuilds the backend class (``None``: it cannot).
        self.backend_ref = backend_ref
        self.namespace = namespace
        self.created: list[HiCacheStorage] = []
        self.namespaces: set[str] = {namespace}
        #: ``probe(backend, ns)``: objects already in ``ns`` (out-of-band view), or ``None``.
        self._probe = probe
        self._proven: set[str] = set()
        #: Bugs recorded by backends already released (see :func:`backend_bugs`).
        self._released_bugs: list[dict[str, str]] = []
        self._refs: list[weakref.ref[Any]] = []
        #: namespace -> the storage configs backends were built with (one per model).
        self._models: dict[str, dict[str, HiCacheStorageConfig]] = {}
        #: namespace -> object names written through a transport there.
        self._written: dict[str, set[str]] = {}
        self._model_of: dict[int, str] = {}
        self._lock = threading.Lock()
        #: Objects still there after cleanup (``None``: nothing could be checked).
        self.left: int | None = None
        #: Why a cleanup step failed (the first error per step), for the report.
        self.cleanup_errors: list[str] = []

    def new_namespace(self) -> str:
        ns = f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:12]}"
        self.namespaces.add(ns)
        return ns

    def extra_config(self, namespace: str | None = None, **overrides: Any) -> dict[str, Any]:
        ns = namespace or self.namespace
        if not ns.startswith(NAMESPACE_PREFIX):
            raise pytest.UsageError(
                f"the conformance suite writes and clears data and runs only in a namespace of its own "
                f"(starting with {NAMESPACE_PREFIX!r}); refusing namespace {ns!r}"
            )
        self.namespaces.add(ns)
        return {**self._config, **self._namespace_config(ns), **overrides}

    def storage_config(
        self,
        *,
        namespace: str | None = None,
        storage_config: HiCacheStorageConfig | None = None,
        **overrides: Any,
    ) -> HiCacheStorageConfig:
        """The storage config a backend of this namespace is built from (a copy)."""
        sc = (
            copy.copy(storage_config)
            if storage_config is not None
            else HiCacheStorageConfig(model_name="conformance/model")
        )
        sc.extra_config = self.extra_config(namespace, **overrides)
        return sc

    def __call__(
        self,
        *,
        namespace: str | None = None,
        storage_config: HiCacheStorageConfig | None = None,
        **overrides: Any,
    ) -> HiCacheStorage:
        sc = self.storage_config(namespace=namespace, storage_config=storage_config, **overrides)
        backend = self._build(sc)
        ns = namespace or self.namespace
        self._models.setdefault(ns, {}).setdefault(str(sc.model_name), sc)
        self._model_of[id(backend)] = str(sc.model_name)
        self._record_writes(backend, ns)
        self.created.append(backend)
        try:
            self._refs.append(weakref.ref(backend))
        except TypeError:  # a class with __slots__ and no __weakref__
            pass
        if self._probe is not None and ns not in self._proven:
            held = self._probe(backend, ns)
            if held:
                self.namespaces.discard(ns)  # never cleared by the suite
                raise pytest.UsageError(
                    f"refusing to run in namespace {ns!r}: the store already holds {held} object(s) there "
                    f"(the suite writes, plants garbage and clears only in a namespace it created and "
                    f"proved empty; check the namespace / --isolate settings)"
                )
            self._proven.add(ns)
        return backend

    def _record_writes(self, backend: Any, ns: str) -> None:
        """Record every object name written through ``backend``'s transport (a backend
        not built on ``PagedStorage`` has none: nothing recorded)."""
        try:
            t = getattr(backend, "raw_transport", None)
        except Exception:
            return
        write = getattr(t, "write", None)
        if t is None or write is None or getattr(write, "_hicache_records", None) is not None:
            return
        written = self._written.setdefault(ns, set())
        lock = self._lock

        def recording_write(keys: Any, buffers: Any, *args: Any, **kwargs: Any) -> Any:
            with lock:
                written.update(keys)
            return write(keys, buffers, *args, **kwargs)  # a cancellable one takes cancel=

        recording_write._hicache_records = written  # type: ignore[attr-defined]
        try:
            t.write = recording_write
        except Exception:
            pass

    def _clean(self, backend: Any, ns: str) -> None:
        """Delete, through ``backend``'s transport, what was written in ``ns`` and is still
        there; count what is left after that."""
        with self._lock:
            keys = sorted(self._written.pop(ns, set()))
        if not keys:
            return
        try:
            t = backend.raw_transport
            left = [k for k, size in zip(keys, t.exists(keys)) if size is not None]
            if left:
                t.delete(left)
                left = [k for k, size in zip(left, t.exists(left)) if size is not None]
        except Exception as e:
            self.cleanup_errors.append(f"checking what is left in {ns}: {type(e).__name__}: {e}")
            return
        self.left = (self.left or 0) + len(left)

    def _clear_models(self, ns: str, first: Any = None) -> None:
        """``clear()`` ``ns`` once per model a backend was built for there (``first``, when
        given, is a backend of ``ns`` to use for its own model), then :meth:`_clean`."""
        configs = self._models.pop(ns, None) or {
            "conformance/model": HiCacheStorageConfig(model_name="conformance/model")
        }
        done: set[str] = set()
        last: Any = None
        if first is not None:
            self._try_clear(first, ns)
            done.add(self._model_of.get(id(first), ""))
        for model, sc in configs.items():
            if model in done:
                continue
            try:
                b = self._build(self.storage_config(namespace=ns, storage_config=sc))
            except Exception as e:
                self.cleanup_errors.append(f"building a backend to clear {ns}: {type(e).__name__}: {e}")
                continue
            self._try_clear(b, ns)
            if last is not None:
                _close(last)
            last = b
        checker = first if first is not None else last
        if checker is not None:
            self._clean(checker, ns)
        if last is not None:
            _close(last)

    def _try_clear(self, backend: Any, ns: str) -> None:
        try:
            backend.clear()
        except Exception as e:
            self.cleanup_errors.append(f"clear() in {ns}: {type(e).__name__}: {e}")

    def bugs(self) -> list[dict[str, str]]:
        """Every bug the backends of this test recorded so far (released ones first)."""
        out = list(self._released_bugs)
        for b in self.created:
            out += backend_bugs(b)
        return out

    def release(self, backend: Any, *, namespace: str | None = None, clear: bool = False) -> None:
        """Close ``backend`` now and drop the factory's reference to it (its bugs are kept).
        With ``clear``, first clear ``namespace`` through it (the teardown then need not
        build another backend for that namespace; a store whose backends are slow to
        build or destroy pays once, not twice)."""
        self._released_bugs += backend_bugs(backend)
        if clear and namespace is not None and (self._probe is None or namespace in self._proven):
            self._clear_models(namespace, first=backend)
            self.namespaces.discard(namespace)
            self._proven.discard(namespace)
        _close(backend)
        self._model_of.pop(id(backend), None)
        self.created = [b for b in self.created if b is not backend]

    def teardown(self, clear: bool) -> None:
        for b in self.created:
            self._released_bugs += backend_bugs(b)
            _close(b)
        self.created = []
        self._model_of.clear()
        if clear:
            # with an out-of-band view, only namespaces proved empty before use are cleared
            todo = self._proven if self._probe is not None else self.namespaces
            for ns in sorted(todo):
                self._clear_models(ns)

    def alive(self) -> int:
        """How many backends this test built are still referenced somewhere (closed or not)."""
        return sum(1 for r in self._refs if r() is not None)
