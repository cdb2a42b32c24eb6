"""Both writers of create-if-absent values (the compiled loop, ``_bulkread.write``, and the
Python one, :func:`hicache_backend_redis.writes.write_python`, both behind
:func:`hicache_backend_redis.writes.write_lanes`) over real sockets, against a
scripted peer: every value reaches the peer whole from its segments, every success reply
(``:1``, ``:0``, ``+OK``, ``$-1``) is a success and an error reply fails only its value, the
window bounds what is in flight, and a peer that closes, stalls, stops reading or answers
garbage ends the call as it must (reset, timeout, cancel with no byte of caller memory read
afterwards, ``ProtocolError``)."""

from __future__ import annotations

import ctypes
import itertools
import socket
import threading
import time
from collections.abc import Iterator, Sequence

import pytest
from _scripted_peer import Peer, parse_command
from hicache_backend_redis import native as compiled
from hicache_backend_redis.frames import write_frames as frames
from hicache_backend_redis.resp import Connection, ProtocolError, ReplyError, command
from hicache_backend_redis.writes import write_lanes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hicache_sdk.errors import Cancelled
from hicache_sdk.kit import CancelToken

WRITERS = pytest.mark.parametrize(
    "native",
    [
        pytest.param(
            True, id="native", marks=pytest.mark.skipif(compiled._bulkread is None, reason="not built")
        ),
        pytest.param(False, id="python"),
    ],
)


@pytest.fixture(autouse=True)
def _writer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run a ``WRITERS`` test on the writer it names; on the compiled one, check it ran."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    if "native" not in params:
        yield
        return
    monkeypatch.setattr(compiled, "NATIVE", params["native"])
    if not params["native"]:
        yield
        return
    real = compiled._bulkread
    calls = [0]

    class Counting:
        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

        def write(self, *args: object) -> object:
            calls[0] += 1
            return real.write(*args)  # type: ignore[union-attr]

    monkeypatch.setattr(compiled, "_bulkread", Counting())
    yield
    assert calls[0], "the compiled writer was not used"


class Values:
    """Source memory: one ctypes buffer per value, split into segments at ``cuts``."""

    def __init__(self, data: Sequence[bytes], cuts: Sequence[Sequence[int]] = ()) -> None:
        self.bufs = [ctypes.create_string_buffer(d, len(d)) for d in data]
        self.segments: list[list[tuple[int, int]]] = []
        for i, b in enumerate(self.bufs):
            at = sorted({0, *(c for c in (cuts[i] if i < len(cuts) else ()) if 0 < c < len(b)), len(b)})
            base = ctypes.addressof(b)
            self.segments.append([(base + a, z - a) for a, z in itertools.pairwise(at)])


def write(
    conn: Connection, names: Sequence[bytes], values: Values, window: int, ttl_ms: int = 0
) -> tuple[list[bool], list[str]]:
    sizes = [len(b) for b in values.bufs]
    heads, tail = frames(names, sizes, ttl_ms, window)
    out = [False] * len(names)
    refused: list[str] = []
    write_lanes(
        [(conn, range(len(names)))], heads, tail, values.segments, window, out, None,
        refused=lambda c, e: refused.append(str(e)) or False,
    )  # fmt: skip
    return out, refused


@pytest.fixture
def pair() -> Iterator[tuple[Connection, socket.socket]]:
    a, b = socket.socketpair()
    conn = Connection(a, timeout_s=5.0)
    yield conn, b
    conn.close()
    b.close()


REPLIES = {"new": b":1\r\n", "exists": b":0\r\n", "ok": b"+OK\r\n", "nil": b"$-1\r\n"}


