"""The dead-code rule's allow-list (``vulture``, configured in pyproject.toml): names that no
code of this repository uses, kept because something outside it does. Each group says who.

Vulture reads this file, never runs it: a name written here counts as used. Add a name only
with its reason; code that nothing uses at all is deleted, not listed."""

# ruff: noqa: B018, F821

# Public API: the contract's names, as SGLang defines them (hicache_sdk.spec), and the fields
# of public results and configs that users read.
PoolName.AUXILIARY_SWA
PoolName.DEEPSEEK_V4_C1
PoolName.DEEPSEEK_V4_C1_INDEXER
PoolName.DEEPSEEK_V4_C1_INDEXER_SCALE
PoolName.DEEPSEEK_V4_C2
PoolName.DEEPSEEK_V4_C2_INDEXER
PoolName.DEEPSEEK_V4_C2_INDEXER_SCALE
PoolName.DEEPSEEK_V4_C4
PoolName.DEEPSEEK_V4_C4_INDEXER
PoolName.DEEPSEEK_V4_C4_INDEXER_SCALE
PoolName.DEEPSEEK_V4_C128
PoolName.DEEPSEEK_V4_C4_ROPE
PoolName.DEEPSEEK_V4_C128_ROPE
PoolName.DEEPSEEK_V4_C4_STATE
PoolName.DEEPSEEK_V4_C4_INDEXER_STATE
PoolName.DEEPSEEK_V4_C128_STATE
PoolName.DRAFT_INDEXER
PoolName.DRAFT_SWA
PoolTransfer.device_indices
PoolTransfer.nodes_to_load
Capabilities.fault_injection
Trace.loaded_from_storage_tokens  # hiradix: Engine.explain()
FailureReasons.unbind  # hicache_sdk.transport: a transport's failure sink
ContractProfile.zero_copy_backends  # hicache_sdk.sglang.versions: facts of the release
ContractProfile.file_dir_extra_key

# SGLang's duck-typed surfaces: attributes SGLang's code reads on our host pools, and on its
# own objects where the suite builds them.
MHAHostPool.start_layer  # and MLAHostPool's
MHAHostPool.end_layer
MHAHostPool.layout_dim
IndexerHostPool.indexer_page_num
RankGroup.world_size
# conformance/hicache_conformance/sglang_path.py: SGLang's own HiCacheController and
# PrefetchOperation, set up the way SGLang sets them up.
HiCacheController.storage_host_pool
HiCacheController.prefetch_sync_queue
HiCacheController.page_get_func
HiCacheController.page_set_func
PrefetchOperation.hash_value

# Python protocols that call by name: file objects (boto3 reads segio's), import finders,
# numpy's flags, pytest's collection switch, signal and context-manager signatures.
SegmentReader.seekable
SegmentReader.tell
create_module
_.flags.writeable
_.__test__
_.__path__
__call__
signum
frame
exc_type
exitstatus
runtest  # pytest's Item protocol (tests/sglang/conftest.py's skipping item)
reportinfo
__package__  # set on a module the generator test builds
is_throttling_error_from_context  # botocore's throttling detector protocol (s3 config)
is_throttling_error
flag  # a deprecated no-op's parameter (set_inside_sglang)

# Found by name, never imported: hooks looked up with getattr, ``module:Class`` strings,
# entry points, code the tests generate, a lock read through ``__dict__``, a flag set on an
# outside module.
deadline_passed  # hicache_sdk.kit.negative asks the resilience wrapper for it
hooks_for  # conformance/tests/suite_runs.py writes a module that calls it
_close_lock  # hicache_sdk.sglang.bridge: self.__dict__.get("_close_lock")
TESTING_DISABLE_PIN_MEMORY  # scripts/compat: set on SGLang's module
BuggyReads  # conformance/tests: "reporting_backends:BuggyReads"
FlakyStores
BrokenStorage  # tests/registry/fixtures: entry points
NotAStorage

# Classes whose definition is the test (it must raise, or register itself).
Bad
CountingClose
_NeedsAnArgument

# LMCache's plug points, called by LMCache by name: the connector adapter protocol and the
# L2 adapter's config-class lookup, the connector's remove (RemoteBackend.remove) and its
# batched forms, with LMCache's parameter names.
can_parse
create_connector
config_class_name
remove_sync
support_batched_contains  # RemoteConnector's batched forms (RemoteBackend, its wrapper)
batched_async_contains
batched_get_non_blocking
lookup_id

# SGLang's duck-typed tree stand-in for UnifiedCacheLinkerWrapper (tests/sglang): the wrapper
# reads these by name.
component_type
build_external_linker_transfer
update_external_linker_load
prefix_len
tree_components
_components_tuple
tree_core
_all_reduce_attn_groups
get_last_hash_value

# Backends loaded by ``module:Class`` name in the linker tests (tests/sglang).
StalledFileStorage
k_scale_buffer  # SGLang's scaled KV pools (the linker refuses a pool that holds one)

# SGLang's HiCacheController attributes that scripts/compat/release_probe.py sets on a
# controller built without its constructor (the release's own methods read them).
enable_storage
storage_backend_type
_generate_storage_config
_create_sync_groups
mem_pool_device
storage_stop_event
host_memory_mode
prefetch_hits_sync_groups
prefetch_completion_sync_groups
