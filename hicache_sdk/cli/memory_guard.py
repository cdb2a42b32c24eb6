"""Refuse a command whose host memory would exceed what the machine has available, before
allocating anything (``hicache ping --pages``, ``hicache bench --batch``)."""

from __future__ import annotations

import os

__all__ = ["available_bytes", "check_fits", "human"]


def available_bytes() -> int | None:
    """The memory the kernel says can be allocated without swapping (``MemAvailable`` of
    ``/proc/meminfo``), else free physical pages; ``None`` when neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        return None


def human(n: float) -> str:
    """``3.3 TB``, ``22.1 GB``, ``512.0 MB`` (decimal units)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def check_fits(needed: int, what: str, available: int | None = None) -> str | None:
    """``None`` when ``needed`` bytes fit in the available memory (or it is unknown), else
    one line saying so, naming ``what`` asked for it (``"--pages 100000000"``)."""
    avail = available_bytes() if available is None else available
    if avail is None or needed <= avail:
        return None
    return f"{what} needs {human(needed)} of host memory; {human(avail)} is available"
