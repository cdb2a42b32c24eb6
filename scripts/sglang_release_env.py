"""Install one SGLang release into the current environment, for ``tox -e sglang-X.Y.Z``.

``python scripts/sglang_release_env.py sglang-0.5.9`` (the tox env's name, or ``0.5.9``)
installs, with ``pip --no-deps``, the wheel that release line's contract profile was read
from (its last ``.postN``, :mod:`hicache_sdk.sglang.profiles`), then the few pure-Python
packages on its storage modules' import chain at the versions that release pins
(``einops``, ``openai``, ``partial_json_parser``, ``transformers``, and ``xgrammar`` without its
dependencies: read from the installed wheel's metadata). Everything else comes from ``tests/sglang/requirements.txt``; the GPU-only
modules (``triton``, ``torchvision``, ``sgl_kernel``) are stood in by
``tests/sglang/sglang_standins.py``.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pip_except import pip_install

#: Distributions on the storage modules' import chain, installed at the release's own pin.
CHAIN = ("einops", "openai", "partial_json_parser", "transformers")
#: The same, installed without their dependencies (``xgrammar`` would resolve torch anew;
#: 0.5.20 imports it on the metrics module's chain).
CHAIN_NO_DEPS = ("xgrammar",)


def _pip(*args: str) -> None:
    pip_install({"sglang", *CHAIN, *CHAIN_NO_DEPS}, *args)


def _pins(chain: tuple[str, ...]) -> list[str]:
    """The release's requirement for each of ``chain`` (``name==X`` or ``name``)."""
    out = []
    for req in metadata.requires("sglang") or []:
        if ";" in req and "extra" in req.split(";", 1)[1]:
            continue
        m = re.match(r"([A-Za-z0-9_.-]+)\s*(.*)", req.split(";", 1)[0].strip())
        if m and m.group(1).lower().replace("-", "_") in chain:
            out.append(f"{m.group(1)}{m.group(2).replace(' ', '')}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: sglang_release_env.py sglang-X.Y.Z", file=sys.stderr)
        return 2
    from hicache_sdk.sglang.versions import profile_for

    profile = profile_for(argv[0].removeprefix("sglang-"))
    _pip("--no-deps", f"sglang=={profile.wheel_version}")
    pins, loose = _pins(CHAIN), _pins(CHAIN_NO_DEPS)
    _pip(*pins)
    if loose:
        _pip("--no-deps", *loose)
    print(f"SGLang {profile.wheel_version} with {', '.join(pins + loose)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
