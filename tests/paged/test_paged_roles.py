"""Writer roles and isolation between deployments sharing one store."""

from __future__ import annotations

import torch
from paged_helpers import StorageFactory, hkey, mamba, mha, mla, page_bytes, randomize, scattered_slots

from hicache_sdk.spec import PoolName, PoolTransfer

KEYS = [hkey(i, "roles") for i in range(2)]


def test_mla_non_writer_does_not_write_kv_but_mamba_is_written(make_storage: StorageFactory) -> None:
    p1, m1 = randomize(mla(), 1), randomize(mamba(), 2)
    rank1 = make_storage(p1, is_mla_model=True, tp_rank=1, tp_size=2, sidecars={"mamba": m1})
    slots = scattered_slots(p1, 2)
    assert rank1.batch_set_v1(KEYS, slots) == [True, True]
    assert rank1.batch_set([KEYS[0]], [p1.get_data_page(int(slots[0])).contiguous()]) is True
    ms = scattered_slots(m1, 2)
    res = rank1.batch_set_v2(
        [PoolTransfer(PoolName.KV, slots, keys=KEYS), PoolTransfer(PoolName.MAMBA, ms, keys=KEYS)]
    )
    assert res == {"kv": [True, True], "mamba": [True, True]}
    assert rank1.batch_exists(KEYS) == 0  # no KV written by the non-writer
    got = rank1.batch_get_v2([PoolTransfer(PoolName.MAMBA, scattered_slots(mamba(), 2, 5), keys=KEYS)])
    assert got == {"mamba": [True, True]}  # Mamba is rank-sharded: every rank writes it
    rank0 = make_storage(mla(), is_mla_model=True, tp_rank=0, tp_size=2)
    assert rank0.batch_exists(KEYS) == 0
    p0 = randomize(mla(), 3)
    writer = make_storage(p0, is_mla_model=True, tp_rank=0, tp_size=2)
    assert writer.batch_set_v1(KEYS, scattered_slots(p0, 2)) == [True, True]
    assert rank1.batch_exists(KEYS) == 2  # MLA ranks share


def test_mla_ranks_share_mha_ranks_do_not_dp_replicas_share(make_storage: StorageFactory) -> None:
    src = randomize(mla(), 4)
    w = make_storage(src, is_mla_model=True, tp_rank=0, tp_size=4)
    slots = scattered_slots(src, 2)
    assert w.batch_set_v1(KEYS, slots) == [True, True]
    for rank in (1, 2, 3):
        dst = mla()
        r = make_storage(dst, is_mla_model=True, tp_rank=rank, tp_size=4)
        d = scattered_slots(dst, 2, seed=rank)
        assert r.batch_get_v1(KEYS, d) == [True, True]
        assert page_bytes(dst, int(d[0])) == page_bytes(src, int(slots[0]))

    h = randomize(mha(), 5)
    m0 = make_storage(h, tp_rank=0, tp_size=2)
    assert m0.batch_set_v1(KEYS, scattered_slots(h, 2)) == [True, True]
    assert make_storage(mha(), tp_rank=1, tp_size=2).batch_exists(KEYS) == 0
    assert make_storage(mha(), tp_rank=0, tp_size=2, dp_rank=1).batch_exists(KEYS) == 2


def test_different_dtype_or_layout_never_share(make_storage: StorageFactory) -> None:
    src = randomize(mha("page_first", torch.bfloat16), 6)
    w = make_storage(src)
    assert w.batch_set_v1(KEYS, scattered_slots(src, 2)) == [True, True]
    for other in (mha("page_first", torch.float16), mha("page_first_direct"), mha("layer_first")):
        r = make_storage(other)
        assert r.batch_exists(KEYS) == 0
        assert r.batch_get_v1(KEYS, scattered_slots(other, 2)) == [False, False]
    assert make_storage(mha(), model_name="other/model").batch_exists(KEYS) == 0
    assert make_storage(mha(), extra={"namespace": "tenant-b"}).batch_exists(KEYS) == 0
    assert make_storage(mha(), extra={"namespace_salt": "s3cret"}).batch_exists(KEYS) == 0
    assert make_storage(mha()).batch_exists(KEYS) == 2
