"""``hicache ping``: a real round trip through ``memory``, broken backends (reached by
module path), usage/config errors, and the installed console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from hicache_sdk.cli import main
from hicache_sdk.errors import ConfigError
from hicache_sdk.spec import HiCacheStorage

HICACHE = Path(sys.executable).parent / "hicache"
STEPS = [
    "construct",
    "reach",
    "register",
    "fill",
    "exists_before",
    "set",
    "exists_after",
    "get",
    "compare",
    "cleanup",
    "close",
]
HERE = Path(__file__).parent

pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def _fresh_registry() -> Iterator[None]:
    from hicache_sdk import registry

    registry.refresh()
    yield
    registry.refresh()


def _memory_ready() -> bool:
    try:
        from hicache_sdk.registry import resolve_backend

        resolve_backend("memory")
        import hicache_sdk.hostpool as hp

        return hasattr(hp, "MHAHostPool")
    except Exception:
        return False


needs_memory = pytest.mark.skipif(not _memory_ready(), reason="memory backend / host pool not available")


class DictV1Storage(HiCacheStorage):
    """A v1 backend keeping page copies in a dict; subclasses break it on purpose."""

    last: ClassVar[Any] = None

    def __init__(self, storage_config: Any, kwargs: Any) -> None:
        self.storage_config = storage_config
        self.pages: dict[str, Any] = {}
        type(self).last = self

    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        self.pool = mem_pool_host

    def _starts(self, host_indices: Any) -> list[int]:
        return [int(i) for i in host_indices[:: self.pool.page_size]]

    def _store(self, key: str, page: Any) -> None:
        self.pages.setdefault(key, page.clone())

    def _load(self, page: Any) -> Any:
        return page

    def batch_set_v1(self, keys: Any, host_indices: Any, extra_info: Any = None) -> list[bool]:
        for key, start in zip(keys, self._starts(host_indices)):
            self._store(key, self.pool.get_data_page(start, flat=True))
        return [True] * len(keys)

    def batch_get_v1(self, keys: Any, host_indices: Any, extra_info: Any = None) -> list[bool]:
        out = []
        for key, start in zip(keys, self._starts(host_indices)):
            page = self.pages.get(key)
            if page is not None:
                self.pool.set_from_flat_data_page(start, self._load(page))
            out.append(page is not None)
        return out

    def exists(self, key: str) -> bool:
        return key in self.pages

    def get(self, key: str, target_location: Any = None, target_sizes: Any = None) -> Any:
        return self.pages.get(key)

    def batch_get(self, keys: Any, target_locations: Any = None, target_sizes: Any = None) -> Any:
        out = []
        for key, target in zip(keys, target_locations):
            page = self.pages.get(key)
            if page is not None:
                target.copy_(page)
            out.append(None if page is None else target)
        return out

    def set(self, key: str, value: Any = None, target_location: Any = None, target_sizes: Any = None) -> bool:
        self._store(key, value)
        return True

    def batch_set(
        self, keys: Any, values: Any = None, target_locations: Any = None, target_sizes: Any = None
    ) -> bool:
        for key, value in zip(keys, values):
            self._store(key, value)
        return True


class CorruptingStorage(DictV1Storage):
    def _load(self, page: Any) -> Any:
        bad = page.clone()
        bad.view(dtype=__import__("torch").uint8)[7] ^= 0xFF
        return bad


class ForgetfulStorage(DictV1Storage):
    def _store(self, key: str, page: Any) -> None:
        pass


class RaisingStorage(DictV1Storage):
    def batch_get_v1(self, keys: Any, host_indices: Any, extra_info: Any = None) -> list[bool]:
        raise RuntimeError("socket closed")


class LegacyStorage(DictV1Storage):
    def batch_set_v1(self, keys: Any, host_indices: Any, extra_info: Any = None) -> list[bool]:
        raise NotImplementedError

    def batch_get_v1(self, keys: Any, host_indices: Any, extra_info: Any = None) -> list[bool]:
        raise NotImplementedError


class DeletingStorage(DictV1Storage):
    def batch_delete(self, keys: Any) -> None:
        for key in keys:
            self.pages.pop(key, None)


class UnreachableStorage(DictV1Storage):
    def __init__(self, storage_config: Any, kwargs: Any) -> None:
        raise ConnectionError("connection refused")


class BadConfigStorage(DictV1Storage):
    def __init__(self, storage_config: Any, kwargs: Any) -> None:
        raise ConfigError("DictConfig: unknown config key(s) 'hots'")


def _path(cls: type) -> str:
    return f"{__name__}:{cls.__name__}"


def _ping(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["ping", *args])
    out, err = capsys.readouterr()
    return code, out, err


@needs_memory
def test_ping_memory_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _ping(capsys, "memory", "--config", '{"store": "cli-ping"}')
    assert code == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith("hicache ping memory: 4 pages x 16 tokens, 16384 B/page, page_first")
    for step in STEPS:
        assert any(line.split()[1:2] == [step] and line.split()[0] == "ok" for line in lines), step
    assert "4/4 identical" in out and "MB/s" in out
    assert lines[-1] == "OK"


@needs_memory
@pytest.mark.parametrize("layout", ["layer_first", "page_first_direct", "page_head"])
def test_ping_memory_json_other_layouts(capsys: pytest.CaptureFixture[str], layout: str) -> None:
    code, out, _ = _ping(
        capsys, "memory", "--config", "{}", "--layout", layout, "--pages", "3", "--page-size", "4", "--json"
    )
    report = json.loads(out)
    assert code == 0, report
    assert report["ok"] is True and report["layout"] == layout and report["pages"] == 3
    assert [s["step"] for s in report["steps"]] == STEPS
    assert report["page_bytes"] == 2 * 2 * 2 * 64 * 4 * 2  # k+v, layers, heads, dim, tokens, bf16
    by = {s["step"]: s for s in report["steps"]}
    assert by["compare"]["detail"] == "3/3 identical"
    assert by["set"]["bytes_per_s"] > 0 and by["get"]["bytes_per_s"] > 0


def test_ping_detects_corruption(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _ping(capsys, _path(CorruptingStorage), "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    by = {s["step"]: s for s in report["steps"]}
    assert by["get"]["ok"] is True
    assert (
        by["compare"]["ok"] is False and by["compare"]["detail"] == "0/4 identical; pages [0, 1, 2, 3] differ"
    )


def test_ping_detects_misses(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _ping(capsys, _path(ForgetfulStorage))
    assert code == 1
    assert "FAIL exists_after" in out and "0/4 present (expected 4)" in out
    assert "FAIL get" in out and "0/4 read" in out
    assert out.splitlines()[-1] == "FAILED"


def test_ping_reports_a_raising_step(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _ping(capsys, _path(RaisingStorage))
    assert code == 1
    assert "raised RuntimeError: socket closed" in out
    assert "ok   close" in out and "Traceback" not in out + err


def test_ping_unreachable_backend_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _ping(capsys, _path(UnreachableStorage))
    assert code == 1
    assert "FAIL construct" in out and "ConnectionError: connection refused" in out


def test_ping_legacy_backend(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _ping(capsys, _path(LegacyStorage), "--pages", "2", "--json")
    report = json.loads(out)
    assert code == 0, report
    assert report["api"] == "legacy"


def test_ping_cleans_up_with_batch_delete(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _ping(capsys, _path(DeletingStorage), "--pages", "3")
    assert code == 0, out
    assert "deleted 3 pages" in out
    assert DeletingStorage.last.pages == {}


def test_ping_config_reaches_extra_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text('{"answer": 42}')
    code, _, _ = _ping(capsys, _path(DictV1Storage), "--config", f"@{cfg}", "--pages", "1")
    assert code == 0
    sc = DictV1Storage.last.storage_config
    assert sc.extra_config == {"answer": 42}
    assert sc.model_name == "hicache-ping" and sc.is_page_first_layout is True


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["memory", "--config", "{bad"], "hicache ping: --config is not valid JSON"),
        (["memory", "--config", "[1]"], "hicache ping: config must be a JSON object"),
        (
            ["memory", "--config", "@/nonexistent/c.json"],
            "hicache ping: --config @/nonexistent/c.json: No such file",
        ),
        (["no-such-backend"], "hicache ping: no HiCache storage backend named 'no-such-backend'"),
        ([_path(BadConfigStorage)], "hicache ping: DictConfig: unknown config key(s) 'hots'"),
    ],
)
def test_ping_usage_and_config_errors_exit_2(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = _ping(capsys, *args)
    assert code == 2
    assert err.startswith(message)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert out == ""


@pytest.mark.parametrize(
    "args", [["memory", "--pages", "0"], ["memory", "--page-size", "x"], ["memory", "--layout", "nope"], []]
)
def test_ping_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code, _, err = _ping(capsys, *args)
    assert code == 2 and "usage: hicache ping" in err


@needs_memory
def test_console_script_ping_round_trips() -> None:
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    ok = subprocess.run(
        [str(HICACHE), "ping", "memory", "--config", "{}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == "OK"
    bad = subprocess.run(
        [str(HICACHE), "ping", "test_cli_ping:CorruptingStorage", "--pages", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL compare" in bad.stdout
    usage = subprocess.run(
        [str(HICACHE), "ping", "memory", "--config", "{bad"], capture_output=True, text=True, timeout=120
    )
    assert usage.returncode == 2 and usage.stderr.startswith("hicache ping: --config is not valid JSON")
    assert "Traceback" not in usage.stderr


def test_ping_file_backend_when_present(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file backend, found through its own entry point (its source folder on sys.path)."""
    from hicache_sdk import registry

    monkeypatch.syspath_prepend(str(HERE.parents[1] / "backends" / "file"))
    registry.refresh()
    try:
        registry.resolve_backend("file")
    except Exception as e:
        pytest.skip(f"file backend not available: {e}")
    config = json.dumps({"root": str(tmp_path / "store")})
    code, out, err = _ping(capsys, "file", "--config", config, "--pages", "2", "--json")
    report = json.loads(out)
    assert code == 0, (report, err)
    assert {s["step"]: s["detail"] for s in report["steps"]}["compare"] == "2/2 identical"
    assert any((tmp_path / "store").rglob("*")), "the file backend wrote nothing under its root"


