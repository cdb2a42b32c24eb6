"""The shape of a contract profile: every version-specific fact of one SGLang release that
the SDK depends on (the profiles themselves are generated into :mod:`.profiles`; the
installed one is picked in :mod:`.versions`)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ContractProfile"]


@dataclass(frozen=True)
class ContractProfile:
    """What one SGLang release expects of an L3 backend."""

    #: The release line (``0.5.9``) and the exact wheel the profile was read from.
    sglang_version: str
    wheel_version: str
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
    #: The module defining ``StorageMetrics`` (what SGLang's metrics logger expects) and
    #: its fields.
    storage_metrics_module: str
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
    #: Whether SGLang's controller calls ``on_host_pools_registered`` once every host pool
    #: is registered (otherwise the bridge checks layouts at registration).
    calls_on_host_pools_registered: bool
    #: The suffix SGLang appends to a page hash for speculative-decoding draft pages on the
    #: generic path (``".draft"``), or ``""`` where it stores none.
    draft_key_suffix: str
    #: Whether the page-hash chain starts from a seed made of the request's ``extra_key`` /
    #: ``cache_salt`` (SGLang's ``storage_namespace_seed``).
    salted_seeding: bool
    #: Whether the release ships SGLang's unified cache linker
    #: (``sglang/srt/mem_cache/unified_cache/``).
    has_unified_cache_linker: bool
    #: Facts above read from the release's source rather than observed by running its
    #: controller.
    unobserved: tuple[str, ...]

    @property
    def line(self) -> tuple[int, ...]:
        """The release line as numbers, for ordering (``(0, 5, 9)``)."""
        return tuple(int(x) for x in self.sglang_version.split("."))
