"""``hicache lmcache-args NAME --config ... [--plug l2|connector]``: the LMCache setting that
serves a backend through :mod:`hicache_sdk.lmcache`.

``--plug l2`` (the default) prints the ``lmcache server`` flag (multiprocess mode, the L2
adapter plug point)::

    --l2-adapter '{"type": "plugin", "module_path": "hicache_sdk.lmcache",
                   "class_name": "L2Adapter", "adapter_params": {"backend": NAME, ...}}'

``--plug connector`` prints the lines of LMCache's YAML config for the in-process remote
connector (``remote_url: plugin://hicache``, ``remote_storage_plugins`` and its
``extra_config`` keys), for vLLM's in-process LMCache connector.

The config is validated against the backend's typed config first (unknown keys, ranges),
as ``hicache sglang-args`` does, so a typo fails here and not at the server's start.
Secrets never reach the command line: when the config holds a secret (a field the
backend's config declares secret, or a URL with ``user:password@``), the backend config is
written to a JSON file created with mode ``0600`` (``--secret-file``, default
``./hicache-lmcache-NAME.json``; a symlink is refused) and ``backend_config`` becomes
``"@FILE"``, which the adapter reads at start. The names of the moved keys go to stderr,
never their values. Exit: 0 printed, 2 usage / configuration error.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from ..config import BackendConfig, parse_config_arg
from ..errors import HiCacheError
from ..registry import resolve_backend
from .secrets import secret_keys, write_secret_file

HELP = "print the LMCache setting (lmcache server --l2-adapter) that serves a backend"

#: Where LMCache's plugin loader finds our L2 adapter.
L2_MODULE, L2_CLASS = "hicache_sdk.lmcache", "L2Adapter"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="backend name (or 'package.module:Class')")
    parser.add_argument(
        "--config", default=None, help="backend settings: a JSON object, or @file (.json, .toml, .yaml)"
    )
    parser.add_argument(
        "--secret-file",
        default=None,
        help="where to write the backend config when it holds a secret (mode 0600; "
        "default ./hicache-lmcache-NAME.json)",
    )
    parser.add_argument(
        "--plug",
        choices=["l2", "connector"],
        default="l2",
        help="l2: lmcache server's --l2-adapter flag (default); connector: the YAML of the in-process connector",
    )
    parser.add_argument("--dist", default=None, help="pick the distribution providing NAME")
    parser.add_argument(
        "--json", action="store_true", help="print {args, l2_adapter, secret_file, secret_keys}"
    )


def build_args(
    name: str, config: dict[str, Any], *, secret_file: str | None = None, dist: str | None = None
) -> dict[str, Any]:
    """The ``lmcache server`` flags for backend ``name`` with ``config``: ``{"args": [...],
    "l2_adapter": {...} (secrets redacted to "***"), "secret_file": path or None,
    "secret_keys": [...]}``; writes the secret file when needed. Raises ``HiCacheError``
    (unknown backend, bad config) or ``OSError`` (the file)."""
    cls = resolve_backend(name, dist=dist)
    config_cls = getattr(cls, "config_cls", None)
    if isinstance(config_cls, type) and issubclass(config_cls, BackendConfig):
        config_cls.from_mapping(config)
    else:
        config_cls = None
    secrets = secret_keys(config_cls, config)
    params: dict[str, Any] = {"backend": name}
    path: Path | None = None
    if secrets:
        path = Path(secret_file or f"hicache-lmcache-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.json").absolute()
        write_secret_file(path, dict(config))
        params["backend_config"] = f"@{path}"
    elif config:
        params["backend_config"] = dict(config)
    spec = {"type": "plugin", "module_path": L2_MODULE, "class_name": L2_CLASS, "adapter_params": params}
    shown = json.loads(json.dumps(spec))
    if secrets:
        shown["adapter_params"]["backend_config"] = {
            k: ("***" if k in secrets else v) for k, v in config.items()
        }
    return {
        "args": ["--l2-adapter", json.dumps(spec)],
        "l2_adapter": shown,
        "connector_yaml": connector_yaml(params),
        "secret_file": str(path) if path is not None else None,
        "secret_keys": secrets,
    }


def connector_yaml(params: dict[str, Any]) -> str:
    """LMCache YAML lines that load the in-process connector with ``adapter_params``
    (JSON values, which YAML reads as they are)."""
    key = "remote_storage_plugin.hicache"
    return "\n".join(
        [
            'remote_url: "plugin://hicache"',
            'remote_storage_plugins: ["hicache"]',
            "extra_config:",
            f"  {key}.module_path: hicache_sdk.lmcache",
            f"  {key}.class_name: ConnectorAdapter",
            f"  {key}.adapter_params: {json.dumps(params)}",
        ]
    )


def run(args: argparse.Namespace) -> int:
    """Print the flag (``--json``: the whole result); exit 2 on a usage or config error."""
    try:
        config = parse_config_arg(args.config)
        out = build_args(args.name, config, secret_file=args.secret_file, dist=args.dist)
    except (HiCacheError, ValueError, TypeError, OSError) as e:
        print(f"hicache lmcache-args: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(out, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    print(out["connector_yaml"] if args.plug == "connector" else shlex.join(out["args"]))
    if out["secret_file"]:
        print(
            f"# secret key(s) {', '.join(out['secret_keys'])} kept out of the command line: the backend "
            f"config is in {out['secret_file']} (mode 0600); keep that file private",
            file=sys.stderr,
        )
    return 0
