"""Error and hint texts of the registry: they are product surface (fsspec style), so they
live in one place and name exactly what to run."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from ..errors import BackendUnavailableError, DuplicateBackendError

__all__ = ["describe_not_found", "duplicate", "install_command", "normalize_dist", "unavailable", "viability"]


def normalize_dist(dist: str) -> str:
    """A distribution name normalized as packaging does (PEP 503)."""
    return re.sub(r"[-_.]+", "-", dist).lower()


def install_command(distribution: str) -> str:
    """The exact command that installs ``distribution``."""
    return f"pip install {distribution}"


def requirement_for(module: str, requires: tuple[str, ...]) -> str | None:
    """The requirement (of a distribution's ``Requires-Dist``) whose project name matches
    the missing top-level module, e.g. ``redis>=5`` for ``redis``; ``None`` if none."""
    top = normalize_dist(module.split(".")[0])
    for req in requires:
        spec = req.split(";")[0].strip()
        project = re.split(r"[\s\[<>=!~(]", spec, maxsplit=1)[0]
        if project and normalize_dist(project) == top:
            return spec.replace(" ", "")
    return None


def unavailable(
    name: str,
    value: str,
    dist: str | None,
    version: str | None,
    requires: tuple[str, ...],
    missing: str,
    exc: BaseException,
) -> BackendUnavailableError:
    """A :class:`BackendUnavailableError` naming backend, distribution, missing module and
    the install command."""
    where = f"{dist} {version}" if dist else f"{value!r}"
    own_module = value.partition(":")[0]
    if missing and (own_module == missing or own_module.startswith(missing + ".")):
        fix = (
            f"entry point {name!r} = {value!r} in {dist}'s metadata (group hicache_sdk.backends) "
            f"points at module {missing!r}, which does not exist: a typo in the entry point, "
            f"or a stale install of {dist}"
            if dist
            else f"module {missing!r} does not exist"
        )
    elif missing:
        req = requirement_for(missing, requires)
        if dist:
            fix = f"missing module {missing!r}; install it with: {install_command(dist)}"
            if req:
                fix += f" (or: pip install '{req}')"
        else:
            fix = f"missing module {missing!r}; install the package that provides it"
    else:
        fix = f"{type(exc).__name__}: {exc}"
        if dist and isinstance(exc, AttributeError):
            attr = value.partition(":")[2] or value
            fix = (
                f"entry point {name!r} = {value!r} in {dist}'s metadata (group hicache_sdk.backends) "
                f"points at attribute {attr!r}, which its module does not define ({exc})"
            )
    err = BackendUnavailableError(f"backend {name!r} ({where}) cannot be imported: {fix}")
    err.name = missing or None
    return err


def duplicate(name: str, claims: list[tuple[str, str, str]]) -> DuplicateBackendError:
    """A :class:`DuplicateBackendError` naming every distribution that claims ``name``."""
    who = "; ".join(f"{d} {v} ({val})" for d, v, val in claims)
    first = claims[0][0]
    return DuplicateBackendError(
        f"backend {name!r} is provided by {len(claims)} distributions: {who}. "
        f"Uninstall one, or pick one: resolve_backend({name!r}, dist={first!r})"
    )


def describe_not_found(
    name: str,
    available: list[str],
    hidden: list[str],
    not_installed: Mapping[str, str],
    allow_env: tuple[str, str],
) -> str:
    """The message of ``BackendNotFoundError``: what exists and how to get the rest.

    ``allow_env`` is (variable name, raw value) of the allow-list."""
    parts: list[str] = []
    if name in not_installed:
        parts.append(f"backend {name!r} is not installed: {install_command(not_installed[name])}.")
    elif name in hidden:
        parts.append(
            f"backend {name!r} is installed but hidden by {allow_env[0]}={allow_env[1]!r}; add it to the list."
        )
    else:
        parts.append(f"no HiCache storage backend named {name!r}.")
        close = difflib.get_close_matches(name, [*available, *not_installed], n=1)
        if close:
            parts.append(f"Did you mean {close[0]!r}?")
    parts.append(f"Available: {', '.join(available) if available else '(none)'}.")
    others = {n: d for n, d in not_installed.items() if n != name}
    if others:
        hints = ", ".join(f"{n} ({install_command(d)})" for n, d in sorted(others.items()))
        parts.append(f"Known but not installed: {hints}.")
    if hidden and name not in hidden:
        parts.append(f"Hidden by {allow_env[0]}: {', '.join(hidden)}.")
    parts.append("A backend can also be named by its import path, 'package.module:Class'.")
    return " ".join(parts)


def viability(cls: type[Any]) -> str | None:
    """The optional keyring-style probe: ``cls.check_environment()`` returns why the
    backend cannot work here (``"protocol=rdma but no RDMA device"``) or ``None``."""
    probe = getattr(cls, "check_environment", None)
    if not callable(probe):
        return None
    try:
        reason = probe()
    except Exception as e:
        return f"check_environment() raised {type(e).__name__}: {e}"
    return f"not viable here: {reason}" if reason else None
