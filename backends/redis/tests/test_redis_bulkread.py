"""The compiled reader of streamed ``MGET`` replies (``hicache_backend_redis._bulkread``,
the accelerator of :func:`hicache_backend_redis.mget.stream_mget`) over real sockets, against a scripted
peer: values land in multi-segment pages exactly as with the Python reader, absent values
and values of the wrong size are misses (the latter drained, the connection still usable),
an error reply fails only its command, and a peer that stalls, closes, or sends garbage
ends the call the way the Python reader does (cancel, timeout, reset, ``ProtocolError``).
Every test runs on both readers unless it is about the compiled one only."""

from __future__ import annotations

import ctypes
import itertools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import pytest
from _scripted_peer import Answer, Peer, parse_command
from hicache_backend_redis import native as compiled
from hicache_backend_redis.mget import chunk_keys, stream_mget
from hicache_backend_redis.resp import Connection, ProtocolError, ReplyError, command
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hicache_sdk.errors import Cancelled
from hicache_sdk.kit import CancelToken


def test_extension_is_built_in_ci() -> None:
    if os.environ.get("CI"):
        assert compiled._bulkread is not None, "hicache_backend_redis._bulkread was not compiled"


READERS = pytest.mark.parametrize(
    "native",
    [
        pytest.param(
            True, id="native", marks=pytest.mark.skipif(compiled._bulkread is None, reason="not built")
        ),
        pytest.param(False, id="python"),
    ],
)


@pytest.fixture(autouse=True)
def _reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run a ``READERS`` test on the reader it names; on the compiled one, check it ran."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if "native" not in params:
        yield
        return
    monkeypatch.setattr(compiled, "NATIVE", params["native"])
    if not params["native"]:
        yield
        return
    calls = _Counting(compiled._bulkread)
    monkeypatch.setattr(compiled, "_bulkread", calls)
    yield
    assert calls.calls, "the compiled reader was not used"


class _Counting:
    def __init__(self, module: object) -> None:
        self.module = module
        self.calls = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.module, name)

    def stream(self, *args: object) -> object:
        self.calls += 1
        return self.module.stream(*args)  # type: ignore[attr-defined]


def bulk(v: bytes | None) -> bytes:
    return b"$-1\r\n" if v is None else b"$%d\r\n%s\r\n" % (len(v), v)


def store_answer(store: dict[bytes, bytes]) -> Answer:
    def answer(args: list[bytes]) -> bytes:
        if args[0] == b"MGET":
            return b"*%d\r\n" % (len(args) - 1) + b"".join(bulk(store.get(k)) for k in args[1:])
        if args[0] == b"PING":
            return b"+PONG\r\n"
        return b"-ERR unknown\r\n"

    return answer


class Pages:
    """Destination memory: one ctypes buffer per value, split into segments at ``cuts``."""

    def __init__(self, sizes: Sequence[int], cuts: Sequence[Sequence[int]] = ()) -> None:
        self.bufs = [ctypes.create_string_buffer(b"\xee" * n, n) for n in sizes]
        self.segments: list[list[tuple[int, int]]] = []
        for i, b in enumerate(self.bufs):
            at = sorted({0, *(c for c in (cuts[i] if i < len(cuts) else ()) if 0 < c < len(b)), len(b)})
            base = ctypes.addressof(b)
            self.segments.append([(base + a, z - a) for a, z in itertools.pairwise(at)])

    def value(self, i: int) -> bytes:
        return self.bufs[i].raw


@pytest.fixture
def pair() -> Iterator[tuple[Connection, socket.socket]]:
    a, b = socket.socketpair()
    conn = Connection(a, timeout_s=5.0)
    yield conn, b
    conn.close()
    b.close()


def read(
    conn: Connection,
    names: Sequence[bytes],
    pages: Pages,
    cancel: CancelToken | None = None,
    max_command_bytes: int = 64 << 20,
    refused: Callable[[Sequence[int], ReplyError], None] | None = None,
) -> list[bool]:
    sizes = [sum(n for _, n in s) for s in pages.segments]
    chunks = chunk_keys([list(range(len(names)))], sizes, max_command_bytes)
    out: list[bool] = [False] * len(names)
    stream_mget(conn, names, sizes, pages.segments, chunks, out, cancel, refused=refused)
    return out


