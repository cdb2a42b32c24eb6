"""Repository-wide pytest setup: hypothesis profiles.

``ci`` (selected when ``CI`` is set): derandomized, bounded examples, no deadline, so the
suite is reproducible and stays inside the CI time budget. ``dev``: random, more examples.
Override with ``HYPOTHESIS_PROFILE``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))
