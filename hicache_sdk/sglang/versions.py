"""Which SGLang contract profile applies here: the installed release's, else the newest.

Every version-specific fact the SDK depends on lives in one
:class:`~hicache_sdk.sglang.contract_profile.ContractProfile` per SGLang release line,
generated from that release's wheel into :mod:`hicache_sdk.sglang.profiles` by
``scripts/gen_sglang_profiles.py`` (the supported range is ``0.5.3`` to ``0.5.23``).
Following SGLang's next release means generating its profile, not hunting for literals.

The library reads its SGLang literals from :data:`CURRENT` (the batch size, the loader's
keys, the read path's defaults, the failure-injector variables, ``HiCacheFile``'s directory
rules, the metrics class's module, the draft-page key suffix, whether SGLang calls
``on_host_pools_registered``). ``CURRENT`` is the profile of the installed SGLang's release
line, found with :mod:`importlib.metadata` (importing this module never imports SGLang), or
the newest profile when SGLang is not installed.

An installed SGLang outside the range also gets the newest profile, and
:data:`UNSUPPORTED` holds the one message that says so (the bridge raises it, as
:class:`UnsupportedSGLangError`, when SGLang loads it; as :class:`UnsupportedSGLangExit`
while SGLang's scheduler starts, so that the operator sees that one line, no traceback).
"""

from __future__ import annotations

import re
from importlib import metadata
from typing import Optional

from ..errors import HiCacheError
from .contract_profile import ContractProfile
from .profiles import PROFILES

__all__ = [
    "ContractProfile",
    "CURRENT",
    "NEWEST",
    "OLDEST",
    "PROFILES",
    "SGLANG_0_5_23",
    "SUPPORTED_RANGE",
    "UNSUPPORTED",
    "UnsupportedSGLangError",
    "UnsupportedSGLangExit",
    "installed_sglang_version",
    "profile_for",
    "release_line",
]

#: The oldest and newest releases with a profile.
OLDEST: ContractProfile = PROFILES[0]
NEWEST: ContractProfile = PROFILES[-1]
SGLANG_0_5_23: ContractProfile = next(p for p in PROFILES if p.sglang_version == "0.5.23")
SUPPORTED_RANGE = f"{OLDEST.sglang_version} to {NEWEST.sglang_version}"

_BY_LINE = {p.sglang_version: p for p in PROFILES}
_LINE = re.compile(r"(\d+)\.(\d+)\.(\d+)")


class UnsupportedSGLangError(HiCacheError, RuntimeError):
    """The installed SGLang is outside the releases hicache-sdk has a contract profile for."""


class UnsupportedSGLangExit(SystemExit):
    """The same refusal, raised by the bridge while SGLang's scheduler is starting up.

    SGLang's factory and scheduler catch every ``Exception`` around the backend's
    construction and log it with a traceback (the scheduler's "Scheduler hit an exception:
    Traceback ..."), which buries the one line that matters. A ``SystemExit`` passes both:
    the scheduler process ends with exit code 1 and prints only the message. (On a runtime
    attach request the bridge raises :class:`UnsupportedSGLangError`, which SGLang returns
    as the request's message, and the server keeps running.)"""


def release_line(version: str) -> str:
    """``"0.5.9.post1"`` -> ``"0.5.9"``; ``ValueError`` naming ``version`` when it does not
    start with three numbers."""
    m = _LINE.match(version)
    if m is None:
        raise ValueError(f"not an SGLang version: {version!r} (expected X.Y.Z, e.g. 0.5.9 or 0.5.3.post3)")
    return ".".join(str(int(g)) for g in m.groups())


def installed_sglang_version() -> Optional[str]:
    """The installed SGLang distribution's version, or ``None`` (never imports SGLang)."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def _unsupported_message(version: str) -> str:
    return (
        f"SGLang {version} is installed, but hicache-sdk supports SGLang {SUPPORTED_RANGE} "
        f"(one contract profile per release line: {', '.join(_BY_LINE)}); install a release in that range"
    )


def profile_for(version: str) -> ContractProfile:
    """The profile of ``version``'s release line (``0.5.9.post1`` -> ``0.5.9``). Raises
    :class:`UnsupportedSGLangError` naming the version and the range for a release outside
    it, ``ValueError`` for a string that is no version."""
    profile = _BY_LINE.get(release_line(version))
    if profile is None:
        raise UnsupportedSGLangError(_unsupported_message(version))
    return profile


def _current() -> tuple[ContractProfile, Optional[str]]:
    version = installed_sglang_version()
    if version is None:
        return NEWEST, None
    try:
        return profile_for(version), None
    except (UnsupportedSGLangError, ValueError):
        return NEWEST, _unsupported_message(version)


#: The profile the SDK follows: the installed SGLang's release line, else the newest.
#: ``UNSUPPORTED``: the message for an installed SGLang outside the range, else ``None``.
CURRENT, UNSUPPORTED = _current()
