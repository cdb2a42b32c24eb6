"""The SGLang contract profile: every version-specific fact the SDK depends on, in one place.

The library reads its SGLang literals from :data:`CURRENT` (the batch size, the loader's
keys, the read path's defaults, the failure-injector variables, ``HiCacheFile``'s directory
rules); the contract's own classes (:mod:`hicache_sdk.spec`) are checked against the rest by
the tests, and the whole profile against the installed SGLang under ``tox -e sglang``.
Following SGLang's next release means adding a profile here, not hunting for literals. Facts were read from the
SGLang 0.5.23 wheel (``sglang/srt/mem_cache/hicache_storage.py`` and friends).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ContractProfile", "SGLANG_0_5_23", "CURRENT"]


@dataclass(frozen=True)
class ContractProfile:
    """What one SGLang release expects of an L3 backend."""

    sglang_version: str
    #: ``HiCacheStorage`` methods: name -> (parameter names without self, number of
    #: parameters with defaults, abstract?).
    methods: tuple[tuple[str, tuple[str, ...], int, bool], ...]
    #: ``HiCacheStorageConfig`` fields in declaration order, with defaults (``...`` = required).
    config_fields: tuple[tuple[str, object], ...]
    #: ``PoolName`` values.
    pool_names: tuple[str, ...]
    #: ``PoolHitPolicy`` values.
    hit_policies: tuple[str, ...]
    #: ``PoolTransfer`` fields in order.
    pool_transfer_fields: tuple[str, ...]
    #: ``PoolTransferResult`` fields in order.
    pool_transfer_result_fields: tuple[str, ...]
    #: ``HiCacheStorageExtraInfo`` fields in order.
    extra_info_fields: tuple[str, ...]
    #: ``StorageMetrics`` fields.
    storage_metrics_fields: tuple[str, ...]
    #: ``STORAGE_BATCH_SIZE``.
    storage_batch_size: int
    #: Keys SGLang pops from extra_config before the backend sees it, with defaults.
    reserved_extra_config: tuple[tuple[str, object], ...]
    #: Keys of the ``dynamic`` loader inside extra_config.
    dynamic_loader_keys: tuple[str, ...]
    #: Backend names for which the controller takes the zero-copy v1 path.
    zero_copy_backends: tuple[str, ...]
    #: SGLang's failure-injector environment variables.
    injector_env: tuple[str, ...]
    #: The scheduler's read-path defaults that are not ``extra_config`` keys:
    #: ``--hicache-load-back-threshold`` and the prefetch retry knobs.
    load_back_threshold: int
    prefetch_retry_poll_interval: int
    prefetch_retry_max_attempts: int
    #: HiCacheFile directory resolution: env var, extra_config key, default.
    file_dir_env: str
    file_dir_extra_key: str
    file_dir_default: str


SGLANG_0_5_23 = ContractProfile(
    sglang_version="0.5.23",
    methods=(
        ("register_mem_pool_host", ("mem_pool_host",), 0, False),
        ("register_mem_host_pool_v2", ("host_pool", "host_pool_name"), 0, False),
        ("on_host_pools_registered", (), 0, False),
        ("batch_exists_v2", ("keys", "pool_transfers", "extra_info"), 2, False),
        ("batch_get_v2", ("transfers", "extra_info"), 1, False),
        ("batch_set_v2", ("transfers", "extra_info"), 1, False),
        ("batch_get_v1", ("keys", "host_indices", "extra_info"), 1, False),
        ("batch_set_v1", ("keys", "host_indices", "extra_info"), 1, False),
        ("get", ("key", "target_location", "target_sizes"), 2, True),
        ("batch_get", ("keys", "target_locations", "target_sizes"), 2, True),
        ("set", ("key", "value", "target_location", "target_sizes"), 3, True),
        ("batch_set", ("keys", "values", "target_locations", "target_sizes"), 3, True),
        ("exists", ("key",), 0, True),
        ("batch_exists", ("keys", "extra_info"), 1, False),
        ("clear", (), 0, False),
        ("get_stats", (), 0, False),
    ),
    config_fields=(
        ("tp_rank", ...),
        ("tp_size", ...),
        ("pp_rank", ...),
        ("pp_size", ...),
        ("attn_cp_rank", ...),
        ("attn_cp_size", ...),
        ("is_mla_model", ...),
        ("enable_storage_metrics", ...),
        ("is_page_first_layout", ...),
        ("model_name", ...),
        ("tp_lcm_size", None),
        ("should_split_heads", False),
        ("dp_rank", 0),
        ("extra_config", None),
        ("dcp_size", 1),
        ("dcp_rank", 0),
        ("logical_page_size", None),
    ),
    pool_names=(
        "kv",
        "mamba",
        "swa",
        "auxiliary_swa",
        "indexer",
        "deepseek_v4_c1",
        "deepseek_v4_c1_indexer",
        "deepseek_v4_c1_indexer_scale",
        "deepseek_v4_c2",
        "deepseek_v4_c2_indexer",
        "deepseek_v4_c2_indexer_scale",
        "deepseek_v4_c4",
        "deepseek_v4_c4_indexer",
        "deepseek_v4_c4_indexer_scale",
        "deepseek_v4_c128",
        "deepseek_v4_c4_rope",
        "deepseek_v4_c128_rope",
        "deepseek_v4_c4_state",
        "deepseek_v4_c4_indexer_state",
        "deepseek_v4_c128_state",
        "draft",
        "draft_indexer",
        "draft_swa",
    ),
    hit_policies=("all_pages", "trailing_pages", "block_groups"),
    pool_transfer_fields=(
        "name",
        "host_indices",
        "device_indices",
        "keys",
        "hit_policy",
        "nodes_to_load",
        "indices_from_pool",
        "block_pages",
        "group_pages",
    ),
    pool_transfer_result_fields=("kv_hit_pages", "extra_pool_hit_pages", "restorable_prefix_pages"),
    extra_info_fields=("prefix_keys", "extra_info"),
    storage_metrics_fields=("prefetch_pgs", "backup_pgs", "prefetch_bandwidth", "backup_bandwidth"),
    storage_batch_size=128,
    reserved_extra_config=(
        ("prefetch_threshold", 256),
        ("prefetch_timeout_base", 1.0),
        ("prefetch_timeout_per_ki_token", 0.25),
        ("hicache_storage_pass_prefix_keys", False),
        ("tp_lcm_size", None),
    ),
    dynamic_loader_keys=("backend_name", "module_path", "class_name", "interface_v1"),
    zero_copy_backends=(
        "hf3fs",
        "mooncake",
        "npu_memcache",
        "eic",
        "nixl",
        "simm",
        "mori",
        "tensorcast",
        "seaweedfs",
    ),
    injector_env=(
        "SGLANG_TEST_HICACHE_BACKEND_RANDOM_DELAY",
        "SGLANG_TEST_HICACHE_BACKEND_RANDOM_FAILURE",
    ),
    load_back_threshold=10,
    prefetch_retry_poll_interval=8,
    prefetch_retry_max_attempts=8,
    file_dir_env="SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR",
    file_dir_extra_key="file_storage_path",
    file_dir_default="/tmp/hicache",
)

#: The profile this release of the SDK targets.
CURRENT = SGLANG_0_5_23
