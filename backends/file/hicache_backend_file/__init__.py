"""hicache-backend-file: the local-file L3 backend (the embedded default).

``FileStorage`` (the ``file`` entry point) is the paged adapter over
:class:`FileTransport`; ``FileConfig`` documents every setting. With
``key_scheme="sglang-file"`` it reads and writes exactly SGLang 0.5.23 HiCacheFile's files.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import FileConfig, parse_size, resolve_root
from .file_transport import FileTransport
from .fsops import RootError

if TYPE_CHECKING:
    from .storage import FileStorage

__all__ = ["FileConfig", "FileStorage", "FileTransport", "RootError", "parse_size", "resolve_root"]


def __getattr__(name: str) -> Any:
    # FileStorage pulls in the paged adapter (and torch) only when asked for.
    if name == "FileStorage":
        from .storage import FileStorage

        return FileStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
