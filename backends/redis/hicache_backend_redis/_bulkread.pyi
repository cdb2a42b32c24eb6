from collections.abc import Sequence

DONE: int
STOP: int
EOF: int
TIMEOUT: int
OSERROR: int
PROTOCOL: int
HIT: int
ABSENT: int
MISMATCH: int
RECV: int
HEADER_RECV: int
DIRECT_MIN: int

def stream(
    fd: int,
    buffered: bytes | bytearray | memoryview,
    keys: Sequence[bytes],
    counts: Sequence[int],
    values: Sequence[Sequence[tuple[int, int]]],
    results: bytearray | memoryview,
    reply: int,
    sent: int,
    ahead: int,
    ahead_max: int,
    low_water: int,
    min_in_flight: int,
    /,
) -> tuple[int, int | str | None, int, int, int, bytes]: ...
def write(
    fd: int,
    buffered: bytes | bytearray | memoryview,
    heads: Sequence[bytes],
    tail: bytes,
    values: Sequence[Sequence[tuple[int, int]]],
    results: bytearray | memoryview,
    reply: int,
    sent: int,
    window: int,
    /,
) -> tuple[int, int | str | None, int, int, bytes]: ...
