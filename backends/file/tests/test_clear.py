"""``FileStorage.clear()`` removes exactly this instance's pages: under the default scheme
the files below ``{ns}/{model}/``, never a neighbour's -- models ``m`` / ``m_x`` / no
model, namespaces ``p`` / ``p2`` in one root, or a neighbouring root ``p`` / ``p2``.
``sglang-file`` (SGLang's flat names, which cannot tell models apart) refuses and
removes nothing."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from _helpers import listing
from hicache_backend_file import FileStorage

from hicache_sdk import ClearRefusedError

torch = pytest.importorskip("torch")

from hicache_sdk.hostpool import MHAHostPool  # noqa: E402
from hicache_sdk.spec import HiCacheStorageConfig  # noqa: E402

PAGE = 4


class _Store:
    """A backend with two pages written."""

    def __init__(self, root: Path, model: str | None, **extra: Any) -> None:
        cfg = HiCacheStorageConfig(model_name=model, extra_config={"root": str(root), **extra})
        self.s = FileStorage(cfg, {})
        pool = MHAHostPool(8, PAGE, 1, 1, 8, dtype=torch.bfloat16, layout="page_first", pin_memory=False)
        self.s.register_mem_pool_host(pool)
        self.keys = [hashlib.sha256(f"{root}{model}{extra}{i}".encode()).hexdigest() for i in range(2)]
        before = set(listing(root.parent))
        assert self.s.batch_set_v1(self.keys, torch.arange(2 * PAGE)) == [True, True]
        self.files = set(listing(root.parent)) - before  # what this instance wrote


@pytest.fixture
def make() -> Iterator[Callable[..., _Store]]:
    made: list[_Store] = []

    def make(root: Path, model: str | None, **extra: Any) -> _Store:
        made.append(_Store(root, model, **extra))
        return made[-1]

    yield make
    for st in made:
        st.s.close()


def _clears_only_its_own(top: Path, stores: dict[Any, _Store], target: Any) -> None:
    me = stores[target]
    before = set(listing(top))
    assert len(me.files) == 2 and me.files <= before
    me.s.clear()
    assert set(listing(top)) == before - me.files
    assert me.s.batch_exists(me.keys) == 0
    for name, other in stores.items():  # every neighbour still serves its pages
        if name != target:
            assert other.s.batch_exists(other.keys) == 2, name


@pytest.mark.parametrize("target", ["m", "m_x", None])
def test_clear_removes_exactly_one_model(make: Any, tmp_path: Path, target: str | None) -> None:
    stores = {m: make(tmp_path / "root", m) for m in ("m", "m_x", None)}
    _clears_only_its_own(tmp_path, stores, target)


@pytest.mark.parametrize("target", ["p", "p2"])
def test_clear_removes_exactly_one_namespace(make: Any, tmp_path: Path, target: str) -> None:
    stores = {ns: make(tmp_path / "root", "m", namespace=ns) for ns in ("p", "p2")}
    _clears_only_its_own(tmp_path, stores, target)


@pytest.mark.parametrize("target", ["p", "p2"])
def test_clear_stays_in_its_root(make: Any, tmp_path: Path, target: str) -> None:
    stores = {r: make(tmp_path / r, "m") for r in ("p", "p2")}
    _clears_only_its_own(tmp_path, stores, target)
    left = set(listing(tmp_path))
    stores[target].s.raw_transport.clear("")  # everything under its root, nothing beside it
    assert set(listing(tmp_path)) == {f for f in left if not f.startswith(f"{target}/")}
    assert any(f.startswith("p2/" if target == "p" else "p/") for f in left)


def test_sglang_file_refuses_and_removes_nothing(make: Any, tmp_path: Path) -> None:
    st = make(tmp_path / "root", "m", key_scheme="sglang-file")
    make(tmp_path / "root", "m_x", key_scheme="sglang-file")
    before = listing(tmp_path)
    assert len(before) == 4
    with pytest.raises(ClearRefusedError):
        st.s.clear()
    assert listing(tmp_path) == before
