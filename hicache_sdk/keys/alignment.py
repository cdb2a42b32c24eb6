"""Page alignment of token spans, and ``prefix_keys`` handling.

HiCache only hashes page-aligned spans: prefetch and tree keys are truncated to a
whole number of pages before hashing. These helpers do that truncation, validate their
arguments (``ValueError`` naming the argument), and never mutate their inputs.
"""

from __future__ import annotations

import operator
from typing import Optional, Sequence, TypeVar

__all__ = ["page_align", "aligned_span", "num_pages", "chain_keys"]

T = TypeVar("T")


def _as_int(value: object, name: str, *, minimum: int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got bool")
    try:
        iv = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise ValueError(f"{name} must be an int, got {type(value).__name__}") from None
    if iv < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {iv}")
    return int(iv)


def page_align(n_tokens: int, page_size: int) -> int:
    """``n_tokens`` rounded down to a whole number of pages (``0`` when fewer than one
    page). Raises ``ValueError`` for a negative/non-int ``n_tokens`` or a ``page_size``
    that is not an int ``>= 1``."""
    n = _as_int(n_tokens, "n_tokens", minimum=0)
    size = _as_int(page_size, "page_size", minimum=1)
    return n - n % size


def num_pages(n_tokens: int, page_size: int) -> int:
    """The number of whole pages in ``n_tokens`` tokens (a partial tail is dropped)."""
    return page_align(n_tokens, page_size) // _as_int(page_size, "page_size", minimum=1)


def aligned_span(tokens: Sequence[T], page_size: int, start: int = 0) -> Sequence[T]:
    """``tokens[start:end]`` where ``end`` drops the partial trailing page, counted from
    ``start`` (the span's first token must itself sit on a page boundary of the
    caller's sequence; that is the caller's business). Returns a slice (a new object
    for lists/tuples/arrays; ``tokens`` is not modified). ``start`` beyond the end gives
    an empty span. Raises ``ValueError`` for a bad ``page_size`` or ``start``."""
    size = _as_int(page_size, "page_size", minimum=1)
    begin = _as_int(start, "start", minimum=0)
    avail = max(0, len(tokens) - begin)
    return tokens[begin : begin + avail - avail % size]


def chain_keys(prefix_keys: Optional[Sequence[str]], keys: Sequence[str]) -> list[str]:
    """``prefix_keys + keys`` as a NEW list (the whole hash chain from the root).

    Neither argument is mutated, and the result never aliases either (SGLang <= 0.5.10
    extended ``prefix_keys`` in place). ``None`` means no prefix. The legacy default
    ``(None,)`` of SGLang 0.5.5-0.5.10 is treated as no prefix too. Any other ``None``
    or non-str entry raises ``ValueError`` naming the argument.
    """
    if prefix_keys is None or (len(prefix_keys) == 1 and prefix_keys[0] is None):
        prefix: list[str] = []
    else:
        prefix = list(prefix_keys)
    for name, seq in (("prefix_keys", prefix), ("keys", keys)):
        for i, k in enumerate(seq):
            if not isinstance(k, str):
                raise ValueError(f"{name}[{i}] must be a str, got {type(k).__name__}")
    return [*prefix, *keys]