@WRITERS
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    spec=st.lists(
        st.tuples(
            st.sampled_from([1, 63, 4000, 32 << 10, (64 << 10) + 3, 300 << 10]),
            st.sampled_from(["new", "exists", "ok", "nil", "new", "NOPERM", "READONLY"]),
            st.lists(st.integers(1, 300 << 10), max_size=3),
        ),
        min_size=1,
        max_size=10,
    ),
    window=st.sampled_from([0, 1, 2, 3]),
    ttl_ms=st.sampled_from([0, 60_000]),
    pieces=st.booleans(),
    seed=st.integers(0, 1 << 16),
)
def test_any_mix_of_values_and_replies(
    native: bool, spec: list[tuple[int, str, list[int]]], window: int, ttl_ms: int, pieces: bool, seed: int
) -> None:
    a, far = socket.socketpair()
    conn = Connection(a, timeout_s=5.0)
    try:
        data = [bytes([i % 251]) * n for i, (n, _, _) in enumerate(spec)]
        got: dict[bytes, list[bytes]] = {}

        def answer(args: list[bytes]) -> bytes:
            if args[0] == b"PING":
                return b"+PONG\r\n"
            got[args[1]] = args
            kind = spec[int(args[1][1:])][1]
            return REPLIES.get(kind) or b"-%s no, not this one\r\n" % kind.encode()

        Peer(far, answer, pieces=pieces, seed=seed)
        names = [b"k%d" % i for i in range(len(spec))]
        out, refused = write(conn, names, Values(data, [c for _, _, c in spec]), window, ttl_ms)
        assert out == [kind in REPLIES for _, kind, _ in spec]
        assert refused == [f"{kind} no, not this one" for _, kind, _ in spec if kind not in REPLIES]
        for i, name in enumerate(names):  # every value arrived whole, in the command the window asks
            args = got[name]
            if window and not ttl_ms:
                assert args == [b"SETNX", name, data[i]]
            else:
                ttl = [b"PX", b"%d" % ttl_ms] if ttl_ms else []
                assert args == [b"SET", name, data[i], b"NX", *ttl]
        conn.send([command("PING")])
        assert conn.reply() == "OK" and not conn.broken  # still in step
    finally:
        conn.close()
        far.close()


def _waiting(far: socket.socket, wait_s: float = 0.15) -> int:
    """How many whole commands the writer has sent that ``far`` has not taken yet."""
    time.sleep(wait_s)
    try:
        data = far.recv(8 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return 0
    n = 0
    while (parsed := parse_command(data)) is not None:
        n, data = n + 1, parsed[1]
    return n


@WRITERS
@pytest.mark.parametrize("window", [1, 2, 0])
def test_the_window_bounds_what_is_in_flight(
    native: bool, window: int, pair: tuple[Connection, socket.socket]
) -> None:
    conn, far = pair
    n = 4
    data = [bytes([i]) * (40 << 10) for i in range(n)]
    t = threading.Thread(target=write, args=(conn, [b"k%d" % i for i in range(n)], Values(data), window))
    t.start()
    try:
        waiting = []
        for _ in range(n):
            waiting.append(_waiting(far))
            args, _ = parse_command(far.recv(8 << 20, socket.MSG_PEEK)) or ([], b"")
            assert far.recv(len(command(*args))) == command(*args)  # take exactly this command
            far.sendall(b":1\r\n")
        t.join(10)
        assert not t.is_alive()
        limit = window or n
        assert waiting == [min(limit, n - i) for i in range(n)]
    finally:
        t.join(10)


@WRITERS
def test_a_peer_that_closes_mid_value_resets(native: bool, pair: tuple[Connection, socket.socket]) -> None:
    conn, far = pair
    far.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)

    def reader() -> None:
        far.recv(100 << 10)
        far.close()

    threading.Thread(target=reader, daemon=True).start()
    with pytest.raises(OSError) as e:
        write(conn, [b"k"], Values([b"x" * (8 << 20)]), 1)
    assert not isinstance(e.value, ProtocolError) and conn.broken


@WRITERS
def test_a_peer_that_never_answers_times_out(native: bool) -> None:
    a, far = socket.socketpair()
    conn = Connection(a, timeout_s=0.3)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            write(conn, [b"k"], Values([b"x" * 1000]), 1)
        assert time.monotonic() - t0 < 3 and conn.broken
    finally:
        conn.close()
        far.close()


@WRITERS
@pytest.mark.parametrize("reply", [b"*1\r\n", b"$3\r\n", b"?\r\n"])
def test_a_malformed_reply_is_a_protocol_error(
    native: bool, reply: bytes, pair: tuple[Connection, socket.socket]
) -> None:
    conn, far = pair
    Peer(far, lambda args: reply)
    with pytest.raises(ProtocolError):
        write(conn, [b"k"], Values([b"v" * 100]), 1)
    assert conn.broken


