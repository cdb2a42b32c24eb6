"""Minimal reproducers of defects the compatibility matrix (``docs/compatibility.md``) found
in SGLang 0.5.23's own HiCache storage backends; collected only under ``tox -e sglang``
(``HICACHE_SGLANG_ENV=1``, see ``tests/sglang/conftest.py``).

Each test states what SGLang's controller relies on and is marked ``xfail(strict=True)``
with the defect as its reason: it passes while the defect is there, and fails the run the
day SGLang fixes it (then the matrix row and its finding must change). Each is written to be
filed upstream as is: SGLang's own backend, built by SGLang's ``StorageBackendFactory``,
SGLang's own host pool, and the controller's own way of reading results.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
