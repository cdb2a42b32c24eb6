"""Backend construction for the suite: :class:`BackendFactory` builds every backend of a
test inside a conformance namespace of its own, proves the namespace empty first (when an
out-of-band view exists), and closes, clears and releases what it built at teardown.

The suite bounds its own footprint: a backend is closed and dropped as soon as its test
(or its stateful example, :meth:`BackendFactory.release`) ends, including after a
failure (the plugin clears a failure's traceback frames), so a run never holds more than
one test's backends.
"""

from __future__ import annotations

import copy
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
        self.created.append(backend)
        try:
            self._refs.append(weakref.ref(backend))
        except TypeError:  # a class with __slots__ and no __weakref__
            pass
        ns = namespace or self.namespace
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
            try:
                backend.clear()
            except Exception:
                pass
            else:
                self.namespaces.discard(namespace)
                self._proven.discard(namespace)
        _close(backend)
        self.created = [b for b in self.created if b is not backend]

    def teardown(self, clear: bool) -> None:
        for b in self.created:
            self._released_bugs += backend_bugs(b)
            _close(b)
        self.created = []
        if clear:
            # with an out-of-band view, only namespaces proved empty before use are cleared
            todo = self._proven if self._probe is not None else self.namespaces
            for ns in sorted(todo):
                try:
                    b = self._build(
                        HiCacheStorageConfig(
                            model_name="conformance/model", extra_config=self.extra_config(ns)
                        )
                    )
                except Exception:
                    continue
                try:
                    b.clear()
                except Exception:
                    pass
                _close(b)
                del b

    def alive(self) -> int:
        """How many backends this test built are still referenced somewhere (closed or not)."""
        return sum(1 for r in self._refs if r() is not None)
