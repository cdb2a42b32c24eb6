"""Generate ``hicache_sdk/sglang/profiles.py``: one ``ContractProfile`` per SGLang release line.

Each profile is read from one installed SGLang wheel (its source files, parsed; nothing of
SGLang is imported, so any release can be read on any machine)::

    pip install --no-deps --target /tmp/sglang-0.5.9 sglang==0.5.9
    python scripts/gen_sglang_profiles.py /tmp/sglang-0.5.9 /tmp/sglang-0.5.23 ... --write

Install the last ``.postN`` of every release line (``pip index versions sglang`` lists them);
a profile is named after its line (``0.5.9``) and records the exact wheel it was read from.
Without ``--write`` the module text goes to stdout.

What is read, and from where (paths under ``sglang/srt``):

* ``mem_cache/hicache_storage.py``: ``HiCacheStorage``'s public methods (parameters,
  defaults, abstract), the config / extra-info / pool dataclasses' fields, ``PoolName`` and
  ``PoolHitPolicy`` values, ``STORAGE_BATCH_SIZE``, ``HiCacheFile``'s directory rules;
* the module defining ``class StorageMetrics`` (it moved between releases) and its fields;
* ``managers/cache_controller.py``: the batch size where it is an attribute, the backends
  that take the zero-copy path, the draft-page key form, whether the controller calls
  ``on_host_pools_registered``;
* ``mem_cache/hiradix_cache.py``: the keys popped from ``extra_config`` and the read-path
  defaults; ``mem_cache/storage/backend_factory.py``: the ``dynamic`` loader's keys;
* every module: SGLang's failure-injector variables; ``mem_cache`` for the page-hash seeding;
  whether ``mem_cache/unified_cache/`` (SGLang's unified cache linker) is there.

Facts about behaviour (hooks the controller calls, the draft key suffix, salted seeding) are
read from the source here; each profile lists them in ``unobserved`` so that nobody mistakes
them for observations. ``--observed docs/compatibility-releases.json`` takes the facts that
``scripts/compat_matrix.py --releases`` observed by running each release's own code (the
draft key its ``HiCacheController`` writes to a recording backend; whether its storage
attach calls ``on_host_pools_registered`` on the backend the factory hands it; whether its
``compute_node_hash_values`` keys a salted request apart): an observed fact leaves
``unobserved``, and one that contradicts the source stops the generator.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "hicache_sdk" / "sglang" / "profiles.py"

#: Facts read from source, not observed by running that release's controller.
UNOBSERVED = ("calls_on_host_pools_registered", "draft_key_suffix", "salted_seeding")


class Wheel:
    """One installed SGLang: ``root`` holds ``sglang/`` and its ``sglang-*.dist-info``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.srt = root / "sglang" / "srt"
        if not self.srt.is_dir():
            raise SystemExit(
                f"{root}: no sglang/srt here (install with pip install --no-deps --target {root})"
            )
        infos = sorted(root.glob("sglang-*.dist-info"))
        if len(infos) != 1:
            raise SystemExit(f"{root}: expected one sglang-*.dist-info, found {len(infos)}")
        meta = (infos[0] / "METADATA").read_text(encoding="utf-8")
        self.version = re.search(r"^Version: (\S+)$", meta, re.M).group(1)  # type: ignore[union-attr]
        self.line = ".".join(self.version.split(".")[:3])

    def text(self, rel: str) -> str:
        path = self.srt / rel
        return path.read_text(encoding="utf-8") if path.is_file() else ""

    def tree(self, rel: str) -> ast.Module:
        return ast.parse(self.text(rel))

    def modules(self) -> list[Path]:
        return sorted(self.srt.rglob("*.py"))


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return ...
    try:
        return ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)


def _fields(cls: ast.ClassDef | None) -> tuple[str, ...]:
    if cls is None:
        return ()
    return tuple(
        n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    )


def _fields_with_defaults(cls: ast.ClassDef | None) -> tuple[tuple[str, Any], ...]:
    if cls is None:
        return ()
    out = []
    for n in cls.body:
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            out.append((n.target.id, _literal(n.value)))
    return tuple(out)


def _enum_values(cls: ast.ClassDef | None) -> tuple[str, ...]:
    if cls is None:
        return ()
    out = []
    for n in cls.body:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str):
            out.append(n.value.value)
    return tuple(out)


