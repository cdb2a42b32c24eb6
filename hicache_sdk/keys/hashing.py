"""SGLang-compatible page hashing (byte-compatible with SGLang 0.5.23).

A page key is the lowercase hex SHA-256 of ``prior_digest (32 raw bytes, when there is a
prior) || payload``, chained page to page. The payload of a page is every token as a
4-byte unsigned little-endian word; a page holding any token above ``2**32 - 1`` is
instead hashed as one ``0xff`` tag byte followed by every word as 8-byte unsigned
little-endian (the odd length keeps the two encodings apart).

Token units, as SGLang's ``_native_hash_input`` defines them:

* plain ints (a list, ``array``, numpy array, or anything indexable): one word each;
* tuples (all of one width ``w``): the ``w`` elements of each, flattened;
* EAGLE bigram keys (an object with ``is_bigram`` true): unit ``i`` is the pair
  ``(t[i], t[i+1])``, so ``len(key) + 1`` raw tokens are needed. A page's wide check
  covers its raw tokens including the one boundary token after it.

Edge cases: an empty input hashes to ``sha256(prior)`` (or of nothing) with
``page_size=None`` and to ``[]`` with a page size; a trailing partial page is hashed
(callers align spans first, see :mod:`.alignment`). Tokens that are negative or
``>= 2**63`` raise ``ValueError`` naming their position (SGLang raises a native
out-of-range error). Mixed tuple widths, tuples in bigram keys, and a bigram buffer
shorter than ``len(key) + 1`` raise ``ValueError``.

numpy is used to pack all tokens once; torch is never imported.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Any, Optional, Sequence, Union

import numpy as np

__all__ = [
    "get_hash_str",
    "get_storage_hash_str",
    "storage_namespace_seed",
    "hash_str_to_int64",
]

_U32_MAX = 0xFFFFFFFF
_I64_MAX = 0x7FFFFFFFFFFFFFFF
_WIDE_TAG = b"\xff"
_NAMESPACE_MAGIC = b"sglang-cache-namespace-v1"


def _check_page_size(page_size: Optional[int]) -> Optional[int]:
    if page_size is None:
        return None
    if isinstance(page_size, bool) or not isinstance(page_size, (int, np.integer)):
        raise ValueError(f"page_size must be a positive int or None, got {page_size!r}")
    if page_size < 1:
        raise ValueError(f"page_size must be positive, got {page_size}")
    return int(page_size)


def _prior_digest(prior_hash: Optional[str]) -> bytes:
    """Raw bytes of a prior hex hash; ``None`` or ``""`` means no prior (as in SGLang)."""
    if not prior_hash:
        return b""
    try:
        raw = bytes.fromhex(prior_hash)
    except (TypeError, ValueError):
        raise ValueError(f"prior_hash must be a 64-char hex string, got {prior_hash!r}") from None
    if len(raw) != 32:
        raise ValueError(f"prior_hash must be 64 hex chars (32 bytes), got {len(prior_hash)} chars")
    return raw


def _bad_token_error(values: Sequence[Any], width: int) -> ValueError:
    """Find the first out-of-range element (slow path, only on error)."""
    for pos, v in enumerate(values):
        iv = int(v)
        if iv < 0 or iv > _I64_MAX:
            where = f"token_ids[{pos}]" if width == 1 else f"token_ids[{pos // width}][{pos % width}]"
            return ValueError(f"{where} = {iv} is out of range: token ids must be in [0, 2**63)")
    return ValueError("token_ids contains a value outside [0, 2**63)")


def _to_words(values: Any, width: int) -> np.ndarray:
    """A 1-D uint64 array of the token words, validated to ``[0, 2**63)``."""
    if isinstance(values, np.ndarray):
        arr = values.reshape(-1)
        if arr.size and arr.dtype.kind not in "iu":
            raise ValueError(f"token_ids must hold integers, got dtype {arr.dtype}")
    elif isinstance(values, array) and values.typecode in "bBhHiIlLqQ":
        arr = np.frombuffer(values, dtype=values.typecode)
    else:
        try:
            # array('q') is the fastest exact conversion of a list of Python ints
            # (~4x np.asarray); it raises on floats, strings and ints >= 2**63.
            arr = np.frombuffer(array("q", values), dtype=np.int64)
        except (OverflowError, ValueError, TypeError):
            arr = np.empty(0, dtype=object)
        if arr.dtype.kind not in "iu" or arr.ndim != 1:
            # Mixed, huge, negative-and-huge or non-int input: validate element-wise.
            arr = np.empty(len(values), dtype=object)
            arr[:] = list(values)
    if arr.dtype == object:
        flat = list(arr)
        for pos, v in enumerate(flat):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"token_ids[{pos}] must be an int, got {type(v).__name__}")
            if not 0 <= int(v) <= _I64_MAX:
                raise _bad_token_error(flat, width)
        return np.array([int(v) for v in flat], dtype=np.uint64)
    arr = arr.reshape(-1)
    if arr.dtype.kind == "i":
        if arr.size and int(arr.min()) < 0:
            raise _bad_token_error(arr.tolist(), width)
        return arr.astype(np.uint64, copy=False)
    if arr.size and arr.dtype.itemsize == 8 and int(arr.max()) > _I64_MAX:
        raise _bad_token_error(arr.tolist(), width)
    return arr.astype(np.uint64, copy=False)


def _unpack_key(token_ids: Any) -> tuple[np.ndarray, int, int, bool]:
    """``(words, logical_len, unit_width, is_bigram)`` for any accepted input."""
    raw_fn = getattr(token_ids, "raw_token_ids", None)
    raw = raw_fn() if callable(raw_fn) else getattr(token_ids, "token_ids", token_ids)
    is_bigram = bool(getattr(token_ids, "is_bigram", False))
    try:
        logical_len = len(token_ids)
    except TypeError:
        logical_len = len(raw)
    if is_bigram:
        need = logical_len + 1 if logical_len > 0 else 0
        if len(raw) < need:
            raise ValueError(
                f"bigram token_ids holds {len(raw)} raw tokens; {need} are needed for {logical_len} bigrams"
            )
        head = raw[:need]
        if need and isinstance(head[0], tuple):
            raise ValueError("token_ids: tuple tokens are not supported in bigram keys")
        return _to_words(head, 1), logical_len, 2, True
    if logical_len == 0:
        return np.zeros(0, dtype=np.uint64), 0, 1, False
    first = raw[0]
    if isinstance(first, tuple):
        width = len(first)
        if width == 0:
            raise ValueError("token_ids[0] is an empty tuple")
        rows = raw[:logical_len]
        for pos, tok in enumerate(rows):
            if not isinstance(tok, tuple) or len(tok) != width:
                raise ValueError(f"token_ids[{pos}] must be a tuple of width {width}, got {tok!r}")
        return _to_words([e for tok in rows for e in tok], width), logical_len, width, False
    return _to_words(raw[:logical_len], 1), logical_len, 1, False


def _pair_words(words: np.ndarray, logical_len: int) -> np.ndarray:
    """Interleave ``(t[i], t[i+1])`` for every bigram unit."""
    out = np.empty(2 * logical_len, dtype=np.uint64)
    out[0::2] = words[:logical_len]
    out[1::2] = words[1 : logical_len + 1]
    return out


def _wide_pages(
    words: np.ndarray, logical_len: int, width: int, is_bigram: bool, page_size: int
) -> np.ndarray:
    """Per page: whether any raw token its wide check covers exceeds ``2**32 - 1``
    (bigram pages also cover the boundary token that follows them)."""
    starts = np.arange(0, logical_len, page_size)
    if not is_bigram:
        return np.asarray(np.maximum.reduceat(words[: logical_len * width], starts * width) > _U32_MAX)
    ends = np.minimum(starts + page_size, logical_len)
    page_max = np.maximum(np.maximum.reduceat(words[:logical_len], starts), words[ends])
    return np.asarray(page_max > _U32_MAX)


def _hash_chain(
    words: np.ndarray, logical_len: int, width: int, is_bigram: bool, prior: bytes, page_size: int
) -> list[str]:
    """Per-page hex digests. Unit ``u`` covers ``payload[u*width:(u+1)*width]``."""
    payload = _pair_words(words, logical_len) if is_bigram else words
    any_wide = bool(words.size) and int(words.max()) > _U32_MAX
    wide = _wide_pages(words, logical_len, width, is_bigram, page_size) if any_wide else None
    # astype wraps wide values; pages holding them use the u64 encoding instead.
    mv = memoryview(payload.astype("<u4").tobytes())
    out: list[str] = []
    sha256 = hashlib.sha256
    unit_bytes = 4 * width
    for page, start in enumerate(range(0, logical_len, page_size)):
        end = min(start + page_size, logical_len)
        h = sha256(prior)
        if wide is not None and wide[page]:
            h.update(_WIDE_TAG)
            h.update(payload[start * width : end * width].astype("<u8").tobytes())
        else:
            h.update(mv[start * unit_bytes : end * unit_bytes])
        prior = h.digest()
        out.append(prior.hex())
    return out


def get_hash_str(
    token_ids: Any,
    prior_hash: Optional[str] = None,
    page_size: Optional[int] = None,
) -> Union[str, list[str]]:
    """SGLang's ``get_hash_str``: one hex hash over all tokens (``page_size=None``) or the
    list of chained per-page hex hashes (the last page may be partial).

    ``token_ids``: ints, tuples of ints, or a RadixKey-like object (``token_ids``,
    ``raw_token_ids()``, ``is_bigram``, ``__len__``). ``prior_hash``: the hex hash the
    chain continues from (falsy = none). Raises ``ValueError`` for a bad page size,
    prior hash, or token (naming its position).
    """
    size = _check_page_size(page_size)
    prior = _prior_digest(prior_hash)
    words, logical_len, width, is_bigram = _unpack_key(token_ids)
    if size is None:
        if logical_len == 0:
            return hashlib.sha256(prior).hexdigest()
        return _hash_chain(words, logical_len, width, is_bigram, prior, logical_len)[0]
    return _hash_chain(words, logical_len, width, is_bigram, prior, size)


def storage_namespace_seed(extra_key: Optional[str], cache_salt: Optional[str]) -> Optional[str]:
    """The hex seed that starts a namespaced storage chain, or ``None`` when both parts
    are ``None`` (old keys are preserved). ``""`` is a present, empty part, distinct from
    ``None``. Each part is tagged with presence and its UTF-8 length, so no two
    different pairs collide by concatenation."""
    if extra_key is None and cache_salt is None:
        return None
    h = hashlib.sha256(_NAMESPACE_MAGIC)
    for name, part in (("extra_key", extra_key), ("cache_salt", cache_salt)):
        if part is None:
            h.update(b"\x00")
            continue
        if not isinstance(part, str):
            raise ValueError(f"{name} must be a str or None, got {type(part).__name__}")
        encoded = part.encode("utf-8")
        h.update(b"\x01" + len(encoded).to_bytes(8, "little") + encoded)
    return h.hexdigest()


def get_storage_hash_str(
    key: Any,
    prior_hash: Optional[str] = None,
    page_size: Optional[int] = None,
) -> Union[str, list[str]]:
    """SGLang's ``get_storage_hash_str``: like :func:`get_hash_str`, but a chain that
    starts at the root (``prior_hash is None``) is seeded with
    :func:`storage_namespace_seed` of the key's ``extra_key`` / ``cache_salt`` attributes
    (absent attributes count as ``None``, so a plain list hashes like ``get_hash_str``).
    An explicit ``prior_hash`` -- even ``""`` -- is used as given."""
    if prior_hash is None:
        prior_hash = storage_namespace_seed(getattr(key, "extra_key", None), getattr(key, "cache_salt", None))
    return get_hash_str(key, prior_hash, page_size=page_size)


def hash_str_to_int64(hash_str: str) -> int:
    """The first 16 hex chars of ``hash_str`` as a signed int64 (used for KV events,
    never for storage keys). Raises ``ValueError`` when they are not hex."""
    if not isinstance(hash_str, str) or len(hash_str) < 16:
        raise ValueError(f"hash_str must be a hex string of at least 16 chars, got {hash_str!r}")
    value = int(hash_str[:16], 16)
    return value - (1 << 64) if value >= (1 << 63) else value
