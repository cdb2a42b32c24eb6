"""FileStorage through the paged adapter: zero-copy round trips into a real host pool,
integrity (truncated / torn / foreign pages are misses and removed), SGLang file
compatibility, and two processes sharing one directory."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hicache_backend_file import FileStorage  # noqa: E402

from hicache_sdk.hostpool import MHAHostPool  # noqa: E402
from hicache_sdk.spec import HiCacheStorageConfig  # noqa: E402

PAGE = 4
Make = Callable[..., FileStorage]


def pool(layer_num: int = 2, layout: str = "page_first") -> MHAHostPool:
    p = MHAHostPool(64, PAGE, layer_num, 2, 8, dtype=torch.bfloat16, layout=layout, pin_memory=False)
    g = torch.Generator().manual_seed(layer_num)
    buf = p.kv_buffer
    for t in buf if isinstance(buf, (list, tuple)) else [buf]:
        t.view(torch.uint8).copy_(
            torch.randint(0, 256, t.view(torch.uint8).shape, generator=g, dtype=torch.uint8)
        )
    return p


def keys(n: int, salt: str = "") -> list[str]:
    return [hashlib.sha256(f"{salt}{i}".encode()).hexdigest() for i in range(n)]


def idx(pages: list[int]) -> torch.Tensor:
    return torch.tensor([p * PAGE + j for p in pages for j in range(PAGE)], dtype=torch.int64)


def page_bytes(p: MHAHostPool, page: int) -> bytes:
    return bytes(p.get_data_page(page * PAGE, flat=True).contiguous().view(torch.uint8).numpy().tobytes())


@pytest.fixture
def make_storage(tmp_path: Path) -> Iterator[Make]:
    made: list[FileStorage] = []

    def make(p: Any = None, *, root: Path | None = None, **extra: Any) -> FileStorage:
        extra.setdefault("root", str(root or tmp_path / "cache"))
        sc = HiCacheStorageConfig(model_name="org/model", extra_config=extra)
        s = FileStorage(sc, {})
        if p is not None:
            s.register_mem_pool_host(p)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def page_files(root: Path) -> list[Path]:
    return sorted(f for f in root.rglob("*") if f.is_file() and not f.name.startswith("."))


def test_v1_round_trip_default_scheme(make_storage: Make, tmp_path: Path) -> None:
    src, dst = pool(), pool(layer_num=2)
    dst.kv_buffer.zero_()
    k = keys(5)
    s = make_storage(src)
    assert s.batch_set_v1(k, idx([0, 1, 2, 3, 4])) == [True] * 5
    r = make_storage(dst)
    assert r.batch_exists(k) == 5
    assert r.batch_get_v1(k, idx([10, 11, 12, 13, 14])) == [True] * 5
    for i in range(5):
        assert page_bytes(dst, 10 + i) == page_bytes(src, i)
    files = page_files(tmp_path / "cache")
    assert len(files) == 5
    # default scheme fans out by the first two hex chars of the hash
    for f in files:
        assert f.parent.name == f.name[:2]


@pytest.mark.parametrize("damage", ["truncate", "flip_header", "foreign_layout", "empty"])
def test_bad_page_is_miss_and_removed(make_storage: Make, tmp_path: Path, damage: str) -> None:
    src = pool()
    k = keys(3, damage)
    s = make_storage(src)
    assert s.batch_set_v1(k, idx([0, 1, 2])) == [True] * 3
    files = {f.name: f for f in page_files(tmp_path / "cache")}
    victim = files[k[1]]
    data = victim.read_bytes()
    if damage == "truncate":
        victim.write_bytes(data[: len(data) - 100])
    elif damage == "empty":
        victim.write_bytes(b"")
    elif damage == "flip_header":
        at = len(data) - 96  # the first byte (magic) of the SDK trailer
        victim.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
    else:
        # a page of another layout (4 layers instead of 2) written out of band under the same name
        other_root = tmp_path / "other"
        o = make_storage(pool(layer_num=4), root=other_root)
        assert o.batch_set_v1([k[1]], idx([0])) == [True]
        planted = next(f for f in page_files(other_root) if f.name == k[1])
        victim.write_bytes(planted.read_bytes())
    dst = pool()
    r = make_storage(dst)
    res = r.batch_get_v1(k, idx([5, 6, 7]))
    assert res == [True, False, True]
    assert page_bytes(dst, 5) == page_bytes(src, 0) and page_bytes(dst, 7) == page_bytes(src, 2)
    assert not victim.exists(), "the bad page must be removed"
    # after removal a rewrite heals it
    assert s.batch_set_v1([k[1]], idx([1])) == [True]
    assert r.batch_get_v1([k[1]], idx([6])) == [True]
    assert page_bytes(dst, 6) == page_bytes(src, 1)


def test_truncated_page_detected_by_exists(make_storage: Make, tmp_path: Path) -> None:
    src = pool()
    k = keys(3, "ex")
    s = make_storage(src)
    s.batch_set_v1(k, idx([0, 1, 2]))
    victim = next(f for f in page_files(tmp_path / "cache") if f.name == k[1])
    victim.write_bytes(victim.read_bytes()[:-1])
    assert s.batch_exists(k) == 1
    assert not victim.exists()


def _sglang_suffix(tp_rank: int = 0, tp_size: int = 1) -> str:
    return f"_org-model_{tp_rank}_{tp_size}"


def test_sglang_file_reads_sglang_written_files(make_storage: Make, tmp_path: Path) -> None:
    """Files laid out as SGLang 0.5.23 HiCacheFile writes them (raw flat page bytes,
    ``<hash>_<model>_<tp>_<tpsize>.bin`` in one flat directory) are served by us."""
    root = tmp_path / "sgl"
    root.mkdir(mode=0o700)
    src = pool()
    k = keys(3, "sgl")
    for i, key in enumerate(k):
        flat = src.get_data_page(i * PAGE, flat=True).contiguous().view(torch.uint8).numpy()
        tmp = root / f".{i:032x}.tmp"
        flat.tofile(tmp)
        os.replace(tmp, root / f"{key}{_sglang_suffix()}.bin")
    dst = pool()
    r = make_storage(dst, root=root, key_scheme="sglang-file")
    assert r.batch_exists(k) == 3
    assert r.batch_get_v1(k, idx([12, 13, 14])) == [True] * 3
    for i in range(3):
        assert page_bytes(dst, 12 + i) == page_bytes(src, i)


def test_sglang_file_writes_what_sglang_reads(make_storage: Make, tmp_path: Path) -> None:
    root = tmp_path / "sgl"
    src = pool()
    k = keys(2, "ours")
    s = make_storage(src, root=root, key_scheme="sglang-file")
    assert s.batch_set_v1(k, idx([3, 4])) == [True, True]
    names = sorted(os.listdir(root))
    assert names == sorted(f"{key}{_sglang_suffix()}.bin" for key in k)
    for i, key in enumerate(k):
        # SGLang's get(): readinto a dummy flat page, then set_from_flat_data_page
        target = src.get_dummy_flat_data_page()
        with open(root / f"{key}{_sglang_suffix()}.bin", "rb", buffering=0) as f:
            n = f.readinto(memoryview(target.view(torch.uint8).numpy()))
        assert n == target.numel() * target.element_size()
        assert target.view(torch.uint8).numpy().tobytes() == page_bytes(src, 3 + i)


def test_env_and_extra_config_root_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env_root, extra_root, our_root = tmp_path / "env", tmp_path / "extra", tmp_path / "ours"
    monkeypatch.setenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR", str(env_root))
    sc = HiCacheStorageConfig(model_name="m", extra_config={"file_storage_path": str(extra_root)})
    s = FileStorage(sc, {})
    assert s.root == str(env_root)
    s.close()
    sc = HiCacheStorageConfig(
        model_name="m", extra_config={"file_storage_path": str(extra_root), "root": str(our_root)}
    )
    s = FileStorage(sc, {})
    assert s.root == str(our_root)
    s.close()
    monkeypatch.delenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR")
    s = FileStorage(
        HiCacheStorageConfig(model_name="m", extra_config={"file_storage_path": str(extra_root)}), {}
    )
    assert s.root == str(extra_root)
    s.close()


_READER = r"""
import sys, hashlib, torch
from hicache_backend_file import FileStorage
from hicache_sdk.hostpool import MHAHostPool
from hicache_sdk.spec import HiCacheStorageConfig
root, n = sys.argv[1], int(sys.argv[2])
p = MHAHostPool(64, 4, 2, 2, 8, dtype=torch.bfloat16, layout="page_first", pin_memory=False)
s = FileStorage(HiCacheStorageConfig(model_name="org/model", extra_config={"root": root}), {})
s.register_mem_pool_host(p)
k = [hashlib.sha256(f"x{i}".encode()).hexdigest() for i in range(n)]
idx = torch.tensor([i * 4 + j for i in range(n) for j in range(4)], dtype=torch.int64)
ok = s.batch_get_v1(k, idx)
assert ok == [True] * n, ok
for i in range(n):
    sys.stdout.write(hashlib.sha256(p.get_data_page(i * 4, flat=True).contiguous().view(torch.uint8).numpy().tobytes()).hexdigest() + "\n")
"""


def test_two_processes_share_directory(make_storage: Make, tmp_path: Path) -> None:
    src = pool()
    n = 6
    s = make_storage(src)
    assert s.batch_set_v1(keys(n, "x"), idx(list(range(n)))) == [True] * n
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, "-c", _READER, str(tmp_path / "cache"), str(n)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout.split()
    assert out == [hashlib.sha256(page_bytes(src, i)).hexdigest() for i in range(n)]


def test_checksum_option_round_trip(make_storage: Make) -> None:
    src, dst = pool(), pool()
    k = keys(3, "ck")
    s = make_storage(src, checksum=True)
    assert s.batch_set_v1(k, idx([0, 1, 2])) == [True] * 3
    r = make_storage(dst, checksum=True)
    assert r.batch_get_v1(k, idx([0, 1, 2])) == [True] * 3
    assert all(page_bytes(dst, i) == page_bytes(src, i) for i in range(3))
    assert np.array_equal(
        dst.kv_buffer.view(torch.uint8)[:1].numpy(), src.kv_buffer.view(torch.uint8)[:1].numpy()
    )
