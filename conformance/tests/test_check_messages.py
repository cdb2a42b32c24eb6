"""What ``hicache check`` (and ``hicache ping``) say when the server cannot be used: a
server that is not there is told apart from one that answers and says the bucket does
not exist. ("nothing ran" said once: ``tests/cli/test_cli_bad_input.py``.)"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hicache_sdk import TransportError
from hicache_sdk.cli.reach import unreachable
from hicache_sdk.memory import MemoryStorage, MemoryTransport
from hicache_sdk.spec import HiCacheStorageConfig

HERE = Path(__file__).resolve().parent


class _NoSuchBucket(MemoryTransport):
    """Answers every existence check as an object store whose bucket was deleted does."""

    def exists(self, keys: Sequence[str]) -> list[int | None]:
        raise TransportError("HEAD failed: NoSuchBucket: the bucket 'gone' does not exist", reason="error")


class NoSuchBucketStorage(MemoryStorage):
    def create_transport(self, config: object) -> MemoryTransport:
        return _NoSuchBucket()


class _Refused(MemoryTransport):
    def exists(self, keys: Sequence[str]) -> list[int | None]:
        raise TransportError("connection refused: 127.0.0.1:9", reason="connection")


class RefusedStorage(MemoryStorage):
    def create_transport(self, config: object) -> MemoryTransport:
        return _Refused()


def _backend(cls: type) -> object:
    return cls(HiCacheStorageConfig(model_name="m", extra_config={"namespace": "hicache-conformance-x"}), {})


def test_a_missing_bucket_is_not_an_unreachable_server() -> None:
    gone, refused = _backend(NoSuchBucketStorage), _backend(RefusedStorage)
    try:
        said = unreachable(gone)
        assert said is not None and said.startswith(
            "the backend's server answered, but what the backend points at "
        ), said
        assert "cannot be reached" not in said and "NoSuchBucket" in said, said
        said = unreachable(refused)
        assert said == "the backend's server cannot be reached (connection refused: 127.0.0.1:9)", said
    finally:
        gone.close()  # type: ignore[attr-defined]
        refused.close()  # type: ignore[attr-defined]
