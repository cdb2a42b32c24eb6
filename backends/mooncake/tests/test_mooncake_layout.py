"""``describe_l3_object_layout`` (SGLang's ``MooncakeStore`` method, for KV-aware routers)
on the Mooncake backend, and ``hicache layout mooncake``. Equality with SGLang's own answer
is tested under the real SGLang (``tests/sglang/test_sglang_mooncake_layout.py``)."""

from __future__ import annotations

import json

import pytest
import torch
from _servers import MooncakeCluster, free_port
from hicache_backend_mooncake import MooncakeStorage

from hicache_sdk import HiCacheStorageConfig, NotRegisteredError
from hicache_sdk.cli import main
from hicache_sdk.hostpool import MLAHostPool

ARGS = {"sidecar_pool_specs": (), "swa_trailing_pages": None, "page_size": 4}


def test_layout_needs_no_master_and_names_sglangs_objects(capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing listens at the master address: the layout is printed all the same (it is
    computed from the config and the pools, no I/O)."""
    cfg = {
        "master_server_address": f"127.0.0.1:{free_port()}",
        "protocol": "tcp",
        "global_segment_size": 0,
        "key_scheme": "sglang-mooncake",
        "extra_backend_tag": "prod",
    }
    code = main(
        [
            "layout",
            "mooncake",
            "--config",
            json.dumps(cfg),
            "--model",
            "org/m",
            "--mla",
            "--pp-rank",
            "1",
            "--pp-size",
            "2",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    layout = json.loads(out)
    assert layout["enabled"] is True and layout["page_size"] == 64
    inner = layout["hicache_object_layout"]
    assert (inner["key_prefix"], inner["pp_rank"], inner["pp_size"]) == ("prod_org-m", 1, 2)
    assert inner["pools"] == [{"pool": "kv", "suffixes": ["_1_k"], "hit_policy": "all_pages"}]


def test_default_scheme_answers_disabled_and_registration_comes_first(cluster: MooncakeCluster) -> None:
    named = MooncakeStorage(
        HiCacheStorageConfig(extra_config=cluster.config(key_scheme="sglang-mooncake")), {}
    )
    st = MooncakeStorage(HiCacheStorageConfig(is_mla_model=True, extra_config=cluster.config()), {})
    try:
        with pytest.raises(NotRegisteredError):
            named.describe_l3_object_layout(**ARGS)
        st.register_mem_pool_host(MLAHostPool(8, 4, 1, 8, 4, dtype=torch.bfloat16))
        layout = st.describe_l3_object_layout(**ARGS)
        assert layout["enabled"] is False and "sglang-mooncake" in layout["reason"]
    finally:
        named.close()
        st.close()
