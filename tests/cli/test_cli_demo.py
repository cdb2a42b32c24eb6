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
    assert cold["causes"]["sidecar_miss"] == 0 and cold["causes"]["hybrid_incomplete"] == 0
    # SGLang's lifecycle counters (tokens): every L3 hit token of the cold peer was used
    life = cold["lifecycle_tokens"]
    assert life["sglang:storage_prefetch_hit_tokens_total"] == 2 * 608
    assert life["sglang:prefetched_tokens_total"] == 2 * 608
    assert sum(life["sglang:storage_prefetch_unfulfilled_tokens_total"].values()) == 0
    # the second turns add 96 tokens after the device hit: under the threshold, not queried
    assert life["hicache_prefetch_declined_tokens_total"]["too_short"] == 2 * 96
    assert warm["pages_written"] > 0 and other["tiers_tokens"]["storage"] == 0


def test_demo_text_explains_each_reason_and_never_redraws_into_a_pipe() -> None:
    out = subprocess.run(
        [str(HICACHE), "demo", "--conversations", "2", "--turns", "2", "--io-timeout", "10"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "\r" not in out.stderr and "2-cold-peer  4/4 requests" in out.stderr
    assert "not attempted  too_short=192" in out.stdout
    # every reason shown is explained once, below the table
    assert out.stdout.count("  too_short: the span after the device and host hits") == 1


def test_demo_rejects_negative_io_timeout() -> None:
    out = subprocess.run(
        [str(HICACHE), "demo", "--io-timeout", "-1"], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 2 and "--io-timeout" in out.stderr
