"""``S3Transport``: named objects in one bucket under one prefix, over boto3.

* **Concurrency.** Every batch is served by at most ``max_concurrency`` requests in
  flight (one pool per transport, shared by all caller threads); results are in key order.
* **exists** issues concurrent HEADs in key order and answers every key: a miss says
  nothing about the keys after it (the adapter asks a page's K objects, then its V objects,
  or several pools' objects, in one call).
* **read** is a GET whose body streams into the page segments (``readinto``, one copy);
  ``ContentLength`` different from the segments' total is a miss (``False``).
* **write** is create-if-absent: ``PUT`` with ``If-None-Match: *`` (``412`` = the object
  exists = success). Support is probed once (``conditional_put="auto"``); a store without
  it gets HEAD-then-PUT, whose race (two writers both see "absent" and both PUT) only
  ever replaces a page with a complete object of the same key.
* **delete** under an ``sglang-*`` key scheme removes only names inside
  :meth:`S3Transport.deletes_requested` (what ``S3Storage.batch_delete`` asked for); the
  adapter's removal of wrong-length objects is refused (counted in ``refused_deletes``):
  a shared bucket may hold another deployment's objects under those names, and without
  our header nothing proves a wrong-length object is ours. ``clear`` still removes the prefix.
* **Faults**: 404 is a miss; throttling/5xx are retried by botocore within the deadline
  (:func:`~hicache_backend_s3.config.attempts_within`); a batch whose every request
  failed raises ``TransportError`` (misses, breaker) whose message says what happened and
  where: ``"S3 GET failed: connection refused: http://127.0.0.1:9000"``. ``health()``
  raises the same way (``HeadBucket``), so a probe that fails says why.
  :attr:`S3Transport.io_errors` declares botocore's and urllib3's I/O exception types.
* ``clear(prefix)`` lists ``self.prefix + prefix`` page by page and deletes in batches of
  1000 (``DeleteObjects``). The configured prefix ends with ``/`` (or is empty), so
  prefix ``p/`` never reaches ``p2/``'s objects.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any, ClassVar, TypeVar

from hicache_sdk import Capabilities, HiCacheError, Segments, Transport, TransportError
from hicache_sdk.transport import Range, check_ranges

from .client import IO_ERRORS, classify, describe, endpoint_label, make_client
from .config import S3Config, attempts_within
from .ranges import read_ranges_s3
from .segio import SegmentReader, read_body_into, segment_views, total_size

__all__ = ["S3Transport"]

log = logging.getLogger(__name__)
T = TypeVar("T")


class _Failed:
    """A request that failed for an I/O reason: ``kind`` is :func:`classify`'s answer,
    ``detail`` :func:`describe`'s."""

    __slots__ = ("detail", "kind")

    def __init__(self, exc: BaseException) -> None:
        self.kind = classify(exc)
        self.detail = describe(exc)


#: Kinds that say nothing about the object: the next call may succeed.
_TRANSIENT = ("connection", "throttled", "tls")
#: The failure reason counted for each kind of a batch that failed as a whole.
_REASONS = {"tls": "tls", "auth": "auth", "throttled": "throttled"}


def _batch_failed(fails: Sequence[_Failed], what: str, endpoint: str) -> TransportError:
    """The error of a batch whose every request failed, naming what happened (the first
    failure's :func:`describe`) and the endpoint. The reason is the kind every request
    shared (``"tls"``: check verify / ca_bundle; ``"auth"``; ``"throttled"``), else
    ``"connection"``."""
    kinds = {f.kind for f in fails}
    kind = kinds.pop() if len(kinds) == 1 else "connection"
    detail = fails[0].detail if fails else "no answer"
    hint = " (check verify / ca_bundle)" if kind == "tls" else ""
    return TransportError(
        f"S3 {what} failed: {detail}: {endpoint}{hint}", reason=_REASONS.get(kind, "connection")
    )


