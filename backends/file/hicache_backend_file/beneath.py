"""Resolution of object names strictly beneath the root: no symlink on any component,
no way out of the root.

Every path the backend opens, walks or deletes under the root goes through
:class:`Beneath`. Two mechanisms, one behaviour:

* ``openat2(2)`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` (Linux 5.6+, called
  through ``syscall(2)``): the kernel refuses any symlink and any escape in one call;
* elsewhere (an older kernel, or a seccomp filter refusing the call), a walk from the
  root descriptor one component at a time, each opened with ``O_NOFOLLOW`` relative to
  its parent's descriptor. Names are validated first (:mod:`.names`: no ``..``, no
  empty or hidden component), so one component can never leave its parent.

Which one applies is decided once, at import, by :data:`OPENAT2` (a probe of the real
call); a :class:`Beneath` takes its value at construction, so a test can force the
walk. A symlink on the way is refused (``ELOOP`` or ``ENOTDIR``); nothing is followed,
whoever owns the link -- so a ``root/_ -> /elsewhere`` planted in a shared root neither
redirects writes nor lets ``clear`` delete ``/elsewhere``'s files. Names without ``/``
(SGLang's flat names) need no walk: ``O_NOFOLLOW`` relative to the root descriptor is
already exact, and both mechanisms take that fast path.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["OPENAT2", "Beneath"]

_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every Linux architecture (asm-generic, 5.6+)
_O_PATH: int = getattr(os, "O_PATH", 0)
#: Flags of the directory descriptors the walk holds (usable as ``dir_fd`` of ``*at``).
_DIR_FLAGS = os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | (_O_PATH or os.O_RDONLY)
_FS_ENCODING = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())  # os.fsencode's
#: Flags of a directory opened to be listed or fsynced (``O_PATH`` cannot do either).
_DIR_READ_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_syscall: Any = None
try:
    # Our own CDLL instance, so the argument types set here bind no one else's ``syscall``.
    # Declared argument types let ctypes convert plain ints and bytes itself (no wrapper
    # objects per call); ``syscall(2)`` is variadic, and on Linux's ABIs these integer and
    # pointer arguments travel exactly as for a fixed-argument function.
    _syscall = ctypes.CDLL(None, use_errno=True).syscall
    _syscall.restype = ctypes.c_long
    _syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
except (OSError, AttributeError):  # pragma: no cover - non-glibc platforms
    _syscall = None

_HOW_SIZE = ctypes.sizeof(_OpenHow)
#: One immutable ``open_how`` per (flags, mode), kept alive here: a call passes its address.
_HOWS: dict[tuple[int, int], tuple[_OpenHow, int]] = {}


def _how(flags: int, mode: int) -> int:
    """The address of the ``open_how`` for ``flags`` / ``mode`` (made once, never freed:
    the backend uses a handful of flag combinations)."""
    key = (flags, mode if flags & os.O_CREAT else 0)
    hit = _HOWS.get(key)
    if hit is None:
        how = _OpenHow(key[0], key[1], _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS)
        hit = _HOWS.setdefault(key, (how, ctypes.addressof(how)))
    return hit[1]


def _openat2(dir_fd: int, path: str, flags: int, mode: int = 0) -> int:
    """``openat2(dir_fd, path, {flags, mode, BENEATH | NO_SYMLINKS})``; ``OSError`` on
    failure. ``EAGAIN`` (a concurrent rename seen during the resolution) and ``EINTR``
    are retried."""
    how = _how(flags, mode)
    raw = path.encode(*_FS_ENCODING)
    err = errno.EAGAIN
    for _ in range(8):
        fd = int(_syscall(_SYS_OPENAT2, dir_fd, raw, how, _HOW_SIZE))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err not in (errno.EAGAIN, errno.EINTR):
            break
    raise OSError(err, os.strerror(err), path)


def _probe() -> bool:
    """Whether ``openat2`` with our resolve flags works here (not just exists): it must
    open ``.`` of a directory descriptor."""
    if _syscall is None or not _O_PATH:
        return False
    try:
        base = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # pragma: no cover
        return False
    try:
        os.close(_openat2(base, ".", _O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))
        return True
    except OSError:  # ENOSYS (kernel < 5.6), EPERM (seccomp), ...
        return False
    finally:
        os.close(base)


#: ``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`` works on this kernel.
OPENAT2: bool = _probe()


class Beneath:
    """Opens, and finds the parent directory of, names relative to ``root_fd`` without
    following any symlink (see the module docs). ``openat2`` defaults to :data:`OPENAT2`
    read now. Every method raises ``OSError`` as ``open`` would; a symlink anywhere on the
    path is ``ELOOP`` or ``ENOTDIR``. Thread-safe (no state besides the two fields)."""

    def __init__(self, root_fd: int, openat2: bool | None = None) -> None:
        self.root_fd = root_fd
        self.openat2 = OPENAT2 if openat2 is None else openat2

    def open(self, rel: str, flags: int, mode: int = 0o600) -> int:
        """Open ``rel`` (a validated name) with ``flags`` (``O_NOFOLLOW`` and
        ``O_CLOEXEC`` are added)."""
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC
        if "/" not in rel:
            return os.open(rel, flags, mode, dir_fd=self.root_fd)
        if self.openat2:
            return _openat2(self.root_fd, rel, flags, mode)
        head, _, base = rel.rpartition("/")
        pfd = self._walk(head, _DIR_FLAGS)
        try:
            return os.open(base, flags, mode, dir_fd=pfd)
        finally:
            os.close(pfd)

    def opener(self, flags: int) -> Callable[[str], int]:
        """A function that opens a validated name with ``flags`` exactly as :meth:`open`
        does, made once per batch for a hot loop: with ``openat2`` it is one system call
        through ctypes with the ``open_how`` prepared here (no per-call wrapper objects)."""
        flags |= os.O_NOFOLLOW | os.O_CLOEXEC
        root, open_ = self.root_fd, os.open
        if not self.openat2:
            slow = self.open
            return lambda rel: slow(rel, flags)
        call, how, size, (enc, errs) = _syscall, _how(flags, 0), _HOW_SIZE, _FS_ENCODING

        def open_beneath(rel: str) -> int:
            if "/" not in rel:
                return open_(rel, flags, dir_fd=root)
            fd: int = call(_SYS_OPENAT2, root, rel.encode(enc, errs), how, size)
            if fd >= 0:
                return fd
            err = ctypes.get_errno()
            if err in (errno.EAGAIN, errno.EINTR):
                return _openat2(root, rel, flags)
            raise OSError(err, os.strerror(err), rel)

        return open_beneath

    def open_dir(self, rel: str, readable: bool = False) -> int:
        """A new descriptor of directory ``rel`` (``""``: the root itself). Without
        ``readable`` it may be an ``O_PATH`` descriptor, good only as ``dir_fd``; with it,
        it can be listed (``os.scandir``) and fsynced."""
        flags = _DIR_READ_FLAGS if readable else _DIR_FLAGS
        if not rel:
            return os.open(".", flags, dir_fd=self.root_fd)
        if self.openat2:
            return _openat2(self.root_fd, rel, flags)
        return self._walk(rel, flags)

    def _walk(self, rel: str, last_flags: int) -> int:
        """The fallback: one ``O_NOFOLLOW`` open per component from the root."""
        comps = rel.split("/")
        cur = self.root_fd
        try:
            for i, comp in enumerate(comps):
                nxt = os.open(comp, last_flags if i == len(comps) - 1 else _DIR_FLAGS, dir_fd=cur)
                if cur != self.root_fd:
                    os.close(cur)
                cur = nxt
        except BaseException:
            if cur != self.root_fd:
                os.close(cur)
            raise
        return cur

    def parent(self, rel: str) -> tuple[int, str]:
        """``(dir_fd, basename)`` of ``rel``: ``dir_fd`` is the root's own descriptor for a
        flat name, else a new one the caller gives back with :meth:`release`."""
        head, _, base = rel.rpartition("/")
        if not head:
            return self.root_fd, rel
        return self.open_dir(head), base

    def release(self, dir_fd: int) -> None:
        """Close a descriptor :meth:`parent` returned (the root's is kept)."""
        if dir_fd != self.root_fd:
            os.close(dir_fd)

    def stat(self, rel: str) -> os.stat_result:
        """``lstat`` of ``rel`` (its parent resolved beneath the root)."""
        pfd, base = self.parent(rel)
        try:
            return os.stat(base, dir_fd=pfd, follow_symlinks=False)
        finally:
            self.release(pfd)

    def unlink(self, rel: str) -> None:
        """Remove file ``rel`` (a symlink itself is removed, never its target)."""
        pfd, base = self.parent(rel)
        try:
            os.unlink(base, dir_fd=pfd)
        finally:
            self.release(pfd)
