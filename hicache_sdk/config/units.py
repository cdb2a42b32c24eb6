"""Human sizes and durations, parsed once for every config field.

Sizes (:func:`parse_size`), for fields declared with ``setting(unit="bytes")``:

================================  =========================  ==========================
form                              meaning                    convention of
================================  =========================  ==========================
``1048576``, ``"1048576"``        bytes                      everyone
``"25.6k"``, ``"200M"``, ``"4G"``  SI: k=10^3, M=10^6, G=10^9,  SGLang ``human_readable_int``
                                  T=10^12 (case-sensitive)   (``max_size``, file backend)
``"64Ki"``, ``"64KiB"``, ``"4Gi"``  IEC: powers of 2^10          SGLang, IEC
``"4gb"``, ``"512MB"``, ``"1 kb"``  powers of 2^10 (any case)   SGLang's Mooncake settings
                                                             (``"4gb"`` = 4 * 2^30)
================================  =========================  ==========================

Durations (:func:`parse_duration`), for ``setting(unit="seconds")``: a number of seconds, or
a number with ``us``, ``ms``, ``s``, ``m`` or ``h``.

Both refuse NaN, infinities, negatives and anything else with a :class:`ConfigError`
naming the key; the error never echoes a long string (it could be a pasted secret).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from ..errors import ConfigError

__all__ = ["parse_duration", "parse_size", "describe_value", "format_size", "format_number"]

_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)")
_SI = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40}
_B2 = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}
_DUR = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DUR_RE = re.compile(r"(-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*(us|ms|s|m|h)?")


def describe_value(value: object) -> str:
    """How an error shows a value: numbers and booleans as they are, strings only by
    length (a secret pasted into the wrong key must not be printed)."""
    if isinstance(value, (bool, int, float)) or value is None:
        return repr(value)
    if isinstance(value, str):
        return f"a string of {len(value)} characters"
    return f"a {type(value).__name__}"


def format_size(nbytes: float) -> str:
    """A byte count as people write it: ``8 MiB`` when a whole number of an IEC unit (the
    largest that divides it), else ``N bytes`` (``1536 bytes``, never a rounded figure)."""
    n = int(nbytes)
    if n != nbytes:
        return f"{nbytes:g} bytes"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} byte" if n == 1 else f"{n} bytes"


def format_number(value: float, unit: str | None = None) -> str:
    """A limit or value in an error message: sizes with :func:`format_size`, durations in
    seconds (``3600 s``), whole numbers in full (``1000000``, never ``1e+06``)."""
    if unit == "bytes":
        return format_size(value)
    text = str(int(value)) if float(value).is_integer() and abs(value) < 1e18 else f"{value:g}"
    return f"{text} s" if unit == "seconds" else text


def _multiplier(suffix: str) -> int | None:
    if suffix in _SI:
        return _SI[suffix]
    low = suffix.lower()
    if low.endswith("ib") and low[:-1] in _IEC:
        return _IEC[low[:-1]]
    if low in _IEC and suffix[0].isupper():
        return _IEC[low]
    return _B2.get(low)


def parse_size(value: object, key: str) -> int:
    """A byte count from an int or a human size string (see the module table)."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a size in bytes, got {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise ConfigError(f"{key}: expected a whole number of bytes, got {value!r}")
        n = int(value)
    elif isinstance(value, str):
        s = value.strip()
        if not s:
            return 0
        m = _SIZE_RE.fullmatch(s)
        mult = _multiplier(m.group(2)) if m and m.group(2) else (1 if m else None)
        if m is None or mult is None:
            raise ConfigError(
                f"{key}: invalid size ({describe_value(value)}); use bytes, SI 200M/4G, IEC 64Ki/4GiB "
                "or 4gb (= 4 * 2^30)"
            )
        number = m.group(1)
        if "." in number and mult in _IEC.values():
            raise ConfigError(f"{key}: decimals are not allowed with a binary suffix: {s!r}")
        try:
            n = int(Decimal(number) * mult)
        except InvalidOperation as e:  # pragma: no cover - the regex guarantees digits
            raise ConfigError(f"{key}: invalid size {s!r}") from e
    else:
        raise ConfigError(f"{key}: expected a size in bytes, got {describe_value(value)}")
    if n < 0:
        raise ConfigError(f"{key}: must be >= 0 bytes, got {n}")
    return n


def parse_duration(value: object, key: str) -> float:
    """Seconds from a number or a string such as ``"250ms"`` / ``"2s"`` / ``"1.5"``."""
    if isinstance(value, bool):
        raise ConfigError(f"{key}: expected a duration in seconds, got {value!r}")
    if isinstance(value, (int, float)):
        secs = float(value)
    elif isinstance(value, str):
        m = _DUR_RE.fullmatch(value.strip())
        if m is None:
            raise ConfigError(
                f"{key}: invalid duration ({describe_value(value)}); use seconds or 500ms / 2s / 1m"
            )
        secs = float(m.group(1)) * _DUR[m.group(2) or "s"]
    else:
        raise ConfigError(f"{key}: expected a duration in seconds, got {describe_value(value)}")
    if not math.isfinite(secs):
        raise ConfigError(f"{key}: must be a finite number of seconds, got {value!r}")
    return secs
