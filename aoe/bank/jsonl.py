"""Tolerant JSON Lines files with locked, atomic, merge-on-write updates — the bank's storage layer.

Guarantees:
- Readers never see a partial file: a writer writes a temp file in the same directory, fsyncs it and
  `os.replace`s it over the bank file (then fsyncs the directory). A writer killed at any instant
  leaves either the old or the new file, plus at most a hidden temp file that loading ignores and the
  next writer (holding the lock, so it cannot be anybody's live temp file) removes.
- No update is lost: writers take an exclusive `flock` on a hidden sidecar lock file
  (`.<name>.lock`; the bank file itself is replaced on every write, so it cannot carry the lock),
  re-read the current file under the lock, merge, and only then replace it.
- A corrupt or truncated line is skipped with a warning naming file and line, and is KEPT: every
  rewrite writes it back verbatim at its position. `aoe bank verify` lists such lines.
- Files are opened with O_NOFOLLOW: a symlink planted in a shared bank cannot make us read (and
  copy into the bank) or write some other file.
"""
from __future__ import annotations

import errno
import fcntl
import gc
import math
import os
import stat
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..durable import atomic_replace
from ..errors import AoeError
from .paths import share_like_dir

try:  # orjson parses bank lines ~3x faster than the json module; the format is the same
    import orjson as _orjson

    _loads: Callable[[bytes], Any] = _orjson.loads
    _JSONError: type[Exception] = _orjson.JSONDecodeError

    def dumps(obj: Any) -> bytes:
        """Serialise one record as compact JSON bytes (no newline)."""
        return _orjson.dumps(obj)
except ImportError:  # pragma: no cover - orjson is a dependency; keep working without it
    import json as _json

    _loads = _json.loads
    _JSONError = ValueError

    def dumps(obj: Any) -> bytes:
        """Serialise one record as compact JSON bytes (no newline)."""
        return _json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()

MAX_WARNINGS_PER_FILE = 10
Signature = tuple[int, int, int]  # (st_mtime_ns, st_size, st_ino): changes on every rewrite


class BankWarning(UserWarning):
    """A bank file has a damaged line; it was skipped (and is kept in the file)."""


def loads(data: bytes | str) -> Any:
    """Parse one JSON document (raises ValueError on bad JSON)."""
    try:
        return _loads(data)
    except _JSONError as exc:
        raise ValueError(str(exc)) from None


def plain_json(value: Any, what: str) -> Any:
    """Return `value` if it survives a JSON round trip unchanged (no tuples, NaN, non-str keys), else raise."""
    try:
        back = loads(dumps(value))
    except (TypeError, ValueError) as exc:
        raise AoeError(f"{what} is not plain JSON: {exc}") from None
    if back != value or not _finite(value):
        raise AoeError(f"{what} does not round-trip through JSON exactly (use lists, not tuples; "
                       f"string keys; finite numbers): {value!r}")
    return back


def _finite(v: Any) -> bool:
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, dict):
        return all(_finite(x) for x in v.values())
    if isinstance(v, list):
        return all(_finite(x) for x in v)
    return True


@dataclass
class Lines:
    """The parsed content of one JSON Lines file: raw lines, their records (None = damaged)."""

    path: Path
    raw: list[bytes] = field(default_factory=list)  # without the newline; blank lines dropped
    recs: list[Any] = field(default_factory=list)  # parsed record, or None if damaged
    linenos: list[int] = field(default_factory=list)  # 1-based line number in the file as read
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    sig: Signature | None = None  # None: the file did not exist

    def add(self, raw: bytes, rec: Any) -> int:
        """Append a line; return its index."""
        self.raw.append(raw)
        self.recs.append(rec)
        self.linenos.append(0)  # 0 = not yet on disk
        return len(self.raw) - 1

    def content(self) -> bytes:
        """The file bytes these lines make."""
        return b"".join(r + b"\n" for r in self.raw)


def signature(st: os.stat_result) -> Signature:
    """The cheap change detector of a bank file."""
    return (st.st_mtime_ns, st.st_size, st.st_ino)


_UNREADABLE = (-1, -1, -1)  # equals no real signature: the caller re-reads and reports the error


