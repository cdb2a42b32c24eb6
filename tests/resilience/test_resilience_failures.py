"""A failure explains itself: an I/O failure is counted under its reason with its (redacted)
message, logged at WARNING rate-limited; any other exception from a transport is a bug,
counted as ``bug:<ExceptionType>``, kept with its traceback and logged once per call site at
ERROR -- and still a miss."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest
import torch
from resilience_fakes import Buf, Cfg, MisbehavingTransport

from hicache_sdk.config import secret_field
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.kit.existence import CachedExistence
from hicache_sdk.memory import MemoryConfig, MemoryStorage, MemoryTransport, drop_store
from hicache_sdk.metrics.backend import BugRecord, Metrics, redact
from hicache_sdk.resilience import FailureInjector, wrap_transport
from hicache_sdk.spec import HiCacheStorageConfig
from hicache_sdk.transport import Segments, Transport, TransportError, is_io_error


class ClientLibraryError(Exception):
    """What a client library raises for a network failure (not an OSError)."""


class Flaky(MisbehavingTransport):
    io_errors: ClassVar[tuple[type[BaseException], ...]] = (ClientLibraryError,)


def _wrap(t: Transport, **cfg: Any) -> tuple[Any, Metrics]:
    m = Metrics()
    return wrap_transport(t, Cfg(**cfg), m, injector=FailureInjector()), m


@pytest.mark.parametrize("inline", [False, True])
def test_a_bug_is_counted_by_type_kept_once_per_site_and_logged_once(
    inline: bool, caplog: pytest.LogCaptureFixture
) -> None:
    t = MisbehavingTransport()
    w, m = _wrap(
        t, **({"exists_timeout_s": 0, "transfer_timeout_s": 0} if inline else {}), breaker_failures=100
    )
    t.raise_["read"] = TypeError("read() got an unexpected keyword argument 'cancel'")
    t.raise_["exists"] = TypeError("exists broke")
    with caplog.at_level(logging.WARNING, logger="hicache_sdk.failures"):
        for _ in range(3):
            assert w.read(["a"], [Buf(8).segs()]) == [False]  # still a miss: serving goes on
        assert w.exists(["a"]) == [None]
        t.raise_["read"] = KeyError("slot")
        assert w.read(["a"], [Buf(8).segs()]) == [False]
    assert m.errors() == {"bug:TypeError": 4, "bug:KeyError": 1}
    bugs = m.bugs()
    assert [(b.site, b.error) for b in bugs] == [
        ("read", "TypeError"),
        ("exists", "TypeError"),
        ("read", "KeyError"),
    ]
    first = bugs[0]
    assert (
        isinstance(first, BugRecord) and first.message == "read() got an unexpected keyword argument 'cancel'"
    )
    assert "Traceback (most recent call last)" in first.traceback and "in _enter" in first.traceback
    assert first.traceback.rstrip().endswith("TypeError: read() got an unexpected keyword argument 'cancel'")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 3  # once per (site, type), not once per call
    assert "transport bug in read: TypeError" in errors[0].getMessage()
    assert "Traceback (most recent call last)" in errors[0].getMessage()
    assert not [r for r in caplog.records if r.levelno == logging.WARNING and "bug:" in r.getMessage()]
    w.close()


def test_io_failures_keep_their_reason_and_last_message(caplog: pytest.LogCaptureFixture) -> None:
    t = Flaky()
    w, m = _wrap(t, breaker_failures=100)
    t.raise_["read"] = ConnectionRefusedError(111, "connection refused: 127.0.0.1:6399")
    t.raise_["write"] = ClientLibraryError("Error 111 connecting to 127.0.0.1:6399. Connection refused.")
    t.raise_["exists"] = TransportError("no route to 10.0.0.7:7000", reason="connection")
    with caplog.at_level(logging.WARNING, logger="hicache_sdk.failures"):
        for _ in range(2):
            assert w.read(["a"], [Buf(8).segs()]) == [False]
        assert w.write(["a"], [Buf(8).segs()]) == [False]
        assert w.exists(["a"]) == [None]
        t.raise_["read"] = TimeoutError("timed out reading from 127.0.0.1:6399")
        assert w.read(["a"], [Buf(8).segs()]) == [False]
    assert m.errors() == {
        "ConnectionRefusedError": 2,
        "ClientLibraryError": 1,
        "connection": 1,
        "TimeoutError": 1,
    }
    assert m.bugs() == []
    assert m.last_errors() == {
        "ConnectionRefusedError": "[Errno 111] connection refused: 127.0.0.1:6399",
        "ClientLibraryError": "Error 111 connecting to 127.0.0.1:6399. Connection refused.",
        "connection": "no route to 10.0.0.7:7000",
        "TimeoutError": "timed out reading from 127.0.0.1:6399",
    }
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    refused = [x for x in warnings if x.startswith("storage failure: ConnectionRefusedError")]
    assert (
        len(refused) == 1 and "connection refused: 127.0.0.1:6399" in refused[0]
    )  # rate-limited, with its message
    w.close()


def test_io_errors_belong_to_the_transport_that_declares_them() -> None:
    assert is_io_error(ClientLibraryError(), Flaky.io_errors)
    assert not is_io_error(ClientLibraryError())

    class Forgetful(CachedExistence):  # a wrapper that does not restate its inner's io_errors
        io_errors: ClassVar[tuple[type[BaseException], ...]] = ()

    for wrapped in (CachedExistence(Flaky(), 5.0), Forgetful(Flaky(), 5.0)):
        wrapped.io_errors = ()  # type: ignore[misc]
        w, m = _wrap(wrapped)
        wrapped.inner.raise_["read"] = ClientLibraryError("down")  # type: ignore[attr-defined]
        assert w.read(["a"], [Buf(8).segs()]) == [False]
        assert m.errors() == {"ClientLibraryError": 1}  # the inner transport's declaration holds
        w.close()
    t = MisbehavingTransport()  # declares nothing: the same exception is a bug there
    w, m = _wrap(t)
    t.raise_["read"] = ClientLibraryError("boom")
    assert w.read(["a"], [Buf(8).segs()]) == [False]
    assert m.errors() == {"bug:ClientLibraryError": 1}
    w.close()


def test_redact_hides_url_passwords_parameters_and_secrets() -> None:
    text = (
        "connect redis://alice:hunter2@10.0.0.1:6379/0 and rediss://:p%40ss@h:1 failed; "
        "GET /x?password=abc123&user=u token=t0k3n, auth s3cr3t-value"
    )
    out = redact(text, ["s3cr3t-value", ""])
    for secret in ("hunter2", "p%40ss", "abc123", "t0k3n", "s3cr3t-value"):
        assert secret not in out
    assert "redis://alice:***@10.0.0.1:6379/0" in out and "user=u" in out


@dataclass(frozen=True, kw_only=True)
class SecretConfig(MemoryConfig):
    password: str | None = secret_field(None)
    url: str = "redis://127.0.0.1:1"


class Leaky(MemoryTransport):
    """Puts its config's secrets into its error messages."""

    def __init__(self, config: SecretConfig) -> None:
        super().__init__(store=config.store)
        self.cfg = config

    def read(self, keys: Sequence[str], buffers: Sequence[Segments]) -> list[bool]:
        raise ConnectionError(f"AUTH {self.cfg.password} failed at {self.cfg.url}")

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        raise RuntimeError(f"unexpected reply to AUTH {self.cfg.password}")


