"""S3Storage through the paged adapter, against a real moto_server: ``batch_delete``
under an SGLang-compatible key scheme removes the pages asked for, while the adapter's
removal of wrong-length objects (which may be another deployment's) stays refused."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest
from hicache_backend_s3 import S3Storage

torch = pytest.importorskip("torch")

from hicache_sdk.hostpool import MHAHostPool  # noqa: E402
from hicache_sdk.spec import HiCacheStorageConfig  # noqa: E402

PAGE = 4


def _names(moto: Any, bucket: str, prefix: str) -> list[str]:
    got = moto.client().list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return sorted(o["Key"][len(prefix) :] for o in got if ".hicache-probe" not in o["Key"])


@pytest.mark.parametrize("scheme", ["sglang-mooncake", "default"])
def test_batch_delete_removes_pages_but_not_foreign_wrong_length_objects(
    moto: Any, bucket: str, s3cfg: dict[str, Any], scheme: str
) -> None:
    prefix = f"p-{uuid.uuid4().hex[:8]}/"
    pool = MHAHostPool(32, PAGE, 2, 2, 8, dtype=torch.bfloat16, layout="page_first", pin_memory=False)
    pool.kv_buffer.view(torch.uint8).copy_(torch.randint(0, 256, pool.kv_buffer.view(torch.uint8).shape))
    s = S3Storage(
        HiCacheStorageConfig(
            model_name="org/model", extra_config={**s3cfg, "prefix": prefix, "key_scheme": scheme}
        ),
        {},
    )
    try:
        s.register_mem_pool_host(pool)
        k1, k2, k3 = (hashlib.sha256(f"{scheme}{i}".encode()).hexdigest() for i in range(3))
        idx = torch.arange(0, 3 * PAGE, dtype=torch.int64)
        assert s.batch_set_v1([k1, k2, k3], idx) == [True, True, True]
        every = _names(moto, bucket, prefix)
        per_page = len(every) // 3
        assert per_page >= 1 and len(every) == 3 * per_page
        of = {k: [n for n in every if k in n] for k in (k1, k2, k3)}
        assert all(len(v) == per_page for v in of.values())

        # k3: one object replaced by a short one (as another deployment's might be)
        moto.client().put_object(Bucket=bucket, Key=prefix + of[k3][0], Body=b"short")
        assert s.batch_exists([k3]) == 0
        left = _names(moto, bucket, prefix)
        assert (of[k3][0] in left) is (scheme != "default")  # removed only when provably ours

        s.batch_delete([k1])
        left = _names(moto, bucket, prefix)
        assert not any(n in left for n in of[k1])
        assert all(n in left for n in of[k2])
        assert s.batch_exists([k1, k2]) == 0
        assert s.batch_exists([k2]) == 1
        if scheme != "default":
            assert s.raw_transport.refused_deletes >= 1  # type: ignore[attr-defined]
            assert s.raw_transport._requested == {}  # type: ignore[attr-defined]
    finally:
        s.close()


@pytest.mark.parametrize("scheme", ["sglang-mooncake", "default"])
def test_batch_exists_counts_every_present_page_one_request_at_a_time(
    bucket: str, s3cfg: dict[str, Any], scheme: str
) -> None:
    """With K and V objects per page (``sglang-mooncake``) the adapter asks the K column
    and then the V column in one call: a miss in the K column says nothing about the V
    objects after it, so the transport must answer every key (one request in flight makes
    any early stop certain to show)."""
    prefix = f"q-{uuid.uuid4().hex[:8]}/"
    pool = MHAHostPool(32, PAGE, 2, 2, 8, dtype=torch.bfloat16, layout="page_first", pin_memory=False)
    cfg = {**s3cfg, "prefix": prefix, "key_scheme": scheme, "max_concurrency": 1}
    s = S3Storage(HiCacheStorageConfig(model_name="org/model", extra_config=cfg), {})
    try:
        s.register_mem_pool_host(pool)
        keys = [hashlib.sha256(f"e{scheme}{i}".encode()).hexdigest() for i in range(6)]
        assert s.batch_set_v1(keys[:3], torch.arange(0, 3 * PAGE, dtype=torch.int64)) == [True] * 3
        assert s.batch_exists(keys) == 3
        assert s.batch_exists(keys[:2]) == 2
        assert s.batch_exists(keys[3:]) == 0
    finally:
        s.close()
