"""The kit sits below everything that uses it: no module of ``hicache_sdk.kit`` imports
the adapter, the read path, the SGLang bridge, the CLI or the benchmarks."""

from __future__ import annotations

import ast
from pathlib import Path

import hicache_sdk.kit

KIT = Path(hicache_sdk.kit.__file__).parent
UPWARD = ("paged", "hiradix", "sglang", "cli", "bench")


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute (``..paged.x`` -> ``hicache_sdk.paged.x``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ["hicache_sdk", "kit"][: max(0, 2 - node.level + 1)] if node.level else []
            mod = ".".join([*base, node.module] if node.module else base)
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def test_kit_imports_nothing_above_it() -> None:
    modules = sorted(KIT.glob("*.py"))
    assert {p.stem for p in modules} >= {"aio", "cancel", "fanout", "segments"}
    bad = {
        p.name: sorted(m for m in _imports(p) if any(m.startswith(f"hicache_sdk.{u}") for u in UPWARD))
        for p in modules
    }
    assert not any(bad.values()), bad
    # the check sees relative imports: the kit does import the transport interface this way
    assert "hicache_sdk.transport.FailureReasons" in _imports(KIT / "__init__.py")
