"""``hicache check NAME --config JSON|@file --report r.json [--junitxml x.xml] [--level L]
[--profile contract|strict] [--capabilities mla,persistent] [--sglang-backend NAME]
[--io-backend kernel|direct] [--pools auto|sglang|sdk] [--geometry small|block]``.

Runs the suite (``pytest.main`` over the plugin's configured suite, isolated from the
caller's pytest configuration). ``hicache-conformance`` is the same command as a
standalone script. Exit codes (see ``docs/conformance.md``):

* 0: every test that ran passed;
* 1: at least one test failed, or the backend's server cannot be reached (one line on
  stderr names the address; nothing ran);
* 2: bad arguments (unknown level or profile, unknown backend name, a config key the
  backend does not have, a wrong type or unit), or pytest was interrupted;
* 3 / 4 / 5: pytest's internal error / usage error / no tests collected;
* 6: the backend cannot be imported (a missing library) or constructed (one line on
  stderr names the cause; the report, when asked for, says why nothing ran).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from .engines import DEFAULT_ENGINE, ENGINES, engine_runner

__all__ = ["main", "console_main", "EXIT_BACKEND_UNUSABLE"]

#: Exit status when the backend cannot be imported or constructed (nothing ran).
EXIT_BACKEND_UNUSABLE = 6


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="hicache check", description="Run the hicache conformance suite on a backend."
    )
    p.add_argument("backend", help="backend name (entry point) or module:Class")
    p.add_argument(
        "--config", default=None, help="backend extra_config: inline JSON or @file (.json/.toml/.yaml)"
    )
    p.add_argument("--report", default=None, help="write the JSON report here")
    p.add_argument("--junitxml", default=None, help="write JUnit XML here")
    p.add_argument(
        "--level", action="append", default=None, help="levels: L0..L4, stateful, all (repeatable)"
    )
    p.add_argument("--matrix", choices=["full", "pairwise", "minimal"], default=None, help="host-pool matrix")
    p.add_argument(
        "--profile",
        choices=["contract", "strict"],
        default=None,
        help="contract: what SGLang 0.5.23 requires; strict: plus the SDK's promises "
        "(default: strict for PagedStorage backends, contract otherwise)",
    )
    p.add_argument(
        "--isolate",
        action="append",
        default=None,
        metavar="KEY=TEMPLATE",
        help="isolate each test namespace through this extra-config key ({namespace} replaced), "
        "for key schemes without a namespace, e.g. --isolate 'root=/tmp/cc/{namespace}'",
    )
    p.add_argument(
        "--capabilities",
        action="append",
        default=None,
        metavar="CAPS",
        help="declare capabilities the backend class cannot show (comma-separated, e.g. mla,persistent; "
        "-name takes one away); the report shows declared vs inferred",
    )
    p.add_argument(
        "--sglang-backend",
        default=None,
        metavar="NAME",
        help="how SGLang loads the backend: dynamic (default, anything loaded by class) or a built-in "
        "name (mooncake, hf3fs, nixl, file, ...); decides the I/O paths and host layouts certified",
    )
    p.add_argument(
        "--io-backend",
        choices=["kernel", "direct"],
        default=None,
        help="SGLang's --hicache-io-backend (decides the host layouts SGLang hands the backend)",
    )
    p.add_argument(
        "--geometry",
        choices=["small", "block"],
        default=None,
        help="the pools' model geometry: small (default) or block (every page a multiple of 4 KiB, "
        "for backends that transfer with O_DIRECT)",
    )
    p.add_argument(
        "--sglang-version",
        default=None,
        metavar="X.Y.Z",
        help="the SGLang release to certify against: must be the installed SGLang's (exit 2 otherwise); "
        "without SGLang, that release's contract profile with the SDK's own pools",
    )
    p.add_argument(
        "--pools",
        choices=["auto", "sglang", "sdk"],
        default=None,
        help="whose host pools: auto (SGLang's own when SGLang is installed), sglang, sdk",
    )
    p.add_argument(
        "--engine",
        choices=sorted(ENGINES),
        default=DEFAULT_ENGINE,
        help=f"which engine's contract to certify (default {DEFAULT_ENGINE})",
    )
    p.add_argument("-k", dest="keyword", default=None, help="only tests matching this pytest -k expression")
    p.add_argument("-q", "--quiet", action="store_true", help="less output")
    return p


def _capabilities_joined(argv: list[str]) -> list[str]:
    """``--capabilities -mla`` as ``--capabilities=-mla`` (argparse would read ``-mla`` as an
    option of its own)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == "--capabilities" and i + 1 < len(argv) and argv[i + 1].startswith("-"):
            out.append(f"--capabilities={argv[i + 1]}")
            i += 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _plugin_autoloaded() -> bool:
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return False
    return any(ep.value == "hicache_conformance.plugin" for ep in metadata.entry_points(group="pytest11"))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; return the exit status (0 pass, 1 test failures, 2+ usage/internal)."""
    import pytest

    args = _parser().parse_args(_capabilities_joined(list(argv) if argv is not None else sys.argv[1:]))
    runner = engine_runner(args.engine)
    if runner is not None:
        return runner(args, main)
    if args.level:
        from .capabilities import parse_levels

        try:
            parse_levels(args.level)
        except ValueError as e:
            print(f"hicache check: {e}", file=sys.stderr)
            return 2
    if args.capabilities:
        from .capabilities import parse_capabilities

        try:
            parse_capabilities(args.capabilities)
        except ValueError as e:
            print(f"hicache check: {e}", file=sys.stderr)
            return 2
    if args.sglang_version:
        from .release import check_requested

        why = check_requested(args.sglang_version)
        if why is not None:
            print(f"hicache check: {why}", file=sys.stderr)
            return 2
    refused = _preflight(args.backend, args.config, bool(args.isolate))
    if refused is None:
        refused = _try_construct(args.backend, args.config, args.isolate or [])
    if refused is not None:
        code, cause = refused
        tail = "; nothing ran" if code == 1 else ""  # exit 1 is also "a test failed": say none ran
        print(f"hicache check: {args.backend}: {cause}{tail}", file=sys.stderr)
        if args.report:
            _write_unusable_report(args.report, args.backend, cause)
        return code
    suite_file = Path(__file__).with_name("suite") / "test_configured.py"
    with tempfile.TemporaryDirectory(prefix="hicache-check-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        # the configured suite is one module of an installed package: nothing to rewrite, and
        # pytest's warning about already-imported plugins is noise to a user
        ini.write_text(
            "[pytest]\nfilterwarnings =\n    ignore::pytest.PytestAssertRewriteWarning\n", encoding="utf-8"
        )
        pargs = [str(suite_file), "-c", str(ini), "--rootdir", tmp, "-p", "no:cacheprovider", "-rfEs"]
        if not _plugin_autoloaded():
            pargs += ["-p", "hicache_conformance.plugin"]
        pargs += ["--hicache-backend", args.backend]
        if args.config:
            pargs += ["--hicache-config", args.config]
        if args.report:
            pargs += ["--hicache-report", os.path.abspath(args.report)]
        if args.junitxml:
            pargs += ["--junitxml", os.path.abspath(args.junitxml)]
        for lv in args.level or []:
            pargs += ["--hicache-level", lv]
        if args.matrix:
            pargs += ["--hicache-matrix", args.matrix]
        if args.profile:
            pargs += ["--hicache-profile", args.profile]
        for item in args.isolate or []:
            pargs += ["--hicache-isolate", item]
        for item in args.capabilities or []:
            pargs += [f"--hicache-capabilities={item}"]
        if args.sglang_backend:
            pargs += ["--hicache-sglang-backend", args.sglang_backend]
        if args.io_backend:
            pargs += ["--hicache-io-backend", args.io_backend]
        if args.pools:
            pargs += ["--hicache-pools", args.pools]
        if args.sglang_version:
            pargs += ["--hicache-sglang-version", args.sglang_version]
        if args.geometry:
            pargs += ["--hicache-geometry", args.geometry]
        if args.keyword:
            pargs += ["-k", args.keyword]
        if args.quiet:
            pargs += ["-q"]
        # hypothesis (and the suite) import before pytest starts: pytest would otherwise
        # rewrite hypothesis's assertions on every run (seconds without a bytecode cache);
        # its warning that it cannot is filtered in the ini above
        import hypothesis.stateful  # noqa: F401

        from . import suite  # noqa: F401

        # a previous in-process run may have cached the configured suite module
        sys.modules.pop("hicache_conformance.suite.test_configured", None)
        try:
            return int(pytest.main(pargs))
        finally:
            sys.modules.pop("hicache_conformance.suite.test_configured", None)


def _preflight(backend: str, config_arg: str | None, isolated: bool = False) -> tuple[int, str] | None:
    """Why the backend cannot be used at all, as ``(exit code, one line)``, or ``None``: the
    name must resolve (2 when no backend has it, 6 when it cannot be imported); for a
    backend with a ``config_cls``, the config must parse (2); a key scheme without a
    namespace needs ``--isolate`` (2, except on ``memory``)."""
    from hicache_sdk.errors import BackendNotFoundError

    try:
        from hicache_sdk.config import parse_config_arg

        config = parse_config_arg(config_arg)
    except Exception as e:
        return 2, f"bad --config: {e}"
    try:
        from .base import resolve_backend_class

        cls = resolve_backend_class(backend)
    except (BackendNotFoundError, ValueError) as e:
        return 2, str(e)
    except Exception as e:
        return EXIT_BACKEND_UNUSABLE, f"cannot import the backend: {type(e).__name__}: {e}"
    cfg_cls = getattr(cls, "config_cls", None)
    from_mapping = getattr(cfg_cls, "from_mapping", None)
    if callable(from_mapping):
        probe = {k: v for k, v in config.items()}
        if str(config.get("key_scheme", "default")) == "default":
            probe.setdefault("namespace", "hicache-conformance-preflight")
        try:
            from_mapping(probe)
        except (ValueError, TypeError) as e:
            return 2, f"config rejected: {e}"
        except Exception as e:
            return EXIT_BACKEND_UNUSABLE, f"config rejected: {type(e).__name__}: {e}"
    scheme = str(config.get("key_scheme", "default"))
    if scheme != "default" and not isolated:
        from .raw import is_memory_backend

        if not is_memory_backend(cls):
            return 2, (
                f"key scheme {scheme!r} takes no namespace: isolate each test namespace with "
                f"--isolate KEY=TEMPLATE (e.g. --isolate 'root=/tmp/cc/{{namespace}}')"
            )
    return None


def _try_construct(backend: str, config_arg: str | None, isolate: list[str]) -> tuple[int, str] | None:
    """Why one backend cannot be constructed the way SGLang's loader does it, in a
    conformance namespace, or cannot reach its service, as ``(exit code, one line)``; or
    ``None``. Construction must not connect, so the reachability probe is one tiny
    exists call through the backend afterwards: an I/O failure counted there (the
    backend's ``metrics``) means the server is unreachable (1, with its last error)."""
    from hicache_sdk.cli import reach
    from hicache_sdk.config import parse_config_arg
    from hicache_sdk.errors import ConfigError
    from hicache_sdk.spec import HiCacheStorageConfig

    from .base import NAMESPACE_PREFIX, resolve_backend_class

    ns = f"{NAMESPACE_PREFIX}preflight"
    config = parse_config_arg(config_arg)
    if isolate:
        for item in isolate:
            key, _, template = item.partition("=")
            config[key.strip()] = template.replace("{namespace}", ns)
    elif str(config.get("key_scheme", "default")) == "default":
        config["namespace"] = ns
    else:
        config["store"] = ns  # memory under an sglang-* scheme (others need --isolate)
    try:
        cls = resolve_backend_class(backend)
        b = cls(HiCacheStorageConfig(model_name="conformance/model", extra_config=config), {})
    except ConfigError as e:
        return 2, f"config rejected: {e}"
    except Exception as e:
        return EXIT_BACKEND_UNUSABLE, f"cannot construct the backend: {type(e).__name__}: {e}"
    try:
        unreachable = reach.unreachable(b)
    finally:
        close = getattr(b, "close", None)
        try:
            if close is not None:
                close()
        except Exception:
            pass
    return (1, unreachable) if unreachable else None


def _write_unusable_report(path: str, backend: str, cause: str) -> None:
    import json

    from . import __version__

    report = {
        "suite_version": __version__,
        "backend": {"name": backend},
        "ok": False,
        "error": f"nothing ran: {cause}",
        "levels": {},
        "tests": {},
    }
    Path(path).write_text(json.dumps(report, indent=2, sort_keys=True), encoding="utf-8")


def console_main() -> None:
    raise SystemExit(main())
