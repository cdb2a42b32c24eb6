"""``hicache sglang-args NAME --config ...``: the exact SGLang flags that load a backend
through the bridge (:mod:`hicache_sdk.sglang`).

Prints one line (shell-quoted) for ``python -m sglang.launch_server``::

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config '{"backend_name": ...}'

The extra config holds the bridge's loader keys, ``"backend": NAME``, ``"backend_config"``
(the ``--config`` object) and ``"interface_v1"`` set from what the backend implements
(``1`` when it overrides ``batch_get_v1``/``batch_set_v1``; the bridge re-checks this at
construction).

Secrets never reach the command line: when the config holds a value of a field the
backend's config declares secret (``password``, ``namespace_salt``, ...) or a URL with
``user:password@`` credentials, the whole extra config is written to a JSON file created
with mode ``0600`` (``--secret-file``, default ``./hicache-sglang-NAME.json``; an existing
file is replaced, a symlink is refused) and the flag becomes
``--hicache-storage-backend-extra-config @FILE``, SGLang 0.5.23's own ``@file`` form (it
reads ``.json``/``.toml``/``.yaml``). The names of the moved keys go to stderr, never their
values.

The config is validated against the backend's typed config first (unknown keys, ranges),
with the environment applied as the backend would, so a typo fails here and not in
SGLang's attach. Exit: 0 printed, 2 usage / configuration error. ``--linker`` prints the
flags of the unified cache linker instead (:mod:`.linker_args`).
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
from ..sglang import BRIDGE_EXTRA_CONFIG
from ..sglang.checks import implements_v1
from .linker_args import build_linker_args
from .secrets import secret_keys, write_secret_file

HELP = "print the SGLang flags that load a backend through the hicache-sdk bridge"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="backend name (or 'package.module:Class')")
    parser.add_argument(
        "--config", default=None, help="backend settings: a JSON object, or @file (.json, .toml, .yaml)"
    )
    parser.add_argument(
        "--secret-file",
        default=None,
        help="where to write the extra config when it holds a secret (mode 0600; default ./hicache-sglang-NAME.json)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="add the bridge's Prometheus endpoint (rank r on PORT+r; needs hicache-sdk[prometheus])",
    )
    parser.add_argument("--dist", default=None, help="pick the distribution providing NAME")
    parser.add_argument("--json", action="store_true", help="print {args, secret_file, secret_keys} as JSON")
    parser.add_argument(
        "--linker",
        action="store_true",
        help="the flags of SGLang's unified cache linker (TransportLinker) instead of HiCache",
    )


def build_args(
    name: str,
    config: dict[str, Any],
    *,
    secret_file: str | None = None,
    dist: str | None = None,
    metrics_port: int | None = None,
) -> dict[str, Any]:
    """The SGLang flags for backend ``name`` with ``config``: ``{"args": [...],
    "extra_config": {...} (secrets redacted to "***"), "secret_file": path or None,
    "secret_keys": [...]}``; writes the secret file when needed. Raises ``HiCacheError``
    (unknown backend, bad config) or ``OSError`` (the file)."""
    cls = resolve_backend(name, dist=dist)
    config_cls = getattr(cls, "config_cls", None)
    if isinstance(config_cls, type) and issubclass(config_cls, BackendConfig):
        config_cls.from_mapping(config)  # validate now, not in SGLang's attach
    else:
        config_cls = None
    extra: dict[str, Any] = {
        **BRIDGE_EXTRA_CONFIG,
        "interface_v1": 1 if implements_v1(cls) else 0,
        "backend": name,
    }
    if metrics_port is not None:
        if not 0 <= metrics_port <= 65535:
            raise ValueError(f"--metrics-port must be 0..65535, got {metrics_port}")
        extra["metrics_port"] = metrics_port
    if config:
        extra["backend_config"] = dict(config)
    secrets = secret_keys(config_cls, config)
    value = json.dumps(extra, sort_keys=False)
    path: Path | None = None
    if secrets:
        path = Path(secret_file or f"hicache-sglang-{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.json").absolute()
        write_secret_file(path, extra)
        value = f"@{path}"
    shown = dict(extra)
    if config:
        shown["backend_config"] = {k: ("***" if k in secrets else v) for k, v in config.items()}
    return {
        "args": ["--hicache-storage-backend", "dynamic", "--hicache-storage-backend-extra-config", value],
        "extra_config": shown,
        "secret_file": str(path) if path is not None else None,
        "secret_keys": secrets,
    }


def run(args: argparse.Namespace) -> int:
    """Print the flags (``--json``: the whole result); exit 2 on a usage or config error."""
    try:
        config = parse_config_arg(args.config)
        if getattr(args, "linker", False):
            out = {"secret_file": None, **build_linker_args(args.name, config, dist=args.dist)}
        else:
            out = build_args(
                args.name,
                config,
                secret_file=args.secret_file,
                dist=args.dist,
                metrics_port=args.metrics_port,
            )
    except (HiCacheError, ValueError, TypeError, OSError) as e:
        print(f"hicache sglang-args: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(out, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
        return 0
    print(shlex.join(out["args"]))
    if out["secret_file"]:
        print(
            f"# secret key(s) {', '.join(out['secret_keys'])} kept out of the command line: the extra "
            f"config is in {out['secret_file']} (mode 0600); keep that file private",
            file=sys.stderr,
        )
    return 0
