"""The base every suite mixin builds on: backend construction in an isolated test
namespace, the capability gate, the watchdog, and page I/O helpers.

A backend's own tests subclass :class:`hicache_conformance.BackendSuite` and set
``backend`` (a class, ``"module:Class"`` or an entry-point name) and ``config`` (its
``extra_config`` settings). They may override:

* the ``backend_factory`` fixture (build backends some other way; each call must return
  a backend bound to the namespace it is given);
* the ``fault_hooks`` fixture (L4): an object with ``stop()``, ``start()`` and optionally
  ``add_delay(seconds)`` / ``clear_delay()``;
* the ``raw_pages`` fixture: out-of-band access to the stored objects by physical name
  (``names`` / ``get`` / ``put`` / ``delete``, see :mod:`hicache_conformance.raw`),
  bypassing the backend's own I/O; supplied by the suite itself for ``memory``;
* ``namespace_config(namespace)``: the extra-config settings that put a backend in a
  test namespace of its own (default ``{"namespace": ns}``; the ``sglang-*`` key
  schemes take no namespace, so a backend tested with one must isolate otherwise,
  e.g. a private root directory or store per namespace);
* ``child_backend_ref()``: how a child process rebuilds the backend class (default: the
  ``backend`` string, or ``"module:Class"`` when that imports the same class; ``None``
  skips the two-process test).

What SGLang does with the backend (:mod:`hicache_conformance.sglang_path`): ``route``
(``Route("dynamic")`` by default; a built-in name such as ``Route("mooncake")`` for SGLang's
own backends) decides the I/O paths certified (``io_path``: ``generic`` always for
``dynamic``, ``v1`` too when implemented) and the host layouts of the pool matrix. Reads
and writes that stand for SGLang's go through :class:`~hicache_conformance.sglang_path.Controller`
(SGLang's own controller functions when SGLang is installed).
"""

from __future__ import annotations

import dataclasses
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pytest

from hicache_sdk.capabilities import Capabilities
from hicache_sdk.spec import HiCacheStorage, HiCacheStorageConfig, PoolName

from . import pools as P
from .capabilities import (
    LEVELS,
    PROFILES,
    apply_capability_overrides,
    default_profile,
    infer_capabilities,
    missing_capabilities,
    strict_reason,
    test_level,
    test_requires,
    validate_waivers,
)
from .explain import describe_pages, is_initial_fill, short_key
from .factory import NAMESPACE_PREFIX, BackendFactory, resolve_backend_class
from .matrix import PoolCase, pool_cases
from .raw import RawObjects, default_raw_objects, is_memory_backend
from .sglang_path import Controller, Route
from .watchdog import Watchdog, settle

__all__ = ["SuiteBase", "BackendFactory", "Attached", "NAMESPACE_PREFIX", "resolve_backend_class"]


@dataclass
class Attached:
    """A backend with its host pools registered: ``kv`` and sidecars by name."""

    backend: HiCacheStorage
    kv: Any
    case: PoolCase
    pools: dict[str, Any] = field(default_factory=dict)


