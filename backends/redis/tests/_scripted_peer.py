"""A scripted Redis peer on the far end of a socket pair: it parses the commands it
receives and answers each as the test says, in pieces, with stalls or a close."""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Callable

__all__ = ["Answer", "Peer", "parse_command"]

Answer = Callable[[list[bytes]], bytes]


class Peer:
    """A scripted server on the far end of a socket: reads commands, and answers each with
    ``answer(args)`` (``pieces``: in writes of random small sizes, to split headers and
    values anywhere, each CRLF's CR and LF in writes of their own). ``stall_at``: after that
    many reply bytes, stop writing until
    :attr:`resume` is set; ``close_at``: close the socket instead."""

    def __init__(
        self,
        sock: socket.socket,
        answer: Answer,
        *,
        pieces: bool = False,
        stall_at: int | None = None,
        close_at: int | None = None,
        seed: int = 0,
    ) -> None:
        self.sock = sock
        self.answer = answer
        self.pieces = pieces
        self.stall_at = stall_at
        self.close_at = close_at
        self.rng = random.Random(seed)
        self.resume = threading.Event()
        self.commands: list[list[bytes]] = []
        self.written = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _write(self, data: bytes) -> bool:
        limit = self.stall_at if self.stall_at is not None else self.close_at
        if limit is not None and self.written + len(data) > limit:
            k = max(0, limit - self.written)
            self.sock.sendall(data[:k])
            self.written += k
            if self.close_at is not None:
                self.sock.close()
                return False
            self.resume.wait(10)
            self.stall_at = None
            data = data[k:]
        while data:
            k = self.rng.randint(1, 700) if self.pieces else len(data)
            cr = data.find(b"\r\n", 0, k) if self.pieces else -1
            if cr >= 0:  # a line's CR and LF arrive apart
                k = cr + 1
            self.sock.sendall(data[:k])
            self.written += k
            data = data[k:]
            if cr >= 0:
                time.sleep(0.0002)
        return True

    def _run(self) -> None:
        buf = b""
        try:
            while True:
                parsed = parse_command(buf)
                if parsed is None:
                    chunk = self.sock.recv(1 << 16)
                    if not chunk:
                        return
                    buf += chunk
                    continue
                args, buf = parsed
                self.commands.append(args)
                if not self._write(self.answer(args)):
                    return
        except OSError:
            return


def parse_command(buf: bytes) -> tuple[list[bytes], bytes] | None:
    if b"\r\n" not in buf:
        return None
    head, rest = buf.split(b"\r\n", 1)
    args = []
    for _ in range(int(head[1:])):
        if b"\r\n" not in rest:
            return None
        h, rest = rest.split(b"\r\n", 1)
        n = int(h[1:])
        if len(rest) < n + 2:
            return None
        args.append(rest[:n])
        rest = rest[n + 2 :]
    return args, rest
