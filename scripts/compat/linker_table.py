"""The linker section of ``docs/compatibility.md``: which linkers serve SGLang's unified cache
linker, with verdicts and reasons.

``python scripts/compat_matrix.py --linker`` runs the rows (``scripts/linker_matrix.py``,
in an environment with SGLang 0.5.23 or later and the servers: ``tox -e matrix``) and
writes ``docs/compatibility_linker.json``; :func:`render_linker` turns that run into the
section (``render.py`` appends it to the page, so ``--render`` regenerates it too).
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "compatibility_linker.json"

__all__ = ["RESULTS", "render_linker", "run_linker"]

_INTRO = """## Linkers: SGLang's unified cache linker

SGLang 0.5.23 can move KV pages between its device pools and a store without a host tier,
layer by layer (`--enable-unified-cache-external-linker`; see [linker.md](linker.md)). Each
row builds a linker through SGLang's own factory (`create_unified_cache_linker`) on SGLang's
real CPU device pools and runs the linker contract (`hicache check NAME --engine
sglang-linker`, [conformance.md](conformance.md)) against the real store. *certified*: every
check passes; *passes*: the checks its reason names pass (the others build models the linker
does not serve); *fails*: a check fails (its reason); *refused*: the factory or the linker
refused the model (its reason).
"""

#: What the rows show, after the table (each when its row has that verdict).
FINDINGS = {
    ("SGLang MooncakeDirectLinker", "refused"): (
        "- **SGLang's own Mooncake linker refuses plain models.** It builds its view of the device "
        "pools with SGLang's `resolve_hybrid_device_pool_group` "
        "(`mem_cache/hybrid_cache/linker_pool_assembler.py`), which supports the hybrid strategies "
        "only (DeepSeek V4, Mamba over an MLA pool, Mamba+SWA, DSA); a plain MHA or MLA model gets "
        "`_PlainKvStrategy`, which it refuses at construction. So no linker SGLang ships serves a "
        "plain model; `TransportLinker` builds its view from the pool's per-layer buffers and does."
    ),
    ("SGLang MooncakeDirectLinker", "passes"): (
        "- **SGLang's own Mooncake linker serves the hybrid Mamba model.** On a `HybridLinearKVPool` "
        "over an MLA pool with the `MambaPool` of SGLang's `HybridReqToTokenPool`, against the real "
        "`mooncake_master`, it passes the contract's `mamba_windows` check. SGLang publishes the "
        "runtime context this linker reads (`get_parallel()`, `get_memory()`, `get_model()`) from "
        "full server arguments at start-up; the matrix stands in for the fields it reads (one TP "
        "rank, no DCP, no unified memory, the model name)."
    ),
    ("sglang-fs-linker 0.1.0", "refused"): (
        "- **`sglang-fs-linker` 0.1.0 no longer loads.** SGLang 0.5.23's factory requires every "
        "abstract method of `UnifiedCacheLinker`; 0.1.0's `FileSystemLinker` lacks "
        "`finish_layer_wise_loading`, so the factory refuses the class before it is built."
    ),
}

#: Rows this table does not have yet, and why.
NOT_YET = (
    "- **Not in the table: SGLang's Mooncake linker on its other hybrid models.** The matrix "
    "builds no DeepSeek V4 or DSA device pools, and the contract's Mamba check builds Mamba over "
    "an MLA pool only (not Mamba + SWA)."
)


def render_linker(_run: dict[str, Any] | None = None) -> str:
    """The section, from the last ``--linker`` run (a line saying so when there is none)."""
    if not RESULTS.exists():
        return _INTRO + "\nNot run yet: `python scripts/compat_matrix.py --linker`.\n"
    run: dict[str, Any] = json.loads(RESULTS.read_text(encoding="utf-8"))
    out = [
        _INTRO,
        f"Last run: `{run['command']}` on {run['date']}, SGLang {run['sglang']}, Python {run['python']}.",
        "",
        "| linker | store and model | verdict | reason |",
        "|---|---|---|---|",
    ]
    for row in run["rows"]:
        reason = " ".join(str(row["reason"]).split()).replace("|", "\\|")
        out.append(f"| {row['linker']} | {row['store']} | {row['verdict']} | {reason} |")
    out.append("")
    seen = {(row["linker"], row["verdict"]) for row in run["rows"]}
    out.extend(text for key, text in FINDINGS.items() if key in seen)
    out.append(NOT_YET)
    out.append("")
    return "\n".join(out)


def run_linker() -> int:
    """Run ``scripts/linker_matrix.py`` in a child process (it installs SGLang's test
    stand-ins on a machine without ``triton``, and ``sglang-fs-linker`` into a throwaway
    folder), then write the JSON."""
    cmd = [sys.executable, str(ROOT / "scripts" / "linker_matrix.py"), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    sys.stderr.write(done.stderr[-4000:])
    if done.returncode != 0:
        print(f"[matrix] linker rows failed (exit {done.returncode})", file=sys.stderr)
        return 1
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    doc["command"] = "python scripts/compat_matrix.py --linker"
    doc["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    RESULTS.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    for row in doc["rows"]:
        print(f"[matrix] {row['linker']} / {row['store']}: {row['verdict']}")
    from render import render  # the page, with this section, from the last full run

    page = ROOT / "docs" / "compatibility.md"
    page.write_text(render(json.loads((ROOT / "docs" / "compatibility.json").read_text("utf-8"))), "utf-8")
    print(f"wrote {RESULTS.relative_to(ROOT)} and {page.relative_to(ROOT)}")
    return 0
