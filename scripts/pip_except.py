"""``pip install`` under the repository's constraints file less the lines of some packages.

    python scripts/pip_except.py NAME[,NAME...] -- PIP-INSTALL-ARGS...
    python scripts/pip_except.py only:NAME[,NAME...] -- PIP-INSTALL-ARGS...

An environment whose engine needs other versions of a few packages than the ones the
constraints file pins (an older SGLang release and its import chain; LMCache's
``numpy<=2.2.6``) installs through this: ``PIP_CONSTRAINT`` (set by tox to
``constraints.txt``) is replaced by a copy without the lines for those names, so every other
pin, the CPU build of torch first, still holds. With ``only:``, the copy keeps just the lines
of those names (an engine that pins many of the packages the other environments pin, as
LMCache does, keeps torch's CPU build and the test tools' versions).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["constraints_without", "pip_install"]


def _name(line: str) -> str:
    return re.split(r"[=<>!~\[; ]", line.strip(), maxsplit=1)[0].lower().replace("-", "_")


def constraints_without(names: Iterable[str], *, only: bool = False) -> dict[str, str]:
    """The environment with ``PIP_CONSTRAINT`` replaced by a copy of that file without the
    lines for ``names`` (``only``: with just those lines; comments go either way); unchanged
    when no constraints file is set."""
    named = {n.lower().replace("-", "_") for n in names}
    env = dict(os.environ)
    path = env.get("PIP_CONSTRAINT")
    if not path:
        return env
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if _name(line)]
    kept = [line for line in lines if (_name(line) in named) == only]
    out = Path(tempfile.mkdtemp(prefix="hicache-pins-")) / "constraints.txt"
    out.write_text("\n".join(kept) + "\n", encoding="utf-8")
    env["PIP_CONSTRAINT"] = str(out)
    return env


def pip_install(names: Iterable[str], *args: str, only: bool = False) -> None:
    """``pip install ARGS`` with the constraints less ``names`` (``only``: just those);
    raises on failure."""
    cmd = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=constraints_without(names, only=only))


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: pip_except.py [only:]NAME[,NAME...] -- PIP-INSTALL-ARGS...", file=sys.stderr)
        return 2
    only = argv[0].startswith("only:")
    pip_install(argv[0].removeprefix("only:").split(","), *argv[2:], only=only)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
