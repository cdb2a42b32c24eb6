"""Key schemes: SGLang-exact names, identity sharing rules, and bad-name rejection."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from key_layouts import C4, INDEXER, MAMBA, MHA, MHA_LF, MLA, SWA_MHA

from hicache_sdk.errors import ClearRefusedError
from hicache_sdk.keys.names import exact_component
from hicache_sdk.keys.scheme_base import ObjectSpec
from hicache_sdk.keys.schemes import SCHEMES, make_scheme
from hicache_sdk.spec import HiCacheStorageConfig

H = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"


def cfg(**kw):
    return HiCacheStorageConfig(**kw)


def names(objs):
    return [o.name for o in objs]


# -- sglang-file ---------------------------------------------------------------------
def test_file_spec_examples():
    s = make_scheme("sglang-file", cfg(model_name="mymodel"))
    assert s.page_objects("k2", MHA) == [ObjectSpec("k2_mymodel_0_1.bin", (0, 1))]
    assert names(s.page_objects("k2", MAMBA)) == ["k2.mamba_mymodel_0_1.bin"]
    s = make_scheme("sglang-file", cfg(model_name="meta-llama/Llama-3.2-1B"))
    assert names(s.page_objects(H, MHA)) == [f"{H}_meta-llama-Llama-3.2-1B_0_1.bin"]
    for rank in range(4):
        s = make_scheme(
            "sglang-file", cfg(model_name="org/model", tp_rank=rank, tp_size=4, is_mla_model=True)
        )
        assert names(s.page_objects(H, MLA)) == [f"{H}_org-model.bin"]
        # mamba stays rank-sharded under MLA; other sidecars follow config_suffix
        assert names(s.page_objects(H, MAMBA)) == [f"{H}.mamba_org-model_{rank}_4.bin"]
        assert names(s.page_objects(H, INDEXER)) == [f"{H}.indexer_org-model.bin"]
    with pytest.raises(ClearRefusedError, match=r"'sglang-file'.*<hash>_org-model\.bin"):
        s.clear_prefix()


def test_file_layer_first_object_is_the_flat_page():
    s = make_scheme("sglang-file", cfg(model_name="m"))
    assert s.page_objects("k", MHA_LF) == [ObjectSpec("k_m_0_1.bin", (0, 2, 4, 6, 1, 3, 5, 7))]


def test_file_pp_cp_dcp_and_no_model():
    s = make_scheme("sglang-file", cfg(model_name="m", tp_rank=1, tp_size=2, pp_rank=1, pp_size=2))
    assert names(s.page_objects("k", MHA)) == ["k_m_1_2_2_1.bin"]
    s = make_scheme("sglang-file", cfg(model_name="m", attn_cp_rank=1, attn_cp_size=2, is_mla_model=True))
    assert names(s.page_objects("k", MLA)) == ["k_m_cp1_2.bin"]
    assert names(s.page_objects("k", MAMBA)) == ["k.mamba_m_0_1_cp1_2.bin"]
    s = make_scheme(
        "sglang-file",
        cfg(
            model_name="m",
            tp_rank=3,
            tp_size=4,
            dcp_size=2,
            dcp_rank=1,
            is_mla_model=True,
            logical_page_size=128,
        ),
    )
    assert names(s.page_objects("k", MLA)) == ["k_m_tp4_dcp1_2_page128.bin"]
    assert names(s.page_objects("k", MAMBA)) == ["k.mamba_m_3_4_tp4_dcp1_2_page128.bin"]
    assert names(make_scheme("sglang-file", cfg()).page_objects("k", MHA)) == ["k__0_1.bin"]


# -- sglang-mooncake -------------------------------------------------------------------
def test_mooncake_spec_examples():
    s = make_scheme("sglang-mooncake", cfg(model_name="Qwen/Qwen3-8B"))
    assert s.page_objects(H, MHA) == [
        ObjectSpec(f"Qwen-Qwen3-8B_{H}_0_k", (0,)),
        ObjectSpec(f"Qwen-Qwen3-8B_{H}_0_v", (1,)),
    ]
    s = make_scheme(
        "sglang-mooncake", cfg(model_name="deepseek-ai/DeepSeek-V3", is_mla_model=True, tp_size=8, tp_rank=5)
    )
    assert names(s.page_objects(H, MLA)) == [f"deepseek-ai-DeepSeek-V3_{H}__k"]
    with pytest.raises(ClearRefusedError, match=r"'sglang-mooncake'.*prefix 'deepseek-ai-DeepSeek-V3_'"):
        s.clear_prefix()


def test_mooncake_layout_vector_and_pp():
    s = make_scheme("sglang-mooncake", cfg(is_mla_model=True))
    assert names(s.page_objects("h", C4)) == ["h__deepseek_v4_c4"]
    with pytest.raises(ClearRefusedError, match="start with no prefix"):
        s.clear_prefix()
    s = make_scheme("sglang-mooncake", cfg(is_mla_model=True, pp_rank=1, pp_size=2))
    assert names(s.page_objects("h", C4)) == ["h_1_deepseek_v4_c4"]
    assert names(s.page_objects("h", MLA)) == ["h_1_k"]
    s = make_scheme("sglang-mooncake", cfg(tp_rank=3, tp_size=4, pp_rank=1, pp_size=2))
    assert names(s.page_objects("h", MHA)) == ["h_3_1_k", "h_3_1_v"]


def test_mooncake_tag_and_dcp():
    c = cfg(
        model_name="m",
        is_mla_model=True,
        tp_rank=1,
        tp_size=2,
        dcp_size=2,
        dcp_rank=1,
        logical_page_size=64,
        extra_config={"extra_backend_tag": "t1"},
    )
    s = make_scheme("sglang-mooncake", c)
    assert names(s.page_objects("h", MLA)) == ["t1_m_tp2_dcp2_page64_pp1_cp1_h_dcp1_cp0_k"]
    assert names(
        make_scheme("sglang-mooncake", cfg(extra_config={"extra_backend_tag": 7})).page_objects("h", MHA)
    ) == [
        "7_h_0_k",
        "7_h_0_v",
    ]


def test_mooncake_sidecars():
    s = make_scheme("sglang-mooncake", cfg(tp_rank=1, tp_size=2))
    assert s.page_objects("h", MAMBA) == [
        ObjectSpec("h_1_temporal", (0,)),
        ObjectSpec("h_1_conv_0", (1,)),
        ObjectSpec("h_1_conv_1", (2,)),
    ]
    conv_only = dataclasses.replace(MAMBA, segment_sizes=(0, 100), flat_order=(0, 1))
    assert names(s.page_objects("h", conv_only)) == ["h_1_conv_0"]
    # as hostpool.describe reports a conv-only pool: temporal segment left out
    described = dataclasses.replace(
        MAMBA, segment_sizes=(100, 60), flat_order=(0, 1), geometry=(("conv_0_ndim", 2), ("conv_1_ndim", 2))
    )
    assert s.page_objects("h", described) == [ObjectSpec("h_1_conv_0", (0,)), ObjectSpec("h_1_conv_1", (1,))]
    with_temporal = dataclasses.replace(described, segment_sizes=(800, 100, 60), flat_order=(0, 1, 2))
    assert names(s.page_objects("h", with_temporal)) == ["h_1_temporal", "h_1_conv_0", "h_1_conv_1"]
    assert names(s.page_objects("h", SWA_MHA)) == ["h_1_swa_k", "h_1_swa_v"]
    assert names(s.page_objects("h", dataclasses.replace(MHA, name="draft"))) == [
        "h_1_draft_k",
        "h_1_draft_v",
    ]
    assert names(s.page_objects("h", dataclasses.replace(MHA, name="draft_swa"))) == [
        "h_1_draft_swa_k",
        "h_1_draft_swa_v",
    ]
    assert names(s.page_objects("h", INDEXER)) == ["h__indexer"]
    mla = make_scheme("sglang-mooncake", cfg(tp_rank=1, tp_size=2, is_mla_model=True))
    assert names(mla.page_objects("h", MAMBA))[0] == "h_1_temporal"  # always the TP-rank suffix
    assert names(mla.page_objects("h", dataclasses.replace(MLA, name="swa"))) == ["h__swa"]
    assert names(mla.page_objects("h", dataclasses.replace(MLA, name="draft"))) == ["h__draft_k"]
    assert names(mla.page_objects("h", dataclasses.replace(MLA, name="draft_swa"))) == ["h__draft_swa"]
    with pytest.raises(ValueError, match="Unsupported Mooncake hybrid pool"):
        s.page_objects("h", dataclasses.replace(INDEXER, name="auxiliary_swa"))


def test_mooncake_mha_layer_first_rejected():
    with pytest.raises(ValueError, match="layer_first"):
        make_scheme("sglang-mooncake", cfg()).page_objects("h", MHA_LF)


def test_mooncake_head_split():
    c = cfg(tp_rank=1, tp_size=2, tp_lcm_size=4, should_split_heads=True)
    s = make_scheme("sglang-mooncake", c)
    split_pool = dataclasses.replace(
        MHA, layout="page_head", segment_sizes=(2048,) * 4, flat_order=(0, 1, 2, 3)
    )
    assert s.page_objects("h", split_pool) == [
        ObjectSpec("h_2_k", (0,)),
        ObjectSpec("h_2_v", (1,)),
        ObjectSpec("h_3_k", (2,)),
        ObjectSpec("h_3_v", (3,)),
    ]
    with pytest.raises(ValueError, match="head split"):
        s.page_objects("h", MHA)
    with pytest.raises(ValueError, match="tp_lcm_size"):
        make_scheme("sglang-mooncake", cfg(tp_size=2, tp_lcm_size=3, should_split_heads=True))


# -- default -----------------------------------------------------------------------------
def default(**kw):
    ns = kw.pop("namespace", "")
    salt = kw.pop("namespace_salt", None)
    return make_scheme("default", cfg(model_name="org/m", **kw), namespace=ns, namespace_salt=salt)


def only_name(scheme, pool, h=H):
    (obj,) = scheme.page_objects(h, pool)
    return obj.name


def test_default_shape():
    s = default(namespace="team-a")
    name = only_name(s, MHA)
    ns, model, pooldir, fan, last = name.split("/")
    assert (ns, model, fan, last) == ("team-a", "org%2Fm", H[:2], H)
    assert pooldir == f"kv-{s.identity(MHA).hex()[:16]}"
    assert len(s.identity(MHA)) == 32
    assert s.page_objects(H, MHA_LF)[0].segments == MHA_LF.flat_order
    assert s.clear_prefix() == "team-a/org%2Fm/"
    assert default().clear_prefix() == "_/org%2Fm/"
    assert only_name(default(), MHA).startswith("_/org%2Fm/kv-")
    assert s.has_header and not make_scheme("sglang-file", cfg()).has_header


def test_mla_ranks_share_mha_ranks_do_not():
    mla = {only_name(default(tp_rank=r, tp_size=4, is_mla_model=True), MLA) for r in range(4)}
    assert len(mla) == 1
    mha = {only_name(default(tp_rank=r, tp_size=4), MHA) for r in range(4)}
    assert len(mha) == 4
    mamba = {only_name(default(tp_rank=r, tp_size=4, is_mla_model=True), MAMBA) for r in range(4)}
    assert len(mamba) == 4


def test_dp_replicas_share():
    assert only_name(default(dp_rank=0), MHA) == only_name(default(dp_rank=3), MHA)


@pytest.mark.parametrize(
    "change",
    [
        {"dtype": "float16"},
        {"dtype": "float8_e4m3fn"},
        {"layout": "page_first_direct"},
        {"layout": "layer_first"},
        {"page_size": 32},
        {"geometry": (("head_num", 16), ("layer_num", 4))},
        {"segment_sizes": (4096, 2048)},
    ],
)
def test_dtype_layout_geometry_never_share(change):
    s = default()
    other = dataclasses.replace(MHA, **change)
    assert only_name(s, MHA) != only_name(s, other)
    assert s.identity(MHA) != s.identity(other)


def test_parallel_coordinates():
    base = only_name(default(), MHA)
    assert only_name(default(pp_rank=1, pp_size=2), MHA) != only_name(default(pp_rank=0, pp_size=2), MHA)
    assert only_name(default(attn_cp_rank=1, attn_cp_size=2), MHA) != base
    a = default(is_mla_model=True, tp_size=4, tp_rank=0, dcp_size=2, dcp_rank=0, logical_page_size=64)
    b = default(is_mla_model=True, tp_size=4, tp_rank=2, dcp_size=2, dcp_rank=0, logical_page_size=64)
    c = default(is_mla_model=True, tp_size=4, tp_rank=1, dcp_size=2, dcp_rank=1, logical_page_size=64)
    assert only_name(a, MLA) == only_name(b, MLA) != only_name(c, MLA)


def test_model_namespace_and_salt_separate():
    s = default()
    assert only_name(s, MHA) != only_name(
        make_scheme("default", cfg(model_name="org-m")), MHA
    )  # same dir, other identity
    assert only_name(default(namespace_salt="s1"), MHA) != only_name(default(namespace_salt="s2"), MHA)
    salted = default(namespace_salt="top-secret-salt")
    assert "top-secret-salt" not in repr(salted) and "top-secret-salt" not in str(vars(salted))
    assert (
        only_name(default(namespace="a"), MHA).split("/")[2]
        == only_name(default(namespace="b"), MHA).split("/")[2]
    )


def test_logical_anchor_has_no_objects():
    anchor = dataclasses.replace(MLA, has_buffer=False)
    for scheme in SCHEMES:
        assert make_scheme(scheme, cfg(is_mla_model=True)).page_objects(H, anchor) == []


def test_model_name_override():
    s = make_scheme("sglang-file", cfg(model_name="a"), model_name="b/c")
    assert names(s.page_objects("k", MHA)) == ["k_b-c_0_1.bin"]


# -- rejection ---------------------------------------------------------------------------
def test_unknown_scheme_lists_valid_names():
    with pytest.raises(ValueError, match="default, sglang-file, sglang-mooncake"):
        make_scheme("nope", cfg())


@pytest.mark.parametrize("bad", ["", "a/b", "a\\b", "..", "x..y", "/abs", "a\x00b", "a\nb"])
@pytest.mark.parametrize("scheme", ["sglang-file", "sglang-mooncake"])
def test_sglang_schemes_reject_bad_hashes(scheme, bad):
    with pytest.raises(ValueError, match="page_hash"):
        make_scheme(scheme, cfg()).page_objects(bad, MHA)


@pytest.mark.parametrize("bad", ["k2", H.upper(), H[:-1], H + "0", "../" + H[3:], 5])
def test_default_requires_hex_hash(bad):
    with pytest.raises(ValueError, match="page_hash"):
        default().page_objects(bad, MHA)


@pytest.mark.parametrize(
    ("mine", "neighbour"),
    [
        ({"model_name": "m"}, {"model_name": "m_x"}),
        ({"model_name": "m"}, {"model_name": "m/x"}),
        ({"model_name": "a/b"}, {"model_name": "a-b"}),
        ({"model_name": ""}, {"model_name": "_"}),
        ({"model_name": "m", "namespace": "p"}, {"model_name": "m", "namespace": "p2"}),
        ({"model_name": "m", "namespace": ""}, {"model_name": "m", "namespace": "_"}),
    ],
)
def test_default_clear_prefix_never_holds_a_neighbours_objects(mine, neighbour):
    """``clear()`` removes what starts with ``clear_prefix()``: exactly this model in this
    namespace, never a neighbour whose name extends or resembles it."""

    def scheme(kw):
        return make_scheme("default", cfg(model_name=kw["model_name"]), namespace=kw.get("namespace", ""))

    a, b = scheme(mine), scheme(neighbour)
    assert only_name(a, MHA).startswith(a.clear_prefix())
    for x, y in ((a, b), (b, a)):
        assert not only_name(y, MHA).startswith(x.clear_prefix()), (x.clear_prefix(), only_name(y, MHA))
        assert not only_name(y, MAMBA).startswith(x.clear_prefix())


@given(st.text(max_size=12), st.text(max_size=12))
def test_exact_component_is_injective_and_path_safe(a, b):
    ea, eb = exact_component(a), exact_component(b)
    assert (ea == eb) == (a == b)
    for e in (ea, eb):
        assert e and "/" not in e and ".." not in e and not e.startswith(".")


def test_unsafe_pool_and_model_names_are_sanitised():
    s = make_scheme("default", cfg(model_name="../../etc"), namespace="a/../b")
    name = only_name(s, dataclasses.replace(MHA, name="../x\\y"))
    parts = name.split("/")
    assert len(parts) == 5
    assert all(p and ".." not in p and not p.startswith(".") and "\\" not in p for p in parts)
    f = make_scheme("sglang-file", cfg(model_name="m"))
    assert "/" not in names(f.page_objects("k", dataclasses.replace(MHA, name="a/b")))[0]


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"tp_rank": 2, "tp_size": 2}, "tp_rank"),
        ({"pp_rank": -1}, "pp_rank"),
        ({"tp_size": 0}, "tp_size"),
    ],
)
def test_bad_topology(kw, field):
    class Duck:
        pass

    d = Duck()
    for k, v in kw.items():
        setattr(d, k, v)
    with pytest.raises(ValueError, match=field):
        make_scheme("default", d)


def test_namespace_only_for_default():
    with pytest.raises(ValueError, match="namespace"):
        make_scheme("sglang-file", cfg(), namespace="x")
    with pytest.raises(ValueError, match="namespace"):
        make_scheme("sglang-mooncake", cfg(), namespace_salt="x")
    with pytest.raises(ValueError, match="extra_backend_tag"):
        make_scheme("sglang-mooncake", cfg(extra_config={"extra_backend_tag": "a/b"}))


def test_duck_typed_config_defaults():
    class Bare:
        model_name = "m"

    assert names(make_scheme("sglang-file", Bare()).page_objects("k", MHA)) == ["k_m_0_1.bin"]
    assert names(make_scheme("sglang-mooncake", Bare()).page_objects("k", MHA)) == ["m_k_0_k", "m_k_0_v"]


@given(st.integers(1, 8), st.integers(0, 7), st.integers(0, 3))
def test_default_tp_rule(tp_size, rank_seed, dp):
    r = rank_seed % tp_size
    mla_names = only_name(default(tp_rank=r, tp_size=tp_size, dp_rank=dp, is_mla_model=True), MLA)
    assert mla_names == only_name(default(tp_rank=0, tp_size=tp_size, is_mla_model=True), MLA)
    mha0 = only_name(default(tp_rank=0, tp_size=tp_size), MHA)
    assert (only_name(default(tp_rank=r, tp_size=tp_size, dp_rank=dp), MHA) == mha0) == (r == 0)
