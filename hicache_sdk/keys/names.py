"""Validation and sanitising of the pieces that go into object names.

Two kinds of input reach an object name:

* **page hashes** come from callers and are *validated* (never rewritten): a rewritten
  hash would silently alias another page. The ``default`` scheme accepts only SGLang's
  64 lowercase hex chars; SGLang-compatible schemes accept any hash SGLang would name
  (tests use hashes like ``"k2"``) but reject anything that could escape or corrupt a
  name: empty, ``/``, ``\\``, ``..``, NUL and other control characters, or a leading
  ``/``.
* **pool, model and namespace names** are *sanitised*: every character outside
  ``[A-Za-z0-9._-]`` becomes ``-``, runs of dots become ``-`` and a leading dot becomes
  ``-``, so a component can never be ``.``/``..``, hidden, or contain a separator.

All errors are ``ValueError`` naming the argument.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Optional
from urllib.parse import quote

__all__ = [
    "all_hex64",
    "batch_names",
    "check_page_hash",
    "check_hex_page_hash",
    "exact_component",
    "sanitize_component",
    "sglang_model_name",
    "check_plain_fragment",
    "check_page_key",
]

_HEX64 = re.compile(r"[0-9a-f]{64}")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_DOTS = re.compile(r"\.{2,}")
_DOT_RUN = re.compile(r"^\.|(?<=\.)\.")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def all_hex64(hashes: Sequence[str]) -> bool:
    """Whether every entry is a ``str`` of exactly 64 lowercase hex chars, in a few C-level
    passes over the batch (no per-hash Python call). ``False`` means "check them one by one"
    (the slow path names the bad one); an empty batch is ``False``."""
    if not hashes:
        return False
    if set(map(type, hashes)) != {str} or set(map(len, hashes)) != {64}:
        return False
    joined = "".join(hashes)
    try:
        # fromhex skips whitespace and accepts A-F: the round trip through hex() (always
        # lowercase, no whitespace) is equal only for pure lowercase hex input.
        return bytes.fromhex(joined).hex() == joined
    except ValueError:
        return False


def batch_names(hashes: Sequence[str], prefix: str, suffix: str, fanout: int = 0) -> list[str]:
    """``[prefix + h + suffix for h in hashes]``, with ``h[:fanout] + "/"`` before ``h`` when
    ``fanout`` is set: the object names of a batch."""
    if fanout:
        return [f"{prefix}{h[:fanout]}/{h}{suffix}" for h in hashes]
    return [f"{prefix}{h}{suffix}" for h in hashes]


def check_hex_page_hash(page_hash: object, argument: str = "page_hash") -> str:
    """Return ``page_hash`` if it is exactly 64 lowercase hex chars, else ``ValueError``."""
    if not isinstance(page_hash, str) or _HEX64.fullmatch(page_hash) is None:
        raise ValueError(f"{argument} must be 64 lowercase hex chars, got {page_hash!r}")
    return page_hash


def check_page_key(page_hash: object, draft_suffix: str, argument: str = "page_hash") -> str:
    """Return ``page_hash`` if it is 64 lowercase hex chars, or (when ``draft_suffix`` is set:
    the SGLang release stores speculative-decoding draft pages, e.g. ``".draft"``) those
    64 chars followed by ``draft_suffix``; ``ValueError`` naming ``argument`` otherwise."""
    if draft_suffix and isinstance(page_hash, str) and page_hash.endswith(draft_suffix):
        stem = page_hash[: -len(draft_suffix)]
        if _HEX64.fullmatch(stem) is not None:
            return page_hash
        raise ValueError(
            f"{argument} must be 64 lowercase hex chars, optionally followed by {draft_suffix!r}, got {page_hash!r}"
        )
    return check_hex_page_hash(page_hash, argument)


def check_plain_fragment(value: object, argument: str) -> str:
    """Return ``value`` if it is a non-empty str that is safe inside any object name:
    no ``/`` or ``\\`` (so not absolute either), no ``..``, no NUL or control characters.
    Raises ``ValueError`` naming ``argument`` otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"{argument} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{argument} must not be empty")
    if "/" in value or "\\" in value:
        raise ValueError(f"{argument} must not contain path separators: {value!r}")
    if ".." in value:
        raise ValueError(f"{argument} must not contain '..': {value!r}")
    if _CONTROL.search(value):
        raise ValueError(f"{argument} must not contain control characters: {value!r}")
    return value


def check_page_hash(page_hash: object, *, hex_only: bool, argument: str = "page_hash") -> str:
    """Validate a page hash for a scheme: strict hex (``hex_only``) or plain-safe."""
    if hex_only:
        return check_hex_page_hash(page_hash, argument)
    return check_plain_fragment(page_hash, argument)


def exact_component(name: Optional[str]) -> str:
    """A safe single path component made from ``name`` that no other name maps to.

    ``[A-Za-z0-9_.~-]`` pass unchanged and every other character is percent-encoded (so
    ``/`` never appears); a leading ``.`` and a ``.`` after a ``.`` are encoded too (no
    ``..`` anywhere); the empty name (and ``None``) is ``_`` and the name ``_`` itself is
    ``%5F``. Every output but ``_`` percent-decodes to its input, so distinct names give
    distinct components and ``"{component}/"`` is a prefix that holds exactly one name's
    objects (the default scheme's ``clear()``)."""
    if name is None or name == "":
        return "_"
    if not isinstance(name, str):
        raise ValueError(f"name must be a str, got {type(name).__name__}")
    if name == "_":
        return "%5F"
    return _DOT_RUN.sub("%2E", quote(name, safe="-_.~"))


def sanitize_component(name: Optional[str], *, fallback: str = "_") -> str:
    """A safe single path component made from ``name`` (``fallback`` when empty/None).

    Idempotent; names made only of ``[A-Za-z0-9_-]`` and single inner dots pass unchanged
    (all SGLang pool names do). Distinct inputs can map to the same output, so callers
    that need uniqueness must also hash the raw name (the default scheme does)."""
    if name is None or name == "":
        return fallback
    if not isinstance(name, str):
        raise ValueError(f"name must be a str, got {type(name).__name__}")
    out = _DOTS.sub("-", _UNSAFE.sub("-", name))
    if out.startswith("."):
        out = "-" + out[1:]
    return out


def sglang_model_name(model_name: Optional[str]) -> str:
    """SGLang's storage model name: ``/`` replaced by ``-`` (``""`` for None/empty).

    Exactly SGLang's mapping for every real model name. Additionally ``\\`` and control
    characters (which no real served name has) become ``-``; ``..`` is kept for exact
    parity, which is safe because an SGLang-scheme name is one component with no
    separator and always has the page hash inside it, so it is never ``..`` itself."""
    if not model_name:
        return ""
    if not isinstance(model_name, str):
        raise ValueError(f"model_name must be a str, got {type(model_name).__name__}")
    return _CONTROL.sub("-", model_name.replace("/", "-").replace("\\", "-"))
