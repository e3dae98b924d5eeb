"""Tolerant JSON Lines files: locked appends, incremental reads, atomic rewrites — the bank's storage layer.

Guarantees:
- A save is O(1) in the file's size: under an exclusive `flock` on a hidden sidecar lock file
  (`.<name>.lock`; a compaction replaces the bank file, so it cannot carry the lock) the writer
  catches up with lines appended since it last read (`refresh`), decides, appends its new lines in
  one `write` and fdatasyncs. No update is lost: every decision is taken on the file as it is under
  the lock.
- Torn appends: a writer killed mid-`write` leaves a last line without its newline. Readers ignore
  such a fragment (it may also be an append in flight); the next writer, holding the lock, cuts it
  off with a warning (a fragment that is a valid record, e.g. a hand-made file without a final
  newline, is kept and terminated instead). So a torn line is never read as a record nor propagated.
- Readers pick up appended lines incrementally (`refresh` reads only the bytes past the last
  complete line it read); a replaced file (new inode) or one that shrank is read again in full.
- Lazy reads (`lazy=True`, the operator banks): lines are split but not parsed; their records are
  `UNPARSED` until the caller parses the ones it needs (a last line without its newline is still
  parsed at once, to tell a torn append from a record).
- Compaction (`rewrite`) writes a temp file in the same directory, fsyncs it and `os.replace`s it over
  the bank file (then fsyncs the directory): readers see the old file or the new one.
- A corrupt line in the middle of a file is skipped with a warning naming file and line, and is KEPT:
  appends never touch it and a rewrite writes it back verbatim at its position. `aoe bank verify`
  lists such lines.
- Hostile files: bank and lock files are opened with O_NOFOLLOW (a planted symlink is refused) and
  O_NONBLOCK (a planted FIFO cannot hang a reader), must be regular files, and must have one hard link
  (a planted hard link to someone else's file would make a write copy its lines into the bank).
"""
from __future__ import annotations

import bisect
import errno
import fcntl
import gc
import itertools
import math
import os
import stat
import warnings
from array import array
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..durable import atomic_replace, umask
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

# the bare parser (no wrapper frame: it runs once per record a lookup resolves) and its error
parse_raw: Callable[[bytes], Any] = _loads
DecodeError: type[Exception] = _JSONError
MAX_WARNINGS_PER_FILE = 10
Signature = tuple[int, int, int]  # (st_mtime_ns, st_size, st_ino): changes on every rewrite


class BankWarning(UserWarning):
    """A bank file has a damaged line; it was skipped (and is kept in the file)."""


# The record of a line read lazily and not parsed yet (a bare object: nothing the cyclic GC tracks).
UNPARSED: Any = object()


