"""Object-level I/O of the paged adapter: integrity trailers, staging, validation and
deletion of corrupt objects, over one :class:`~hicache_sdk.transport.Transport` call per
batch.

An :class:`ObjectIO` describes one physical object of one page: its name, the memory its
payload lives in (segments, in object byte order) and, for header schemes, the identity
and page digests its integrity record must carry. That record (:mod:`.header`) is stored
as a trailer: an object is ``payload || record``, so the payload starts at offset 0. :class:`ObjectEngine` turns a list of them into
one ``read`` / ``write`` / ``exists`` call and returns per-object results.

Rules:

* zero-copy: payload segments go to the transport as given (adjacent ones coalesced);
  when an object needs more segments than ``transport.max_segments``, it is staged
  through one SDK-owned contiguous buffer (one copy);
* header objects are read together with their trailer (into a per-call scratch buffer,
  never shared between threads); a record that fails validation, or a checksum that
  does not match, makes that object a miss, and the object is deleted
  (``integrity_deleted``);
* a read that fails for an object is followed by one existence check of the failed
  objects, which deletes any of the wrong size (truncated / torn);
* a ``TransportError`` or any unexpected exception from the transport makes the whole
  call a miss (``metrics.error(reason)``); nothing raises out of these methods.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np

from ..kit.batches import first_occurrences
from ..kit.segments import coalesce, gather, scatter
from ..metrics.backend import Metrics
from ..transport import SIZE_UNKNOWN, DeadlineScoped, Segment, SizedTransfer, Transport, TransportError
from .header import TRAILER_SIZE, HeaderError, PageHeader, crc32_segments, plain_records

__all__ = ["ObjectEngine", "ObjectIO", "coalesce", "fold_pages"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectIO:
    """One object to move. ``segments``: its payload memory in object byte order.
    ``identity`` / ``page``: 32-byte digests for the header, or ``None`` for raw schemes."""

    name: str
    segments: tuple[Segment, ...]
    payload_len: int
    identity: bytes | None = None
    page: bytes | None = None

    @property
    def has_header(self) -> bool:
        return self.identity is not None

    @property
    def object_size(self) -> int:
        """Stored size: payload plus trailer (if any)."""
        return self.payload_len + (TRAILER_SIZE if self.has_header else 0)


#: ``exists`` answers that carry no size: absent, or present with its size unknown.
_NO_SIZES = frozenset({None, SIZE_UNKNOWN})


def fold_pages(n: int, owners: Sequence[int], ok: Sequence[bool]) -> list[bool]:
    """Per page (``0..n-1``): ``True`` unless an object it owns (``owners[i]`` owns object
    ``i``, whose result is ``ok[i]``) failed."""
    out = [True] * n
    for owner, good in zip(owners, ok):
        if not good:
            out[owner] = False
    return out


def _addr(buf: np.ndarray) -> int:
    return int(buf.ctypes.data)


def _plain_records(objects: Sequence[ObjectIO], scratch: np.ndarray) -> list[bool] | None:
    """Vectorised trailer check of a batch of header objects whose trailers lie in order
    in ``scratch``: ``True`` where the record is byte-for-byte the one a checksum-free
    write of that object produces (so it validates), ``False`` where it must go through
    :meth:`PageHeader.decode` (another page, a checksum, corruption). ``None`` when the
    objects do not share one identity and payload length (then check one by one)."""
    first = objects[0]
    ident, plen = first.identity, first.payload_len
    if ident is None or any(o.identity != ident or o.payload_len != plen for o in objects):
        return None
    n = len(objects)
    want = plain_records(ident, [o.page or bytes(32) for o in objects], [plen], n)
    same: list[bool] = (scratch[: n * TRAILER_SIZE].reshape(n, TRAILER_SIZE) == want).all(axis=1).tolist()
    return same


class ObjectEngine:
    """Batched object I/O with headers and integrity checks over one transport."""

    def __init__(self, transport: Transport, metrics: Metrics, *, checksum: bool = False) -> None:
        self.transport = transport
        self.metrics = metrics
        self.checksum = checksum
        scoped = transport.offers(DeadlineScoped)
        self._scope = scoped.deadline_scope if scoped is not None else None
        #: The transport's sized transfer (:class:`~hicache_sdk.transport.SizedTransfer`),
        #: when it offers one.
        self.sized = transport.offers(SizedTransfer)

    def deadline(self, op: str) -> AbstractContextManager[object]:
        """The deadline of one batch of ``op`` (``"read"``, ``"write"``, ``"exists"``): every
        transport call inside the block -- the follow-up existence check of a failed read,
        the deletion of a corrupt object -- ends by it (the resilience layer's
        ``deadline_scope``; nothing where the transport has none)."""
        return self._scope(op) if self._scope is not None else nullcontext()

    # -- failure handling ---------------------------------------------------------
    def _failed(self, op: str, exc: BaseException) -> None:
        """An exception that escaped the transport: an I/O failure or a bug, counted (the
        resilience layer counts its own; this is for what gets past it)."""
        self.metrics.failure(op, exc, getattr(self.transport, "io_errors", ()))

    def delete_corrupt(self, names: Sequence[str]) -> None:
        """Delete objects found corrupt and count them (``integrity_deleted``)."""
        unique = list(dict.fromkeys(names))
        if not unique:
            return
        self.metrics.count("integrity_deleted", len(unique))
        try:
            self.transport.delete(unique)
        except Exception as e:  # deletion is best effort
            self._failed("delete", e)

    # -- exists ------------------------------------------------------------------
    def exists(self, objects: Sequence[ObjectIO]) -> list[bool]:
        """Per object: present with the expected size (or a size the transport cannot
        tell cheaply). An object of the wrong size is missing and is deleted."""
        with self.deadline("exists"):
            return self.exists_named([o.name for o in objects], [o.object_size for o in objects])

    def exists_named(
        self, names: Sequence[str], sizes: Sequence[int], *, distinct: bool = False
    ) -> list[bool]:
        """:meth:`exists` by name and expected stored size (a repeated name is asked once;
        ``distinct``: the caller knows that no name repeats, which spares hashing them all)."""
        if not names:
            return []
        unique = names if distinct else list(dict.fromkeys(names))
        found = self._ask_exists(unique)
        if found is None:
            return [False] * len(names)
        return self._present(names, sizes, unique, found)

    def _ask_exists(self, names: Sequence[str]) -> list[int | None] | None:
        """The transport's answers for ``names``; ``None`` (counted) when it failed."""
        try:
            found = self.transport.exists(names)
            if len(found) != len(names):
                raise TransportError("exists returned a wrong number of answers", "protocol")
        except Exception as e:
            self._failed("exists", e)
            return None
        return found

    def _present(
        self, names: Sequence[str], sizes: Sequence[int], asked: Sequence[str], found: list[int | None]
    ) -> list[bool]:
        """Per name: present with its expected size (``SIZE_UNKNOWN`` counts as present),
        given ``found``, the answers for ``asked`` (``names`` or its distinct names). Names
        of the wrong size are deleted."""
        if len(asked) == len(names):
            if found[0] == SIZE_UNKNOWN and found.count(SIZE_UNKNOWN) == len(found):
                return [True] * len(names)  # all present, no sizes (Mooncake): one C-speed count
            kinds = set(found)
            if kinds <= _NO_SIZES:  # present or absent, no size to compare (C-speed passes)
                return [True] * len(names) if None not in kinds else [f is not None for f in found]
            if found == list(sizes):  # all present, right sizes
                return [True] * len(names)
        by_name = dict(zip(asked, found))
        out: list[bool] = []
        bad: list[str] = []
        for name, want in zip(names, sizes):
            size = by_name[name]
            if size is None:
                out.append(False)
            elif size != SIZE_UNKNOWN and size != want:
                out.append(False)
                bad.append(name)
            else:
                out.append(True)
        self.delete_corrupt(bad)
        return out

    # -- read ----------------------------------------------------------------------
    def read(self, objects: Sequence[ObjectIO]) -> list[bool]:
        """Read every object into its segments. ``True`` per object only when the bytes
        arrived whole and (header schemes) the header validated."""
        with self.deadline("read"):
            return self._read(objects)

    def _read(self, objects: Sequence[ObjectIO]) -> list[bool]:
        n = len(objects)
        if n == 0:
            return []
        limit = max(1, int(getattr(self.transport, "max_segments", 1 << 30)))
        n_hdr = sum(1 for o in objects if o.has_header)
        scratch = np.empty(max(1, n_hdr) * TRAILER_SIZE, dtype=np.uint8)
        base = _addr(scratch)
        buffers: list[list[Segment]] = []
        rec_at: list[int] = []  # offset of each object's trailer in scratch or its stage (-1: none)
        stages: list[np.ndarray | None] = []
        slot = 0
        for o in objects:
            payload = coalesce(o.segments)
            extra = 1 if o.has_header else 0
            if len(payload) + extra > limit:
                stage = np.empty(o.object_size, dtype=np.uint8)
                stages.append(stage)
                buffers.append([(_addr(stage), o.object_size)])
                rec_at.append(o.payload_len if o.has_header else -1)
                continue
            stages.append(None)
            if o.has_header:
                off = slot * TRAILER_SIZE
                slot += 1
                buffers.append([*payload, (base + off, TRAILER_SIZE)])
                rec_at.append(off)
            else:
                buffers.append(payload)
                rec_at.append(-1)
        try:
            ok = list(self.transport.read([o.name for o in objects], buffers))
            if len(ok) != n:
                raise TransportError("read returned a wrong number of answers", "protocol")
        except Exception as e:
            self._failed("read", e)
            return [False] * n
        bad: list[str] = []
        plain = _plain_records(objects, scratch) if n_hdr == n and all(st is None for st in stages) else None
        for i, o in enumerate(objects):
            if not ok[i] or (plain is not None and plain[i]):
                continue
            staged = stages[i]
            if o.has_header:
                assert o.identity is not None and o.page is not None
                at = rec_at[i]
                raw = (
                    staged[at : at + TRAILER_SIZE] if staged is not None else scratch[at : at + TRAILER_SIZE]
                )
                try:
                    record = PageHeader.decode(raw.tobytes())
                    record.check(identity=o.identity, page=o.page, payload_len=o.payload_len)
                    if record.checksum is not None:
                        payload_segs = [(_addr(staged), o.payload_len)] if staged is not None else o.segments
                        if crc32_segments(payload_segs) != record.checksum:
                            raise HeaderError("checksum")
                except HeaderError as e:
                    ok[i] = False
                    bad.append(o.name)
                    self.metrics.error(f"header_{e.reason}")
                    continue
            if staged is not None:
                self._scatter(staged, 0, o.segments)
        self.delete_corrupt(bad)
        failed = [o for o, good in zip(objects, ok) if not good and o.name not in bad] if any(ok) else []
        if failed:
            # A failed read may be a torn / wrong-sized object: the existence check
            # deletes those (the transport's read cannot tell us why it failed). Not when
            # nothing arrived (a failed call, a missed deadline): that check would spend a
            # second timeout past the caller's deadline, and the next existence query
            # removes a wrong-sized object anyway.
            self.exists(failed)
        return [bool(x) for x in ok]

    @staticmethod
    def _scatter(stage: np.ndarray, offset: int, segments: Sequence[Segment]) -> None:
        scatter(_addr(stage) + offset, segments)

    # -- write -----------------------------------------------------------------------
    def write(self, objects: Sequence[ObjectIO]) -> list[bool]:
        """Create every object (create-if-absent). ``True`` per object when it now exists.
        A name given more than once is written once, from its first occurrence, and every
        occurrence gets that result: the first write wins whatever the transport does
        with duplicates."""
        with self.deadline("write"):
            return self._write(objects)

    def _write(self, objects: Sequence[ObjectIO]) -> list[bool]:
        n = len(objects)
        if n == 0:
            return []
        dup = first_occurrences([o.name for o in objects])
        if dup is not None:
            firsts, owner = dup
            done = self._write([objects[i] for i in firsts])
            return [done[j] for j in owner]
        limit = max(1, int(getattr(self.transport, "max_segments", 1 << 30)))
        headers: list[bytes] = []
        keep: list[object] = []  # memory that must outlive the transport call
        buffers: list[list[Segment]] = []
        for o in objects:
            payload = coalesce(o.segments)
            hdr: bytes | None = None
            if o.has_header:
                assert o.identity is not None and o.page is not None
                crc = crc32_segments(payload) if self.checksum else None
                hdr = PageHeader(o.identity, o.page, o.payload_len, crc).encode()
                headers.append(hdr)
            extra = 1 if hdr is not None else 0
            if len(payload) + extra > limit:
                stage = np.empty(o.object_size, dtype=np.uint8)
                gather(payload, _addr(stage))
                if hdr is not None:
                    stage[o.payload_len :] = np.frombuffer(hdr, dtype=np.uint8)
                keep.append(stage)
                buffers.append([(_addr(stage), o.object_size)])
            elif hdr is not None:
                hbuf = np.frombuffer(hdr, dtype=np.uint8)
                keep.append(hbuf)
                buffers.append([*payload, (_addr(hbuf), TRAILER_SIZE)])
            else:
                buffers.append(payload)
        try:
            ok = list(self.transport.write([o.name for o in objects], buffers))
            if len(ok) != n:
                raise TransportError("write returned a wrong number of answers", "protocol")
        except Exception as e:
            self._failed("write", e)
            return [False] * n
        finally:
            del keep
        return [bool(x) for x in ok]
