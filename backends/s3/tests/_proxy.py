"""A loopback TCP proxy (asyncio, in a thread) that adds latency and can drop connections.

``delay_s`` is added once per request: before forwarding the first client bytes after
the server last answered on that connection (HTTP/1.1 request/response alternation);
``method_delay`` (``{"GET": 30.0}``) overrides it per HTTP method, so that one kind of
request stalls while others pass. ``drop()`` closes every open connection; ``refuse =
True`` closes new connections at once. Listens on a free 127.0.0.1 port; ``close()``
stops it.
"""

from __future__ import annotations

import asyncio
import socket
import threading


class LatencyProxy:
    def __init__(self, target_port: int, delay_s: float = 0.0) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.method_delay: dict[str, float] = {}
        self.refuse = False
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = int(sock.getsockname()[1])
        self._sock = sock
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="latency-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, sock=self._sock))
        self._ready.set()
        self._loop.run_forever()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    async def _pipe(
        self, r: asyncio.StreamReader, w: asyncio.StreamWriter, up: bool, fresh: list[bool]
    ) -> None:
        try:
            while True:
                data = await r.read(1 << 16)
                if not data:
                    break
                if up and fresh[0]:
                    method = data.split(b" ", 1)[0].decode("latin-1")
                    delay = self.method_delay.get(method, self.delay_s)
                    if delay:
                        await asyncio.sleep(delay)
                fresh[0] = not up
                w.write(data)
                await w.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            w.close()

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        if self.refuse:
            cw.close()
            return
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cw.close()
            return
        self._writers.update((cw, uw))
        try:
            fresh = [True]
            await asyncio.gather(self._pipe(cr, uw, True, fresh), self._pipe(ur, cw, False, fresh))
        finally:
            self._writers.discard(cw)
            self._writers.discard(uw)

    def drop(self) -> None:
        """Close every open connection (clients see resets / short bodies)."""

        def _drop() -> None:
            for w in list(self._writers):
                w.transport.abort()

        self._loop.call_soon_threadsafe(_drop)

    def close(self) -> None:
        def _stop() -> None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            self._loop.stop()

        self._loop.call_soon_threadsafe(_stop)
        self._thread.join(5)