class S3Transport(Transport):
    """See the module docs."""

    capabilities: ClassVar[Capabilities] = Capabilities(
        persistent=True, shared_across_processes=True, delete=True, health=True
    )

    #: Keys per listing page and per ``DeleteObjects`` request (S3's maximum for both).
    page_keys: ClassVar[int] = 1000
    io_errors: ClassVar[tuple[type[BaseException], ...]] = IO_ERRORS

    def __init__(self, cfg: S3Config) -> None:
        self.cfg = cfg
        self.bucket = cfg.bucket
        self.prefix = cfg.prefix
        self._own_names = cfg.key_scheme == "default"
        per = cfg.connect_timeout_s + cfg.read_timeout_s
        n_x = attempts_within(cfg.transfer_timeout_s, per, cfg.max_attempts)
        self._xfer = make_client(
            cfg, attempts=n_x, connect_s=cfg.connect_timeout_s, read_s=cfg.read_timeout_s
        )
        et = cfg.exists_timeout_s
        c_e = min(cfg.connect_timeout_s, et) if et > 0 else cfg.connect_timeout_s
        r_e = min(cfg.read_timeout_s, et) if et > 0 else cfg.read_timeout_s
        n_e = attempts_within(et, c_e + r_e, cfg.max_attempts)
        self._fast = make_client(cfg, attempts=n_e, connect_s=c_e, read_s=r_e)
        #: Where requests go, for messages: ``scheme://host:port`` (no credentials, no path).
        self.endpoint = endpoint_label(self._xfer.meta.endpoint_url)
        self._pool = ThreadPoolExecutor(cfg.max_concurrency, thread_name_prefix="hicache-s3")
        self._lock = threading.Lock()
        self._conditional: bool | None = {"on": True, "off": False}.get(cfg.conditional_put)
        self._closed = False
        self.refused_deletes = 0
        self._requested: Counter[str] = Counter()  # names inside deletes_requested()
        self._check_bucket()

    # -- construction --------------------------------------------------------------------
    def _check_bucket(self) -> None:
        """A missing bucket or rejected credentials fail here; an unreachable endpoint
        does not (the breaker handles it). Asked with the existence client: one attempt
        within the exists deadline, so construction never stalls on a frozen store."""
        try:
            self._fast.head_bucket(Bucket=self.bucket)
            return
        except Exception as e:
            kind = classify(e)
            if kind in ("tls", "connection", "throttled"):
                log.warning(
                    "s3: bucket %r not reachable at construction: %s: %s%s; calls miss until it answers",
                    self.bucket,
                    describe(e),
                    self.endpoint,
                    " (check verify / ca_bundle)" if kind == "tls" else "",
                )
                return
            if kind == "auth":
                raise HiCacheError(
                    f"s3: credentials rejected for bucket {self.bucket!r} at {self.endpoint} ({describe(e)})"
                ) from None
            if kind != "missing":
                raise HiCacheError(
                    f"s3: cannot use bucket {self.bucket!r} at {self.endpoint}: {describe(e)}"
                ) from None
        if not self.cfg.create_bucket:
            raise HiCacheError(
                f"s3: bucket {self.bucket!r} does not exist at {self.endpoint} "
                "(create it, or set create_bucket=true)"
            )
        kw: dict[str, Any] = {"Bucket": self.bucket}
        if self.cfg.region != "us-east-1":
            kw["CreateBucketConfiguration"] = {"LocationConstraint": self.cfg.region}
        try:
            self._xfer.create_bucket(**kw)
        except Exception as e:
            if "BucketAlready" not in str(e):
                raise HiCacheError(
                    f"s3: cannot create bucket {self.bucket!r} at {self.endpoint}: {describe(e)}"
                ) from None

    # -- fan-out ---------------------------------------------------------------------------
    def _run(self, fn: Callable[[int], T], n: int, what: str) -> list[T | object]:
        """``fn(i)`` for ``i < n`` on the pool, results in order; a request that raised is a
        :class:`_Failed`. Every request failing raises ``TransportError`` (:func:`_batch_failed`)."""
        if self._closed:
            raise TransportError("s3 transport is closed", reason="closed")

        def call(i: int) -> T | object:
            try:
                return fn(i)
            except Exception as e:
                failed = _Failed(e)
                log.debug("s3 %s failed (%s): %s", what, failed.kind, failed.detail)
                return failed

        if n == 1:
            out: list[T | object] = [call(0)]
        else:
            out = [f.result() for f in [self._pool.submit(call, i) for i in range(n)]]
        if n and all(isinstance(r, _Failed) for r in out):
            raise _batch_failed([r for r in out if isinstance(r, _Failed)], what, self.endpoint)
        return out

    def _key(self, name: str) -> str:
        return self.prefix + name

    # -- Transport -----------------------------------------------------------------------------
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        if self._closed:
            raise TransportError("s3 transport is closed", reason="closed")
        n = len(keys)
        out: list[int | None] = [None] * n
        if not n:
            return out

        def head(i: int) -> int | object | None:
            try:
                r = self._fast.head_object(Bucket=self.bucket, Key=self._key(keys[i]))
                return int(r["ContentLength"])
            except Exception as e:
                if classify(e) == "missing":
                    return None
                failed = _Failed(e)
                log.debug("s3 HEAD failed (%s): %s", failed.kind, failed.detail)
                return failed

        # Every key is asked (at most max_concurrency in flight, in key order): a miss says
        # nothing about the keys after it -- the adapter asks a page's K column and then its
        # V column, or several pools' objects, in one call.
        nxt = 0
        fails: list[_Failed] = []
        inflight: dict[Future[Any], int] = {}
        while nxt < n or inflight:
            while nxt < n and len(inflight) < self.cfg.max_concurrency:
                inflight[self._pool.submit(head, nxt)] = nxt
                nxt += 1
            done, _ = wait(inflight, return_when=FIRST_COMPLETED)
            for f in done:
                i = inflight.pop(f)
                r = f.result()
                if isinstance(r, _Failed):
                    fails.append(r)
                elif r is not None:
                    out[i] = r
        if fails and len(fails) == nxt:
            raise _batch_failed(fails, "HEAD", self.endpoint)
        return out

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        def get(i: int) -> bool:
            want = total_size(buffers[i])
            try:
                r = self._xfer.get_object(Bucket=self.bucket, Key=self._key(keys[i]))
            except Exception as e:
                if classify(e) == "missing":
                    return False
                raise
            body = r["Body"]
            try:
                if int(r.get("ContentLength", -1)) != want:
                    return False
                return read_body_into(body, segment_views(buffers[i]))
            finally:
                body.close()

        return [r is True for r in self._run(get, len(keys), "GET")]

    def read_ranges(self, key: str, ranges: Sequence[Range]) -> bool:
        """One ``HEAD``, then a ranged ``GET`` per range (:mod:`.ranges`)."""
        if self._closed:
            check_ranges(ranges)  # a malformed range is a ValueError, even when closed
            return False
        name = self._key(key)
        return read_ranges_s3(
            lambda: self._fast.head_object(Bucket=self.bucket, Key=name),
            lambda span: self._xfer.get_object(Bucket=self.bucket, Key=name, Range=span),
            self.count_failure,
            ranges,
        )

    def _conditional_supported(self) -> bool:
        with self._lock:
            if self._conditional is not None:
                return self._conditional
        probe = self._key(f".hicache-probe-{uuid.uuid4().hex}")
        supported = False
        try:
            self._xfer.put_object(Bucket=self.bucket, Key=probe, Body=b"1", IfNoneMatch="*")
            try:
                self._xfer.put_object(Bucket=self.bucket, Key=probe, Body=b"2", IfNoneMatch="*")
            except Exception as e:
                if classify(e) != "exists":
                    raise
                supported = True
        except Exception as e:
            if classify(e) in _TRANSIENT:
                raise  # unknown yet: probe again on the next write
            supported = False
        finally:
            try:
                self._xfer.delete_object(Bucket=self.bucket, Key=probe)
            except Exception:
                pass
        if not supported:
            log.warning("s3: the store ignores If-None-Match: *; writes use HEAD-then-PUT (racy)")
        with self._lock:
            self._conditional = supported
        return supported

    def write(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        if not keys:
            return []
        try:
            conditional = self._conditional_supported()
        except Exception as e:
            raise _batch_failed([_Failed(e)], "PUT", self.endpoint) from None
        first: dict[str, int] = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        order = list(first.values())

        def put(j: int) -> bool:
            i = order[j]
            key = self._key(keys[i])
            if not conditional:
                try:
                    self._xfer.head_object(Bucket=self.bucket, Key=key)
                    return True
                except Exception as e:
                    if classify(e) != "missing":
                        raise
            body = SegmentReader(buffers[i])
            kw: dict[str, Any] = {"IfNoneMatch": "*"} if conditional else {}
            try:
                self._xfer.put_object(Bucket=self.bucket, Key=key, Body=body, ContentLength=len(body), **kw)
            except Exception as e:
                if classify(e) == "exists":
                    return True
                if classify(e) in _TRANSIENT:
                    raise
                log.debug("s3 PUT refused: %s", describe(e))
                return False
            return True

        res = self._run(put, len(order), "PUT")
        by_key = {keys[i]: r is True for i, r in zip(order, res)}
        return [by_key[k] for k in keys]

    @property
    def owns_names(self) -> bool:
        """Whether every object under our names is provably ours (the default scheme's
        header); otherwise only :meth:`deletes_requested` names are deleted."""
        return self._own_names

    @contextmanager
    def deletes_requested(self, names: Sequence[str]) -> Iterator[None]:
        """While open, :meth:`delete` removes these names even under an ``sglang-*``
        scheme: a caller (``S3Storage.batch_delete``) asked for them, as opposed to the
        adapter's removal of wrong-length objects, which stays refused. Keyed by name,
        not by thread (the resilience layer may run the delete on another thread); a
        delete that runs after the block closed (abandoned at its deadline) is refused."""
        unique = list(dict.fromkeys(names))
        with self._lock:
            self._requested.update(unique)
        try:
            yield
        finally:
            with self._lock:
                self._requested.subtract(unique)
                for n in unique:
                    if self._requested[n] <= 0:
                        del self._requested[n]

    def delete(self, keys: Sequence[str]) -> None:
        if not keys or self._closed:
            return
        unique = list(dict.fromkeys(keys))
        if not self._own_names:
            with self._lock:
                allowed = [k for k in unique if self._requested.get(k, 0) > 0]
                self.refused_deletes += len(unique) - len(allowed)
            unique = allowed
        if unique:
            self._delete_objects([self._key(k) for k in unique])

    def _delete_objects(self, full: list[str]) -> None:
        step = self.page_keys
        for s in range(0, len(full), step):
            chunk = [{"Key": k} for k in full[s : s + step]]
            try:
                self._xfer.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})
            except Exception as e:
                log.debug("s3 DeleteObjects failed: %s: %s", describe(e), self.endpoint)

    def clear(self, prefix: str) -> None:
        """Remove every object under ``self.prefix + prefix`` (paginated listing, batched
        deletes). Errors propagate as ``TransportError`` (an admin call)."""
        try:
            pages = self._xfer.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=self._key(prefix), PaginationConfig={"PageSize": self.page_keys}
            )
            for page in pages:
                keys = [o["Key"] for o in page.get("Contents", ())]
                if keys:
                    self._delete_objects(keys)
        except Exception as e:
            raise _batch_failed([_Failed(e)], "clear", self.endpoint) from None

    def health(self) -> bool:
        """``HeadBucket`` answered. Any other outcome raises ``TransportError`` saying what
        happened and where (``"S3 HeadBucket failed: connection refused: http://..."``,
        reason ``"connection"``, ``"tls"`` or ``"auth"``): the resilience layer counts why
        the breaker stays open, and ``hicache ping`` can show it."""
        try:
            self._fast.head_bucket(Bucket=self.bucket)
            return True
        except Exception as e:
            raise _batch_failed([_Failed(e)], "HeadBucket", self.endpoint) from None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        for c in (self._xfer, self._fast):
            try:
                c.close()
            except Exception:
                pass

    def __repr__(self) -> str:
        return (
            f"S3Transport(bucket={self.bucket!r}, prefix={self.prefix!r}, endpoint={self.cfg.endpoint_url!r})"
        )
