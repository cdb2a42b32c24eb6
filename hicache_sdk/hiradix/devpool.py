"""The device (L1) KV pool: CUDA memory when a GPU is present, otherwise a CPU tensor
standing in for it, through the same code.

The buffer has the host MHA ``page_first`` shape ``(2, size, layers, heads, head_dim)``, so
a load-back is one gather on the host side, one host-to-device copy, and one scatter on the
device: never one ``copy_`` per page. Slots are handed out in whole pages. ``fail_copies``
makes the next N host-to-device copies raise (tests).
"""

from __future__ import annotations

import threading

import torch


class CopyFailed(RuntimeError):
    """A host-to-device copy failed (real or injected)."""


class DevicePool:
    def __init__(
        self,
        size: int,
        page_size: int,
        layer_num: int,
        head_num: int,
        head_dim: int,
        dtype: torch.dtype,
        device: str | None = None,
    ) -> None:
        if size < page_size or size % page_size:
            raise ValueError(f"size must be a positive multiple of page_size={page_size}, got {size}")
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.page_size, self.size, self.dtype = page_size, size, dtype
        self.kv = torch.zeros((2, size, layer_num, head_num, head_dim), dtype=dtype, device=self.device)
        self._free = list(range(size // page_size))
        self._used: set[int] = set()
        self._lock = threading.Lock()
        self.fail_copies = 0
        self._staging: torch.Tensor | None = None

    def available_size(self) -> int:
        with self._lock:
            return len(self._free) * self.page_size

    def alloc(self, n: int) -> torch.Tensor | None:
        """``n`` slot indices (whole pages, ``n`` a multiple of the page size), or ``None``."""
        if n % self.page_size or n < 0:
            raise ValueError(f"n must be a non-negative multiple of page_size={self.page_size}, got {n}")
        with self._lock:
            k = n // self.page_size
            if k > len(self._free):
                return None
            pages, self._free = self._free[:k], self._free[k:]
            self._used.update(pages)
        p = torch.tensor(pages, dtype=torch.int64)
        return (p[:, None] * self.page_size + torch.arange(self.page_size)[None, :]).reshape(-1)

    def free(self, idx: torch.Tensor) -> None:
        """Return pages; a page not allocated raises ``ValueError`` (double free)."""
        pages = sorted({int(i) // self.page_size for i in idx.tolist()})
        with self._lock:
            bad = [p for p in pages if p not in self._used]
            if bad:
                raise ValueError(f"double free of device pages {bad[:8]}")
            self._used.difference_update(pages)
            self._free.extend(pages)

    def used_pages(self) -> int:
        with self._lock:
            return len(self._used)

    def load_from_host(self, host_kv: torch.Tensor, host_idx: torch.Tensor, dev_idx: torch.Tensor) -> None:
        """Copy host slots ``host_idx`` of ``host_kv`` (shape ``(2, size, L, H, D)``) into device
        slots ``dev_idx``: one gather, one transfer, one scatter. Raises :class:`CopyFailed`."""
        if len(host_idx) != len(dev_idx):
            raise ValueError(f"host_idx has {len(host_idx)} slots, dev_idx {len(dev_idx)}")
        if self.fail_copies > 0:
            self.fail_copies -= 1
            raise CopyFailed("injected host-to-device copy failure")
        try:
            h0, d0, n = _run_start(host_idx), _run_start(dev_idx), len(host_idx)
            if h0 is not None and d0 is not None:  # one contiguous run each: no gather
                for half in (0, 1):
                    self.kv[half, d0 : d0 + n].copy_(host_kv[half, h0 : h0 + n], non_blocking=True)
                if self.kv.device.type == "cuda":
                    torch.cuda.current_stream().synchronize()
                return
            src = host_kv.index_select(1, host_idx)
            if self.kv.device.type == "cuda":
                n = src.numel()
                if self._staging is None or self._staging.numel() < n:
                    self._staging = torch.empty(n, dtype=src.dtype, pin_memory=True)
                stage = self._staging[:n].view(src.shape)
                stage.copy_(src)
                src = stage.to(self.kv.device, non_blocking=True)
                self.kv.index_copy_(1, dev_idx.to(self.kv.device), src)
                torch.cuda.current_stream().synchronize()
            else:
                self.kv.index_copy_(1, dev_idx, src)
        except CopyFailed:
            raise
        except Exception as e:  # pragma: no cover - real device errors
            raise CopyFailed(f"host-to-device copy failed: {type(e).__name__}: {e}") from e

    def store_to_host(self, dev_idx: torch.Tensor, host_kv: torch.Tensor, host_idx: torch.Tensor) -> None:
        """Device slots -> host slots (the write path's L1 -> L2 backup)."""
        src = self.kv.index_select(1, dev_idx.to(self.kv.device)).cpu()
        host_kv.index_copy_(1, host_idx, src)


def _run_start(idx: torch.Tensor) -> int | None:
    """The first index when ``idx`` is one ascending run of consecutive slots, else ``None``."""
    if len(idx) == 0:
        return None
    first = int(idx[0])
    if int(idx[-1]) - first != len(idx) - 1:
        return None
    return first if bool(torch.equal(idx, torch.arange(first, first + len(idx), dtype=idx.dtype))) else None