def _methods(cls: ast.ClassDef | None) -> tuple[tuple[str, tuple[str, ...], int, bool], ...]:
    if cls is None:
        return ()
    out = []
    for n in cls.body:
        if not isinstance(n, ast.FunctionDef) or n.name.startswith("_"):
            continue
        a = n.args
        params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg != "self"]
        n_defaults = len(a.defaults) + sum(d is not None for d in a.kw_defaults)
        abstract = any(
            (isinstance(d, ast.Name) and d.id == "abstractmethod")
            or (isinstance(d, ast.Attribute) and d.attr == "abstractmethod")
            for d in n.decorator_list
        )
        out.append((n.name, tuple(params), n_defaults, abstract))
    return tuple(out)


def _int_assign(text: str, pattern: str) -> int | None:
    m = re.search(pattern, text)
    return int(m.group(1)) if m else None


def _metrics(w: Wheel) -> tuple[str, tuple[str, ...]]:
    for path in w.modules():
        text = path.read_text(encoding="utf-8")
        if re.search(r"^class StorageMetrics\b", text, re.M):
            module = ".".join(path.relative_to(w.root).with_suffix("").parts)
            return module, _fields(_class(ast.parse(text), "StorageMetrics"))
    return "", ()


def _zero_copy(w: Wheel) -> tuple[str, ...]:
    """The string names ``storage_backend_type`` is compared against with ``in`` (the first
    such comparison in ``cache_controller.py``, where the page get/set functions are chosen)."""
    tree = w.tree("managers/cache_controller.py")
    consts: dict[str, ast.AST] = {
        t.id: n.value
        for n in tree.body
        if isinstance(n, ast.Assign)
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In)):
            continue
        left = node.left
        if not (isinstance(left, ast.Attribute) and left.attr == "storage_backend_type"):
            continue
        comp: ast.AST = node.comparators[0]
        if isinstance(comp, ast.Name) and comp.id in consts:
            comp = consts[comp.id]
        if isinstance(comp, ast.Call) and comp.args:  # frozenset({...})
            comp = comp.args[0]
        if isinstance(comp, (ast.List, ast.Tuple, ast.Set)):
            return tuple(
                e.value for e in comp.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)
            )
    return ()


_POP = re.compile(r"extra_config\.pop\(\s*\"(\w+)\"\s*,\s*([^)#]+?)\s*,?\s*\)", re.S)


def _controller_sources(w: Wheel) -> list[str]:
    """The radix caches and controllers (where SGLang pops its own ``extra_config`` keys):
    ``mem_cache`` without its backends and sparsity, then ``managers/cache_controller.py``."""
    paths = [
        p
        for p in sorted((w.srt / "mem_cache").rglob("*.py"))
        if not {"storage", "sparsity"} & set(p.relative_to(w.srt / "mem_cache").parts[:-1])
    ]
    return [p.read_text(encoding="utf-8") for p in paths] + [w.text("managers/cache_controller.py")]


def _reserved(w: Wheel) -> tuple[tuple[str, Any], ...]:
    out: dict[str, Any] = {}
    sources = _controller_sources(w)
    timeouts = next(
        (c for c in (_class(ast.parse(t), "PrefetchTimeoutConfig") for t in sources) if c is not None), None
    )
    timeout_defaults = dict(_fields_with_defaults(timeouts))
    for text in sources:
        for name, default in _POP.findall(text):
            default = default.strip()
            m = re.fullmatch(r"defaults\.(\w+)", default)
            if m and m.group(1) in timeout_defaults:
                out.setdefault(name, timeout_defaults[m.group(1)])
                continue
            try:
                out.setdefault(name, ast.literal_eval(default))
            except (ValueError, SyntaxError):
                out.setdefault(name, default)
    return tuple(out.items())


def _loader_keys(w: Wheel) -> tuple[str, ...]:
    text = w.text("mem_cache/storage/backend_factory.py")
    m = re.search(r"required_fields\s*=\s*\[([^\]]*)\]", text)
    keys = re.findall(r"\"(\w+)\"", m.group(1)) if m else []
    if '"interface_v1"' in w.text("managers/cache_controller.py") + text:
        keys.append("interface_v1")
    return tuple(keys)


def _injector(w: Wheel) -> tuple[str, ...]:
    found: set[str] = set()
    for path in w.modules():
        found |= set(re.findall(r"SGLANG_TEST_HICACHE_BACKEND_[A-Z_]+", path.read_text(encoding="utf-8")))
    return tuple(sorted(found))


