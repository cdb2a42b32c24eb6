"""Compare the test IDs collected now with those of 0.1.0: every 0.1.0 test must still
exist, or be accounted for in ``tests/ids/changes.txt`` (renamed, or removed with a reason).

    python scripts/compare_test_ids.py            # collect now, compare, exit 1 if unaccounted
    python scripts/compare_test_ids.py --ids F    # compare a saved list (pytest --collect-only -q)

A 0.1.0 id counts as kept when, in this order:

* it exists as is;
* the same ``Class::test[params]`` exists under another path (a test file that moved);
* its parameters gained SGLang's I/O path in front (``[X]`` became ``[generic-X]``,
  ``[v1-X]`` or ``[v2-X]``; ``test`` became ``test[generic]``): the suite certifies each path;
* it was one implementation of a pair whose other one went with the C (its parameters
  without ``python`` / ``py`` / ``lock`` / ``native`` / ``runner`` name a current test, or
  ``native`` became ``py``);
* ``changes.txt`` maps it (a glob) to a current id, or says why it was removed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IDS = ROOT / "tests" / "ids"
#: What the 0.1.0 test command ran (the SGLang tests run in their own environment).
DIRS = [
    "tests",
    "backends/file/tests",
    "backends/redis/tests",
    "backends/s3/tests",
    "backends/mooncake/tests",
    "conformance/tests",
]
_SINGLE = {"python", "py", "lock", "native", "runner"}


def collect() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *DIRS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return sorted(line.strip() for line in out.splitlines() if "::" in line)


def load_changes(path: Path) -> list[tuple[re.Pattern[str], str]]:
    """``(OLD as a pattern, NEW)`` for each rule of ``changes.txt``."""
    rules = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        old, sep, new = line.partition(" => ")
        if not sep:
            raise SystemExit(f"{path}:{n}: expected 'OLD => NEW' or 'OLD => removed: WHY'")
        rules.append((_glob(old.strip()), new.strip()))
    return rules


def _glob(pattern: str) -> re.Pattern[str]:
    """``*`` matches anything (each a group); every other character, brackets included, is
    literal."""
    return re.compile("(.*)".join(re.escape(part) for part in pattern.split("*")), re.S)


def _apply(rule: re.Pattern[str], new: str, old_id: str) -> str:
    """``new`` for ``old_id``, a ``*`` in ``new`` standing for what the first ``*`` of the
    rule's OLD matched (a class renamed: ``path::Old* => path::New*``)."""
    m = rule.fullmatch(old_id)
    assert m is not None
    return new.replace("*", m.group(1), 1) if "*" in new else new


def _split(test_id: str) -> tuple[str, str, str | None]:
    path, rest = test_id.split("::", 1)
    m = re.fullmatch(r"(.*?)(?:\[(.*)\])?", rest, re.S)
    assert m is not None
    return path, m.group(1), m.group(2)


def classify(
    base: list[str], now: list[str], rules: list[tuple[re.Pattern[str], str]]
) -> tuple[Counter[str], list[str], list[str]]:
    """``(counts by how each 0.1.0 id was kept, unaccounted ids, problems in the rules)``."""
    current = set(now)
    by_tail: dict[str, str] = {}
    for t in now:
        by_tail.setdefault(t.split("::", 1)[1], t)
    counts: Counter[str] = Counter()
    missing, problems = [], []
    for new in {new for _, new in rules if not new.startswith("removed:") and "*" not in new}:
        if new not in current:
            problems.append(f"changes.txt maps to {new}, which is not a current test")
    for b in base:
        path, name, params = _split(b)
        if b in current:
            counts["same id"] += 1
            continue
        if b.split("::", 1)[1] in by_tail:
            counts["moved to another file"] += 1
            continue
        prefixed = [f"{name}[{p}-{params}]" if params else f"{name}[{p}]" for p in ("generic", "v1", "v2")]
        if any(f"{path}::{c}" in current or c in by_tail for c in prefixed):
            counts["per SGLang I/O path"] += 1
            continue
        if params is not None:
            kept = [t for t in params.split("-") if t not in _SINGLE]
            if len(kept) < len(params.split("-")):
                single = f"{path}::{name}[{'-'.join(kept)}]" if kept else f"{path}::{name}"
                twin = f"{path}::{name}[{params.replace('native', 'py')}]"
                if single in current or twin in current:
                    counts["one implementation left"] += 1
                    continue
        rule = next(((old, new) for old, new in rules if old.fullmatch(b)), None)
        if rule is None:
            missing.append(b)
        elif rule[1].startswith("removed:"):
            counts["removed (changes.txt)"] += 1
        elif (target := _apply(rule[0], rule[1], b)) not in current:
            problems.append(f"changes.txt maps {b} to {target}, which is not a current test")
        else:
            counts["renamed (changes.txt)"] += 1
    return counts, missing, problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ids", type=Path, default=None, help="current ids from a file instead of collecting")
    args = ap.parse_args(argv)
    base = [t for t in (IDS / "0.1.0.txt").read_text(encoding="utf-8").splitlines() if "::" in t]
    now = args.ids.read_text(encoding="utf-8").splitlines() if args.ids else collect()
    now = [t.strip() for t in now if "::" in t]
    counts, missing, problems = classify(base, now, load_changes(IDS / "changes.txt"))
    print(f"0.1.0: {len(base)} tests; now: {len(now)} tests")
    for k, v in counts.most_common():
        print(f"  {v:5d}  {k}")
    for p in problems:
        print(f"PROBLEM: {p}")
    for m in missing:
        print(f"UNACCOUNTED: {m}")
    return 1 if missing or problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