class _WriteRefused:
    """Mixin for a MemoryTransport whose every write fails with a connection error."""

    def write(self, keys: Any, buffers: Any) -> list[bool]:
        raise ConnectionRefusedError("refused")


def _refusing_memory_storage() -> type:
    from hicache_sdk.memory import MemoryStorage, MemoryTransport

    transport_cls = type("RefusingTransport", (_WriteRefused, MemoryTransport), {})

    def create_transport(self: Any, config: Any) -> Any:
        return transport_cls(store=config.store, capacity_bytes=config.capacity_bytes)

    return type("RefusingMemoryStorage", (MemoryStorage,), {"create_transport": create_transport})


RefusingMemoryStorage = _refusing_memory_storage()


def test_ping_names_the_counted_failure_reasons(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="hicache_sdk.failures"):
        code, out, _ = _ping(capsys, _path(RefusingMemoryStorage))
    assert code == 1
    set_line = next(line for line in out.splitlines() if " set " in line)
    assert "FAIL" in set_line and "failures:" in set_line, set_line
    warned = [r for r in caplog.records if r.name == "hicache_sdk.failures"]
    assert warned and "storage failure" in warned[0].getMessage()
    assert len({r.getMessage().split(" (")[0] for r in warned}) == len(warned)  # once per reason
