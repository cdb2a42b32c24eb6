"""Bad input at the command line, as a user types it (``hicache`` as a subprocess): one line
on stderr naming what was wrong and the valid choices, exit 2, never a traceback; an
unreachable server is exit 1 with the transport's error."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HICACHE = str(Path(sys.executable).with_name("hicache"))


def _hicache(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HICACHE, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once the socket is closed


def _one_line(proc: subprocess.CompletedProcess[str], code: int) -> str:
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out
    assert "Traceback" not in out, out
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize("command", ["check", "ping"])
def test_unknown_backend_name(tmp_path: Path, command: str) -> None:
    line = _one_line(_hicache(command, "fiel", cwd=tmp_path), 2)
    assert "no HiCache storage backend named 'fiel'" in line
    assert "Available: file, memory" in line


@pytest.mark.parametrize("command", ["check", "ping"])
def test_unknown_config_key_says_did_you_mean(tmp_path: Path, command: str) -> None:
    config = json.dumps({"roott": str(tmp_path / "s")})
    line = _one_line(_hicache(command, "file", "--config", config, cwd=tmp_path), 2)
    assert "unknown config key(s) 'roott' (did you mean 'root'?)" in line
    assert "valid keys: " in line and " root," in line


@pytest.mark.parametrize(
    ("command", "key", "value", "says"),
    [
        ("check", "max_size", "12 parsecs", "use bytes, SI 200M/4G, IEC 64Ki/4GiB"),
        ("ping", "transfer_timeout_s", "fast", "use seconds or 500ms / 2s / 1m"),
        ("ping", "io_threads", 2.5, "expected an integer, got 2.5"),
        ("check", "key_scheme", "sglang", "must be 'default', 'sglang-file' or 'sglang-mooncake'"),
    ],
)
def test_wrong_type_or_unit_names_the_key(
    tmp_path: Path, command: str, key: str, value: object, says: str
) -> None:
    config = json.dumps({"root": str(tmp_path / "s"), key: value})
    line = _one_line(_hicache(command, "file", "--config", config, cwd=tmp_path), 2)
    assert f"{key}: " in line and says in line


@pytest.mark.parametrize("command", ["check", "ping"])
def test_unreachable_server_is_exit_1_with_the_error(tmp_path: Path, command: str) -> None:
    port = _closed_port()
    config = json.dumps({"url": f"redis://127.0.0.1:{port}"})
    report = tmp_path / "report.json"
    extra = ["--report", str(report)] if command == "check" else []
    proc = _hicache(command, "redis", "--config", config, *extra, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "Traceback" not in out
    reached = [ln for ln in out.splitlines() if "the backend's server cannot be reached (" in ln]
    assert len(reached) == 1 and f"connection refused: 127.0.0.1:{port}" in reached[0], out
    if command == "check":
        assert proc.stderr.rstrip().endswith("; nothing ran") and out.count("nothing ran") == 1, out
        error = json.loads(report.read_text())["error"]
        assert error.startswith("nothing ran: the backend's server cannot be reached (")
        assert error.count("nothing ran") == 1, error


def test_ping_refuses_pages_beyond_the_machines_memory(tmp_path: Path) -> None:
    config = json.dumps({"root": str(tmp_path / "s")})
    line = _one_line(_hicache("ping", "file", "--config", config, "--pages", "100000000", cwd=tmp_path), 2)
    assert line.startswith("hicache ping: --pages 100000000 of --page-size 16 needs 3.3 TB of host memory; ")
    assert line.endswith(" is available")
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").rglob("*.bin"))


def test_bench_refuses_a_batch_beyond_the_machines_memory(tmp_path: Path) -> None:
    line = _one_line(_hicache("bench", "memory", "--batch", "1000000", cwd=tmp_path), 2)
    assert line.startswith(
        "hicache bench: --batch 1000000 of --page-bytes 64KiB needs 262.1 GB of host memory; "
    )


@pytest.mark.parametrize(
    ("content", "suffix", "says"),
    [
        (None, ".json", "No such file or directory"),
        ("{bad", ".json", "not valid: Expecting property name"),
        ("x = [", ".toml", "not valid: "),
        ("{}", ".txt", "unsupported extension (use .json, .toml or .yaml)"),
    ],
)
def test_config_file_problems_name_the_file(
    tmp_path: Path, content: str | None, suffix: str, says: str
) -> None:
    path = tmp_path / f"c{suffix}"
    if content is not None:
        path.write_text(content)
    line = _one_line(_hicache("ping", "file", "--config", f"@{path}", cwd=tmp_path), 2)
    assert str(path) in line and says in line and "Errno" not in line