class BulkLines:
    """Lines as a tuple (those read in one go) plus a list (those appended later): what a list of
    them offers the bank (len, indexing, slicing, iteration, append, +=). The cyclic GC stops scanning
    a tuple of bytes once it has seen one, while it scans a list of a million lines at every full
    collection (tens of ms a time, for as long as the bank is loaded)."""

    __slots__ = ("bulk", "tail")

    def __init__(self, bulk: Iterable[bytes] = ()) -> None:
        self.bulk: tuple[bytes, ...] = tuple(bulk)
        self.tail: list[bytes] = []

    def __len__(self) -> int:
        return len(self.bulk) + len(self.tail)

    def __getitem__(self, i: Any) -> Any:
        n = len(self.bulk)
        if type(i) is int:
            if 0 <= i < n:
                return self.bulk[i]
            if i < 0:
                return self[i + len(self)] if i >= -len(self) else self.tail[i]  # (IndexError)
            return self.tail[i - n]
        start, stop, step = i.indices(len(self))
        if step != 1:
            return list(self)[i]
        if stop <= n:
            return self.bulk[start:stop]
        if start >= n:
            return self.tail[start - n:stop - n]
        return [*self.bulk[start:], *self.tail[:stop - n]]

    def __iter__(self) -> Iterator[bytes]:
        return itertools.chain(self.bulk, self.tail)

    def __bool__(self) -> bool:
        return bool(self.bulk) or bool(self.tail)

    def append(self, line: bytes) -> None:
        """Add one line at the end."""
        self.tail.append(line)

    def __iadd__(self, lines: Iterable[bytes]) -> BulkLines:
        if not self.bulk and not self.tail:
            self.bulk = tuple(lines)
        else:
            self.tail += lines
        return self


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
    raw: Any = field(default_factory=list)  # list[bytes] (BulkLines for lazy reads): no newline; blank lines dropped
    # parsed record, None if damaged, UNPARSED (lazy reads; an operator file's index then keeps each
    # usable line's case here instead of its record)
    recs: list[Any] = field(default_factory=list)
    # 1-based line number in the file as read (an array: a million ints are nothing for the GC to scan)
    linenos: Any = field(default_factory=lambda: array("q"))
    problems: list[tuple[int, str]] = field(default_factory=list)  # (line number, reason)
    sig: Signature | None = None  # None: the file did not exist
    offset: int = 0  # bytes consumed: the end of the last newline-terminated line read
    nlines: int = 0  # newline-terminated lines consumed (blank ones included): numbering goes on from here
    open_tail: bool = False  # a record without its final newline was read: next refresh reads it all again

    def add(self, raw: bytes, rec: Any) -> int:
        """Append a line; return its index."""
        self.raw.append(raw)
        self.recs.append(rec)
        self.linenos.append(0)  # 0 = not yet on disk
        return len(self.raw) - 1

    def content(self) -> bytes:
        """The file bytes these lines make."""
        return b"\n".join([*self.raw, b""]) if self.raw else b""  # one copy of the bytes, not two

    def chunks(self, per: int = 4096) -> Iterator[bytes]:
        """`content()` in pieces of `per` lines: a compaction writes a large file without holding it
        whole, and each piece reuses the memory the one before it freed (fresh pages cost a page fault
        each, which on some virtual machines is dearer than the copy itself)."""
        raw = self.raw
        for i in range(0, len(raw), per):
            yield b"\n".join([*raw[i:i + per], b""])


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


class NotRegular(AoeError):
    """A bank path is a FIFO, device, directory or a file with several hard links: refused."""


