"""The device lock on a shared host: unsafe lock directories, unusable lock files, replaced lock files."""
from __future__ import annotations

import os
import stat

import pytest

from aoe.errors import AoeError
from aoe.job.lock import DeviceBusy, DeviceLock

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")


def test_own_world_writable_dir_without_sticky_bit_is_fixed(tmp_path):
    d = tmp_path / "locks"
    d.mkdir()
    os.chmod(d, 0o777)
    with DeviceLock(0, d):
        assert os.stat(d).st_mode & stat.S_ISVTX


@root_only
def test_another_users_writable_dir_without_sticky_bit_is_refused(tmp_path):
    d = tmp_path / "locks"
    d.mkdir()
    os.chmod(d, 0o777)
    os.chown(d, 54321, 54321)
    with pytest.raises(AoeError, match="another user.*sticky"):
        DeviceLock(0, d).acquire()
    os.chmod(d, 0o1777)  # sticky: usable
    with DeviceLock(0, d):
        pass


@pytest.mark.parametrize("make", ["file_as_dir", "dir_as_lock", "symlink_dir", "unwritable_fs"])
def test_unusable_lock_dir_or_file_is_an_error(tmp_path, make):
    d = tmp_path / "locks"
    if make == "file_as_dir":
        d.write_text("x")
    elif make == "dir_as_lock":
        d.mkdir()
        (d / "device0.lock").mkdir()
    elif make == "symlink_dir":
        (tmp_path / "real").mkdir()
        d.symlink_to(tmp_path / "real")
    else:
        d = __import__("pathlib").Path("/proc/aoe-locks-here")
    with pytest.raises(AoeError):
        DeviceLock(0, d).acquire()


def test_a_replaced_lock_file_is_detected(tmp_path, monkeypatch):
    """The lock file swapped between open and flock: the file now at the path is the one locked."""
    d = tmp_path / "locks"
    a = DeviceLock(0, d).acquire()
    real_open = DeviceLock._open_once
    swapped = []

    def open_then_swap(self):
        fd = real_open(self)
        if not swapped:
            swapped.append(1)
            os.unlink(self.path)
            (d / "device0.lock").write_text("")
        return fd

    a.release()
    monkeypatch.setattr(DeviceLock, "_open_once", open_then_swap)
    b = DeviceLock(0, d).acquire()
    assert swapped
    monkeypatch.undo()
    with pytest.raises(DeviceBusy):
        DeviceLock(0, d).acquire()   # the lock b holds is the file at the path
    b.release()
