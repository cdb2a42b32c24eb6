"""Chunk objects with their layout: ``payload || record`` over one transport (no LMCache import).

LMCache's key does not say how the bytes under it are laid out (shape, dtype, memory
format), and its lookups get no reliable layout. So every chunk object carries the SDK's
96-byte integrity record (:mod:`hicache_sdk.paged.header`) as a trailer, with

* ``identity``: sha256 of :func:`layout_identity` (scheme, shape(s), dtype(s), format),
* ``page``: sha256 of the object name,
* ``payload_len``: the chunk's byte size.

A load asks the objects' sizes first and reads only those of the expected size (one
existence call per batch): some transports delete an object a read finds of another size,
and a caller's buffer of the wrong size must not cost a good chunk.

A load checks the record against the caller's buffer: another layout of the same size
(bf16 stored, fp16 asked), another object's bytes, another size or a torn object is a
miss. A record that is not ours (bad magic, version, flags, name digest or a checksum that
fails) marks a corrupt object, which is deleted; another *layout* is a legitimate object
of another deployment and is left alone (create-if-absent would otherwise never repair
either case, so only the corrupt one is removed).

Writes are create-if-absent (the transport's rule). :meth:`ChunkObjects.store` asks
``exists`` first and writes only the absent names, so it can report which objects *this*
call created. The race: two writers that both find a name absent both write it; the
transport keeps one copy, and both report it created (a usage count may be high by one
object until a delete; documented, and bounded by the number of concurrent writers).

Payloads move straight between the caller's memory and the transport: an object is two
segments (payload, then the record), so a transport that takes two segments per object
(every hicache-sdk backend) needs no copy; one that takes a single segment gets one staging
copy. Nothing here raises for an I/O failure: the batch misses and the reason is counted.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ..kit.segments import gather, scatter
from ..metrics.backend import Metrics
from ..paged.header import TRAILER_SIZE, HeaderError, PageHeader, crc32_segments
from ..transport import SIZE_UNKNOWN, Segment, Transport, TransportError, exact_sizes

__all__ = ["Chunk", "ChunkObjects", "layout_identity"]

log = logging.getLogger(__name__)


def layout_identity(shapes: Sequence[Sequence[int]], dtypes: Sequence[str], fmt: str) -> bytes:
    """The 32-byte identity of a chunk layout: every tensor's shape and dtype, in order,
    and the memory format's name. Equal layouts give equal identities."""
    text = "lmc1-layout;" + ";".join(
        f"{tuple(int(d) for d in s)}:{t}" for s, t in zip(shapes, dtypes, strict=True)
    )
    return hashlib.sha256(f"{text};fmt={fmt}".encode()).digest()


@dataclass(frozen=True)
class Chunk:
    """One chunk to move: its object ``name``, payload memory ``(address, nbytes)`` and
    layout ``identity`` (:func:`layout_identity`)."""

    name: str
    address: int
    nbytes: int
    identity: bytes

    @property
    def stored_size(self) -> int:
        return self.nbytes + TRAILER_SIZE


