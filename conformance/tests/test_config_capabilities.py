"""Capabilities that depend on the config (a backend's ``capabilities_for_config`` hook:
the suite's gate uses them and its skip says why), and the cross-process child that stays
alive while the parent reads what it wrote (``run_child(..., while_alive=...)``)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hicache_backend_file import FileStorage
from hicache_conformance import BackendSuite
from hicache_conformance.child import ChildJob, run_child
from hicache_conformance.matrix import PoolCase

from hicache_sdk import Capabilities
from hicache_sdk.spec import HiCacheStorageConfig

WHY = "pages live in this process only"


class VolatileFile(FileStorage):
    """The file backend, claiming that a config with ``namespace`` "volatile" is not persistent."""

    @classmethod
    def capabilities_for_config(cls, config: Mapping[str, Any]) -> tuple[Capabilities, dict[str, str]]:
        if config.get("namespace") == "volatile":
            return dataclasses.replace(cls.capabilities, persistent=False), {"persistent": WHY}
        return cls.capabilities, {}


class _Volatile(BackendSuite):
    backend = VolatileFile
    config = {"namespace": "volatile"}


class _Plain(_Volatile):
    config = {"namespace": "kept"}


class _Declared(_Volatile):
    declared_capabilities = Capabilities(persistent=True)


def test_the_config_decides_and_the_reason_is_given() -> None:
    assert VolatileFile.capabilities.persistent
    assert _Volatile.capabilities_of().persistent is False
    assert _Volatile.capability_notes() == {"persistent": WHY}
    assert _Plain.capabilities_of().persistent is True and _Plain.capability_notes() == {}
    # a test class's own declaration wins over the hook
    assert _Declared.capabilities_of().persistent is True and _Declared.capability_notes() == {}


def _children() -> list[int]:
    pids: list[int] = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children", encoding="ascii") as f:
            pids += [int(p) for p in f.read().split()]
    return pids


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_the_child_is_alive_while_the_parent_reads(tmp_path: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    job = ChildJob(
        backend="file",
        storage_config=HiCacheStorageConfig(model_name="m", extra_config={"root": str(root)}),
        case=PoolCase(),
        zero_copy=True,
        write=("a" * 64,),
    )
    seen: list[tuple[list[bool], int]] = []
    before = set(_children())  # servers other tests of the session may have started

    def parent_reads(result: dict[str, Any]) -> None:
        seen.append((result["write"], len(set(_children()) - before)))

    result = run_child(job, timeout=60, while_alive=parent_reads)
    assert seen == [([True], 1)], "the callback did not run while the child was alive"
    assert result["write"] == [True] and set(_children()) - before == set()


def test_an_error_in_the_callback_comes_after_the_child_ended(tmp_path: Path) -> None:
    job = ChildJob(
        backend="file",
        storage_config=HiCacheStorageConfig(model_name="m", extra_config={"root": str(tmp_path)}),
        case=PoolCase(),
        zero_copy=True,
        write=("b" * 64,),
    )

    before = set(_children())

    def fails(result: dict[str, Any]) -> None:
        raise AssertionError("the parent's read failed")

    with pytest.raises(AssertionError, match="the parent's read failed"):
        run_child(job, timeout=60, while_alive=fails)
    assert set(_children()) - before == set()
