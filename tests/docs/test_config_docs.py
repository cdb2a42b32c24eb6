"""The option tables of docs/backends/*.md are generated from the config classes
(scripts/gen_config_docs.py); these tests fail when the pages drift from the code."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import pytest

from hicache_sdk.config import BackendConfig, secret_field, setting

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_every_backend_page_matches_its_config_class(gen: ModuleType) -> None:
    assert set(gen.BACKENDS) == {"memory", "file", "redis", "s3", "mooncake"}
    assert gen.drift() == []


def test_every_field_has_a_row_and_a_description(gen: ModuleType) -> None:
    import dataclasses

    for name, (ref, rel) in gen.BACKENDS.items():
        cls = gen.load(ref)
        page = (ROOT / rel).read_text(encoding="utf-8")
        table = page[page.index(gen.BEGIN) : page.index(gen.END)]
        for f in dataclasses.fields(cls):
            rows = [line for line in table.splitlines() if line.startswith(f"| `{f.name}` |")]
            assert len(rows) == 1, (name, f.name)
            assert rows[0].rstrip(" |").split(" | ")[-1].strip(), f"{name}.{f.name}: no description"


@dataclass(frozen=True, kw_only=True)
class _Cfg(BackendConfig):
    """Settings.

    * ``wait_s`` [1.5]: how long to wait.
    * ``token``: the API token.
    """

    env_prefix: ClassVar[str] = "DEMO"
    wait_s: float = setting(1.5, gt=0, le=60, unit="seconds", env="DEMO_WAIT")
    token: str | None = secret_field(None)
    size: int = setting(64 << 20, ge=1 << 20, unit="bytes")
    url: str = setting()


def test_render_reads_defaults_ranges_units_secrets_and_env(gen: ModuleType) -> None:
    rows = {
        line.split(" | ")[0][2:]: line for line in gen.render(_Cfg).splitlines() if line.startswith("| `")
    }
    assert rows["`wait_s`"] == (
        "| `wait_s` | `float` | `1.5` | > 0 and <= 60; seconds |  | `HICACHE_DEMO_WAIT_S`, `DEMO_WAIT` "
        "| how long to wait. |"
    )
    assert "| yes | `HICACHE_DEMO_TOKEN` | the API token. |" in rows["`token`"]
    assert "`67108864` (64 MiB) | >= 1 MiB; bytes |" in rows["`size`"]
    assert rows["`url`"].startswith("| `url` | `str` | required |")
    # the shared fields come with BackendConfig's own descriptions
    assert "circuit breaker" in rows["`breaker_failures`"]


def test_a_stale_page_is_reported(gen: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "demo.md"
    page.write_text(f"# demo\n\n{gen.BEGIN}\n{gen.render(_Cfg)}{gen.END}\n", encoding="utf-8")
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "BACKENDS", {"demo": (f"{__name__}:_Cfg", "demo.md")})
    assert gen.drift() == []
    page.write_text(page.read_text().replace("`1.5`", "`2.0`"), encoding="utf-8")
    assert gen.drift() == ["demo.md: the option table of 'demo' differs from " + f"{__name__}:_Cfg"]
    page.write_text("# demo\n", encoding="utf-8")
    assert gen.drift() == ["demo.md: no generated-table markers (demo)"]
