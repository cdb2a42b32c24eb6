"""Page hashing: SGLang 0.5.23 vectors, an independent oracle, and chain properties."""

from __future__ import annotations

import hashlib
from array import array

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk.keys.hashing import (
    get_hash_str,
    get_storage_hash_str,
    hash_str_to_int64,
    storage_namespace_seed,
)

H1 = "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"
H2 = "4ebfa8a1f3c341517621838c6e1b9aa350307e3f00b3cbd1a07ef740f54396d6"
SEED_SALT_ABC = "745b27447a73b201eb83d180e2f4c0896e423174ce08319ef9f36d8280c3216a"
SALTED_H1 = "37162b2a7198a18a668e43b5b410c92b090adb639b63de408114f72c5c676db2"
SEED_LORA_X = "da1b83db28cc6bd5f69b1217d748c26776c076d8ecd88f582ea3125379f6e49b"


class Key:
    """A duck-typed RadixKey."""

    def __init__(self, token_ids, extra_key=None, cache_salt=None, is_bigram=False):
        self.token_ids = token_ids
        self.extra_key = extra_key
        self.cache_salt = cache_salt
        self.is_bigram = is_bigram

    def __len__(self):
        n = len(self.token_ids)
        return max(0, n - 1) if self.is_bigram else n


# -- an oracle written from the spec text, one token at a time ------------------------
def oracle(units, prior_hex, page_size, *, bigram_raw=None):
    """units: list of lists of words (one list per logical unit); bigram_raw: the raw
    tokens when bigram (the wide check covers the boundary token)."""
    prior = bytes.fromhex(prior_hex) if prior_hex else b""
    n = len(units)
    size = n if page_size is None else page_size
    out = []
    starts = range(0, n, size) if n else ([0] if page_size is None else [])
    for s in starts:
        e = min(n, s + size)
        words = [w for u in units[s:e] for w in u]
        check = bigram_raw[s : e + 1] if bigram_raw is not None else words
        if any(w > 0xFFFFFFFF for w in check):
            payload = b"\xff" + b"".join(w.to_bytes(8, "little") for w in words)
        else:
            payload = b"".join(w.to_bytes(4, "little") for w in words)
        digest = hashlib.sha256(prior + payload).digest()
        out.append(digest.hex())
        prior = digest
    return out[0] if page_size is None else out


def test_spec_vectors():
    assert get_hash_str([1, 2, 3, 4], None, 4) == [H1]
    assert get_hash_str([1, 2, 3, 4, 5, 6, 7, 8], None, 4) == [H1, H2]
    assert get_hash_str([5, 6, 7, 8], H1, 4) == [H2]
    assert get_hash_str([1, 2, 3, 4]) == H1
    assert storage_namespace_seed(None, "abc") == SEED_SALT_ABC
    assert storage_namespace_seed("lora-x", None) == SEED_LORA_X
    assert storage_namespace_seed(None, None) is None
    assert get_hash_str([1, 2, 3, 4], SEED_SALT_ABC, 4) == [SALTED_H1]
    assert get_storage_hash_str(Key([1, 2, 3, 4], cache_salt="abc"), None, 4) == [SALTED_H1]


def test_storage_hash_plain_list_and_explicit_prior():
    assert get_storage_hash_str([1, 2, 3, 4], None, 4) == [H1]
    # an explicit prior is used as given, not reseeded
    assert get_storage_hash_str(Key([5, 6, 7, 8], cache_salt="abc"), H1, 4) == [H2]
    # "" prior on a salted key: explicit, so no seed (SGLang: falsy prior = none)
    assert get_storage_hash_str(Key([1, 2, 3, 4], cache_salt="abc"), "", 4) == [H1]
    lora = get_storage_hash_str(Key([1, 2, 3, 4], extra_key="lora-x"), None, 4)
    assert lora == get_hash_str([1, 2, 3, 4], SEED_LORA_X, 4)
    assert lora != [H1]


def test_namespace_seed_distinguishes_absent_empty_and_joined():
    seeds = {
        storage_namespace_seed("", None),
        storage_namespace_seed(None, ""),
        storage_namespace_seed("", ""),
        storage_namespace_seed("ab", "c"),
        storage_namespace_seed("a", "bc"),
    }
    assert len(seeds) == 5
    with pytest.raises(ValueError, match="extra_key"):
        storage_namespace_seed(3, None)  # type: ignore[arg-type]


def test_empty_inputs():
    assert get_hash_str([], None, 4) == []
    assert get_hash_str([]) == hashlib.sha256(b"").hexdigest()
    assert get_hash_str([], H1) == hashlib.sha256(bytes.fromhex(H1)).hexdigest()


