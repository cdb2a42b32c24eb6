"""The suite against the backend named by ``--hicache-backend`` (collects nothing
without it)."""

from __future__ import annotations

from hicache_conformance.plugin import configured_suite

_suite = configured_suite()
if _suite is not None:
    TestConfiguredBackend = _suite
