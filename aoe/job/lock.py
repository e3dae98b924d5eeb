"""One tuning job per (simulated) device: an `flock` on `<lock dir>/device<N>.lock`.

The lock directory is shared by every user of the machine: `$AOE_LOCK_DIR`, else
`<tmp>/aoe-devices` (created world-writable and sticky, like /tmp). The lock file is created
mode 0666 so that every user can lock it and record themselves in it; while a job runs, the file
holds `{"pid", "user", "uid", "host", "started", "device", "model"}`.

- A second job on the same device gets `AoeError` at once naming the holder's pid and user.
- The kernel drops an flock when its process dies, so a lock left by a dead (even `kill -9`ed)
  job is free again; the next job notices the old holder's record, says it recovers a stale lock
  and overwrites it. A clean release empties the file.
- flock is per open file description: two jobs in one process conflict too. The descriptor is
  close-on-exec and worker processes come from a forkserver, so no worker ever holds the lock.

On a multi-user host: a lock directory that others may write must be sticky (as /tmp), or one user
could delete another's running lock and share the device. A directory of ours without the sticky bit
is fixed; one owned by another user (not root) and writable without it is refused. The owner of a
sticky directory can still remove files in it, so the safest shared directory is one root creates
once (`install -d -m 1777 /var/lock/aoe-devices`, then `AOE_LOCK_DIR=/var/lock/aoe-devices` for all
users). A lock file removed or replaced while a job opens it is detected (the inode changed) and the
file now at the path is locked instead.
"""
from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from ..bank.paths import rwx_ok
from ..errors import AoeError
from .result import hostname, pid_alive


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


def _ensure_dir(d: Path, shared: bool = True) -> None:
    """Create the lock directory if missing (shared: mode 1777, like /tmp), then check it is safe."""
    if not d.is_dir():
        try:
            d.mkdir(parents=True, exist_ok=True)
            if shared:
                os.chmod(d, 0o1777)  # shared by all users, like /tmp
        except OSError as exc:
            raise AoeError(f"cannot create the device lock directory {d}: {exc.strerror or exc}; "
                           f"set AOE_LOCK_DIR to a directory every tuning user can write") from None
    check_dir(d)


def check_dir(d: Path) -> None:
    """Refuse a lock directory another user could use to steal or delete a running job's lock.

    Safe: owned by root or by this user, and, when others may write it, sticky (then nobody deletes or
    renames a lock file they do not own). A world-writable directory without the sticky bit that this
    user owns is fixed (the sticky bit is set); one owned by another user is refused.
    """
    try:
        st = os.lstat(d)
    except OSError as exc:
        raise AoeError(f"cannot use the device lock directory {d}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise AoeError(f"the device lock directory {d} is not a directory (or is a symbolic link); "
                       f"remove it or set AOE_LOCK_DIR to a directory")
    if not rwx_ok(d, st):
        raise AoeError(f"the device lock directory {d} needs read, write and execute permission for the current "
                       f"user (mode {stat.filemode(st.st_mode)}); fix it with chmod u+rwx or set AOE_LOCK_DIR to "
                       f"a directory every tuning user can write")
    me = os.geteuid()
    others_write = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if st.st_uid not in (0, me):
        if others_write and not st.st_mode & stat.S_ISVTX:
            raise AoeError(f"the device lock directory {d} belongs to another user (uid {st.st_uid}) and anyone "
                           f"may delete the locks in it (writable without the sticky bit); ask its owner to run "
                           f"`chmod +t {d}` or set AOE_LOCK_DIR to a directory owned by you or root")
        return
    if others_write and not st.st_mode & stat.S_ISVTX:
        try:
            os.chmod(d, stat.S_IMODE(st.st_mode) | stat.S_ISVTX)
        except OSError as exc:
            raise AoeError(f"the device lock directory {d} is writable by others without the sticky bit and "
                           f"cannot be fixed ({exc.strerror or exc}); run `chmod +t {d}`") from None


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
        try:
            return self._open_once()
        except AoeError:
            raise
        except OSError as exc:
            raise AoeError(f"cannot open device lock {self.path}: {exc.strerror or exc}; "
                           f"set AOE_LOCK_DIR to a directory every tuning user can write") from None

    def _open_once(self) -> int:
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
        _ensure_dir(self.dir, shared=not os.environ.get("AOE_LOCK_DIR"))
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
                if h.get("host") and h.get("host") != hostname():
                    who += f" on host {h['host']}"
                since = f" since {h['started']}" if h.get("started") else ""
                model = f" tuning {h['model']}" if h.get("model") else ""
                raise DeviceBusy(f"device {self.device} is in use by another tuning job ({who}{model}{since}); "
                                 f"only one job may tune on a device at a time: wait for it, or choose another "
                                 f"device with --device or ASCEND_DEVICE_ID (lock file {self.path})") from None
            raise AoeError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        try:
            same = os.stat(self.path, follow_symlinks=False)
            replaced = (same.st_ino, same.st_dev) != (st.st_ino, st.st_dev)
        except OSError:
            replaced = True
        if replaced:  # removed or replaced between open and flock: lock the file that is there now
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            self._retries = getattr(self, "_retries", 0) + 1
            if self._retries > 5:
                raise AoeError(f"device lock {self.path} keeps being removed or replaced by someone else; "
                               f"check the lock directory {self.dir}")
            return self.acquire()
        old = self.holder()
        if old and self.notice is not None:
            dead = old.get("host") == hostname() and not pid_alive(old.get("pid"))
            self.notice(f"recovered the lock of device {self.device} left by pid {old.get('pid', '?')} of user "
                        f"{old.get('user', '?')}{' (no longer running)' if dead else ''}")
        self.fd = fd
        self._retries = 0
        if self.writable:
            record = {"pid": os.getpid(), "user": _user(), "uid": os.geteuid(), "host": hostname(),
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