def _value(i: int, n: int) -> bytes:
    return (bytes([i % 251]) + os.urandom(16)) * (n // 17) + bytes(n % 17)


@READERS
def test_values_land_in_multi_segment_pages(native: bool, pair: tuple[Connection, socket.socket]) -> None:
    conn, far = pair
    sizes = [300 << 10, 5, 20 << 10, 300 << 10, 1000, 70 << 10, 300 << 10, 16 << 10]
    store = {b"k%d" % i: _value(i, n) for i, n in enumerate(sizes)}
    del store[b"k3"]  # absent
    store[b"k5"] = b"x" * (70 << 10) + b"!"  # one byte too many: drained, a miss
    store[b"k7"] = b""  # empty: a miss too
    pages = Pages(sizes, [[1, 2, 100, 200 << 10], [], [10 << 10], [], [999], [64 << 10], [0, 300 << 10], []])
    Peer(far, store_answer(store))
    names = [b"k%d" % i for i in range(len(sizes))]
    assert read(conn, names, pages) == [True, True, True, False, True, False, True, False]
    for i in (0, 1, 2, 4, 6):
        assert pages.value(i) == store[b"k%d" % i]
    for i in (3, 5, 7):  # a miss writes nothing into its page
        assert pages.value(i) == b"\xee" * sizes[i]
    # the connection is still in step: the next command's reply is read as its own
    conn.send([command("PING")])
    assert conn.reply() == "OK" and not conn.broken


@READERS
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=st.lists(
        st.tuples(
            st.sampled_from([1, 2, 63, 64, 100, 4000, 16 << 10, (16 << 10) + 1, 40000, 200 << 10]),
            st.sampled_from(["hit", "hit", "absent", "short", "long"]),
            st.lists(st.integers(1, 200 << 10), max_size=3),
        ),
        min_size=1,
        max_size=12,
    ),
    pieces=st.booleans(),
    command_bytes=st.sampled_from([64 << 10, 64 << 20]),
    seed=st.integers(0, 1 << 16),
)
def test_any_mix_of_replies_reads_like_the_store(
    native: bool,
    spec: list[tuple[int, str, list[int]]],
    pieces: bool,
    command_bytes: int,
    seed: int,
) -> None:
    a, far = socket.socketpair()
    conn = Connection(a, timeout_s=5.0)
    try:
        store: dict[bytes, bytes] = {}
        for i, (n, kind, _) in enumerate(spec):
            if kind != "absent":
                store[b"k%d" % i] = _value(i, n + {"hit": 0, "short": -1, "long": 1}[kind])
        Peer(far, store_answer(store), pieces=pieces, seed=seed)
        pages = Pages([n for n, _, _ in spec], [c for _, _, c in spec])
        names = [b"k%d" % i for i in range(len(spec))]
        conn.send([command("PING")])
        assert conn.reply() == "OK"
        got = read(conn, names, pages, max_command_bytes=command_bytes)
        assert got == [kind == "hit" for _, kind, _ in spec]
        for i, (n, kind, _) in enumerate(spec):
            assert pages.value(i) == (store[b"k%d" % i] if kind == "hit" else b"\xee" * n)
        conn.send([command("PING"), command("PING")])
        assert conn.reply() == "OK" and conn.reply() == "OK" and not conn.broken
    finally:
        conn.close()
        far.close()


@READERS
def test_buffered_bytes_and_over_read_bytes_stay_in_step(
    native: bool, pair: tuple[Connection, socket.socket]
) -> None:
    """A reply that arrived with the previous one is taken from the connection's buffer,
    and bytes received past the last MGET reply are left for the next reader."""
    conn, far = pair
    store = {b"a": b"1" * 10, b"b": b"2" * 3000, b"c": b"3" * (100 << 10)}
    names = [b"a", b"b", b"c"]
    mget = b"*3\r\n" + b"".join(bulk(store[k]) for k in names)
    # the whole stream at once: +OK, the MGET reply, then +PONG, before anything is asked
    far.sendall(b"+OK\r\n" + mget + b"+PONG\r\n")
    assert conn.reply() == "OK"  # the buffer now holds the start of the MGET reply
    assert len(conn.buffered()) > 0
    pages = Pages([10, 3000, 100 << 10], [[5], [], [1 << 10, 50 << 10]])
    assert read(conn, names, pages) == [True, True, True]
    assert [pages.value(i) for i in range(3)] == [store[k] for k in names]
    assert conn.reply() == "OK"  # +PONG, received with the last value's header or taken as left over
    assert far.recv(1 << 16).startswith(b"*4\r\n$4\r\nMGET\r\n")


