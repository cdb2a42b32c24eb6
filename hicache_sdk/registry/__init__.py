"""Backend selection by name: runtime registrations, installed entry points, import paths.

A backend is a :class:`~hicache_sdk.spec.HiCacheStorage` subclass constructed the way
SGLang's ``dynamic`` loader does it: ``cls(storage_config, kwargs)`` with ``kwargs`` ``{}``
and the backend's settings in ``storage_config.extra_config``.

Resolution of a name (:func:`resolve_backend`), first match wins:

1. a runtime registration (:func:`register_backend`);
2. an installed entry point in group ``hicache_sdk.backends``
   (``name = "package.module:Class"``), loaded only when asked for;
3. a literal ``"package.module:Class"`` import path (SGLang ``dynamic`` compatibility).

Edge cases:

* Entry points are enumerated once and cached (:func:`refresh` forgets the cache, e.g.
  after installing a distribution in-process); ``.load()`` runs only on request.
* One distribution seen twice (an editable install beside stale metadata: same
  normalized distribution name) counts once; the first one on ``sys.path`` wins, as for
  ``importlib.metadata``. Two *different* distributions claiming one name raise
  :class:`~hicache_sdk.errors.DuplicateBackendError` naming both, unless the caller pins
  one with ``dist=``.
* ``HICACHE_SDK_BACKENDS=a,b`` (read on every call) hides every entry point not on the
  list. Runtime registrations and explicit import paths are never hidden.
* A class whose import fails on a missing module raises
  :class:`~hicache_sdk.errors.BackendUnavailableError` naming the backend, its
  distribution and version, the missing module and the install command.
* Something that is not a ``HiCacheStorage`` subclass raises ``TypeError`` naming it.
  (A subclass of SGLang's own ``HiCacheStorage`` is accepted when SGLang is already
  imported, so SGLang backends load here unchanged.)
"""

from __future__ import annotations

import copy
import importlib
import os
import re
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from ..capabilities import Capabilities
from ..errors import BackendNotFoundError
from ..spec import HiCacheStorage, HiCacheStorageConfig
from ._discovery import ALLOW_LIST_ENV, ENTRY_POINT_GROUP, refresh
from ._discovery import Candidate as _Candidate
from ._discovery import discover as _discover  # noqa: F401  (diagnostics and tests)
from ._discovery import visible as _visible
from ._messages import describe_not_found, install_command
from ._messages import duplicate as _duplicate
from ._messages import normalize_dist as _normalize
from ._messages import unavailable as _unavailable
from ._messages import viability as _viability

__all__ = [
    "ALLOW_LIST_ENV",
    "ENTRY_POINT_GROUP",
    "KNOWN_BACKENDS",
    "BackendInfo",
    "backend_capabilities",
    "create_backend",
    "install_command",
    "list_backends",
    "refresh",
    "register_backend",
    "resolve_backend",
    "unregister_backend",
]

#: Backends the project publishes, by name -> distribution (for install hints only: they
#: are resolved through their entry points like any third-party backend).
KNOWN_BACKENDS: Mapping[str, str] = {
    "file": "hicache-backend-file",
    "redis": "hicache-backend-redis",
    "s3": "hicache-backend-s3",
    "mooncake": "hicache-backend-mooncake",
}

