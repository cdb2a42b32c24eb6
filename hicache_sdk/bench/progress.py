"""A progress bar on stderr with no dependency: ``tqdm`` when it is installed, otherwise a
plain ``\\r``-redrawn line (``[#####.....]  12/40  30%  set 64KiB x8``).

``Progress(total, enabled=...)``: ``tick(n=1)`` advances, ``describe(text)`` sets the label,
``close()`` ends the line. With ``enabled=False`` every method is a no-op. ``prefer_tqdm=False``
forces the plain bar (tests). The plain bar redraws at most every 0.1 s, and always for the
final step, so a bar with thousands of ticks costs nothing measurable.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """See the module docs."""

    def __init__(
        self,
        total: int,
        *,
        enabled: bool = True,
        file: TextIO | None = None,
        prefer_tqdm: bool = True,
        width: int = 30,
    ) -> None:
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total!r}")
        self.total = total
        self.done = 0
        self.enabled = enabled
        self._file = file if file is not None else sys.stderr
        self._width = width
        self._label = ""
        self._last_draw = 0.0
        self._tqdm: Any = None
        if enabled and prefer_tqdm:
            try:
                from tqdm import tqdm  # optional: used only when already installed
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._tqdm = tqdm(total=total, file=self._file, leave=True, dynamic_ncols=True)

    def describe(self, text: str) -> None:
        self._label = text
        if not self.enabled:
            return
        if self._tqdm is not None:
            self._tqdm.set_description_str(text)
        else:
            self._draw(force=True)

    def tick(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        if not self.enabled:
            return
        if self._tqdm is not None:
            self._tqdm.update(n)
        else:
            self._draw(force=self.done >= self.total)

    def _draw(self, *, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        frac = self.done / self.total if self.total else 1.0
        filled = round(frac * self._width)
        bar = "#" * filled + "." * (self._width - filled)
        digits = len(str(self.total))
        self._file.write(
            f"\r[{bar}] {self.done:>{digits}}/{self.total} {frac * 100:3.0f}%  {self._label:<32.32}"
        )
        self._file.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self._tqdm is not None:
            self._tqdm.close()
            self._tqdm = None
            return
        self._draw(force=True)
        self._file.write("\n")
        self._file.flush()
        self.enabled = False