@READERS
def test_an_error_reply_fails_only_its_command(native: bool, pair: tuple[Connection, socket.socket]) -> None:
    conn, far = pair
    store = {b"k%d" % i: _value(i, 200 << 10) for i in range(4)}

    def answer(args: list[bytes]) -> bytes:
        if b"k1" in args:
            return b"-NOPERM no rights on k1\r\n"
        return store_answer(store)(args)

    Peer(far, answer, pieces=True)
    pages = Pages([200 << 10] * 4)
    refused: list[tuple[list[int], str]] = []
    out = read(
        conn, [b"k%d" % i for i in range(4)], pages, refused=lambda ch, e: refused.append((list(ch), str(e)))
    )
    assert out == [True, False, True, True]
    assert refused == [([1], "NOPERM no rights on k1")]
    assert pages.value(3) == store[b"k3"] and not conn.broken


@READERS
@pytest.mark.parametrize(
    "reply, error",
    [
        (b"*1\r\n$12x\r\n", "bulk reply|unexpected reply"),
        (b"*1\r\n:5\r\n", "expected a bulk reply"),
        (b"*1\r\n\r\n", "empty reply line|expected a bulk reply"),
        (b"*2\r\n$-1\r\n$-1\r\n", "wrong shape"),
        (b"+OK\r\n", "wrong shape"),
        (b"*1\r\n$3\r\nabcXY", "CRLF"),
        (b"*1\r\n$" + b"9" * 70000, "longer than the receive buffer"),
    ],
)
def test_a_malformed_reply_is_a_protocol_error(
    native: bool, pair: tuple[Connection, socket.socket], reply: bytes, error: str
) -> None:
    conn, far = pair
    Peer(far, lambda args: reply)
    pages = Pages([3])
    with pytest.raises(ProtocolError, match=error):
        read(conn, [b"k"], pages)
    assert conn.broken


@READERS
def test_eof_in_the_middle_of_a_value_raises_and_breaks(
    native: bool, pair: tuple[Connection, socket.socket]
) -> None:
    conn, far = pair
    store = {b"k%d" % i: _value(i, 300 << 10) for i in range(3)}
    Peer(far, store_answer(store), close_at=(300 << 10) + 5000)
    pages = Pages([300 << 10] * 3)
    with pytest.raises(OSError) as e:  # a reset, the server closed: the transport's misses
        read(conn, [b"k0", b"k1", b"k2"], pages)
    assert not isinstance(e.value, ProtocolError)
    assert conn.broken
    assert pages.value(0) == store[b"k0"]  # what came before the reset landed


@READERS
def test_a_stalled_peer_times_out(native: bool) -> None:
    a, far = socket.socketpair()
    conn = Connection(a, timeout_s=0.3)
    try:
        peer = Peer(far, store_answer({b"k": b"v" * (100 << 10)}), stall_at=50 << 10)
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            read(conn, [b"k"], Pages([100 << 10]))
        assert time.monotonic() - t0 < 3 and conn.broken
        peer.resume.set()
    finally:
        conn.close()
        far.close()


@READERS
def test_a_cancel_mid_value_touches_nothing_after_it_returns(
    native: bool, pair: tuple[Connection, socket.socket]
) -> None:
    conn, far = pair
    store = {b"k%d" % i: _value(i + 1, 1 << 20) for i in range(3)}
    peer = Peer(far, store_answer(store), stall_at=(1 << 20) + (300 << 10))  # in the middle of k1
    pages = Pages([1 << 20] * 3, [[100], [512 << 10], []])
    tok = CancelToken()
    outcome: list[object] = []

    def reader() -> None:
        try:
            with conn.watch(tok):  # as the transport runs a part
                outcome.append(read(conn, [b"k0", b"k1", b"k2"], pages, tok))
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=reader)
    t.start()
    time.sleep(0.4)  # k0 and part of k1 have landed; the reader waits for the rest
    t0 = time.monotonic()
    tok.cancel()
    took = time.monotonic() - t0
    snapshot = [pages.value(i) for i in range(3)]
    peer.resume.set()  # the rest arrives after the cancel
    t.join(10)
    assert not t.is_alive() and took < 1.0
    assert isinstance(outcome[0], Cancelled) and conn.broken
    assert [pages.value(i) for i in range(3)] == snapshot  # nothing landed after cancel() returned
    assert snapshot[0] == store[b"k0"]
    assert snapshot[1][: 200 << 10] == store[b"k1"][: 200 << 10]
    assert snapshot[2] == b"\xee" * (1 << 20)