_PATH_RE = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class BackendInfo:
    """What :func:`list_backends` knows about one backend.

    * ``name``: the name it resolves under.
    * ``value``: its ``"module:Class"`` path.
    * ``distribution`` / ``version``: the providing distribution (``None`` for runtime
      registrations).
    * ``source``: ``"runtime"``, ``"entry_point"`` or ``"not_installed"`` (a known
      backend whose distribution is absent).
    * ``importable``: whether its class loaded; ``error`` says why not (with the install
      hint), or notes a name conflict, or what the class's optional ``check_environment()``
      classmethod reported (a reason the backend cannot work on this machine).
    * ``capabilities``: ``Capabilities.to_dict()`` of the loaded class, else ``None``.
    * ``accelerators``: the optional compiled parts the class reports through an optional
      ``accelerators()`` classmethod (``{"hicache_backend_redis._bulkread": True}``: name ->
      built and importable here); ``{}`` when it has none. Every backend works without
      them (a pure-Python path does the same work, slower).
    """

    name: str
    value: str
    distribution: str | None
    version: str | None
    importable: bool
    error: str | None
    capabilities: dict[str, Any] | None
    source: str = "entry_point"
    accelerators: dict[str, bool] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with stable keys (``install`` is the pip command or None)."""
        return {
            "name": self.name,
            "value": self.value,
            "distribution": self.distribution,
            "version": self.version,
            "source": self.source,
            "importable": self.importable,
            "error": self.error,
            "capabilities": self.capabilities,
            "accelerators": dict(self.accelerators),
            "install": install_command(self.distribution) if self.distribution else None,
        }


def _describe_not_found(
    name: str, available: list[str], hidden: list[str], not_installed: Mapping[str, str]
) -> str:
    allow = (ALLOW_LIST_ENV, os.environ.get(ALLOW_LIST_ENV, ""))
    return describe_not_found(name, available, hidden, not_installed, allow)


_lock = threading.RLock()
_runtime: dict[str, type[HiCacheStorage] | str] = {}


def register_backend(name: str, backend: type[HiCacheStorage] | str, *, clobber: bool = False) -> None:
    """Register ``backend`` (a class, or a lazy ``"module:Class"`` path) under ``name``.

    Runtime registrations take precedence over entry points and are never hidden by the
    allow-list. Registering the same object again is a no-op; a different one under a
    taken name raises ``ValueError`` unless ``clobber=True``. A class that is not a
    ``HiCacheStorage`` subclass raises ``TypeError`` now; a path is checked when resolved.
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"name must be a non-empty string without ':', got {name!r}")
    if isinstance(backend, str):
        if not _PATH_RE.match(backend):
            raise ValueError(f"backend must be a 'package.module:Class' path, got {backend!r}")
    else:
        _check_class(backend, name)
    with _lock:
        old = _runtime.get(name)
        if old is not None and old is not backend and old != backend and not clobber:
            raise ValueError(
                f"a backend is already registered as {name!r} ({_describe(old)}); pass clobber=True to replace it"
            )
        _runtime[name] = backend


def unregister_backend(name: str) -> None:
    """Remove a runtime registration (a name not registered is ignored)."""
    with _lock:
        _runtime.pop(name, None)


def _describe(obj: type[Any] | str) -> str:
    return obj if isinstance(obj, str) else f"{obj.__module__}:{obj.__qualname__}"


def _check_class(obj: Any, what: str) -> type[HiCacheStorage]:
    if isinstance(obj, type):
        if issubclass(obj, HiCacheStorage):
            return obj
        sgl = sys.modules.get("sglang.srt.mem_cache.hicache_storage")
        sgl_base = getattr(sgl, "HiCacheStorage", None)
        if isinstance(sgl_base, type) and issubclass(obj, sgl_base):
            return cast("type[HiCacheStorage]", obj)
    qualname = getattr(obj, "__qualname__", None)
    shown = f"{getattr(obj, '__module__', '?')}:{qualname}" if isinstance(qualname, str) else repr(obj)
    raise TypeError(f"backend {what!r}: {shown} is not a HiCacheStorage subclass")


