"""``key_scheme="sglang-file"`` over the file backend: a key whose file name the transport
cannot store is a ``ValueError`` naming the key at the API boundary, before any I/O --
not a silently failed batch (``[False, False]`` and an ``unexpected`` count)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from _helpers import listing  # noqa: E402
from hicache_backend_file import FileStorage  # noqa: E402

from hicache_sdk.hostpool import MHAHostPool  # noqa: E402
from hicache_sdk.spec import HiCacheStorageConfig  # noqa: E402


@pytest.mark.parametrize("bad", [".bad", "x" * 300])
def test_unstorable_key_is_refused_before_any_io(tmp_path: Path, bad: str) -> None:
    root = tmp_path / "c"
    sc = HiCacheStorageConfig(model_name="m", extra_config={"root": str(root), "key_scheme": "sglang-file"})
    s = FileStorage(sc, {})
    try:
        s.register_mem_pool_host(MHAHostPool(16, 4, 2, 2, 8, dtype=torch.bfloat16, pin_memory=False))
        idx = torch.arange(8, dtype=torch.int64)
        before = listing(root)
        for call in (
            lambda: s.batch_set_v1(["good", bad], idx),
            lambda: s.batch_get_v1(["good", bad], idx),
            lambda: s.batch_exists(["good", bad]),
            lambda: s.batch_set(
                [bad], [torch.zeros(s._require_kv("t").layout.page_bytes // 2, dtype=torch.bfloat16)]
            ),
        ):
            with pytest.raises(ValueError, match=r"page_hash '(\.bad|x{300})'"):
                call()
        assert listing(root) == before
        assert s.raw_transport.errors() == {}  # type: ignore[attr-defined]
        # the good key alone still works
        assert s.batch_set_v1(["good"], idx[:4]) == [True]
        assert s.batch_exists(["good"]) == 1
    finally:
        s.close()
