"""The module paths 0.2.0 moved still import: each is a stub module that warns once with a
``DeprecationWarning`` naming the new path and gives the new module itself. Importing
``hicache_sdk`` installs nothing on ``sys.meta_path``.

Run in a fresh interpreter, so that no earlier import has warned already."""

from __future__ import annotations

import json
import subprocess
import sys

from hicache_sdk._compat import MOVED

_PROBE = r"""
import importlib, json, sys, warnings

before = list(sys.meta_path)
import hicache_sdk
from hicache_sdk._compat import MOVED
out = {"meta_path_unchanged": sys.meta_path == before, "modules": {}}
for old, new in MOVED.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = importlib.import_module(old)
        again = importlib.import_module(old)  # imported already: no second warning
    mine = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning) and old + " " in str(w.message)]
    target = importlib.import_module(new)
    out["modules"][old] = {
        "warnings": mine,
        "same": got is target or (got is again and all(getattr(got, n) is getattr(target, n) for n in getattr(target, "__all__", []))),
        "identical": got is target,
    }
print(json.dumps(out))
"""


def _probe() -> dict[str, object]:
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    got: dict[str, object] = json.loads(res.stdout.splitlines()[-1])
    return got


def test_old_paths_are_stub_modules_that_warn_once_and_give_the_new_module() -> None:
    got = _probe()
    assert got["meta_path_unchanged"] is True
    mods = got["modules"]
    assert isinstance(mods, dict) and set(mods) == set(MOVED)
    for old, new in MOVED.items():
        m = mods[old]
        assert m["warnings"] == [f"{old} moved to {new} in hicache-sdk 0.2.0; import it from there"], old
        assert m["same"], old
        # a moved module is the new module itself; the moved package forwards its names
        assert m["identical"] is (old != "hicache_sdk.readpath"), old


def test_a_submodule_of_the_moved_package_loads_once() -> None:
    """``hicache_sdk.readpath.cache`` is ``hicache_sdk.hiradix.cache``, not a second copy
    executed under the old name (its classes would then differ)."""
    code = (
        "import warnings; warnings.simplefilter('ignore')\n"
        "import hicache_sdk.readpath.cache as old, hicache_sdk.hiradix.cache as new\n"
        "import hicache_sdk.readpath as pkg, hicache_sdk.hiradix as hiradix\n"
        "print(old is new, pkg.cache is new, pkg.CacheState is hiradix.CacheState)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.split() == ["True", "True", "True"]
