"""The docs point at what exists: every relative link in docs/ and README.md names a file or
folder of the repository (and, for ``page.md#anchor``, a heading or ``<a id>`` of that page),
so does every repository path they quote in prose (``hicache_sdk/memory.py``), and every ``hicache ...`` command line in their code blocks parses with the CLI's own parser
(``hicache check`` with the conformance suite's, ``hicache bench`` with the bench command's),
and every ``python SCRIPT.py --flag ...`` of the repository's scripts uses only flags that
script defines.

Only the parsing is checked, never a run: placeholders such as ``NAME`` or ``@ci.json`` are
plain values to argparse, a bare ``...`` (an elision of options) is dropped, and an optional
part of a synopsis (``[--out r.json]``) is parsed as if given."""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hicache_conformance import cli as check_cli

from hicache_sdk.cli import bench as bench_cli
from hicache_sdk.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([*ROOT.joinpath("docs").rglob("*.md"), ROOT / "README.md"])

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([\w+-]*)")
#: Code blocks whose lines are not shell (a ``hicache`` there is prose or data).
_NOT_SHELL = {"python", "json", "jsonc", "toml", "mermaid"}
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.M)
_HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)=[\"']([^\"']+)[\"']", re.I)
_SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_OPS = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "2>&1", "<"}


@dataclass(frozen=True)
class Line:
    page: Path
    number: int
    text: str

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.number}"


def split_blocks(text: str) -> tuple[str, list[tuple[int, str, list[str]]]]:
    """``(prose, blocks)``: the page with fenced code blocks blanked (line numbers kept), and
    each block as ``(first line number, language, lines)``."""
    prose: list[str] = []
    blocks: list[tuple[int, str, list[str]]] = []
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            blocks.append((number + 1, m.group(2).lower(), []))
            prose.append("")
        elif fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence = None
            else:
                blocks[-1][2].append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lowercase, punctuation removed (``-``
    and ``_`` kept), each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_, not snake_case
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor of ``page``: its headings' slugs (a repeated one numbered ``-1``, ``-2``
    as GitHub does) and its HTML ``id`` / ``name`` anchors."""
    prose, _ = split_blocks(page.read_text(encoding="utf-8"))
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose.splitlines():
        m = _HEADING.match(line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    found.update(_HTML_ANCHOR.findall(prose))
    return found


def links(page: Path) -> Iterator[tuple[int, str]]:
    """``(line, target)`` of each link of ``page`` outside code (inline links, images and
    reference definitions)."""
    prose, _ = split_blocks(page.read_text(encoding="utf-8"))
    prose = _INLINE_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)
    for pattern in (_LINK, _REF_DEF):
        for m in pattern.finditer(prose):
            yield prose.count("\n", 0, m.start()) + 1, m.group(1)


def broken_links(page: Path) -> list[str]:
    """What is wrong with the relative links of ``page``: one line per broken link."""
    problems = []
    for number, target in links(page):
        if _SCHEME.match(target) or target.startswith("//"):
            continue  # http(s), mailto: not followed here
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        where = f"{page.relative_to(ROOT)}:{number}: {target}"
        if not dest.is_relative_to(ROOT):
            problems.append(f"{where}: points outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading or anchor #{anchor} in {dest.relative_to(ROOT)}")
    return problems


_QUOTED_PATH = re.compile(r"`((?:hicache_sdk|backends|conformance|tests|scripts|docs)/[^`\s:]*)(?:::[^`]*)?`")
#: A placeholder in a quoted path: ``docs/results/NAME.json``, ``backends/*/``, ``<name>``.
_PLACEHOLDER = re.compile(r"[*<>{}]|(?:^|/)[A-Z][A-Z_]+(?:[./]|$)")


def stale_paths(page: Path) -> list[str]:
    """The repository paths quoted in ``page``'s prose (a code span starting with a top-level
    folder; from the root, or from the page's folder as a link's text is) that do not exist."""
    prose, _ = split_blocks(page.read_text(encoding="utf-8"))
    problems = []
    for m in _QUOTED_PATH.finditer(prose):
        path = m.group(1)
        if _PLACEHOLDER.search(path) or (ROOT / path).exists() or (page.parent / path).exists():
            continue
        problems.append(
            f"{page.relative_to(ROOT)}:{prose.count(chr(10), 0, m.start()) + 1}: {path}: no such path"
        )
    return problems


_SCRIPT_RUN = re.compile(
    r"(?:^|[`\s])(?:\.venv/bin/)?python3? ((?:[\w.-]+/)*[\w.-]+\.py)((?: [^`\n]*)?)", re.M
)


def script_flags(script: Path) -> set[str]:
    """The option strings a script's argparse setup defines (read from its source)."""
    flags = {"-h", "--help"}
    for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags.update(
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("-")
            )
    return flags


def unknown_script_flags(page: Path) -> list[str]:
    """Each ``python SCRIPT.py ...`` in ``page`` (prose or code) that passes a flag its
    script (a file of this repository) does not define."""
    problems = []
    text = page.read_text(encoding="utf-8")
    for m in _SCRIPT_RUN.finditer(text):
        script = ROOT / m.group(1)
        if not script.is_file():
            continue
        given = {w.split("=", 1)[0] for w in m.group(2).split() if re.match(r"--?[A-Za-z]", w)}
        unknown = sorted(given - script_flags(script))
        if unknown:
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{page.relative_to(ROOT)}:{line}: {m.group(1)}: no option {', '.join(unknown)}")
    return problems


