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

_LEVEL_ATTR = "_hicache_level"
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