def _arg_default(w: Wheel, name: str) -> int:
    """The default of the server argument ``name`` (``server_args.py`` or ``arg_groups``):
    the first ``= N`` after its declaration; 0 when the release has no such argument."""
    texts = [w.text("server_args.py")] + [
        p.read_text(encoding="utf-8") for p in sorted((w.srt / "arg_groups").rglob("*.py"))
    ]
    for text in texts:
        m = re.search(rf"^\s*{name}\s*:.*?[\]\w]\s*=\s*(\d+)\s*$", text, re.M | re.S)
        if m:
            return int(m.group(1))
    return 0


def _read_path(w: Wheel) -> tuple[int, int, int]:
    threshold = None
    for text in _controller_sources(w):
        threshold = threshold or _int_assign(text, r"self\.load_back_threshold\s*=\s*(\d+)")
    return (
        threshold or 0,
        _arg_default(w, "hicache_storage_prefetch_retry_poll_interval"),
        _arg_default(w, "hicache_storage_prefetch_retry_max_attempts"),
    )


def _file_dir(w: Wheel) -> tuple[str, str, str]:
    text = w.text("mem_cache/hicache_storage.py")
    env = re.search(r"(SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR)", text)
    key = re.search(r"\.get\(\s*\"(file_storage_path)\"", text)
    default = re.search(r"file_path\s*:\s*str\s*=\s*\"([^\"]+)\"", text)
    return (env.group(1) if env else "", key.group(1) if key else "", default.group(1) if default else "")


def _draft_suffix(w: Wheel, pool_names: tuple[str, ...]) -> str:
    text = w.text("managers/cache_controller.py")
    if re.search(r"\{\w+\}\.\{PoolName\.DRAFT\}", text) and "draft" in pool_names:
        return ".draft"
    if re.search(r"\{\w+\}\.draft\"", text):
        return ".draft"
    return ""


def _calls_registered_hook(w: Wheel) -> bool:
    for path in w.modules():
        if path.name == "hicache_storage.py":
            continue
        if re.search(r"\.on_host_pools_registered\(\)", path.read_text(encoding="utf-8")):
            return True
    return False


def _salted_seeding(w: Wheel) -> bool:
    """Whether the page hash chain starts from a seed made of the request's ``extra_key`` /
    ``cache_salt`` (SGLang's ``storage_namespace_seed``)."""
    return any(
        "def storage_namespace_seed" in p.read_text(encoding="utf-8")
        for p in (w.srt / "mem_cache").rglob("*.py")
    )


def read_profile(w: Wheel) -> dict[str, Any]:
    tree = w.tree("mem_cache/hicache_storage.py")
    text = w.text("mem_cache/hicache_storage.py")
    pool_names = _enum_values(_class(tree, "PoolName"))
    batch = _int_assign(text, r"(?m)^STORAGE_BATCH_SIZE\s*=\s*(\d+)")
    if batch is None:
        batch = (
            _int_assign(w.text("managers/cache_controller.py"), r"self\.storage_batch_size\s*=\s*(\d+)") or 0
        )
    metrics_module, metrics_fields = _metrics(w)
    threshold, poll, attempts = _read_path(w)
    env, key, default = _file_dir(w)
    return {
        "sglang_version": w.line,
        "wheel_version": w.version,
        "methods": _methods(_class(tree, "HiCacheStorage")),
        "config_fields": _fields_with_defaults(_class(tree, "HiCacheStorageConfig")),
        "pool_names": pool_names,
        "hit_policies": _enum_values(_class(tree, "PoolHitPolicy")),
        "pool_transfer_fields": _fields(_class(tree, "PoolTransfer")),
        "pool_transfer_result_fields": _fields(_class(tree, "PoolTransferResult")),
        "extra_info_fields": _fields(_class(tree, "HiCacheStorageExtraInfo")),
        "storage_metrics_module": metrics_module,
        "storage_metrics_fields": metrics_fields,
        "storage_batch_size": batch,
        "reserved_extra_config": _reserved(w),
        "dynamic_loader_keys": _loader_keys(w),
        "zero_copy_backends": _zero_copy(w),
        "injector_env": _injector(w),
        "load_back_threshold": threshold,
        "prefetch_retry_poll_interval": poll,
        "prefetch_retry_max_attempts": attempts,
        "file_dir_env": env,
        "file_dir_extra_key": key,
        "file_dir_default": default,
        "calls_on_host_pools_registered": _calls_registered_hook(w),
        "draft_key_suffix": _draft_suffix(w, pool_names),
        "salted_seeding": _salted_seeding(w),
        "has_unified_cache_linker": (w.srt / "mem_cache" / "unified_cache").is_dir(),
        "unobserved": UNOBSERVED,
    }