def command_lines(page: Path) -> Iterator[Line]:
    """Each ``hicache`` / ``hicache-conformance`` command in the shell code blocks of
    ``page``, continuation lines (a trailing ``\\``, an open quote) joined."""
    _, blocks = split_blocks(page.read_text(encoding="utf-8"))
    for first, lang, lines in blocks:
        if lang in _NOT_SHELL:
            continue
        i = 0
        while i < len(lines):
            start = i
            text = lines[i].strip()
            i += 1
            while i < len(lines) and (text.endswith("\\") or not _complete(text)):
                text = (text[:-1] if text.endswith("\\") else text + "\n") + lines[i].strip()
                i += 1
            words = _words(text)
            if words and words[0] in ("hicache", "hicache-conformance"):
                yield Line(page, first + start, text)


def _complete(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:  # an open quote: the command goes on on the next line
        return False
    return True


def _words(text: str) -> list[str]:
    """The command's words: a ``$`` prompt, ``VAR=value`` prefixes, a comment, anything
    after a pipe or redirection and a bare ``...`` dropped; ``[--opt value]`` unbracketed."""
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return []
    if words[:1] == ["$"]:
        words = words[1:]
    while words and _ENV_ASSIGN.match(words[0]):
        words = words[1:]
    for i, w in enumerate(words):
        if w in _SHELL_OPS:
            words = words[:i]
            break
    out, depth = [], 0
    for w in words:
        if w.startswith("[-"):
            w, depth = w[1:], depth + 1
        if depth and w.endswith("]"):
            w, depth = w[:-1], depth - 1
        if w != "...":
            out.append(w)
    return out


def parse_command(words: list[str]) -> str | None:
    """Parse ``words`` (``hicache ...``) the way the CLI does; ``None`` if it parses, else
    argparse's message."""
    args = words[1:]
    if words[0] == "hicache-conformance":
        parser, args = check_cli._parser(), args
    elif args[:1] == ["check"]:
        parser, args = check_cli._parser(), args[1:]
    elif args[:2] == ["bench", "plot"]:
        parser, args = bench_cli.plot_parser(), args[2:]
    elif args[:1] == ["bench"]:
        parser, args = bench_cli.bench_parser(), args[1:]
    else:
        parser = build_parser()
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            ns = parser.parse_args(args)
    except SystemExit as e:
        return None if e.code == 0 else err.getvalue().strip() or f"exit {e.code}"
    if parser.prog == "hicache" and getattr(ns, "command", None) is None:
        return "no subcommand"
    return None


COMMANDS = [line for page in PAGES for line in command_lines(page)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    problems = broken_links(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_quoted_paths_exist(page: Path) -> None:
    problems = stale_paths(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_script_flags_exist(page: Path) -> None:
    problems = unknown_script_flags(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("line", COMMANDS, ids=Line.where)
def test_documented_command_parses(line: Line) -> None:
    error = parse_command(_words(line.text))
    assert error is None, f"{line.where()}: {line.text!r}: {error}"


def test_every_kind_of_command_is_found() -> None:
    """The scan sees the commands the docs are known to show (guards against a scan that
    silently finds nothing)."""
    firsts = {tuple(_words(c.text)[:2]) for c in COMMANDS}
    for sub in ("backends", "ping", "check", "sglang-args", "bench", "stats", "layout"):
        assert ("hicache", sub) in firsts, sub
    assert len(COMMANDS) >= 30, len(COMMANDS)


def test_slugs_follow_github() -> None:
    assert slug("Negative cache: present but unreadable") == "negative-cache-present-but-unreadable"
    assert slug("Declaring a backend: `transport_cls`, capabilities stated once") == (
        "declaring-a-backend-transport_cls-capabilities-stated-once"
    )
    assert slug("3. The backend class") == "3-the-backend-class"
    assert slug("`sglang-file` (SGLang 0.5.23 HiCacheFile)") == "sglang-file-sglang-0523-hicachefile"
    assert slug("**Bold** and [a link](x.md)") == "bold-and-a-link"


def test_the_checks_catch_what_is_wrong(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "b.md").write_text("# Real heading\n\n## Twice\n\n## Twice\n", encoding="utf-8")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#real-heading) [ok2](b.md#twice-1) [bad](gone.md) [bad anchor](b.md#fake)\n"
        "`[in code](gone2.md)` [out](../../x.md) [web](https://example.com/nothing)\n\n"
        "```bash\nhicache ping NAME --config '{\"a\":\n  1}' --pages 4\nhicache ping NAME --no-such-flag\n"
        "hicache check NAME --matrix huge\nhicache bench plot a.json\nhicache bench file ... [--out r.json]\n```\n"
        "```python\nhicache --bogus\n```\n"
        "`b.md` `docs/results/NAME.json` `backends/*/` `tests/gone.py::test_x` `scripts/gone.sh`\n"
        "`python tool.py --out x --no-such 1` `python tool.py --help` `python elsewhere.py --x`\n",
        encoding="utf-8",
    )
    problems = broken_links(page)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "gone.md: no such file",
        "b.md#fake: no heading or anchor #fake in b.md",
        "../../x.md: points outside the repository",
    ]
    assert [p.split(": ", 1)[1] for p in stale_paths(page)] == [
        "tests/gone.py: no such path",
        "scripts/gone.sh: no such path",
    ]
    (tmp_path / "tool.py").write_text(
        "import argparse\nap = argparse.ArgumentParser()\nap.add_argument('--out', '-o')\n", encoding="utf-8"
    )
    assert [p.split(": ", 1)[1] for p in unknown_script_flags(page)] == ["tool.py: no option --no-such"]
    lines = list(command_lines(page))
    assert [ln.number for ln in lines] == [5, 7, 8, 9, 10]
    errors = [parse_command(_words(ln.text)) for ln in lines]
    assert errors[0] is None and errors[4] is None
    assert errors[1] is not None and "--no-such-flag" in errors[1]
    assert errors[2] is not None and "huge" in errors[2]
    assert errors[3] is not None and "-o/--out" in errors[3]
