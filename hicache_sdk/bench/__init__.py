"""Benchmark harness shared by every backend's benchmark script (see :mod:`.harness`)."""

from __future__ import annotations

from .harness import SCHEMA, BenchResult, Harness, write_result

__all__ = ["SCHEMA", "BenchResult", "Harness", "write_result"]
