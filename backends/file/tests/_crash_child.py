"""Child process for the crash tests: writes a batch and reports progress on stdout.

argv: root mode npages page_bytes
mode "publish": report "P <i>" after each page is published (parent kills after k).
mode "before_publish": report "T <i>" when page i's temporary file is complete, then
    block before publishing page ``k`` (argv[5]).
mode "mid_write": report "W <i>" after half of page i's bytes reached the temp file,
    then block (page ``k``).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
from hicache_backend_file import FileConfig, FileTransport, vio
from hicache_backend_file import writes as tmod


def page(i: int, n: int) -> np.ndarray:
    return np.random.default_rng(i).integers(0, 256, n, dtype=np.uint8)


def say(msg: str) -> None:
    os.write(1, (msg + "\n").encode())


def main() -> None:
    root, mode, npages, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    stop_at = int(sys.argv[5]) if len(sys.argv) > 5 else -1
    t = FileTransport(FileConfig(root=root, io_threads=1), environ={})
    counter = {"pub": 0, "writes": 0}
    real_publish = tmod.publish_noreplace
    real_pwritev = vio.os.pwritev

    def publish(tmp: str, final: str, dir_fd: int = -100) -> bool:
        i = counter["pub"]
        say(f"T {i}")
        if mode == "before_publish" and i == stop_at:
            time.sleep(60)
        ok = real_publish(tmp, final, dir_fd)
        counter["pub"] += 1
        say(f"P {i}")
        return ok

    def pwritev(fd: int, bufs: list[memoryview], off: int) -> int:
        i = counter["pub"]
        if mode == "mid_write" and i == stop_at:
            half = [bufs[0][: max(1, bufs[0].nbytes // 2)]]
            n = real_pwritev(fd, half, off)
            say(f"W {i}")
            time.sleep(60)
            return n
        return real_pwritev(fd, bufs, off)

    tmod.publish_noreplace = publish  # type: ignore[assignment]
    vio.os.pwritev = pwritev  # type: ignore[assignment]
    pages = [page(i, nbytes) for i in range(npages)]
    names = [f"ns/m/{i % 4:02x}/page{i}" for i in range(npages)]
    say("R")
    t.write(names, [[(int(p.ctypes.data), p.nbytes)] for p in pages])
    say("D")
    time.sleep(60)


if __name__ == "__main__":
    main()