class LeakyStorage(MemoryStorage):
    config_cls = SecretConfig
    transport_cls = Leaky

    def create_transport(self, config: Any) -> Transport:
        return Leaky(config)


def test_no_secret_of_the_config_reaches_messages_tracebacks_or_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = f"leaky-{uuid.uuid4().hex}"
    extra = {
        "store": store,
        "password": "pw-0xDEADBEEF",
        "url": "redis://admin:url-secret-42@127.0.0.1:6399/0",
    }
    with caplog.at_level(logging.WARNING, logger="hicache_sdk.failures"):
        s = LeakyStorage(HiCacheStorageConfig(model_name="m", extra_config=extra), {})
        try:
            s.register_mem_pool_host(MHAHostPool(16, 4, 2, 2, 8, dtype=torch.bfloat16, pin_memory=False))
            keys = [f"{i:064x}" for i in range(2)]
            assert s.batch_get_v1(keys, torch.arange(8)) == [False, False]
            assert s.batch_exists(keys) == 0
        finally:
            s.close()
            drop_store(store)
    assert (
        s.metrics.last_errors()["ConnectionError"] == "AUTH *** failed at redis://admin:***@127.0.0.1:6399/0"
    )
    (bug,) = [b for b in s.metrics.bugs() if b.site == "exists"]
    assert bug.message == "unexpected reply to AUTH ***"
    seen = " ".join(
        [*s.metrics.last_errors().values(), *(b.message + b.traceback for b in s.metrics.bugs())]
        + [r.getMessage() for r in caplog.records]
    )
    assert "ConnectionError" in seen and "bug:RuntimeError" in seen
    assert "pw-0xDEADBEEF" not in seen and "url-secret-42" not in seen