class SuiteBase:
    """Fixtures, gate and helpers shared by every suite mixin (see the module docs)."""

    backend: ClassVar[Any] = None
    config: ClassVar[Mapping[str, Any]] = {}
    #: Override the backend class's declared capabilities (``None``: use the class's).
    declared_capabilities: ClassVar[Capabilities | None] = None
    #: Capabilities declared on top of those (``hicache check --capabilities mla,persistent``):
    #: a name sets it, ``-name`` / ``no-name`` clears it.
    extra_capabilities: ClassVar[tuple[str, ...]] = ()
    #: How SGLang loads the backend (``dynamic``, or a built-in name) and its I/O backend:
    #: decides the I/O paths and host layouts certified.
    route: ClassVar[Route] = Route()
    #: Whose host pools: ``"auto"`` (SGLang's when installed), ``"sglang"`` or ``"sdk"``.
    host_pools: ClassVar[str] = "auto"
    #: The model geometry of the suite's pools: ``"small"`` (pages of tens to hundreds of
    #: bytes) or ``"block"`` (every page a multiple of 4 KiB, for O_DIRECT transfers).
    geometry: ClassVar[str] = "small"
    #: ``"contract"`` (what SGLang requires), ``"strict"`` (plus the SDK's own promises) or
    #: ``None``: strict for a ``PagedStorage`` backend, contract for any other.
    profile: ClassVar[str | None] = None
    #: extra-config key -> template with ``{namespace}``: how each test namespace is
    #: isolated when the key scheme has no namespace (``hicache check --isolate``), e.g.
    #: ``{"root": "/tmp/cc/{namespace}"}``. Empty: :meth:`namespace_config`'s default.
    isolate: ClassVar[Mapping[str, str]] = {}
    #: test name -> reason; the test becomes a strict xfail.
    waivers: ClassVar[Mapping[str, str]] = {}
    #: ``"full"``, ``"pairwise"`` or ``"minimal"`` (see :mod:`hicache_conformance.matrix`).
    matrix: ClassVar[str] = "pairwise"
    #: Watchdog per test (seconds); the stateful test gets at least 4 s per example.
    test_timeout_s: ClassVar[float] = 120.0
    #: L4: the most one call may take while the service is down or slow (generous).
    call_deadline_s: ClassVar[float] = 10.0
    #: After a test, how long the calls it abandoned (an L4 call past its deadline) get to
    #: end before the next test starts; one still running then is reported as a warning.
    settle_s: ClassVar[float] = 10.0
    #: L4: how long the same backend object gets to recover after a restart.
    recovery_s: ClassVar[float] = 20.0
    #: Hypothesis examples of the stateful test.
    stateful_examples: ClassVar[int] = 30
    #: Run the transport tests (off for a subclass that changes only what sits above the
    #: transport, e.g. the key scheme, when its base class runs them on the same transport).
    transport_tests: ClassVar[bool] = True
    #: Run only these levels (as ``--level`` names them: ``("L0", "L1", "L2")``); the others
    #: are skipped with the reason. For a subclass that changes only the names above the
    #: transport (the key scheme), whose base class runs the other levels on the same store.
    #: ``None``: every level.
    levels: ClassVar[tuple[str, ...] | None] = None
    #: Shrink a failing stateful example (off only to prove a known fault fast).
    stateful_shrink: ClassVar[bool] = True

    # -- collection-time parametrisation ---------------------------------------------
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        paths = self.io_paths()
        cases = self.pool_cases()
        if "pool_case" in metafunc.fixturenames and "io_path" in metafunc.fixturenames:
            # the whole matrix on the first path; the others on one MHA and one MLA case
            # (their layouts are the path-independent part: no need to cover them twice)
            few = _one_per_kind(cases)
            pairs = [(c, paths[0]) for c in cases] + [(c, p) for p in paths[1:] for c in few]
            metafunc.parametrize(("pool_case", "io_path"), pairs, ids=[f"{p}-{c.id}" for c, p in pairs])
            return
        if "pool_case" in metafunc.fixturenames:
            metafunc.parametrize("pool_case", cases, ids=[c.id for c in cases])
        if "io_path" in metafunc.fixturenames:
            metafunc.parametrize("io_path", paths, ids=list(paths))

    @classmethod
    def pool_cases(cls) -> list[PoolCase]:
        """The host-pool cases of ``matrix`` that SGLang can hand this backend: MLA only
        when it declares ``mla``; the layouts of ``route`` (under the ``sglang-mooncake`` key
        scheme, Mooncake's page-first rewrite)."""
        cases = pool_cases(cls.matrix)
        if not cls.capabilities_of().mla:
            cases = [c for c in cases if c.kind != "mla"] or cases
        layouts = cls.route.layouts()
        kept = [c for c in cases if c.layout in layouts]
        if not kept:  # a minimal matrix without the route's layouts: move its cases onto them
            kept = [dataclasses.replace(c, layout=layouts[0]) for c in cases]
        if cls.key_scheme() == "sglang-mooncake":
            # the scheme's K/V objects need page-first MHA pages (as SGLang's own Mooncake)
            kept = [c for c in kept if c.kind == "mla" or c.layout != "layer_first"] or kept
        return kept

    @classmethod
    def io_paths(cls) -> tuple[str, ...]:
        """The I/O paths SGLang takes for this backend (``route``): ``generic``, and ``v1``
        when the backend implements it (``zero_copy``)."""
        return cls.route.io_paths(cls.capabilities_of().zero_copy)

    @classmethod
    def primary_path(cls) -> str:
        """The path of tests that are not about the path: SGLang's default for the route
        (the generic path for ``dynamic``: ``interface_v1`` is off by default)."""
        return cls.io_paths()[0]

    # -- backend description -----------------------------------------------------------
    @classmethod
    def backend_class(cls) -> type[Any]:
        if cls.backend is None:
            raise pytest.UsageError(f"{cls.__name__}.backend is not set (a class, 'module:Class' or a name)")
        return resolve_backend_class(cls.backend)

    @classmethod
    def capabilities_of(cls) -> Capabilities:
        """The test class's ``declared_capabilities``, else the backend class's own
        declaration for the test class's ``config`` (see :meth:`capability_notes`), else
        what the class implements (see :func:`infer_capabilities`); then
        ``extra_capabilities`` (the command line) on top."""
        if cls.declared_capabilities is not None:
            caps = cls.declared_capabilities
        else:
            for_config = cls._capabilities_for_config()
            caps = for_config[0] if for_config is not None else infer_capabilities(cls.backend_class())[0]
        return apply_capability_overrides(caps, cls.extra_capabilities)

    @classmethod
    def capability_notes(cls) -> dict[str, str]:
        """Why a capability differs for this config: a backend class may define
        ``capabilities_for_config(config) -> (Capabilities, {name: why})``, the
        capabilities of an instance built with that ``extra_config`` (a Mooncake client
        that holds its own segment is not ``persistent``); the reason goes into the skip."""
        if cls.declared_capabilities is not None:
            return {}
        for_config = cls._capabilities_for_config()
        return dict(for_config[1]) if for_config is not None else {}

    @classmethod
    def _capabilities_for_config(cls) -> tuple[Capabilities, Mapping[str, str]] | None:
        hook = getattr(cls.backend_class(), "capabilities_for_config", None)
        if not callable(hook):
            return None
        caps, notes = hook(dict(cls.config))
        return caps, notes

    @classmethod
    def inferred_capabilities(cls) -> tuple[str, ...]:
        """The capabilities that were inferred (true) rather than declared; ``()`` when
        the backend or the test class declares them."""
        if cls.declared_capabilities is not None:
            return ()
        return infer_capabilities(cls.backend_class())[1]

    @classmethod
    def capability_sources(cls) -> dict[str, str]:
        """Where each capability that is on came from: ``"command line"``, ``"test class"``,
        ``"backend class"`` or ``"inferred"``."""
        on = {n for n, v in cls.capabilities_of().to_dict().items() if v}
        cli = {c for c in cls.extra_capabilities if not c.startswith(("-", "no-"))}
        inferred = set(cls.inferred_capabilities())
        out = {}
        for n in sorted(on):
            if n in cli:
                out[n] = "command line"
            elif cls.declared_capabilities is not None:
                out[n] = "test class"
            elif n in inferred:
                out[n] = "inferred"
            else:
                out[n] = "backend class"
        return out

    @classmethod
    def active_profile(cls) -> str:
        """The profile in force (see ``profile``); raises ``pytest.UsageError`` for an
        unknown one."""
        prof = cls.profile or default_profile(cls.backend_class())
        if prof not in PROFILES:
            raise pytest.UsageError(f"profile must be one of {', '.join(PROFILES)}, got {prof!r}")
        return prof

    def assert_leading_run(self, n: int, want: int, what: str) -> None:
        """A read whose first ``want`` pages are stored, and the next is not, counted ``n``
        leading hits. More than ``want`` uses a page that is not there (every profile).
        Fewer serves nothing wrong: SGLang commits the leading run of hits and recomputes
        the rest, so a backend that answers a batch all-or-nothing (NIXL) is correct for
        SGLang; exactly ``want`` (per-key results) is a ``strict`` rule."""
        assert n <= want, (
            f"{what}: {n} leading hits, more than the {want} stored: a page past the stored run is a hit"
        )
        if self.active_profile() == "strict":
            assert n == want, (
                f"{what}: {n} leading hits, expected {want} (strict rule: per-key results; SGLang "
                "itself would only lose hits)"
            )

    def build_backend(self, storage_config: HiCacheStorageConfig) -> HiCacheStorage:
        """Construct the way SGLang's dynamic loader does: ``cls(storage_config, {})``."""
        return self.backend_class()(storage_config, {})  # type: ignore[no-any-return]

    @classmethod
    def key_scheme(cls) -> str:
        """The key scheme under test (``config["key_scheme"]``, default ``"default"``)."""
        return str(cls.config.get("key_scheme", "default"))

    def namespace_config(self, namespace: str) -> dict[str, Any]:
        """Extra-config settings that isolate ``namespace``: ``{"namespace": ns}`` under
        the default scheme; a private store under ``sglang-*`` schemes for ``memory``.
        Any other backend tested with an ``sglang-*`` scheme must override this or set
        ``isolate`` (from the command line: ``hicache check NAME --isolate KEY=TEMPLATE``)."""
        if self.isolate:
            return {k: str(v).replace("{namespace}", namespace) for k, v in self.isolate.items()}
        if self.key_scheme() == "default":
            return {"namespace": namespace}
        if is_memory_backend(self.backend_class()):
            return {"store": namespace}
        raise pytest.UsageError(
            f"key scheme {self.key_scheme()!r} takes no namespace: isolate each test namespace with "
            f"`hicache check NAME --isolate KEY=TEMPLATE` (e.g. --isolate 'root=/tmp/cc/{{namespace}}'), "
            f"or override namespace_config(ns) in {type(self).__name__}"
        )

    def child_backend_ref(self) -> str | None:
        """How a child process imports the backend class: the ``backend`` string as is, or
        ``"module:Qualname"`` when that resolves to the very same class; ``None`` when the
        class cannot be rebuilt that way or ``build_backend`` is overridden."""
        if type(self).build_backend is not SuiteBase.build_backend:
            return None
        if isinstance(self.backend, str):
            return self.backend
        cls = self.backend_class()
        ref = f"{cls.__module__}:{cls.__qualname__}"
        try:
            same = resolve_backend_class(ref) is cls
        except Exception:
            same = False
        return ref if same else None

    # -- fixtures ------------------------------------------------------------------------
    @pytest.fixture
    def hicache_namespace(self) -> str:
        return f"{NAMESPACE_PREFIX}{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def backend_factory(self, hicache_namespace: str, raw_pages: Any) -> Iterator[BackendFactory]:
        factory = BackendFactory(
            self.build_backend,
            self.config,
            hicache_namespace,
            namespace_config=self.namespace_config,
            backend_ref=self.child_backend_ref(),
            probe=self._emptiness_probe(raw_pages),
        )
        yield factory
        factory.teardown(clear=self.capabilities_of().delete)

    def _emptiness_probe(self, raw: Any) -> Callable[[HiCacheStorage, str], int] | None:
        """How many objects a fresh namespace already holds, seen out of band (``None``
        without out-of-band access). Under the default scheme object names carry the
        namespace, so only names containing it count; otherwise (isolated store or root)
        every object counts."""
        if raw is None:
            return None
        scoped = self.key_scheme() == "default" and not self.isolate

        def probe(backend: HiCacheStorage, ns: str) -> int:
            try:
                names = raw.names(backend)
            except Exception:
                return 0  # no listing: nothing proven, nothing refused
            return sum(1 for n in names if ns in n) if scoped else len(names)

        return probe

    @pytest.fixture
    def fault_hooks(self) -> Any:
        return None

    @pytest.fixture
    def raw_pages(self) -> RawObjects | None:
        return default_raw_objects(self.backend_class())

    @pytest.fixture(autouse=True)
    def _hicache_gate(self, request: pytest.FixtureRequest) -> Iterator[None]:
        fn = request.function
        name = fn.__name__
        needed = test_requires(fn)
        caps = self.capabilities_of()
        missing = missing_capabilities(caps, needed)
        if missing:
            notes = self.capability_notes()
            why = "; ".join(notes[m] for m in missing if m in notes)
            pytest.skip(
                f"backend does not declare {', '.join(missing)}" + (f" for this config: {why}" if why else "")
            )
        why = strict_reason(fn)
        request.node.user_properties.append(("hicache_rule", "strict" if why else "contract"))
        if why is not None and self.active_profile() != "strict":
            pytest.skip(f"strict-only rule (profile {self.active_profile()}): {why}")
        waivers = validate_waivers(self.waivers)
        if name in waivers:
            request.applymarker(pytest.mark.xfail(strict=True, reason=f"waived: {waivers[name]}"))
        request.node.user_properties.append(("hicache_level", test_level(fn)))
        path = request.node.callspec.params.get("io_path") if hasattr(request.node, "callspec") else None
        if path is not None:
            request.node.user_properties.append(("hicache_io_path", path))
        P.set_source(self.host_pools)
        P.set_geometry(self.geometry)
        limit = self.test_timeout_s
        if LEVELS.get(test_level(fn) or -1) == "stateful":  # one backend per example, built and released
            limit = max(limit, 4.0 * self.stateful_examples)
        with Watchdog(limit, label=name):
            yield
        still = settle(self.settle_s)
        if still:
            warnings.warn(
                f"{name}: {len(still)} abandoned backend call(s) still running {self.settle_s:g} s "
                f"after the test ({', '.join(still)}); they may change what later tests see",
                stacklevel=1,
            )

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    def storage_config_for(case: PoolCase, **fields: Any) -> HiCacheStorageConfig:
        base: dict[str, Any] = {
            "model_name": "conformance/model",
            "is_mla_model": case.kind == "mla",
            "is_page_first_layout": case.layout.startswith("page_first"),
        }
        base.update(fields)
        return HiCacheStorageConfig(**base)

    @staticmethod
    def attach(
        backend: HiCacheStorage, case: PoolCase, sidecars: tuple[str, ...] = (), **kw: Any
    ) -> Attached:
        """Register a fresh KV pool for ``case`` (and the named sidecar pools) the way
        SGLang's controller does."""
        kv = P.make_kv_pool(case, **kw)
        backend.register_mem_pool_host(kv)
        backend.register_mem_host_pool_v2(kv, PoolName.KV)
        att = Attached(backend, kv, case)
        for name in sidecars:
            pool = P.make_sidecar_pool(name, case)
            backend.register_mem_host_pool_v2(pool, PoolName(name))
            att.pools[name] = pool
        on_registered = getattr(backend, "on_host_pools_registered", None)
        if on_registered is not None:
            on_registered()
        return att

    def controller(self, att: Attached, path: str | None = None) -> Controller:
        """SGLang's storage controller over ``att`` on ``path`` (default: :meth:`primary_path`).
        Skips the test, with the reason, under an SGLang release whose controller the suite
        does not model (:mod:`hicache_conformance.release`)."""
        from .release import controller_model

        modelled, why = controller_model()
        if not modelled:
            pytest.skip(why)
        return Controller(att.backend, att.kv, path or self.primary_path())

    def store(
        self,
        att: Attached,
        keys: list[str],
        first_page: int,
        seeds: list[str] | None = None,
        path: str | None = None,
    ) -> list[bytes]:
        """Fill pages ``first_page..`` (data from ``seeds``, default the keys) and back
        them up the way SGLang does (batches of at most 128, stop at the first failed
        batch); fails, naming the call, unless every page was written. Returns the bytes."""
        seeds = keys if seeds is None else seeds
        data = [P.fill_page(att.kv, first_page + i, s) for i, s in enumerate(seeds)]
        ctl = self.controller(att, path)
        done = ctl.backup(keys, first_page)
        assert done == len(keys), (
            f"SGLang's backup ({ctl.path} path) wrote {done} of {len(keys)} pages: a write batch was not a "
            f"success (batch_set must return True, all(batch_set_v1) must be True). Backend calls:\n{ctl.story()}"
        )
        return data

    def expect_pages(
        self,
        att: Attached,
        keys: list[str],
        data: list[bytes],
        first_page: int,
        path: str | None = None,
        *,
        what: str = "pages written",
    ) -> None:
        """Read ``keys`` into pages ``first_page..`` the way SGLang prefetches and fail,
        saying what happened, unless every page is committed with exactly ``data``."""
        for i in range(len(keys)):
            P.zero_page(att.kv, first_page + i)
        ctl = self.controller(att, path)
        got_n = ctl.prefetch(keys, first_page)
        got = [P.page_bytes(att.kv, first_page + i) for i in range(got_n)]
        if got_n == len(keys) and got == data:
            return
        lines = [f"{what}: SGLang's prefetch ({ctl.path} path) committed {got_n} of {len(keys)}"]
        if got_n < len(keys):
            exists = att.backend.batch_exists(list(keys))
            lines[0] += f"; batch_exists reports {exists} of {len(keys)}"
            if got_n == 0 and exists == 0:
                lines.append(
                    f"the backend does not store the bytes it acknowledges: wrote {len(keys)} pages "
                    f"(every write reported success), read back 0"
                )
            else:
                lines.append(f"first page not committed: page {got_n} ({short_key(keys[got_n])})")
        if got_n and all(is_initial_fill(g) for g in got) and not any(is_initial_fill(d) for d in data):
            lines.append(
                f"the backend does not store the bytes it acknowledges: wrote {len(keys)} pages, the {got_n} "
                f"read back as hits hold only the destination's initial fill (nothing was copied in)"
            )
        diff = describe_pages(keys[:got_n], data[:got_n], got)
        if diff:
            lines.append("committed pages whose bytes are wrong:\n" + diff)
        lines.append(f"backend calls:\n{ctl.story()}")
        pytest.fail("\n".join(lines), pytrace=False)

    def write(
        self,
        att: Attached,
        keys: list[str],
        first_page: int,
        seeds: list[str] | None = None,
        path: str | None = None,
    ) -> tuple[list[bool], list[bytes]]:
        """Fill pages ``first_page..`` with data from ``seeds`` (default: the keys) and
        store them under ``keys`` in one call on ``path`` (default :meth:`primary_path`):
        per-key results of ``batch_set_v1``, or ``batch_set``'s one bool for every key. A
        ``batch_set_v1`` that answers per object (K and V of a page apart, as HF3FS does)
        rather than per page counts as SGLang counts it, ``all()`` of the list, for every
        key; under ``strict`` it fails (one result per page)."""
        seeds = keys if seeds is None else seeds
        data = [P.fill_page(att.kv, first_page + i, s) for i, s in enumerate(seeds)]
        if (path or self.primary_path()) == "v1":
            ok = list(att.backend.batch_set_v1(keys, P.host_indices(att.kv, first_page, len(keys))))
            if len(ok) != len(keys):
                assert self.active_profile() != "strict", (
                    f"batch_set_v1 of {len(keys)} pages returned {len(ok)} results (strict rule: one "
                    "result per page; SGLang itself uses all() of the list, _page_set_zero_copy)"
                )
                ok = [all(ok)] * len(keys)
            return ok, data
        values = [
            att.kv.get_data_page((first_page + i) * att.kv.page_size, flat=True) for i in range(len(keys))
        ]
        all_ok = att.backend.batch_set(keys, values)
        return [bool(all_ok)] * len(keys), data

    def read(
        self, att: Attached, keys: list[str], first_page: int, path: str | None = None
    ) -> list[bytes | None]:
        """Read ``keys`` into pages ``first_page..`` (sentinel-filled first) in one call on
        ``path``; the bytes of each hit, ``None`` for each miss (per key, as reported)."""
        for i in range(len(keys)):
            P.zero_page(att.kv, first_page + i)
        if (path or self.primary_path()) == "v1":
            ok = att.backend.batch_get_v1(keys, P.host_indices(att.kv, first_page, len(keys)))
            assert isinstance(ok, list) and len(ok) == len(keys), (
                f"batch_get_v1 of {len(keys)} keys returned {ok!r}"
            )
            return [P.page_bytes(att.kv, first_page + i) if hit else None for i, hit in enumerate(ok)]
        targets = [att.kv.get_dummy_flat_data_page() for _ in keys]
        got = att.backend.batch_get(keys, targets)
        assert isinstance(got, list) and len(got) == len(keys), (
            f"batch_get of {len(keys)} keys returned {got!r}"
        )
        out: list[bytes | None] = []
        for t in got:
            out.append(None if t is None else P._as_bytes(t))
        return out

    @staticmethod
    def keys(namespace: str, label: str, n: int) -> list[str]:
        return [P.page_key(namespace, f"{label}-{i}") for i in range(n)]


def _one_per_kind(cases: Sequence[PoolCase]) -> list[PoolCase]:
    """The first case of each attention kind."""
    seen: dict[str, PoolCase] = {}
    for c in cases:
        seen.setdefault(c.kind, c)
    return list(seen.values())
