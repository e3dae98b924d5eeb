"""Reading untrusted input files: regular files only, size-capped, never blocking on a FIFO or a device.

Config files, tune_ops files, single-operator files, SoC descriptions and JSON graphs are named by a
user but may be anything: `/dev/zero` would grow forever, a FIFO would block the job on `open`, a huge
file would fill the memory. `read_regular` opens without blocking, checks that it is a regular file,
and refuses (never truncates) a file over its cap, with an `AoeError` saying what to do. `parse_json`
parses what such a file holds with bounds (nesting, digits, finite numbers), so no hostile file ends in
a RecursionError or ValueError traceback. Environment values are untrusted input too: `env_text`,
`env_int` and `env_float` are the one parser of every variable (ASCII blanks around a value ignored,
ASCII digits only: `int()` alone would take Arabic-Indic or fullwidth digits).
"""
from __future__ import annotations

import json
import os
import stat
from typing import Any

from .errors import AoeError


def read_regular(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of the regular file `path` (at most `limit`); `what` names it in the error ("config file")."""
    p = os.fspath(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise AoeError(f"{what} {p} does not exist") from None
    except IsADirectoryError:
        raise AoeError(f"{what} {p} is a directory, not a file") from None
    except OSError as exc:
        raise AoeError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise AoeError(f"{what} {p} is a directory, not a file")
        if not stat.S_ISREG(st.st_mode):
            raise AoeError(f"{what} {p} is not a regular file (a device, FIFO or socket); give a regular file")
        if st.st_size > limit:
            raise AoeError(f"{what} {p} is {st.st_size} bytes, over the limit of {limit} bytes; "
                           f"give a smaller file")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # the file grew while it was read
                raise AoeError(f"{what} {p} is over the limit of {limit} bytes; give a smaller file")
        return b"".join(chunks)
    except OSError as exc:
        raise AoeError(f"cannot read {what} {p}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


MAX_INT_DIGITS = 20  # int64 and uint64 fit; a longer integer is no figure aoe ever wrote


class _Refused(Exception):
    """A JSON value the bounded parser refuses (raised from its hooks)."""


def _int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise _Refused(f"an integer of {len(text)} digits")
    return int(text)


def _float(text: str) -> float:
    v = float(text)
    if v in (float("inf"), float("-inf")):
        raise _Refused(f"the number {text[:20]}… is out of range")
    return v


def _constant(text: str) -> float:
    raise _Refused(f"{text} is not JSON")


def parse_json(raw: bytes | str, what: str) -> Any:
    """Untrusted JSON text as Python values, bounded: nesting within the interpreter's recursion limit,
    integers of at most MAX_INT_DIGITS digits, finite numbers only; else an AoeError naming `what`."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, (bytes, bytearray)) else raw
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise AoeError(f"{what} is nested too deeply to be what aoe wrote") from None
    except _Refused as exc:
        raise AoeError(f"{what} holds {exc}: not what aoe wrote") from None
    except UnicodeDecodeError:
        raise AoeError(f"{what} is not UTF-8 text") from None
    except ValueError as exc:  # JSONDecodeError, and any other number the parser cannot take
        raise AoeError(f"{what} is not valid JSON ({getattr(exc, 'msg', exc)})") from None


# --- environment values ---------------------------------------------------------------------------

_BLANKS = " \t\n\r\f\v"  # ASCII whitespace only: str.strip() would also drop U+00A0, U+3000, ...


def env_text(value: str) -> str:
    """An environment (or aoe.ini) value as aoe reads it: surrounding ASCII blanks ignored, the same for
    every variable."""
    return value.strip(_BLANKS)


def env_int(name: str, value: str, lo: int, hi: int, what: str = "") -> int:
    """An integer from `lo` to `hi` written in ASCII digits (an optional sign), else an AoeError naming
    `name`, the value and `what` to set it to. (int() would take Arabic-Indic or fullwidth digits.)"""
    text = env_text(value)
    digits = text[1:] if text[:1] in ("+", "-") else text
    hint = what or f"set it to an integer from {lo} to {hi}"
    if not (digits and digits.isascii() and digits.isdigit()) or len(digits) > 30:
        raise AoeError(f"{name}={value!r} is not valid; {hint}")
    n = int(text)
    if not lo <= n <= hi:
        raise AoeError(f"{name}={value!r} is out of range; {hint}")
    return n


def env_float(name: str, value: str, lo: float, hi: float, what: str) -> float:
    """A finite number from `lo` to `hi` in ASCII (`float` syntax), else an AoeError naming `name`."""
    text = env_text(value)
    try:
        if not text.isascii() or "_" in text or len(text) > 40:
            raise ValueError
        x = float(text)
    except ValueError:
        x = float("nan")
    if not lo <= x <= hi:  # NaN fails too
        raise AoeError(f"{name}={value!r} is not valid; {what}")
    return x
