"""Name validation and sanitising."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk.keys.names import (
    check_hex_page_hash,
    check_page_hash,
    check_plain_fragment,
    sanitize_component,
    sglang_model_name,
)


def test_sglang_model_name():
    assert sglang_model_name("meta-llama/Llama-3.2-1B") == "meta-llama-Llama-3.2-1B"
    assert sglang_model_name("/models/x") == "-models-x"
    assert sglang_model_name(None) == ""
    assert sglang_model_name("a\\b\x00c") == "a-b-c"


def test_sanitize_vectors():
    assert sanitize_component("kv") == "kv"
    assert sanitize_component("deepseek_v4_c4_indexer_scale") == "deepseek_v4_c4_indexer_scale"
    assert sanitize_component("Llama-3.2-1B") == "Llama-3.2-1B"
    assert sanitize_component("..") == "-"
    assert sanitize_component(".hidden") == "-hidden"
    assert sanitize_component("a/b c") == "a-b-c"
    assert sanitize_component("") == "_"
    assert sanitize_component(None, fallback="x") == "x"


@given(st.text())
def test_sanitize_is_safe_and_idempotent(name):
    out = sanitize_component(name)
    assert out and ".." not in out and "/" not in out and "\\" not in out and not out.startswith(".")
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in out)
    assert sanitize_component(out) == out


def test_hex_check():
    h = "ab" * 32
    assert check_hex_page_hash(h) == h
    assert check_page_hash(h, hex_only=True) == h
    for bad in ["AB" * 32, h[:-1], "zz" * 32, None]:
        with pytest.raises(ValueError, match="page_hash"):
            check_hex_page_hash(bad)


@pytest.mark.parametrize("bad", ["", "a/b", "a\\b", "..", "a..b", "/x", "\x00", "a\tb", "\x7f", 3])
def test_plain_fragment_rejects(bad):
    with pytest.raises(ValueError, match="arg"):
        check_plain_fragment(bad, "arg")


def test_plain_fragment_accepts():
    assert check_page_hash("k2", hex_only=False) == "k2"
    assert check_plain_fragment("a.b_c-d", "arg") == "a.b_c-d"
