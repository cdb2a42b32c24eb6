"""Which SGLang release the suite certifies against, and whether it models that release.

The release is the installed SGLang's (``hicache check --sglang-version X.Y.Z`` must name
that same release line), or, without SGLang, the one ``--sglang-version`` names, else the
newest with a contract profile (:mod:`hicache_sdk.sglang.versions`).

The suite's model of SGLang's storage controller and host pools (:mod:`.sglang_path`,
:mod:`.sglang_pools`) is built for the releases in :data:`MODELLED`. Under any other
release, the contract tests that drive the controller skip with the reason ("controller
model for 0.5.9 not built"), and the host pools are the SDK's: a correct backend never
fails a test because the suite drives a controller the release does not have.
"""

from __future__ import annotations

from typing import Any

from hicache_sdk.sglang.versions import (
    NEWEST,
    SUPPORTED_RANGE,
    ContractProfile,
    UnsupportedSGLangError,
    installed_sglang_version,
    profile_for,
    release_line,
)

__all__ = ["MODELLED", "check_requested", "controller_model", "describe", "profile", "set_release"]

#: The release lines whose storage controller and host pools the suite models.
MODELLED = frozenset({"0.5.23"})

_state: dict[str, Any] = {"requested": None}


def check_requested(requested: str) -> str | None:
    """Why ``--sglang-version requested`` cannot be used here (one line), or ``None``: it
    must be a release with a profile and, when SGLang is installed, that same release line."""
    try:
        wanted = profile_for(requested)
    except UnsupportedSGLangError:
        return f"--sglang-version {requested}: no contract profile; hicache-sdk supports SGLang {SUPPORTED_RANGE}"
    except ValueError as e:
        return f"--sglang-version: {e}"
    installed = installed_sglang_version()
    if installed is not None and release_line(installed) != wanted.sglang_version:
        return (
            f"--sglang-version {requested} does not match the installed SGLang {installed}: "
            f"certify against the installed release, or install SGLang {requested}"
        )
    return None


def set_release(requested: str | None) -> None:
    """Certify against ``requested`` (already checked by :func:`check_requested`)."""
    _state["requested"] = requested


def profile() -> ContractProfile:
    """The contract profile of the release the suite certifies against."""
    requested = _state["requested"]
    if requested is not None:
        return profile_for(requested)
    installed = installed_sglang_version()
    if installed is None:
        return NEWEST
    try:
        return profile_for(installed)
    except (RuntimeError, ValueError):
        return NEWEST


def controller_model() -> tuple[bool, str]:
    """(whether the suite models this release's controller, why not / which one)."""
    line = profile().sglang_version
    if line in MODELLED:
        return True, f"controller model for {line}"
    return False, (
        f"controller model for {line} not built (the suite models SGLang {', '.join(sorted(MODELLED))}'s "
        "storage controller and host pools)"
    )


def describe() -> dict[str, Any]:
    """The report's view: the profile, the installed SGLang, whether SGLang's code ran (its
    controller and host pools run only under a release the suite models)."""
    installed = installed_sglang_version()
    ok, why = controller_model()
    return {
        "profile": profile().sglang_version,
        "installed": installed,
        "sglang_code_ran": installed is not None and ok,
        "controller_modelled": ok,
        "controller_model": why,
    }
