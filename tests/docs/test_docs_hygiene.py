"""The docs are for users: reference and guides. No run diary (sessions, our own issue
numbers, tasks, machines lent), no talk of the machine a figure was measured on (the
generated results tables carry that), and no paths outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*ROOT.joinpath("docs").rglob("*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md"])
EXAMPLES = sorted(ROOT.joinpath("docs", "examples").glob("*.py"))

_ORDINAL = (
    r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
    r"\d+(?:st|nd|rd|th)|previous|earlier|later|this|next|last|same|one|two|several"
)
FORBIDDEN = {
    "a work session": re.compile(rf"\b(?:{_ORDINAL}) sessions?\b", re.I),
    # (an upstream project's issue number is allowed: _UPSTREAM below)
    "our own issue numbers": re.compile(r"\b(?:issue|task|ticket)s? #?\d+\b|\(issue\b", re.I),
    "machines lent": re.compile(r"\blent\b|\bGPU was (?:not )?available\b", re.I),
    "the machine a figure ran on": re.compile(
        r"\b(?:this|that|another) (?:machine|VM)\b|\bVMs?\b|\bvCPUs?\b|\ban? (?:AMD|Intel)\b", re.I
    ),
    "a path outside the repository": re.compile(r"(?:^|[\s`(\"'])(?:\.\./)*shared/|/work/|\.\./shared\b"),
    "a run diary": re.compile(r"\b(?:yesterday|this round|we (?:tried|measured|found))\b", re.I),
}


#: An issue number may be cited when it is upstream's (named just before it).
_UPSTREAM = re.compile(r"(?:sglang|mooncake|redis|lmcache|boto|moto|torch|upstream|github)[^\n]{0,24}$", re.I)


def _hits(text: str) -> list[str]:
    out = []
    for what, pattern in FORBIDDEN.items():
        for m in pattern.finditer(text):
            if what == "our own issue numbers" and _UPSTREAM.search(text[max(0, m.start() - 40) : m.start()]):
                continue
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"line {line}: {what}: {m.group(0)!r}")
    return out


@pytest.mark.parametrize("path", PAGES + EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_reads_as_reference(path: Path) -> None:
    hits = _hits(path.read_text(encoding="utf-8"))
    assert not hits, f"{path.relative_to(ROOT)}: " + "; ".join(hits)


def test_the_patterns_catch_a_diary() -> None:
    diary = (
        "Tenth session (2026-12-02, an AMD EPYC VM with 2 vCPUs): see shared/reference/servers.md "
        "and /work/main; issue 8's figures; no GPU lent to this task; this machine is slow."
    )
    found = {h.split(": ")[1] for h in _hits(diary)}
    assert found == set(FORBIDDEN) - {"a run diary"}
    assert not _hits("The test session starts the servers; SGLang issue #40193 (upstream) is cited.")