@WRITERS
def test_a_cancel_while_sending_reads_nothing_after_it_returns(
    native: bool, pair: tuple[Connection, socket.socket]
) -> None:
    """The peer stops reading: the writer blocks with the socket full. ``cancel()`` returns
    promptly, and the memory is reused: not one byte of it is sent afterwards."""
    conn, far = pair
    far.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 << 10)
    values = Values([b"A" * (16 << 20), b"B" * (16 << 20)])
    sizes = [len(b) for b in values.bufs]
    heads, tail = frames([b"k0", b"k1"], sizes, 0, 1)
    tok = CancelToken()
    outcome: list[BaseException | None] = []

    def writer() -> None:
        try:
            with conn.watch(tok):
                write_lanes(
                    [(conn, range(2))], heads, tail, values.segments, 1, [False, False], tok,
                    refused=lambda c, e: False,
                )  # fmt: skip
            outcome.append(None)
        except BaseException as e:
            outcome.append(e)

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    tok.cancel()
    took = time.monotonic() - t0
    for b in values.bufs:  # the slots are reused now
        ctypes.memset(ctypes.addressof(b), ord("Z"), len(b))
    got = bytearray()
    far.settimeout(0.5)
    while True:
        try:
            chunk = far.recv(1 << 20)
        except (TimeoutError, ConnectionResetError):
            break
        if not chunk:
            break
        got += chunk
    t.join(10)
    assert not t.is_alive() and took < 1.0
    assert isinstance(outcome[0], Cancelled) and conn.broken
    assert b"Z" not in got and len(got) < 16 << 20


def test_bad_segments_are_refused_before_any_io(pair: tuple[Connection, socket.socket]) -> None:
    conn, far = pair
    if compiled._bulkread is None:
        pytest.skip("not built")
    with pytest.raises(ValueError, match="address"):
        compiled.write(conn, [b"h"], b"\r\n", [[(-1, 5)]], bytearray(1), (0, 0), 1, None)
    far.settimeout(0.2)
    with pytest.raises(TimeoutError):
        far.recv(1)  # nothing was sent


def test_an_error_reply_reaches_refused_with_its_message(pair: tuple[Connection, socket.socket]) -> None:
    """What the transport's READONLY handling sees, from either writer."""
    conn, far = pair
    Peer(far, lambda args: b"-READONLY You can't write against a read only replica.\r\n")
    seen: list[ReplyError] = []
    heads, tail = frames([b"k"], [3], 0, 1)
    out = [False]
    write_lanes(
        [(conn, [0])], heads, tail, Values([b"abc"]).segments, 1, out, None,
        refused=lambda c, e: seen.append(e) or False,
    )  # fmt: skip
    assert out == [False] and [str(e) for e in seen] == [
        "READONLY You can't write against a read only replica."
    ]


@pytest.mark.parametrize("window", [1, 2, 0])
def test_lanes_driven_from_one_thread_each_resume_after_an_error_reply(window: int) -> None:
    """Several connections driven from this thread (the Python engine): an error reply on
    one lane fails that value only, and every lane still writes the rest of its values."""
    lanes: list[tuple[Connection, list[int]]] = []
    fars: list[socket.socket] = []
    got: list[bytes] = []
    n = 9
    data = [bytes([65 + i]) * (40 << 10) for i in range(n)]

    def answer(args: list[bytes]) -> bytes:
        got.append(args[1])
        return b"-OOM not now\r\n" if args[1] in (b"k1", b"k4") else b":1\r\n"

    try:
        for j in range(3):
            a, far = socket.socketpair()
            fars.append(far)
            Peer(far, answer)
            lanes.append((Connection(a, timeout_s=5.0), list(range(j, n, 3))))
        values = Values(data)
        heads, tail = frames([b"k%d" % i for i in range(n)], [len(d) for d in data], 0, window)
        out: list[object] = [None] * n
        seen: list[str] = []
        write_lanes(
            lanes, heads, tail, values.segments, window, out, None,
            refused=lambda c, e: seen.append(str(e)) or "refused",
        )  # fmt: skip
        assert out == ["refused" if i in (1, 4) else True for i in range(n)]
        assert seen == ["OOM not now"] * 2
        assert sorted(got) == sorted(b"k%d" % i for i in range(n))
        assert not any(c.broken for c, _ in lanes)
    finally:
        for c, _ in lanes:
            c.close()
        for far in fars:
            far.close()
