"""Entry-point discovery: enumerate group ``hicache_sdk.backends`` once, cache it, load
nothing; filter by the ``HICACHE_SDK_BACKENDS`` allow-list on every call."""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import threading
from dataclasses import dataclass

from ._messages import normalize_dist

__all__ = ["ALLOW_LIST_ENV", "ENTRY_POINT_GROUP", "Candidate", "discover", "refresh", "visible"]

#: The entry-point group backends register under.
ENTRY_POINT_GROUP = "hicache_sdk.backends"
#: Environment variable holding the comma-separated allow-list of entry-point names.
ALLOW_LIST_ENV = "HICACHE_SDK_BACKENDS"


@dataclass(frozen=True)
class Candidate:
    """One entry point of one distribution (not loaded)."""

    name: str
    value: str
    distribution: str
    version: str
    requires: tuple[str, ...]
    entry_point: md.EntryPoint


_lock = threading.Lock()
_entry_points: dict[str, list[Candidate]] | None = None


def refresh() -> None:
    """Forget the cached entry points (they are re-enumerated on next use)."""
    global _entry_points
    with _lock:
        _entry_points = None
    importlib.invalidate_caches()


def discover() -> dict[str, list[Candidate]]:
    """All entry points of the group, per name, one candidate per distribution."""
    global _entry_points
    with _lock:
        if _entry_points is not None:
            return _entry_points
        found: dict[str, list[Candidate]] = {}
        seen_dists: set[str] = set()
        for dist in md.distributions():
            try:
                dist_name = dist.metadata["Name"] or ""
                entry_points = list(dist.entry_points)
            except Exception:  # unreadable metadata must not hide every other backend
                continue
            norm = normalize_dist(dist_name)
            if not dist_name or norm in seen_dists:
                continue  # the same distribution again, further down sys.path
            seen_dists.add(norm)
            for ep in entry_points:
                if ep.group != ENTRY_POINT_GROUP:
                    continue
                found.setdefault(ep.name, []).append(
                    Candidate(ep.name, ep.value, dist_name, dist.version, tuple(dist.requires or ()), ep)
                )
        _entry_points = found
        return found


def _allow_list() -> frozenset[str] | None:
    raw = os.environ.get(ALLOW_LIST_ENV, "")
    names = frozenset(n.strip() for n in raw.split(",") if n.strip())
    return names or None


def visible() -> tuple[dict[str, list[Candidate]], dict[str, list[Candidate]]]:
    """(visible, hidden-by-allow-list) entry points."""
    allowed = _allow_list()
    everything = discover()
    if allowed is None:
        return everything, {}
    shown = {n: c for n, c in everything.items() if n in allowed}
    hidden = {n: c for n, c in everything.items() if n not in allowed}
    return shown, hidden