def _digest(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


class ChunkObjects:
    """Create-if-absent stores, checked loads, existence and deletion of chunk objects."""

    def __init__(self, transport: Transport, metrics: Metrics, *, checksum: bool = False) -> None:
        self.transport = transport
        self.metrics = metrics
        self.checksum = checksum
        self._one_segment = int(getattr(transport, "max_segments", 1 << 30)) < 2

    def _failed(self, op: str, exc: BaseException) -> None:
        self.metrics.failure(op, exc, getattr(self.transport, "io_errors", ()))

    def sizes(self, names: Sequence[str], *, exact: bool = False) -> list[int | None]:
        """Per name: the stored size (payload and record), ``SIZE_UNKNOWN``, or ``None``
        when absent or when the query failed (counted). ``exact``: ask the transport's exact
        sizes where it offers them (:func:`~hicache_sdk.transport.exact_sizes`; a query per
        object on some transports), so that ``SIZE_UNKNOWN`` comes back only from one that
        cannot tell."""
        if not names:
            return []
        try:
            ask = partial(exact_sizes, self.transport) if exact else self.transport.exists
            found = list(ask(list(names)))
            if len(found) != len(names):
                raise TransportError("exists returned a wrong number of answers", "protocol")
        except Exception as e:
            self._failed("exists", e)
            return [None] * len(names)
        return found

    def present(self, names: Sequence[str], payloads: Sequence[int | None]) -> list[bool]:
        """Per name: present, with the stored size of ``payloads[i]`` when that is given
        (``None``: any size). A transport that cannot tell sizes answers present."""
        out = []
        for size, want in zip(self.sizes(names), payloads, strict=True):
            if size is None:
                out.append(False)
            elif want is None or size == SIZE_UNKNOWN:
                out.append(True)
            else:
                out.append(size == want + TRAILER_SIZE)
        return out

    def store(self, chunks: Sequence[Chunk]) -> tuple[bool, list[bool]]:
        """Create the absent chunks. Returns ``(ok, created)``: ``ok`` when every chunk
        now exists; ``created[i]`` when this call wrote chunk ``i`` (a name given twice is
        written once, from its first occurrence)."""
        n = len(chunks)
        created = [False] * n
        if n == 0:
            return True, created
        found = self.sizes([c.name for c in chunks])
        todo: list[int] = []
        seen: set[str] = set()
        for i, c in enumerate(chunks):
            if found[i] is None and c.name not in seen:
                todo.append(i)
            seen.add(c.name)
        if not todo:
            return True, created
        records = [self._record(chunks[i]) for i in todo]
        buffers: list[list[Segment]] = []
        keep: list[np.ndarray] = []
        for i, rec in zip(todo, records):
            c = chunks[i]
            if self._one_segment:
                stage = np.empty(c.stored_size, dtype=np.uint8)
                gather([(c.address, c.nbytes)], int(stage.ctypes.data))
                stage[c.nbytes :] = rec
                keep.append(stage)
                buffers.append([(int(stage.ctypes.data), c.stored_size)])
            else:
                keep.append(rec)
                buffers.append([(c.address, c.nbytes), (int(rec.ctypes.data), TRAILER_SIZE)])
        try:
            ok = list(self.transport.write([chunks[i].name for i in todo], buffers))
            if len(ok) != len(todo):
                raise TransportError("write returned a wrong number of answers", "protocol")
        except Exception as e:
            self._failed("write", e)
            return False, created
        finally:
            del keep
        for i, good in zip(todo, ok):
            created[i] = bool(good)
        return all(ok), created

    def _record(self, c: Chunk) -> np.ndarray:
        crc = crc32_segments([(c.address, c.nbytes)]) if self.checksum else None
        raw = PageHeader(c.identity, _digest(c.name), c.nbytes, crc).encode()
        return np.frombuffer(bytearray(raw), dtype=np.uint8)

    def load(self, chunks: Sequence[Chunk]) -> list[bool]:
        """Read each chunk into its memory. ``True`` only when the object exists, has
        exactly this payload size, and its record names this object and this layout."""
        if not chunks:
            return []
        # Ask sizes first: a transport may delete an object a read finds of another size
        # (it takes it for a torn one), and a caller's buffer of another size is no reason
        # to lose a good chunk.
        sizes = self.sizes([c.name for c in chunks])
        want = [i for i, c in enumerate(chunks) if sizes[i] == c.stored_size or sizes[i] == SIZE_UNKNOWN]
        out = [False] * len(chunks)
        if want:
            got = self._load([chunks[i] for i in want])
            for i, ok in zip(want, got):
                out[i] = ok
        return out

    def load_sized(self, chunks: Sequence[Chunk]) -> list[bool]:
        """:meth:`load` of chunks the caller found of the expected size (no existence
        call)."""
        return self._load(chunks) if chunks else []

    def _load(self, chunks: Sequence[Chunk]) -> list[bool]:
        n = len(chunks)
        scratch = np.empty(n * TRAILER_SIZE, dtype=np.uint8)
        base = int(scratch.ctypes.data)
        stages: list[np.ndarray | None] = []
        buffers: list[list[Segment]] = []
        for i, c in enumerate(chunks):
            if self._one_segment:
                stage = np.empty(c.stored_size, dtype=np.uint8)
                stages.append(stage)
                buffers.append([(int(stage.ctypes.data), c.stored_size)])
            else:
                stages.append(None)
                buffers.append([(c.address, c.nbytes), (base + i * TRAILER_SIZE, TRAILER_SIZE)])
        try:
            ok = [bool(x) for x in self.transport.read([c.name for c in chunks], buffers)]
            if len(ok) != n:
                raise TransportError("read returned a wrong number of answers", "protocol")
        except Exception as e:
            self._failed("read", e)
            return [False] * n
        corrupt: list[str] = []
        for i, c in enumerate(chunks):
            if not ok[i]:
                continue
            staged = stages[i]
            raw: Any = (
                staged[c.nbytes :]
                if staged is not None
                else scratch[i * TRAILER_SIZE : (i + 1) * TRAILER_SIZE]
            )
            try:
                rec = PageHeader.decode(raw.tobytes())
                if rec.identity != c.identity:
                    ok[i] = False
                    self.metrics.count("layout_mismatch")
                    continue
                rec.check(identity=c.identity, page=_digest(c.name), payload_len=c.nbytes)
                if rec.checksum is not None:
                    seg = (
                        [(int(staged.ctypes.data), c.nbytes)]
                        if staged is not None
                        else [(c.address, c.nbytes)]
                    )
                    if crc32_segments(seg) != rec.checksum:
                        raise HeaderError("checksum")
            except HeaderError as e:
                ok[i] = False
                corrupt.append(c.name)
                self.metrics.error(f"header_{e.reason}")
                continue
            if staged is not None:
                scatter(int(staged.ctypes.data), [(c.address, c.nbytes)])
        if corrupt:
            self.metrics.count("integrity_deleted", len(corrupt))
            self.delete(corrupt)
        return ok

    def delete(self, names: Sequence[str]) -> None:
        """Remove the objects if present (errors counted, never raised)."""
        if not names:
            return
        try:
            self.transport.delete(list(dict.fromkeys(names)))
        except Exception as e:
            self._failed("delete", e)
