"""The one durable write: replace a file atomically, so readers see the old bytes or the new, never a mix.

A temp file in the same directory gets its permissions first, then the data, an fsync, a rename over
the target and an fsync of the directory (so the rename itself survives a crash). The banks and the
job's result files both write this way; they differ only in the permissions they give the file.
`AppendLog` is the other kind: the JSON-lines files a job appends to as cases finish (its resume
journal, the run's record), whole lines without a rewrite.
"""
from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable, Iterable

from .errors import AoeError

_UMASK: int | None = None


def umask() -> int:
    """The process umask, read without changing it (Linux), else the usual 022."""
    global _UMASK
    if _UMASK is None:
        try:
            with open("/proc/self/status", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("Umask:"):
                        _UMASK = int(line.split()[1], 8)
                        break
        except (OSError, ValueError):
            pass
        if _UMASK is None:
            _UMASK = 0o022
    return _UMASK


def _default_perms(fd: int) -> None:
    # mkstemp creates 0600: give the file what a plain open() would have given it
    os.fchmod(fd, 0o666 & ~umask())


def kind_of(mode: int) -> str:
    """What a non-regular file is, for a message (\"a symbolic link\", \"a FIFO\", ...)."""
    return ("a symbolic link" if stat.S_ISLNK(mode) else "a directory" if stat.S_ISDIR(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")


def check_target(path: str | os.PathLike[str]) -> None:
    """Raise AoeError unless `path` is missing or a regular file (the one rule of every aoe writer)."""
    try:
        st = os.lstat(path)
    except OSError:
        return  # missing (created) or unreachable (the write itself reports it)
    if not stat.S_ISREG(st.st_mode):
        raise AoeError(f"{os.fspath(path)} is {kind_of(st.st_mode)}, not a regular file: aoe writes only "
                       f"regular files and never replaces or follows anything else; give another output path")


def atomic_replace(path: str | os.PathLike[str], data: bytes | Iterable[bytes],
                   set_perms: Callable[[int], None] | None = None) -> os.stat_result:
    """Replace `path` by `data` (bytes, or chunks of them) atomically and durably; `set_perms(fd)` sets
    the new file's mode/owner.

    Returns the new file's stat. Raises AoeError when the target is not a regular file (`check_target`),
    OSError otherwise (the caller words the error for its users).
    """
    path = Path(path)
    check_target(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            # permissions first, so that they are as durable as the data when the rename lands
            (set_perms or _default_perms)(f.fileno())
            if isinstance(data, (bytes, bytearray, memoryview)):
                f.write(data)
            else:
                for chunk in data:
                    f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
            st = os.fstat(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return st
    try:
        os.fsync(dfd)  # make the rename itself durable
    finally:
        os.close(dfd)
    return st


class AppendLog:
    """An append-only JSON-lines file: one `write` per line on an O_APPEND descriptor opened at the first
    line, so a kill leaves whole lines and at most one cut last line (its readers skip it). Never fsynced:
    the page cache keeps it through a `kill -9`; the callers' checkpoints bound what a power loss takes.
    """

    def __init__(self, path: str | os.PathLike[str], what: str) -> None:
        self.path = path
        self.what = what          # names the file in an error: "the run's record", "the resume journal"
        self._fd: int | None = None

    def append(self, entry: object) -> None:
        """Append `entry` as one compact JSON line (AoeError naming the file when it cannot be written)."""
        line = (json.dumps(entry, ensure_ascii=False, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                                   0o666)
            os.write(self._fd, line)
        except OSError as exc:
            raise AoeError(f"cannot write {self.what} {self.path}: {exc.strerror or exc}") from None

    def close(self) -> None:
        """Close the descriptor (the next append opens the file again)."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None