def test_partial_last_page_is_hashed():
    assert get_hash_str([1, 2, 3, 4, 5], None, 4) == oracle([[t] for t in [1, 2, 3, 4, 5]], None, 4)
    assert len(get_hash_str(list(range(9)), None, 4)) == 3


def test_input_types_agree():
    toks = [7, 0, 2**32 - 1, 123456, 9, 8, 1, 2]
    want = get_hash_str(toks, None, 4)
    assert get_hash_str(array("q", toks), None, 4) == want
    assert get_hash_str(array("I", toks), None, 4) == want
    assert get_hash_str(np.array(toks, dtype=np.int64), None, 4) == want
    assert get_hash_str(np.array(toks, dtype=np.uint32), None, 4) == want
    assert get_hash_str(tuple(toks), None, 4) == want
    assert get_hash_str(Key(array("q", toks)), None, 4) == want


def test_raw_token_ids_and_logical_len_are_honoured():
    class Limited(Key):
        def raw_token_ids(self):
            return self.token_ids[:4]

        def __len__(self):
            return 4

    assert get_hash_str(Limited([1, 2, 3, 4, 99, 98]), None, 4) == [H1]


def test_wide_tokens_use_tagged_u64_encoding():
    toks = [1, 2**32, 3, 4]
    got = get_hash_str(toks, None, 2)
    want0 = hashlib.sha256(b"\xff" + (1).to_bytes(8, "little") + (2**32).to_bytes(8, "little")).digest()
    assert got[0] == want0.hex()
    # the second page has no wide token: plain u32, chained on the wide page
    assert got[1] == hashlib.sha256(want0 + (3).to_bytes(4, "little") + (4).to_bytes(4, "little")).hexdigest()
    assert (
        get_hash_str([2**63 - 1]) == hashlib.sha256(b"\xff" + (2**63 - 1).to_bytes(8, "little")).hexdigest()
    )


@pytest.mark.parametrize(
    ("tokens", "pos"),
    [([1, -1], 1), ([2**63, 1], 0), ([0, 0, 2**64], 2), ([1, 2, -(2**70)], 2)],
)
def test_out_of_range_tokens_name_the_position(tokens, pos):
    with pytest.raises(ValueError, match=rf"token_ids\[{pos}\]"):
        get_hash_str(tokens, None, 2)
    with pytest.raises(ValueError, match=rf"token_ids\[{pos}\]"):
        get_hash_str(tokens)


def test_numpy_out_of_range():
    with pytest.raises(ValueError, match=r"token_ids\[2\]"):
        get_hash_str(np.array([1, 2, -3]), None, 2)
    with pytest.raises(ValueError, match=r"token_ids\[1\]"):
        get_hash_str(np.array([1, 2**63], dtype=np.uint64), None, 2)
    with pytest.raises(ValueError, match="integers"):
        get_hash_str(np.array([1.0, 2.0]), None, 2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "4", True])
def test_bad_page_size(bad):
    with pytest.raises(ValueError, match="page_size"):
        get_hash_str([1, 2], None, bad)


@pytest.mark.parametrize("bad", ["xyz", "ab", H1[:-2]])
def test_bad_prior_hash(bad):
    with pytest.raises(ValueError, match="prior_hash"):
        get_hash_str([1, 2], bad, 2)


def test_non_int_tokens_rejected():
    with pytest.raises(ValueError, match=r"token_ids\[1\]"):
        get_hash_str([1, "2"], None, 2)


def test_tuple_tokens_flatten_as_u32_words():
    toks = [(1, 2), (3, 4)]
    assert get_hash_str(toks, None, 2) == [H1]
    assert get_hash_str(toks, None, 1) == oracle([[1, 2], [3, 4]], None, 1)
    with pytest.raises(ValueError, match=r"token_ids\[1\]"):
        get_hash_str([(1, 2), (3,)], None, 1)


def test_eagle_bigram():
    key = Key([1, 2, 3, 4, 5], is_bigram=True)  # 4 bigrams
    want = oracle([[1, 2], [2, 3], [3, 4], [4, 5]], None, 2, bigram_raw=[1, 2, 3, 4, 5])
    assert get_hash_str(key, None, 2) == want
    # bigram keys never match the plain keys of the same tokens
    assert get_hash_str(key, None, 2) != get_hash_str([1, 2, 3, 4], None, 2)
    # a wide boundary token makes the preceding page wide, too
    wide = Key([1, 2, 2**33, 4, 5], is_bigram=True)
    assert get_hash_str(wide, None, 1) == oracle(
        [[1, 2], [2, 2**33], [2**33, 4], [4, 5]], None, 1, bigram_raw=[1, 2, 2**33, 4, 5]
    )
    assert get_hash_str(Key([], is_bigram=True), None, 2) == []

    class Short(Key):
        def __len__(self):
            return 5

    with pytest.raises(ValueError, match="bigram"):
        get_hash_str(Short([1, 2, 3, 4, 5], is_bigram=True), None, 2)
    with pytest.raises(ValueError, match="tuple"):
        get_hash_str(Key([(1, 2), (3, 4)], is_bigram=True), None, 1)


