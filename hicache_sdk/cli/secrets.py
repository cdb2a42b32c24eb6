"""Secrets in a backend's config, for the commands that print an engine's flags: which keys
hold one, and the 0600 file they go to instead of the command line."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
from pathlib import Path
from typing import Any

from ..config import BackendConfig

__all__ = ["secret_keys", "write_secret_file"]

_URL_CREDENTIALS = re.compile(r"^[a-z][a-z0-9+.-]*://[^@/\s]*:[^@/\s]*@", re.IGNORECASE)


def secret_keys(config_cls: type[BackendConfig] | None, config: dict[str, Any]) -> list[str]:
    """The keys of ``config`` that hold a secret: a set field declared secret by
    ``config_cls``, or any string value carrying URL credentials (``scheme://u:p@``)."""
    declared: set[str] = set()
    if config_cls is not None and dataclasses.is_dataclass(config_cls):
        declared = {f.name for f in dataclasses.fields(config_cls) if f.metadata.get("secret")}
    found = []
    for key, value in config.items():
        declared_and_set = key in declared and value not in (None, "")
        if declared_and_set or (isinstance(value, str) and _URL_CREDENTIALS.match(value)):
            found.append(key)
    return sorted(found)


def write_secret_file(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as JSON to ``path`` with mode 0600 from the first byte (``O_CREAT``
    with 0600, then ``fchmod`` in case the file existed). A symlink at ``path`` is refused
    (``O_NOFOLLOW``: a link could point the secrets anywhere), with an ``OSError`` that
    says so in words."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP or path.is_symlink():
            raise OSError(
                f"--secret-file {path} is a symbolic link; refusing to write secrets through a link "
                f"(it could point anywhere): remove it or choose another path",
            ) from None
        raise OSError(f"--secret-file {path}: {e.strerror}") from None
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = -1
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")
    finally:
        if fd >= 0:
            os.close(fd)
