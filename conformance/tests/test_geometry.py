"""``--geometry``: the model geometry of the suite's pools. ``block`` makes every page of
every pool a multiple of 4 KiB (what an O_DIRECT backend needs), ``small`` does not."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hicache_conformance import pools as P
from hicache_conformance import sglang_pools
from hicache_conformance.matrix import full_matrix


@pytest.fixture
def geometry() -> Iterator[None]:
    yield
    P.set_geometry("small")


def _page_nbytes(pool: object) -> int:
    return len(P._as_bytes(pool.get_dummy_flat_data_page()))  # type: ignore[attr-defined]


@pytest.mark.parametrize("source", ["sdk", "sglang"])
def test_block_geometry_pages_are_multiples_of_4_kib(geometry: None, source: str) -> None:
    if source == "sglang" and not sglang_pools.availability()[0]:
        pytest.skip(f"SGLang's pools: {sglang_pools.availability()[1]}")
    P.set_source(source)
    try:
        P.set_geometry("block")
        sizes = {}
        for case in full_matrix():
            sizes[f"kv {case.id}"] = _page_nbytes(P.make_kv_pool(case))
            for side in ("indexer", "swa"):
                sizes[f"{side} {case.id}"] = _page_nbytes(P.make_sidecar_pool(side, case))
    finally:
        P.set_source("auto")
    odd = {k: n for k, n in sizes.items() if n % 4096}
    assert not odd, odd


def test_small_geometry_has_pages_below_a_block(geometry: None) -> None:
    P.set_geometry("small")
    case = full_matrix()[0]
    assert _page_nbytes(P.make_kv_pool(case)) % 4096 != 0


def test_an_unknown_geometry_is_named(geometry: None) -> None:
    with pytest.raises(ValueError, match="geometry must be one of small, block, got 'huge'"):
        P.set_geometry("huge")


def test_the_cli_passes_the_geometry_and_the_report_records_it() -> None:
    from hicache_conformance.run import run_check

    res = run_check(
        "memory", None, "--geometry", "block", "--matrix", "minimal", "--level", "L1", "-k", "byte_exact"
    )
    assert res.ok, res.output[-2000:]
    assert res.report["geometry"] == "block"
    assert res.totals["passed"] >= 2, res.totals
