"""Stand-ins for the GPU-only modules that SGLang imports at module level.

SGLang 0.5.23 imports ``triton`` (and, in a few helpers, ``torchvision``) at the top of
modules that its storage and host-pool code pulls in, even though nothing on the
storage path ever launches a Triton kernel or decodes an image. Neither has a usable
CPU wheel for this test environment, so :func:`install` registers permissive
stand-ins for exactly these two top-level names (and every submodule below them):

* every attribute of a stand-in module is a stand-in *class*, so ``isinstance`` checks
  and subclassing work, and attribute access on it yields another stand-in class
  (``triton.language.constexpr``);
* calling a stand-in with one callable and nothing else returns that callable, so the
  decorators ``@triton.jit`` and ``@triton.autotune(...)`` leave the function intact;
  any other call returns another stand-in class.

Any code that really runs a kernel gets a stand-in back instead of tensors and will
fail loudly; the storage path never does. Nothing else is stubbed: every other import
SGLang needs is a real package listed in ``tests/sglang/requirements.txt``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

#: Top-level modules replaced by stand-ins. GPU-only, no CPU wheel worth installing.
#: ``sgl_kernel`` (SGLang's CUDA kernels) is imported at module level by releases before 0.5.10.
STANDIN_ROOTS = ("triton", "torchvision", "sgl_kernel")

#: Attributes that raise ``RuntimeError`` like a real Triton without a GPU: SGLang's code
#: that asks for the active driver (``triton.runtime.driver.active.get_current_target()``,
#: read at import time by 0.5.9's ``fla/utils.py``) catches that and falls back to CPU.
_NO_GPU = frozenset({"triton.runtime.driver.active"})

#: Version strings SGLang may compare against (``packaging.version.parse``).
_VERSIONS = {"triton": "3.5.0", "torchvision": "0.28.0", "sgl_kernel": "0.3.21"}


class _PermissiveMeta(type):
    """Metaclass of every stand-in attribute: each one is a class, so ``isinstance``
    checks against it (torch's flop counter does ``isinstance(x, JITFunction)``) and
    subclassing it work, while attribute access, indexing and calls stay permissive."""

    def __getattr__(cls, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        if f"{cls.__qualname__}.{attr}" in _NO_GPU:
            raise RuntimeError(f"{cls.__qualname__}.{attr}: no GPU driver (stand-in Triton on CPU)")
        return _standin_class(f"{cls.__qualname__}.{attr}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: keep the function as it is
        return _standin_class(f"{cls.__qualname__}()")

    def __getitem__(cls, item: Any) -> Any:
        return _standin_class(f"{cls.__qualname__}[...]")


def _standin_class(qualname: str) -> type:
    cls = _PermissiveMeta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname})
    return cls


class _StandinModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _standin_class(f"{self.__name__}.{attr}")


class _StandinFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``triton``, ``torchvision`` and any submodule of them to stand-ins."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".", 1)[0] not in STANDIN_ROOTS:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandinModule(spec.name)
        module.__path__ = []
        root = spec.name.split(".", 1)[0]
        module.__version__ = _VERSIONS[root]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


_FINDER = _StandinFinder()


def install() -> None:
    """Register the stand-ins ahead of the real import system (idempotent).

    Raises ``RuntimeError`` if a real ``triton``/``torchvision`` is already imported:
    mixing the two would make the test meaningless.
    """
    for root in STANDIN_ROOTS:
        mod = sys.modules.get(root)
        if mod is not None and not isinstance(mod, _StandinModule):
            raise RuntimeError(f"a real {root!r} is already imported; stand-ins not installed")
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)


def is_standin(module: object) -> bool:
    """Whether ``module`` is one of our stand-in modules."""
    return isinstance(module, _StandinModule)