def test_hash_str_to_int64():
    assert hash_str_to_int64("0" * 15 + "1" + "ff") == 1
    assert hash_str_to_int64("f" * 16) == -1
    assert hash_str_to_int64("8" + "0" * 15) == -(2**63)
    assert hash_str_to_int64("7" + "f" * 15) == 2**63 - 1
    assert hash_str_to_int64(H1) == int(H1[:16], 16) - 2**64  # 0xcf.. has the top bit set
    with pytest.raises(ValueError, match="hash_str"):
        hash_str_to_int64("abc")


# -- properties -------------------------------------------------------------------------
narrow = st.integers(0, 2**32 - 1)
anytok = st.one_of(narrow, narrow, narrow, st.integers(2**32, 2**63 - 1))
prior = st.one_of(st.none(), st.binary(min_size=32, max_size=32).map(bytes.hex))


@given(st.lists(anytok, max_size=40), prior, st.one_of(st.none(), st.integers(1, 9)))
def test_matches_oracle(tokens, prior_hex, page_size):
    assert get_hash_str(tokens, prior_hex, page_size) == oracle([[t] for t in tokens], prior_hex, page_size)


@given(st.lists(anytok, min_size=1, max_size=30), st.integers(1, 6))
def test_bigram_matches_oracle(raw, page_size):
    units = [[raw[i], raw[i + 1]] for i in range(len(raw) - 1)]
    got = get_hash_str(Key(raw, is_bigram=True), None, page_size)
    assert got == oracle(units, None, page_size, bigram_raw=raw)


@given(st.lists(narrow, max_size=60), st.integers(1, 8), st.data())
def test_prefix_hashes_are_a_prefix(tokens, page_size, data):
    cut = data.draw(st.integers(0, len(tokens) // page_size)) * page_size
    full = get_hash_str(tokens, None, page_size)
    assert get_hash_str(tokens[:cut], None, page_size) == full[: cut // page_size]
    # continuing from the last prefix hash gives the rest of the chain
    if cut:
        rest = get_hash_str(tokens[cut:], full[cut // page_size - 1], page_size)
        assert rest == full[cut // page_size :]


@given(st.lists(narrow, min_size=1, max_size=60), st.integers(1, 8), st.data())
def test_changing_a_token_changes_its_page_and_all_later(tokens, page_size, data):
    pos = data.draw(st.integers(0, len(tokens) - 1))
    changed = list(tokens)
    changed[pos] = (changed[pos] + data.draw(st.integers(1, 2**32 - 1))) % 2**32
    a = get_hash_str(tokens, None, page_size)
    b = get_hash_str(changed, None, page_size)
    page = pos // page_size
    assert a[:page] == b[:page]
    assert all(x != y for x, y in zip(a[page:], b[page:]))


def test_release_hash_vectors():
    """``tests/sglang/hash_vectors.json`` (checked against each real release in its tox env by
    ``tests/sglang/test_sglang_profile.py``): the SDK gives each request's unseeded chain and
    its salted chain (seeded from ``extra_key`` / ``cache_salt``); the first page and one seed
    recomputed here from their definitions."""
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[1] / "sglang" / "hash_vectors.json").read_text())
    ps = doc["page_size"]
    assert len(doc["cases"]) == 7
    for case in doc["cases"]:
        tokens, ek, salt = case["tokens"], case["extra_key"], case["cache_salt"]
        assert get_hash_str(tokens, None, ps) == case["unseeded"]
        assert storage_namespace_seed(ek, salt) == case["seed"]
        assert get_hash_str(tokens, case["seed"], ps) == case["salted"]
        assert get_storage_hash_str(Key(tokens, extra_key=ek, cache_salt=salt), None, ps) == case["salted"]
        assert (case["salted"] == case["unseeded"]) is (ek is None and salt is None)
    first = doc["cases"][0]
    page = b"".join(t.to_bytes(4, "little") for t in first["tokens"][:ps])
    assert first["unseeded"][0] == hashlib.sha256(page).hexdigest()
    k_s = next(c for c in doc["cases"] if (c["extra_key"], c["cache_salt"]) == ("k", "s"))
    seed = hashlib.sha256(b"sglang-cache-namespace-v1" + b"\x01" + (1).to_bytes(8, "little") + b"k")
    seed.update(b"\x01" + (1).to_bytes(8, "little") + b"s")
    assert k_s["seed"] == seed.hexdigest()
    assert k_s["salted"][0] == hashlib.sha256(bytes.fromhex(k_s["seed"]) + page).hexdigest()
