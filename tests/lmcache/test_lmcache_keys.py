"""The ``lmc1`` key scheme and the adapter settings (no LMCache needed)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk.lmcache import SCHEME, L2Settings, NameMaker, object_name

_SAFE = re.compile(r"[A-Za-z0-9._/-]+")


@dataclass(frozen=True)
class Key:
    chunk_hash: bytes = b"\x01" * 32
    model_name: str = "meta-llama/Llama-3.1-8B"
    kv_rank: int = 0
    object_group_id: int = 0
    cache_salt: str = ""


def test_name_has_every_field_and_the_version() -> None:
    name = object_name(Key(kv_rank=3, object_group_id=2, cache_salt="alice"))
    assert name.startswith(f"{SCHEME}_meta-llama-Llama-3.1-8B-")
    parts = name.split("_")
    assert parts[0] == "lmc1"
    assert parts[2:4] == ["00000003", "00000002"]
    assert parts[4].startswith("s") and len(parts[4]) == 33
    assert parts[5] == "01" * 32


@pytest.mark.parametrize(
    "other",
    [
        Key(model_name="meta-llama/Llama-3.1-70B"),
        Key(model_name="meta-llama-Llama-3.1-8B"),  # same safe form, other model
        Key(kv_rank=1),
        Key(object_group_id=1),
        Key(cache_salt="bob"),
        Key(chunk_hash=b"\x02" * 32),
    ],
)
def test_every_field_separates_objects(other: Key) -> None:
    assert object_name(other) != object_name(Key())


def test_namespace_and_salt() -> None:
    plain = NameMaker()(Key())
    assert NameMaker("tenant a")(Key()) == "tenant-a/" + plain
    assert NameMaker(namespace_salt="s1")(Key()) != plain
    assert NameMaker(namespace_salt="s1")(Key()) == NameMaker(namespace_salt="s1")(Key())


def test_long_hash_is_digested_and_bad_fields_refused() -> None:
    long = object_name(Key(chunk_hash=b"x" * 100))
    assert long.rsplit("_", 1)[1].startswith("h") and len(long.rsplit("_", 1)[1]) == 65
    with pytest.raises(ValueError, match="chunk_hash"):
        object_name(Key(chunk_hash=b""))
    with pytest.raises(ValueError, match="kv_rank"):
        object_name(Key(kv_rank="0"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cache_salt"):
        object_name(Key(cache_salt=None))  # type: ignore[arg-type]


@given(
    st.binary(min_size=1, max_size=80),
    st.text(max_size=300).filter(lambda m: "@" not in m),
    st.integers(-(2**40), 2**40),
    st.integers(0, 2**31),
    st.text(max_size=128),
)
def test_names_are_safe_for_every_backend(h: bytes, model: str, rank: int, group: int, salt: str) -> None:
    name = object_name(Key(h, model, rank, group, salt))
    assert _SAFE.fullmatch(name), name
    assert len(name) <= 200
    assert not name.startswith(".") and ".." not in name


def test_settings_parse_and_refuse() -> None:
    s = L2Settings.from_mapping({"backend": "file", "backend_config": {"root": "/x"}, "workers": 2})
    assert (s.backend, dict(s.backend_config), s.workers, s.task_timeout_s) == (
        "file",
        {"root": "/x"},
        2,
        30.0,
    )
    assert L2Settings.from_mapping('{"backend": "redis"}').backend == "redis"
    with pytest.raises(ValueError, match="unknown key"):
        L2Settings.from_mapping({"backend": "file", "rooot": 1})
    with pytest.raises(ValueError, match="backend must be"):
        L2Settings.from_mapping({})
    with pytest.raises(ValueError, match="workers"):
        L2Settings.from_mapping({"backend": "file", "workers": 0})
    with pytest.raises(ValueError, match="task_timeout_s"):
        L2Settings.from_mapping({"backend": "file", "task_timeout_s": -1})
    with pytest.raises(ValueError, match="backend_config"):
        L2Settings.from_mapping({"backend": "file", "backend_config": [1]})
    assert s.in_place is True
    assert L2Settings.from_mapping({"backend": "file", "in_place": False}).in_place is False
    with pytest.raises(ValueError, match="in_place"):
        L2Settings.from_mapping({"backend": "file", "in_place": "no"})


def test_the_sdk_never_imports_lmcache_and_the_bindings_stay_apart() -> None:
    import ast
    import subprocess
    import sys
    from pathlib import Path

    code = "import sys, hicache_sdk, hicache_sdk.lmcache; assert 'lmcache' not in sys.modules, 'lmcache imported'"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0
    root = Path(__file__).resolve().parents[2] / "hicache_sdk"

    def imported(pkg: str) -> set[str]:
        names: set[str] = set()
        for f in (root / pkg).glob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.ImportFrom):
                    names.add("." * node.level + (node.module or ""))
                elif isinstance(node, ast.Import):
                    names.update(a.name for a in node.names)
        return names

    assert not [m for m in imported("lmcache") if "sglang" in m]
    assert not [m for m in imported("sglang") if "lmcache" in m]
