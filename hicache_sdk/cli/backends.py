"""``hicache backends [--json]``: every backend the registry can see, and the known ones
that are not installed (with their install command)."""

from __future__ import annotations

import argparse
import json
import sys

from ..registry import BackendInfo, list_backends

HELP = "list installed backends, their capabilities, and known backends not installed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list (stable keys)")


def _format(info: BackendInfo) -> list[str]:
    origin = f"{info.distribution} {info.version}" if info.distribution and info.version else "runtime"
    if info.source == "not_installed":
        return [f"  {info.name:<10} not installed: {info.error.split(': ', 1)[-1] if info.error else ''}"]
    state = "ok" if info.importable else "NOT IMPORTABLE"
    lines = [f"  {info.name:<10} {origin:<28} {info.value}  [{state}]"]
    if info.error:
        lines.append(f"  {'':<10} {info.error}")
    if info.capabilities is not None:
        on = [k for k, v in info.capabilities.items() if v]
        lines.append(f"  {'':<10} capabilities: {', '.join(on) if on else '(none)'}")
    if info.accelerators:
        parts = [
            f"{k} ({'built' if v else 'not built: pure-Python path'})" for k, v in info.accelerators.items()
        ]
        lines.append(f"  {'':<10} accelerators: {', '.join(parts)}")
    return lines


def run(args: argparse.Namespace) -> int:
    """Print the list; exit 0 (an unimportable backend is reported, not an error)."""
    infos = list_backends(include_not_installed=True)
    if args.json:
        json.dump([i.to_dict() for i in infos], sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    installed = [i for i in infos if i.source != "not_installed"]
    missing = [i for i in infos if i.source == "not_installed"]
    print("Installed backends:" if installed else "Installed backends: (none)")
    for info in installed:
        print("\n".join(_format(info)))
    if missing:
        print("Known backends not installed:")
        for info in missing:
            print("\n".join(_format(info)))
    return 0
