"""Capability and level tags on suite tests, and the gate that turns them into outcomes.

A suite test says what it needs, never which backend it is for::

    @level(1)
    @requires("zero_copy")
    def test_v1_round_trip(self, ...): ...

At setup the gate compares the needs with the backend's *declared*
:class:`~hicache_sdk.capabilities.Capabilities`:

* an undeclared capability skips the test, with the reason
  ``"backend does not declare <cap>"``;
* a declared capability runs the test, and a failure is a failure;
* a waiver (test name -> reason) turns the test into a *strict* xfail, so a waiver
  that is no longer needed fails the run and gets noticed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from hicache_sdk.capabilities import Capabilities

__all__ = [
    "LEVELS",
    "level",
    "requires",
    "test_level",
    "test_requires",
    "missing_capabilities",
    "parse_levels",
    "validate_waivers",
    "PROFILES",
    "strict_only",
    "strict_reason",
    "declares_capabilities",
    "infer_capabilities",
    "written_against_sglang",
    "mla_not_certified",
    "default_profile",
    "parse_capabilities",
    "apply_capability_overrides",
]

F = TypeVar("F", bound=Callable[..., Any])

#: Level number -> short name used in reports and ``--level``.
LEVELS: dict[int, str] = {
    0: "L0-shape",
    1: "L1-semantics",
    2: "L2-lifecycle",
    3: "L3-concurrency",
    4: "L4-faults",
    5: "stateful",
}

#: ``contract``: what SGLang 0.5.23 requires of a backend and relies on; ``strict``: the
#: contract plus the SDK's own promises (the default for backends built on ``PagedStorage``).
PROFILES: tuple[str, ...] = ("contract", "strict")

_LEVEL_ATTR = "_hicache_level"
_STRICT_ATTR = "_hicache_strict_reason"
_REQUIRES_ATTR = "_hicache_requires"


def level(n: int) -> Callable[[F], F]:
    """Tag a suite test with its level (0..5, see :data:`LEVELS`)."""
    if n not in LEVELS:
        raise ValueError(f"level must be one of {sorted(LEVELS)}, got {n!r}")

    def deco(fn: F) -> F:
        setattr(fn, _LEVEL_ATTR, n)
        return fn

    return deco


def requires(*caps: str) -> Callable[[F], F]:
    """Tag a suite test with the capabilities it needs (names of ``Capabilities`` fields).

    Raises ``ValueError`` for an unknown capability name (a typo would otherwise make a
    test silently run for everyone)."""
    known = set(Capabilities.names())
    for c in caps:
        if c not in known:
            raise ValueError(f"requires: unknown capability {c!r}; known: {sorted(known)}")

    def deco(fn: F) -> F:
        prev: tuple[str, ...] = getattr(fn, _REQUIRES_ATTR, ())
        setattr(fn, _REQUIRES_ATTR, prev + tuple(caps))
        return fn

    return deco


def test_level(fn: Any) -> int | None:
    """The level a test function was tagged with, or ``None``."""
    fn = getattr(fn, "__func__", fn)
    value = getattr(fn, _LEVEL_ATTR, None)
    return value if isinstance(value, int) else None


def test_requires(fn: Any) -> tuple[str, ...]:
    """The capabilities a test function needs (``()`` when untagged)."""
    fn = getattr(fn, "__func__", fn)
    value = getattr(fn, _REQUIRES_ATTR, ())
    return tuple(value)


def strict_only(why: str) -> Callable[[F], F]:
    """Tag a suite test as a rule of the ``strict`` profile only (an SDK promise beyond
    SGLang's contract). ``why`` says why the rule matters; it is added to the failure
    message and to the skip reason under ``contract``. Raises ``ValueError`` when empty."""
    if not why.strip():
        raise ValueError("strict_only: a strict-only rule needs a reason (why it matters)")

    def deco(fn: F) -> F:
        setattr(fn, _STRICT_ATTR, why.strip())
        return fn

    return deco


def strict_reason(fn: Any) -> str | None:
    """Why a strict-only test's rule matters, or ``None`` for a contract test."""
    fn = getattr(fn, "__func__", fn)
    value = getattr(fn, _STRICT_ATTR, None)
    return value if isinstance(value, str) else None


def _contract_base(cls: type[Any]) -> type[Any] | None:
    """The last class of ``cls``'s MRO named ``HiCacheStorage`` (ours or SGLang's)."""
    bases = [c for c in cls.__mro__ if c.__name__ == "HiCacheStorage"]
    return bases[-1] if bases else None


def written_against_sglang(cls: type[Any]) -> bool:
    """Whether ``cls`` derives from SGLang's own ``HiCacheStorage`` (not the SDK's twin)."""
    base = _contract_base(cls)
    return base is not None and str(getattr(base, "__module__", "")).startswith("sglang.")


def mla_not_certified(
    declared: dict[str, bool], from_command_line: list[str] | tuple[str, ...]
) -> str | None:
    """Why MLA was not certified (no MLA host-pool case ran), or ``None`` when ``mla`` is on."""
    if declared.get("mla", True):
        return None
    if any(c in ("-mla", "no-mla") for c in from_command_line):
        return (
            "MLA was not certified: taken away with --capabilities -mla (SGLang still hands MLA "
            "models to every backend it loads)"
        )
    return "MLA was not certified: the backend does not declare mla (declare it with --capabilities mla)"


def declares_capabilities(cls: type[Any]) -> bool:
    """Whether a class below ``HiCacheStorage`` in ``cls``'s MRO sets ``capabilities``
    itself (a ``PagedStorage`` subclass always does, through the adapter)."""
    base = _contract_base(cls)
    for c in cls.__mro__:
        if c is base or c is object:
            break
        if isinstance(c.__dict__.get("capabilities"), Capabilities):
            return True
    return False


def _overrides(cls: type[Any], base: type[Any] | None, name: str) -> bool:
    impl = getattr(cls, name, None)
    if impl is None:
        return False
    return base is None or impl is not getattr(base, name, None)


def infer_capabilities(cls: type[Any]) -> tuple[Capabilities, tuple[str, ...]]:
    """The capabilities of a backend class and the names that were *inferred*.

    A declared ``Capabilities`` (see :func:`declares_capabilities`) is authoritative and
    nothing is inferred. Otherwise each capability is exactly what the class implements:
    ``zero_copy`` when both v1 methods are overridden, ``hybrid_pools`` when the three v2
    methods are, ``delete`` when ``clear`` is, ``mla`` for a class written against
    SGLang's own ``HiCacheStorage`` (SGLang hands it MLA models whatever it declares);
    every other capability (``persistent``, ...) is false, since it cannot be seen from
    the methods. The second item lists the inferred capabilities that came out true."""
    if declares_capabilities(cls):
        return cls.capabilities, ()
    base = _contract_base(cls)
    found = {
        "zero_copy": all(_overrides(cls, base, m) for m in ("batch_get_v1", "batch_set_v1")),
        "hybrid_pools": all(
            _overrides(cls, base, m) for m in ("batch_exists_v2", "batch_get_v2", "batch_set_v2")
        ),
        "delete": _overrides(cls, base, "clear"),
        # SGLang hands MLA models to every backend it loads: no class of its ABC opts out
        "mla": written_against_sglang(cls),
    }
    caps = Capabilities(**{n: found.get(n, False) for n in Capabilities.names()})
    return caps, tuple(n for n, v in found.items() if v)


def parse_capabilities(spec: str | list[str] | None) -> tuple[str, ...]:
    """``"mla,persistent"`` or ``["mla", "-delete"]`` -> ``("mla", "persistent", "-delete")``.
    A name declares the capability; ``-name`` or ``no-name`` takes it away. Raises
    ``ValueError`` naming ``capabilities`` and the known names for anything unknown."""
    if not spec:
        return ()
    items = [spec] if isinstance(spec, str) else list(spec)
    known = set(Capabilities.names())
    out: list[str] = []
    for item in items:
        for part in (p.strip() for p in item.split(",")):
            if not part:
                continue
            name = part[1:] if part.startswith("-") else part[3:] if part.startswith("no-") else part
            if name not in known:
                raise ValueError(
                    f"capabilities: unknown capability {name!r}; known: {', '.join(sorted(known))}"
                )
            out.append(part)
    return tuple(out)


def apply_capability_overrides(caps: Capabilities, overrides: tuple[str, ...] | list[str]) -> Capabilities:
    """``caps`` with each of ``overrides`` (see :func:`parse_capabilities`) applied in order."""
    if not overrides:
        return caps
    values = caps.to_dict()
    for part in parse_capabilities(list(overrides)):
        off = part.startswith(("-", "no-"))
        name = part[1:] if part.startswith("-") else part[3:] if part.startswith("no-") else part
        values[name] = not off
    return Capabilities(**values)


def default_profile(cls: type[Any]) -> str:
    """``strict`` for a backend built on ``PagedStorage``, ``contract`` for any other."""
    try:
        from hicache_sdk import PagedStorage
    except ImportError:  # pragma: no cover - the SDK always exports it
        return "contract"
    return "strict" if isinstance(cls, type) and issubclass(cls, PagedStorage) else "contract"


# Not tests, despite the name (pytest would otherwise try to collect them when imported
# into a test module).
test_level.__test__ = False  # type: ignore[attr-defined]
test_requires.__test__ = False  # type: ignore[attr-defined]


def missing_capabilities(declared: Capabilities, needed: tuple[str, ...]) -> list[str]:
    """The needed capabilities that ``declared`` does not set to true, in order."""
    return [c for c in needed if not getattr(declared, c, False)]


def parse_levels(spec: str | list[str] | None) -> set[int] | None:
    """Parse ``--level`` values: ``"L1"``, ``"1"``, ``"L0,L2"``, ``"semantics"``,
    ``"stateful"`` or ``"all"``. ``None`` / empty means every level. Raises
    ``ValueError`` naming ``level`` for anything unknown."""
    if not spec:
        return None
    parts: list[str] = []
    for item in [spec] if isinstance(spec, str) else spec:
        parts += [p.strip() for p in item.split(",") if p.strip()]
    out: set[int] = set()
    for p in parts:
        low = p.lower()
        if low == "all":
            return None
        found = None
        for n, name in LEVELS.items():
            if low in (str(n), f"l{n}", name.lower(), name.lower().split("-", 1)[-1]):
                found = n
        if found is None:
            raise ValueError(f"level: unknown level {p!r}; use one of {', '.join(LEVELS.values())} or all")
        out.add(found)
    return out


def validate_waivers(waivers: Mapping[str, str]) -> dict[str, str]:
    """Check a waiver mapping: each entry names a test (``test_...``) and gives a
    non-empty reason. Raises ``ValueError`` naming ``waivers`` otherwise."""
    out: dict[str, str] = {}
    for name, reason in waivers.items():
        if not isinstance(name, str) or not name.startswith("test_"):
            raise ValueError(f"waivers: key {name!r} must name a suite test (test_...)")
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"waivers: waiver of {name} needs a non-empty reason")
        out[name] = reason.strip()
    return out
