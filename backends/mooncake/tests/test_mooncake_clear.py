"""``clear()`` on a shared Mooncake cluster removes exactly this instance's objects.

Under the ``default`` key scheme the adapter clears ``{ns}/{model}/``; the transport
removes what starts with it through the master's regex removal (never ``remove_all``),
with the prefix taken literally (regex syntax characters escaped). Under
``sglang-mooncake`` the scheme cannot scope a clear, so it is refused and nothing goes."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
import torch
from _servers import MooncakeCluster
from hicache_backend_mooncake import MooncakeConfig, MooncakeStorage, MooncakeTransport

from hicache_sdk import ClearRefusedError, HiCacheStorageConfig
from hicache_sdk.hostpool import MHAHostPool

PAGE = 4


def _backend(cluster: MooncakeCluster, ns: str, model: str, **kw: object) -> MooncakeStorage:
    extra = cluster.config(namespace=ns, **kw)
    st = MooncakeStorage(HiCacheStorageConfig(model_name=model, extra_config=extra), {})
    pool = MHAHostPool(8 * PAGE, PAGE, 2, 2, 8, dtype=torch.bfloat16, layout="page_first")
    pool.kv_buffer.view(torch.uint8).copy_(
        torch.randint(0, 256, pool.kv_buffer.view(torch.uint8).shape, dtype=torch.uint8)
    )
    st.register_mem_pool_host(pool)
    return st


def test_clear_removes_this_model_only_neighbours_stay(cluster: MooncakeCluster) -> None:
    ns = f"clear-{uuid.uuid4().hex[:8]}"
    models = ["m", "m_x", "m.x", "m/x"]  # neighbours by prefix, by regex '.' and by path
    backends = [_backend(cluster, ns, m) for m in models]
    other_ns = _backend(cluster, ns + "2", "m")  # namespace neighbour: 'clear-..2' holds 'clear-..'
    keys = [f"{i:064x}" for i in range(3)]
    idx = torch.arange(3 * PAGE, dtype=torch.int64)
    try:
        for st in [*backends, other_ns]:
            assert st.batch_set_v1(keys, idx) == [True] * 3
        backends[0].clear()
        assert backends[0].batch_exists(keys) == 0, "clear() left this model's pages"
        for st, m in zip(backends[1:], models[1:]):
            assert st.batch_exists(keys) == 3, f"clear() of model 'm' removed model {m!r}'s pages"
            assert st.batch_get_v1(keys, idx) == [True] * 3
        assert other_ns.batch_exists(keys) == 3, "clear() removed another namespace's pages"
    finally:
        for st in [*backends, other_ns]:
            st.close()


def test_clear_under_sglang_names_is_refused_and_removes_nothing(cluster: MooncakeCluster) -> None:
    tag = f"refuse{uuid.uuid4().hex[:8]}"
    st = MooncakeStorage(
        HiCacheStorageConfig(
            model_name="m", extra_config=cluster.config(key_scheme="sglang-mooncake", extra_backend_tag=tag)
        ),
        {},
    )
    pool = MHAHostPool(4 * PAGE, PAGE, 2, 2, 8, dtype=torch.bfloat16, layout="page_first")
    st.register_mem_pool_host(pool)
    keys = [f"{i:064x}" for i in range(2)]
    try:
        assert st.batch_set_v1(keys, torch.arange(2 * PAGE)) == [True, True]
        with pytest.raises(ClearRefusedError, match="sglang-mooncake"):
            st.clear()
        assert st.batch_exists(keys) == 2
    finally:
        st.close()


def test_transport_clear_takes_the_prefix_literally(cluster: MooncakeCluster) -> None:
    """Regex syntax in a prefix is literal: clearing ``a.b/`` keeps ``axb/``, clearing
    ``a+b/`` removes ``a+b/`` (an unescaped ``+`` would not match itself)."""
    t = MooncakeTransport(MooncakeConfig.from_mapping(cluster.config(), environ={}), 0)
    base = f"lit-{uuid.uuid4().hex[:8]}/"
    names = [base + n for n in ("a.b/1", "axb/1", "a.b2/1", "a+b/1", "a(b/1")]
    data = np.arange(512, dtype=np.uint8)
    seg = [(data.ctypes.data, data.nbytes)]
    try:
        assert t.write(names, [seg] * len(names)) == [True] * len(names)
        t.clear(base + "a.b/")
        assert t.exists(names) == [None, -1, -1, -1, -1]
        t.clear(base + "a+b/")
        t.clear(base + "a(b/")
        assert t.exists(names) == [None, -1, -1, None, None]
        for bad in ("", base + "a", base[:-1]):
            with pytest.raises(ValueError, match="refusing prefix"):
                t.clear(bad)
    finally:
        t.delete(names)
        t.close()
