"""Helpers for the file backend tests: buffers as (address, nbytes) segments."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def addr(a: np.ndarray) -> int:
    return int(a.ctypes.data)


def segs(a: np.ndarray, parts: int = 1) -> list[tuple[int, int]]:
    """Split a contiguous uint8 array into ``parts`` consecutive segments."""
    n = a.nbytes
    cuts = [n * p // parts for p in range(parts + 1)]
    return [(addr(a) + cuts[p], cuts[p + 1] - cuts[p]) for p in range(parts)]


def pattern(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def listing(root: Path) -> list[str]:
    """Every file under root (relative), hidden ones included."""
    out = []
    for dp, _dn, fn in os.walk(root):
        for f in fn:
            out.append(os.path.relpath(os.path.join(dp, f), root))
    return sorted(out)
