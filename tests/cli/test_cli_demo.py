"""``hicache demo`` end to end (three spawned engine processes over the file backend), with
hybrid sidecar pools and every backend call bounded by the deadline runner."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HICACHE = Path(sys.executable).parent / "hicache"

pytest.importorskip("torch")


def test_demo_hybrid_json() -> None:
    out = subprocess.run(
        [
            str(HICACHE),
            "demo",
            "--hybrid",
            "--conversations",
            "2",
            "--turns",
            "2",
            "--json",
            "--io-timeout",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["checks"] == {
        "all_bytes_identical": True,
        "cold_peer_served_from_storage": True,
        "other_dtype_zero_storage_hits": True,
    }
    warm, cold, other = report["runs"]
    assert cold["sidecars"] == ["mamba", "indexer"]
    # both conversations' first turn (512 + 96 tokens, 38 pages of 16) come from storage,
    # Mamba state included; nothing is discarded for a missing sidecar
    assert cold["tiers_tokens"]["storage"] == 2 * 608
    assert cold["early_aborts"]["sidecar_miss"] == 0 and cold["early_aborts"]["hybrid_incomplete"] == 0
    assert warm["pages_written"] > 0 and other["tiers_tokens"]["storage"] == 0


def test_demo_rejects_negative_io_timeout() -> None:
    out = subprocess.run(
        [str(HICACHE), "demo", "--io-timeout", "-1"], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 2 and "--io-timeout" in out.stderr