def test_the_compiled_reader_is_used_only_where_a_blocking_call_can_be_ended(
    pair: tuple[Connection, socket.socket],
) -> None:
    conn, _ = pair
    if compiled._bulkread is None:
        pytest.skip("not built")
    tok = CancelToken()
    assert compiled.usable(conn, None)
    assert not compiled.usable(conn, tok)  # a token, but nothing watches it
    with conn.watch(tok):
        assert compiled.usable(conn, tok)
    conn.blocking = False  # as over TLS: no-wait calls under a token, the Python reader
    assert not compiled.usable(conn, None)


def test_bad_segments_are_refused_before_any_io(pair: tuple[Connection, socket.socket]) -> None:
    conn, far = pair
    if compiled._bulkread is None:
        pytest.skip("not built")
    bad: list[list[tuple[int, int]]] = [[(-1, 5)]]
    with pytest.raises(ValueError, match="address"):
        stream_mget(conn, [b"k"], [5], bad, [[0]], [False], None)
    far.settimeout(0.2)
    with pytest.raises(TimeoutError):
        far.recv(1)  # nothing was sent


def _commands_waiting(far: socket.socket, wait_s: float = 0.15) -> int:
    """How many whole commands the reader has sent that ``far`` has not taken yet."""
    time.sleep(wait_s)
    try:
        data = far.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return 0
    n = 0
    while (parsed := parse_command(data)) is not None:
        n, data = n + 1, parsed[1]
    return n


@READERS
@pytest.mark.parametrize("policy", ["pipelined", "one_at_a_time"])
def test_refill_policy_decides_what_is_in_flight(
    native: bool, policy: str, pair: tuple[Connection, socket.socket]
) -> None:
    """``ONE_AT_A_TIME`` (a connection carrying one of several parts of a read) sends the
    next command only once the reply before it is read whole; ``PIPELINED`` keeps the next
    one queued at the server while a reply is read."""
    from hicache_backend_redis import mget

    conn, far = pair
    n, size = 3, 300 << 10  # each value larger than STREAM_CHUNK: one MGET each
    store = {b"k%d" % i: _value(i, size) for i in range(n)}
    names = [b"k%d" % i for i in range(n)]
    pages = Pages([size] * n)
    chosen = mget.PIPELINED if policy == "pipelined" else mget.ONE_AT_A_TIME
    out: list[bool] = [False] * n
    chunks = chunk_keys([list(range(n))], [size] * n, 64 << 20)
    assert len(chunks) == n
    t = threading.Thread(
        target=stream_mget,
        args=(conn, names, [size] * n, pages.segments, chunks, out, None),
        kwargs={"policy": chosen},
    )
    t.start()
    try:
        before: list[int] = []  # commands waiting before each reply is sent
        during: list[int] = []  # ... and while all of it but its last CRLF is sent
        for i in range(n):
            before.append(_commands_waiting(far))
            args, _ = parse_command(far.recv(1 << 16, socket.MSG_PEEK)) or ([], b"")
            cmd = command("MGET", *args[1:])
            assert far.recv(len(cmd)) == cmd  # take exactly this command
            reply = store_answer(store)(args)
            far.sendall(reply[:-2])
            if i + 1 < n:
                during.append(_commands_waiting(far))
            far.sendall(reply[-2:])
        t.join(10)
        assert not t.is_alive() and out == [True] * n
        assert [pages.value(i) for i in range(n)] == [store[k] for k in names]
        if policy == "pipelined":  # two in flight from the start, the third sent as the second reply is read
            assert before[0] == 2 and during[0] == 1
        else:  # never a command queued behind an unread reply
            assert before == [1, 1, 1] and during == [0, 0]
    finally:
        t.join(10)