#: Behaviour facts the matrix observes: profile field -> its value in a release's probe
#: (``None``: not observed there).
OBSERVED = {
    "calls_on_host_pools_registered": lambda o: (o.get("registration_hooks") or {}).get(
        "on_host_pools_registered"
    ),
    "draft_key_suffix": lambda o: (o.get("draft_key") or {}).get("suffix"),
    "salted_seeding": lambda o: (o.get("salted_seeding") or {}).get("salted"),
}


def apply_observed(profile: dict[str, Any], releases: dict[str, Any]) -> dict[str, Any]:
    """``profile`` with the facts observed for its release line (``releases``: the
    ``releases`` of ``docs/compatibility-releases.json``) taken out of ``unobserved``;
    ``SystemExit`` when an observation contradicts what the source says."""
    line = profile["sglang_version"]
    seen = ((releases.get(line) or {}).get("probe") or {}).get("observed") or {}
    left = list(profile["unobserved"])
    for field, get in OBSERVED.items():
        value = get(seen)
        if value is None or isinstance(value, list) or field not in left:
            continue
        if value != profile[field]:
            raise SystemExit(
                f"{line}: {field} read from the source is {profile[field]!r}, observed {value!r}"
            )
        left.remove(field)
    return {**profile, "unobserved": tuple(left)}


def _py(value: Any) -> str:
    if value is ...:
        return "..."
    if isinstance(value, tuple):
        inner = ", ".join(_py(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


def render(profiles: list[dict[str, Any]]) -> str:
    """The module text. Values shared by several profiles are written once (``_V<n>``)."""
    shared: dict[str, str] = {}
    lines: list[str] = []
    body: list[str] = []
    for p in profiles:
        name = "SGLANG_" + p["sglang_version"].replace(".", "_")
        body.append(f"{name} = ContractProfile(")
        for field, value in p.items():
            text = _py(value)
            if isinstance(value, tuple) and len(value) > 2:
                if text not in shared:
                    shared[text] = f"_V{len(shared)}"
                    lines.append(f"{shared[text]} = {text}")
                text = shared[text]
            body.append(f"    {field}={text},")
        body.append(")")
    names = ["SGLANG_" + p["sglang_version"].replace(".", "_") for p in profiles]
    head = [
        '"""Generated by ``scripts/gen_sglang_profiles.py`` from each release\'s wheel: do not edit.',
        "",
        "One :class:`~hicache_sdk.sglang.contract_profile.ContractProfile` per SGLang release line;",
        ":mod:`hicache_sdk.sglang.versions` picks the installed one.",
        '"""',
        "",
        "# fmt: off",
        "from __future__ import annotations",
        "",
        "from .contract_profile import ContractProfile",
        "",
        f'__all__ = [{", ".join(repr(n) for n in names)}, "PROFILES"]',
        "",
    ]
    tail = ["", "#: Every profile, oldest release first.", f"PROFILES = ({', '.join(names)},)", ""]
    return "\n".join(head + lines + [""] + body + tail)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("roots", nargs="+", type=Path, help="pip --target folders, one SGLang wheel each")
    ap.add_argument("--write", action="store_true", help=f"write {OUT.relative_to(REPO)} instead of stdout")
    ap.add_argument(
        "--observed", type=Path, default=None, help="docs/compatibility-releases.json: observed behaviour"
    )
    args = ap.parse_args(argv)
    wheels = [Wheel(r) for r in args.roots]
    lines = sorted({w.line for w in wheels}, key=lambda v: tuple(int(x) for x in v.split(".")))
    by_line = {w.line: w for w in wheels}
    if len(by_line) != len(wheels):
        raise SystemExit("two wheels of the same release line: install only the last .postN of each")
    profiles = [read_profile(by_line[v]) for v in lines]
    if args.observed is not None:
        import json

        releases = json.loads(args.observed.read_text(encoding="utf-8")).get("releases", {})
        profiles = [apply_observed(p, releases) for p in profiles]
    text = render(profiles)
    if args.write:
        OUT.write_text(text, encoding="utf-8")
        print(f"wrote {OUT.relative_to(REPO)}: {', '.join(lines)}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
