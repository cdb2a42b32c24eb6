"""Object names to relative file paths, with no way out of the root.

A name is one or more components separated by ``/`` (the fan-out of the default key
scheme; SGLang's names are a single component). Refused, with ``ValueError``:

* an empty name, an empty component (``a//b``, a leading or trailing ``/``, so no
  absolute path);
* a component starting with ``.`` (``.``, ``..``, and every hidden name: those are
  reserved for temporary and control files, so a page can never be mistaken for one);
* NUL or backslash anywhere;
* a component longer than 255 UTF-8 bytes or a name longer than 1024 bytes.

Symlinks are handled at open time (``O_NOFOLLOW``), not here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = [
    "MAX_NAME_BYTES",
    "TEMP_SUFFIX",
    "check_name",
    "check_names",
    "check_prefix",
    "is_page_name",
]

MAX_NAME_BYTES = 1024
MAX_COMPONENT_BYTES = 255
#: Temporary files end with this and start with ``.`` (as SGLang's ``.<uuid>.tmp``).
TEMP_SUFFIX = ".tmp"

_NAME_RE = re.compile(r"[^/\\\x00.][^/\\\x00]*(?:/[^/\\\x00.][^/\\\x00]*)*")


def is_page_name(name: str) -> bool:
    """``True`` when ``name`` is an acceptable object name (see the module docs)."""
    if not name or _NAME_RE.fullmatch(name) is None:
        return False
    if len(name) > MAX_COMPONENT_BYTES or not name.isascii():
        raw = name.encode("utf-8", "surrogatepass")
        if len(raw) > MAX_NAME_BYTES:
            return False
        return all(len(c) <= MAX_COMPONENT_BYTES for c in raw.split(b"/"))
    return True


def check_name(name: object, arg: str = "key") -> str:
    """Return ``name`` if acceptable, else raise ``ValueError`` naming ``arg``."""
    if not isinstance(name, str):
        raise ValueError(f"{arg}: object name must be a str, got {type(name).__name__}")
    if not is_page_name(name):
        raise ValueError(f"{arg}: unsafe or invalid object name {name!r}")
    return name


def _all_plain_names(names: Sequence[str]) -> bool:
    """``True`` only when every name surely passes :func:`is_page_name`, decided by a few
    C-level passes over the batch joined with ``/`` (so name boundaries look like
    component boundaries): ASCII, no NUL / backslash, no empty component (``//`` or a
    ``/`` at either end), no component starting with ``.``, every name at most 255
    chars (so every component and name is within the byte limits). ``False`` means
    "check one by one" -- it is not a verdict."""
    if not names or set(map(type, names)) != {str} or "" in names:
        return False
    if max(map(len, names)) > MAX_COMPONENT_BYTES:
        return False
    joined = "/".join(names)
    return (
        joined.isascii()
        and not joined.startswith(("/", "."))
        and not joined.endswith("/")
        and "//" not in joined
        and ("." not in joined or "/." not in joined)  # the 1-char search is ~80x faster
        and "\\" not in joined
        and "\x00" not in joined
    )


def check_names(names: Sequence[str], arg: str = "keys") -> None:
    """Validate every name before any I/O; the error names ``arg[i]``."""
    if _all_plain_names(names):
        return
    for i, n in enumerate(names):
        if not isinstance(n, str) or not is_page_name(n):
            check_name(n, f"{arg}[{i}]")


def check_prefix(prefix: object) -> str:
    """Validate a ``clear`` prefix: ``""`` (everything), or a name prefix that may end
    with ``/`` or in the middle of a component. Raises ``ValueError`` naming ``prefix``."""
    if not isinstance(prefix, str):
        raise ValueError(f"prefix must be a str, got {type(prefix).__name__}")
    if prefix == "":
        return prefix
    body = prefix[:-1] if prefix.endswith("/") else prefix
    if not is_page_name(body):
        raise ValueError(f"prefix: unsafe or invalid name prefix {prefix!r}")
    return prefix
