"""Reading untrusted input files: regular files only, size-capped, never blocking on a FIFO or a device.

Config files, tune_ops files, single-operator files, SoC descriptions and JSON graphs are named by a
user but may be anything: `/dev/zero` would grow forever, a FIFO would block the job on `open`, a huge
file would fill the memory. `read_regular` opens without blocking, checks that it is a regular file,
and refuses (never truncates) a file over its cap, with an `AoeError` saying what to do.
"""
from __future__ import annotations

import os
import stat

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
