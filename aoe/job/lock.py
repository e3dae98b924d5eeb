"""One tuning job per (simulated) device: an `flock` on `<lock dir>/device<N>.lock`.

The lock directory is shared by every user of the machine: `$AOE_LOCK_DIR`, else
`<tmp>/aoe-devices` (created world-writable and sticky, like /tmp). The lock file is created
mode 0666 so that every user can lock it and record themselves in it; while a job runs, the file
holds `{"pid", "user", "uid", "host", "started", "device", "model"}`.

- A second job on the same device gets `AoeError` at once naming the holder's pid and user.
- The kernel drops an flock when its process dies, so a lock left by a dead (even `kill -9`ed)
  job is free again; the next job notices the old holder's record, says it recovers a stale lock
  and overwrites it. A clean release empties the file.
- flock is per open file description: two jobs in one process conflict too.
"""
from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import json
import os
import socket
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import AoeError
from .result import pid_alive


def lock_dir(env: Mapping[str, str] | None = None) -> Path:
    """`$AOE_LOCK_DIR`, else `<system temp dir>/aoe-devices`."""
    env = os.environ if env is None else env
    value = env.get("AOE_LOCK_DIR", "")
    if value:
        return Path(value).absolute()
    return Path(tempfile.gettempdir()) / "aoe-devices"


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return os.environ.get("USER", str(os.geteuid()))


def _ensure_dir(d: Path) -> None:
    if d.is_dir():
        return
    try:
        d.mkdir(parents=True, exist_ok=True)
        if not os.environ.get("AOE_LOCK_DIR"):
            os.chmod(d, 0o1777)  # shared by all users, like /tmp
    except OSError as exc:
        raise AoeError(f"cannot create the device lock directory {d}: {exc.strerror or exc}; "
                       f"set AOE_LOCK_DIR to a directory every tuning user can write") from None


class DeviceBusy(AoeError):
    """Another job holds the device."""


class DeviceLock:
    """Exclusive use of one simulated device for the lifetime of a tuning job (a context manager)."""

    def __init__(self, device: int, directory: Path | None = None, model: str = "",
                 notice: Callable[[str], None] | None = None) -> None:
        self.device = device
        self.dir = Path(directory) if directory is not None else lock_dir()
        self.path = self.dir / f"device{device}.lock"
        self.model = model
        self.notice = notice
        self.fd: int | None = None
        self.writable = False

    def _open(self) -> int:
        flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
        for _ in range(3):
            try:
                fd = os.open(self.path, flags)
                self.writable = True
                return fd
            except FileNotFoundError:
                try:
                    fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o666)
                except FileExistsError:
                    continue
                try:
                    os.fchmod(fd, 0o666)
                except OSError:
                    pass
                self.writable = True
                return fd
            except PermissionError:
                # another user's lock file that we may not write: a read-only descriptor can still flock
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                self.writable = False
                return fd
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise AoeError(f"device lock {self.path} is a symbolic link; remove it") from None
                raise AoeError(f"cannot open device lock {self.path}: {exc.strerror or exc}; "
                               f"set AOE_LOCK_DIR to a directory every tuning user can write") from None
        raise AoeError(f"cannot create device lock {self.path}")

    def holder(self) -> dict[str, Any] | None:
        """The record of the job holding (or last holding) the device, if any."""
        try:
            with open(self.path, "rb") as fh:
                raw = fh.read(65536)
        except OSError:
            return None
        try:
            data = json.loads(raw.decode("utf-8")) if raw.strip() else None
        except (UnicodeDecodeError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def acquire(self) -> "DeviceLock":
        _ensure_dir(self.dir)
        fd = self._open()
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise AoeError(f"device lock {self.path} is not a regular file")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                h = self.holder() or {}
                who = f"pid {h.get('pid', '?')} of user {h.get('user', '?')}"
                if h.get("host") and h.get("host") != socket.gethostname():
                    who += f" on host {h['host']}"
                since = f" since {h['started']}" if h.get("started") else ""
                model = f" tuning {h['model']}" if h.get("model") else ""
                raise DeviceBusy(f"device {self.device} is in use by another tuning job ({who}{model}{since}); "
                                 f"only one job may tune on a device at a time: wait for it, or choose another "
                                 f"device with --device or ASCEND_DEVICE_ID (lock file {self.path})") from None
            raise AoeError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        old = self.holder()
        if old and self.notice is not None:
            dead = old.get("host") == socket.gethostname() and not pid_alive(int(old.get("pid", 0) or 0))
            self.notice(f"recovered the lock of device {self.device} left by pid {old.get('pid', '?')} of user "
                        f"{old.get('user', '?')}{' (no longer running)' if dead else ''}")
        self.fd = fd
        if self.writable:
            record = {"pid": os.getpid(), "user": _user(), "uid": os.geteuid(), "host": socket.gethostname(),
                      "started": _dt.datetime.now().isoformat(timespec="seconds"), "device": self.device,
                      "model": self.model}
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, json.dumps(record).encode("utf-8") + b"\n", 0)
            except OSError:
                pass
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        try:
            if self.writable:
                os.ftruncate(self.fd, 0)
        except OSError:
            pass
        finally:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            finally:
                os.close(self.fd)
                self.fd = None

    def __enter__(self) -> "DeviceLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
