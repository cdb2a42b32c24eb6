"""SGLang-compatible page hashing and physical object naming (key schemes)."""

from .alignment import aligned_span, chain_keys, num_pages, page_align
from .hashing import get_hash_str, get_storage_hash_str, hash_str_to_int64, storage_namespace_seed
from .names import (
    check_hex_page_hash,
    check_page_hash,
    check_plain_fragment,
    sanitize_component,
    sglang_model_name,
)
from .scheme_base import KeyScheme, ObjectSpec
from .schemes import (
    SCHEMES,
    DefaultKeyScheme,
    SGLangFileKeyScheme,
    SGLangMooncakeKeyScheme,
    Topology,
    make_scheme,
)

__all__ = [
    "SCHEMES",
    "DefaultKeyScheme",
    "KeyScheme",
    "ObjectSpec",
    "SGLangFileKeyScheme",
    "SGLangMooncakeKeyScheme",
    "Topology",
    "aligned_span",
    "chain_keys",
    "check_hex_page_hash",
    "check_page_hash",
    "check_plain_fragment",
    "get_hash_str",
    "get_storage_hash_str",
    "hash_str_to_int64",
    "make_scheme",
    "num_pages",
    "page_align",
    "sanitize_component",
    "sglang_model_name",
    "storage_namespace_seed",
]