def current_signature(path: str) -> Signature | None:
    """The signature of the file at `path` now (None: no such file); one stat call."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError:
        return _UNREADABLE
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _open_nofollow(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except PermissionError:
        raise AoeError(f"cannot read bank file {path}: permission denied; ask its owner to make it "
                       f"group-readable or fix the bank directory's permissions") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the final component is a symlink
            raise AoeError(f"bank file {path} is a symbolic link; aoe refuses to follow links inside "
                           f"a bank directory (remove the link)") from None
        raise AoeError(f"cannot read bank file {path}: {exc.strerror}") from None


def read_lines(path: Path, check: Callable[[Any], str | None], warn: bool = True) -> Lines:
    """Read a JSON Lines file; records failing JSON or `check` (returns a reason) are marked damaged."""
    out = Lines(path)
    try:
        fd = _open_nofollow(path)
    except FileNotFoundError:
        return out
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AoeError(f"bank path {path} is not a regular file; remove it")
        chunks = []
        while True:
            b = os.read(fd, 1 << 24)
            if not b:
                break
            chunks.append(b)
    finally:
        os.close(fd)
    out.sig = signature(st)
    with gc_paused():
        _parse(b"".join(chunks), check, out)
    if warn and out.problems:
        warn_problems(path, out.problems)
    return out


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic GC: loading allocates ~10^6 acyclic objects that it would only rescan
    over and over (about a third of the load time)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _parse(data: bytes, check: Callable[[Any], str | None], out: Lines) -> None:
    raw, recs, linenos, problems = out.raw, out.recs, out.linenos, out.problems
    for n, line in enumerate(data.split(b"\n"), 1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line or line.isspace():  # (isspace stops at the first non-space: no copy)
            continue
        try:
            rec = _loads(line)
        except _JSONError:
            rec, why = None, "not valid JSON (corrupt or truncated line)"
        else:
            why = check(rec)
            if why is not None:
                rec = None
        if rec is None:
            problems.append((n, why))  # type: ignore[arg-type]
        raw.append(line)
        recs.append(rec)
        linenos.append(n)


def warn_problems(path: Path, problems: list[tuple[int, str]]) -> None:
    """Emit one warning per damaged line (at most MAX_WARNINGS_PER_FILE, then a summary)."""
    for n, why in problems[:MAX_WARNINGS_PER_FILE]:
        warnings.warn(f"{path}:{n}: {why}; line skipped (kept in the file; `aoe bank verify` lists it)",
                      BankWarning, stacklevel=3)
    if len(problems) > MAX_WARNINGS_PER_FILE:
        warnings.warn(f"{path}: {len(problems) - MAX_WARNINGS_PER_FILE} more damaged lines skipped",
                      BankWarning, stacklevel=3)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path`'s sidecar lock file (created shared like its directory)."""
    lock = path.with_name(f".{path.name}.lock")
    dir_st = os.stat(path.parent)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        try:
            fd = os.open(lock, flags | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                share_like_dir(fd, dir_st)
            except OSError:
                pass
        except FileExistsError:
            fd = os.open(lock, flags)  # flock needs only a read descriptor
    except OSError as exc:
        raise AoeError(f"cannot open the lock file {lock}: {exc.strerror}; the bank directory "
                       f"{path.parent} needs read, write and execute permission for every user "
                       f"sharing it") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def atomic_write(path: Path, data: bytes) -> Signature:
    """Replace `path` by `data` atomically and durably; keep the old file's mode/group, else the directory's."""
    d = path.parent
    dir_st = os.stat(d)
    try:
        old_st: os.stat_result | None = os.lstat(path)
    except FileNotFoundError:
        old_st = None

    def perms(fd: int) -> None:
        if old_st is not None and stat.S_ISREG(old_st.st_mode):
            os.fchmod(fd, stat.S_IMODE(old_st.st_mode))
            try:  # keep the file's owner (root may) and group (members may)
                os.fchown(fd, old_st.st_uid if os.geteuid() == 0 else -1, old_st.st_gid)
            except OSError:
                pass
        else:
            share_like_dir(fd, dir_st)

    try:
        st = atomic_replace(path, data, perms)
    except PermissionError as exc:
        raise AoeError(f"cannot write in bank directory {d}: {exc.strerror}; it needs write and "
                       f"execute permission (set TUNE_BANK_PATH to a writable directory)") from None
    return signature(st)


def remove_stale_temps(path: Path) -> None:
    """Delete temp files of `path` left by killed writers; call only while holding `locked(path)`."""
    prefix = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix) and name.endswith(".tmp"):
            try:
                os.unlink(path.parent / name)
            except OSError:
                pass


def update(path: Path, check: Callable[[Any], str | None],
           merge: Callable[[Lines], bool]) -> Lines:
    """Locked read-merge-replace of one file; `merge` edits the Lines in place and says if anything changed."""
    with locked(path):
        remove_stale_temps(path)
        cur = read_lines(path, check)
        if merge(cur):
            cur.sig = atomic_write(path, cur.content())
            # damaged lines were written back; renumber everything as it now stands in the file
            why = dict(cur.problems)
            cur.problems = [(i + 1, why[n]) for i, n in enumerate(cur.linenos) if n in why]
            cur.linenos = list(range(1, len(cur.raw) + 1))
        return cur