_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _open_checked(path: Path, flags: int = _READ_FLAGS, mode: int = 0o600) -> tuple[int, os.stat_result]:
    """Open a bank file without following links or blocking; refuse non-regular and multiply-linked files."""
    try:
        fd = os.open(path, flags, mode)
    except FileNotFoundError:
        raise
    except PermissionError:
        raise AoeError(f"cannot read bank file {path}: permission denied; ask its owner to make it "
                       f"group-readable or fix the bank directory's permissions") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the final component is a symlink
            raise AoeError(f"bank file {path} is a symbolic link; aoe refuses to follow links inside "
                           f"a bank directory (remove the link)") from None
        raise AoeError(f"cannot open bank file {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        check_regular(path, st)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def check_regular(path: Path, st: os.stat_result) -> None:
    """Raise NotRegular unless `st` is a regular file with a single hard link."""
    if not stat.S_ISREG(st.st_mode):
        raise NotRegular(f"bank path {path} is not a regular file (a FIFO, device or directory); "
                         f"remove it")
    if st.st_nlink > 1:
        raise NotRegular(f"bank file {path} has {st.st_nlink} hard links; aoe refuses multiply-linked "
                         f"bank files (a planted link could copy another file into the bank): remove it "
                         f"or replace it by a copy")


def _read_from(fd: int, offset: int, size: int) -> bytes:
    chunks, pos = [], offset
    while pos < size:
        b = os.pread(fd, min(1 << 24, size - pos), pos)
        if not b:
            break
        chunks.append(b)
        pos += len(b)
    return b"".join(chunks)


def read_lines(path: Path, check: Callable[[Any], str | None], warn: bool = True, lazy: bool = False) -> Lines:
    """Read a JSON Lines file; records failing JSON or `check` (returns a reason) are marked damaged.
    `lazy`: split the lines only (records UNPARSED; `check` is used for a last line without newline)."""
    out = Lines(path, BulkLines()) if lazy else Lines(path)
    try:
        fd, st = _open_checked(path)
    except FileNotFoundError:
        return out
    try:
        data = _read_from(fd, 0, st.st_size)
    finally:
        os.close(fd)
    out.sig = signature(st)
    with gc_paused():
        _parse(data, check, out, lazy)
    if warn and out.problems:
        warn_problems(path, out.problems)
    return out


def refresh(lines: Lines, check: Callable[[Any], str | None], warn: bool = True,
            lazy: bool = False) -> tuple[Lines, int]:
    """Catch up with the file: (lines, index of the first new line). Reads only appended bytes when
    the file grew in place; a new inode, a shrink or a rewritten tail reads it all (index 0)."""
    path = lines.path
    try:
        fd, st = _open_checked(path)
    except FileNotFoundError:
        return Lines(path), 0
    try:
        sig = signature(st)
        if sig == lines.sig:
            return lines, len(lines.raw)
        if (lines.sig is None or lines.open_tail or sig[2] != lines.sig[2] or st.st_size < lines.offset
                or (lines.offset and os.pread(fd, 1, lines.offset - 1) != b"\n")):
            data, fresh = _read_from(fd, 0, st.st_size), (Lines(path, BulkLines()) if lazy else Lines(path))
        else:
            data, fresh = _read_from(fd, lines.offset, st.st_size), lines
    finally:
        os.close(fd)
    first = len(fresh.raw)
    n_problems = len(fresh.problems)
    fresh.sig = sig
    with gc_paused():
        _parse(data, check, fresh, lazy)
    if warn and len(fresh.problems) > n_problems:
        warn_problems(path, fresh.problems[n_problems:])
    return fresh, first


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


def _parse(data: bytes, check: Callable[[Any], str | None], out: Lines, lazy: bool = False) -> None:
    """Parse `data` (the bytes at `out.offset`) into `out`; a last fragment without its newline is
    taken only when it is a valid record, and is never reported (it may be an append in flight).
    `lazy`: the newline-terminated lines are kept unparsed (UNPARSED)."""
    raw, recs, linenos, problems = out.raw, out.recs, out.linenos, out.problems
    parts = data.split(b"\n")
    tail = parts.pop()  # b"" when the data ends with a newline
    base, n_parts = out.nlines, len(parts)
    # lazy and no blank line (nothing sorts before a line starting with a byte above the space) and no
    # CR: the lines are the parts, numbered in a row (C-level list work, no loop per line)
    if lazy:
        if not (parts and min(parts)[:1] > b" " and b"\r" not in data):
            kept = [(n, line[:-1] if line.endswith(b"\r") else line) for n, line in enumerate(parts, base + 1)]
            kept = [(n, line) for n, line in kept if line and not line.isspace()]
            parts = [line for _, line in kept]
            linenos.extend(n for n, _ in kept)
        else:
            linenos.extend(range(base + 1, base + 1 + len(parts)))
        raw += parts
        recs += [UNPARSED] * len(parts)
        parts = []
    for n, line in enumerate(parts, base + 1):
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
    out.nlines = base + n_parts
    out.offset += len(data) - len(tail)
    out.open_tail = False
    t = tail.rstrip(b"\r")
    if t and not t.isspace():
        try:
            rec = _loads(t)
        except _JSONError:
            return  # torn: ignored here, cut off by the next writer
        if check(rec) is None:
            raw.append(t)
            recs.append(rec)
            linenos.append(out.nlines + 1)
            out.open_tail = True


def torn_tail(data: bytes, check: Callable[[Any], str | None]) -> bool:
    """True if the last fragment of `data` (no final newline) is not a valid record: a torn append."""
    tail = data[data.rfind(b"\n") + 1:].rstrip(b"\r")
    if not tail or tail.isspace():
        return False
    try:
        return check(_loads(tail)) is not None
    except _JSONError:
        return True


def warn_problems(path: Path, problems: list[tuple[int, str]], stacklevel: int = 3) -> None:
    """Emit one warning per damaged line (at most MAX_WARNINGS_PER_FILE, then a summary)."""
    for n, why in problems[:MAX_WARNINGS_PER_FILE]:
        warnings.warn(f"{path}:{n}: {why}; line skipped (kept in the file; `aoe bank verify` lists it)",
                      BankWarning, stacklevel=stacklevel)
    if len(problems) > MAX_WARNINGS_PER_FILE:
        warnings.warn(f"{path}: {len(problems) - MAX_WARNINGS_PER_FILE} more damaged lines skipped",
                      BankWarning, stacklevel=stacklevel)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on `path`'s sidecar lock file (created shared like its directory)."""
    lock = path.with_name(f".{path.name}.lock")
    dir_st = os.stat(path.parent)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
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
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AoeError(f"the lock file {lock} is not a regular file (a FIFO or device?); remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def atomic_write(path: Path, data: bytes | Iterable[bytes]) -> Signature:
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


_APPEND_FLAGS = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def append(lines: Lines, new_raw: list[bytes]) -> Lines:
    """Append `new_raw` lines durably; call only while holding `locked(lines.path)` on freshly
    refreshed `lines`. Cuts a torn last line first. Returns `lines` updated to the new end."""
    path = lines.path
    created = False
    try:
        try:
            fd, st = _open_checked(path, _APPEND_FLAGS)
        except FileNotFoundError:
            dir_st = os.stat(path.parent)
            fd = os.open(path, _APPEND_FLAGS | os.O_CREAT | os.O_EXCL, 0o666 & ~umask())
            created = True
            try:
                share_like_dir(fd, dir_st)
            except OSError:
                pass
            st = os.fstat(fd)
    except PermissionError as exc:
        raise AoeError(f"cannot write bank file {path}: {exc.strerror}; the bank directory needs read, "
                       f"write and execute permission (set TUNE_BANK_PATH to a writable directory)") from None
    try:
        if signature(st) != lines.sig and not (created and lines.sig is None):
            raise AoeError(f"bank file {path} changed under aoe's lock (edited by a program that does "
                           f"not take the lock?); the save was not done: run the job again")
        size = st.st_size
        prefix = b""
        if size > lines.offset:
            if lines.open_tail:  # a valid last record without its newline: terminate it
                prefix = b"\n"
                lines.nlines += 1
                lines.offset = size + 1
            else:  # a torn append of a killed writer: cut it off (no writer is live: we hold the lock)
                os.ftruncate(fd, lines.offset)
                warnings.warn(f"{path}: cut off an incomplete last line ({size - lines.offset} bytes) left "
                              f"by an interrupted write", BankWarning, stacklevel=3)
        data = prefix + b"".join(r + b"\n" for r in new_raw)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fdatasync(fd)
        st = os.fstat(fd)
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)
    lines.open_tail = False
    for r in new_raw:
        lines.nlines += 1
        lines.raw.append(r)
        lines.recs.append(None)  # the caller sets the parsed record
        lines.linenos.append(lines.nlines)
    lines.offset = st.st_size
    lines.sig = signature(st)
    return lines


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rewrite(lines: Lines) -> Lines:
    """Replace the file by `lines` atomically (compaction); call only while holding the lock.
    `lines.linenos` (the old numbers of the lines kept, 0 for new ones at the end) must ascend."""
    lines.sig = atomic_write(lines.path, lines.chunks())
    linenos = lines.linenos
    hi = len(linenos)
    while hi and not linenos[hi - 1]:
        hi -= 1
    renum = []
    for n, why in lines.problems:  # damaged lines stay in the file: each gets its new number
        i = bisect.bisect_left(linenos, n, 0, hi)
        if i < len(linenos) and linenos[i] == n:
            renum.append((i + 1, why))
    lines.problems = sorted(renum)
    lines.linenos = array("q", range(1, len(lines.raw) + 1))
    lines.nlines = len(lines.raw)
    lines.offset = lines.sig[1]
    lines.open_tail = False
    return lines


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
            rewrite(cur)  # damaged lines are written back and renumbered as they now stand
        return cur