def _import_path(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _load_path(name: str, path: str, *, literal: bool) -> type[HiCacheStorage]:
    """Import a ``module:Class`` path (a runtime registration or a literal name)."""
    module_name = path.partition(":")[0]
    try:
        obj = _import_path(path)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if literal and (missing == module_name or module_name.startswith(missing + ".")):
            raise BackendNotFoundError(
                f"no module {missing!r} for import path {name!r}; "
                + _describe_not_found(name, *_names_for_hint())
            ) from e
        raise _unavailable(name, path, None, None, (), missing, e) from e
    except AttributeError as e:
        raise BackendNotFoundError(f"backend {name!r}: {path!r} does not exist ({e})") from e
    except ImportError as e:
        raise _unavailable(name, path, None, None, (), e.name or "", e) from e
    return _check_class(obj, name)


def _load_candidate(c: _Candidate) -> type[HiCacheStorage]:
    try:
        obj = c.entry_point.load()
    except ImportError as e:
        raise _unavailable(c.name, c.value, c.distribution, c.version, c.requires, e.name or "", e) from e
    except AttributeError as e:
        raise _unavailable(c.name, c.value, c.distribution, c.version, (), "", e) from e
    return _check_class(obj, c.name)


def _names_for_hint() -> tuple[list[str], list[str], dict[str, str]]:
    visible, hidden = _visible()
    with _lock:
        available = sorted(set(_runtime) | set(visible))
    not_installed = {n: d for n, d in KNOWN_BACKENDS.items() if n not in available and n not in hidden}
    return available, sorted(hidden), not_installed


def _pick(name: str, candidates: list[_Candidate], dist: str | None) -> _Candidate:
    if dist is not None:
        chosen = [c for c in candidates if _normalize(c.distribution) == _normalize(dist)]
        if not chosen:
            provided = ", ".join(f"{c.distribution} {c.version}" for c in candidates) or "none"
            raise BackendNotFoundError(
                f"no distribution {dist!r} provides backend {name!r} (provided by: {provided})"
            )
        return chosen[0]
    if len(candidates) > 1:
        raise _duplicate(name, [(c.distribution, c.version, c.value) for c in candidates])
    return candidates[0]


def resolve_backend(name: str, *, dist: str | None = None) -> type[HiCacheStorage]:
    """The backend class for ``name`` (see the module docs for the order).

    ``dist`` pins the entry point of that distribution (runtime registrations are then
    skipped), which resolves a name two distributions claim. Raises
    :class:`BackendNotFoundError` (listing available names and install hints),
    :class:`BackendUnavailableError`, :class:`DuplicateBackendError`, ``TypeError``
    (not a ``HiCacheStorage`` subclass) or ``ValueError`` (empty or malformed name).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if dist is None:
        with _lock:
            registered = _runtime.get(name)
        if registered is not None:
            if isinstance(registered, str):
                return _load_path(name, registered, literal=False)
            return registered
    visible, _hidden = _visible()
    if name in visible:
        return _load_candidate(_pick(name, visible[name], dist))
    if dist is None and ":" in name:
        if not _PATH_RE.match(name):
            raise ValueError(f"name {name!r} is not a backend name or a 'package.module:Class' path")
        return _load_path(name, name, literal=True)
    available, hidden_names, not_installed = _names_for_hint()
    if dist is not None:
        raise BackendNotFoundError(
            f"no distribution {dist!r} provides backend {name!r}; "
            + _describe_not_found(name, available, hidden_names, not_installed)
        )
    raise BackendNotFoundError(_describe_not_found(name, available, hidden_names, not_installed))


def backend_capabilities(cls: type[Any]) -> Capabilities:
    """``cls.capabilities`` without constructing (``Capabilities()`` when absent).

    Raises ``TypeError`` naming the class when the attribute is not a ``Capabilities``.
    """
    caps = getattr(cls, "capabilities", None)
    if caps is None:
        return Capabilities()
    if not isinstance(caps, Capabilities):
        raise TypeError(
            f"{_describe(cls)}.capabilities must be a hicache_sdk.Capabilities, got {type(caps).__name__}"
        )
    return caps


def create_backend(
    name: str,
    storage_config: Any = None,
    config: Mapping[str, Any] | None = None,
    *,
    dist: str | None = None,
) -> HiCacheStorage:
    """Resolve ``name`` and construct it as SGLang's dynamic loader does.

    ``config`` is merged over a *copy* of ``storage_config.extra_config`` (the caller's
    config object and dict are never mutated) and the class is called as
    ``cls(new_storage_config, {})``. ``storage_config`` ``None`` means
    ``HiCacheStorageConfig()``; SGLang's own config object works too (it is copied with
    ``copy.copy``). Construction errors (a bad config) propagate unchanged.
    """
    if config is not None and not isinstance(config, Mapping):
        raise ValueError(f"config must be a mapping, got {type(config).__name__}")
    cls = resolve_backend(name, dist=dist)
    base = HiCacheStorageConfig() if storage_config is None else storage_config
    if not hasattr(base, "extra_config"):
        raise ValueError(f"storage_config has no extra_config attribute: {type(base).__name__}")
    extra = getattr(base, "extra_config", None)
    if extra is not None and not isinstance(extra, Mapping):
        raise ValueError(f"storage_config.extra_config must be a mapping, got {type(extra).__name__}")
    merged = dict(extra or {})
    merged.update(config or {})
    new_config = copy.copy(base)
    new_config.extra_config = merged
    return cls(new_config, {})  # type: ignore[call-arg]


def _info_for(
    name: str, value: str, dist: str | None, version: str | None, load: Any, source: str, note: str | None
) -> BackendInfo:
    try:
        cls = load()
        caps = backend_capabilities(cls).to_dict()
    except Exception as e:  # diagnostics: any failure is reported, not raised
        return BackendInfo(name, value, dist, version, False, str(e), None, source)
    reason = _viability(cls)
    if reason:
        note = f"{note}; {reason}" if note else reason
    return BackendInfo(name, value, dist, version, True, note, caps, source, _accelerators(cls))


def _accelerators(cls: Any) -> dict[str, bool]:
    """The class's optional ``accelerators()`` report (name -> built), ``{}`` without one
    or when it fails (diagnostics never raise)."""
    hook = getattr(cls, "accelerators", None)
    if not callable(hook):
        return {}
    try:
        return {str(k): bool(v) for k, v in dict(hook()).items()}
    except Exception:
        return {}


def list_backends(*, include_not_installed: bool = False) -> list[BackendInfo]:
    """Every runtime registration and visible entry point, each loaded inside try/except.

    A name claimed by several distributions yields one entry per distribution, each with
    an ``error`` saying so. ``include_not_installed`` adds the known backends whose
    distribution is absent (``source="not_installed"``, with the install command).
    Sorted by name; a runtime registration comes before the entry point it shadows.
    """
    out: list[BackendInfo] = []
    with _lock:
        runtime = dict(_runtime)
    for name, obj in runtime.items():
        if isinstance(obj, str):
            out.append(
                _info_for(
                    name,
                    obj,
                    None,
                    None,
                    lambda n=name, p=obj: _load_path(n, p, literal=False),
                    "runtime",
                    None,
                )
            )
        else:
            out.append(_info_for(name, _describe(obj), None, None, lambda o=obj: o, "runtime", None))
    visible, hidden = _visible()
    for name, candidates in visible.items():
        note = None
        if len(candidates) > 1:
            note = str(_duplicate(name, [(c.distribution, c.version, c.value) for c in candidates]))
        elif name in runtime:
            note = "shadowed by a runtime registration"
        for c in candidates:
            out.append(
                _info_for(
                    name,
                    c.value,
                    c.distribution,
                    c.version,
                    lambda c=c: _load_candidate(c),
                    "entry_point",
                    note,
                )
            )
    if include_not_installed:
        for name, dist in KNOWN_BACKENDS.items():
            if name not in visible and name not in hidden and name not in runtime:
                msg = f"not installed: {install_command(dist)}"
                out.append(BackendInfo(name, "", dist, None, False, msg, None, "not_installed"))
    order = {"runtime": 0, "entry_point": 1, "not_installed": 2}
    out.sort(key=lambda i: (i.source == "not_installed", i.name, order[i.source], i.distribution or ""))
    return out
