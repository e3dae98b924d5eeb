"""The OPAT worker pool: processes that are safe to start from any thread and die with their job.

Workers come from a `forkserver` (one per process, started once, with numpy preloaded), never from
a plain `fork` of the job: a fork copies whatever another thread of an embedding program holds at that
instant (a bank file lock, a Python lock), and the child could wait for it forever. The forkserver is
itself a fresh interpreter, so no descriptor of the job (the device lock, bank files) reaches a worker.

A worker exits when its job dies, even by `kill -9`: a watchdog thread checks every half second that the
job still runs. A worker's parent is the forkserver, not the job, and every worker holds the
forkserver's lifeline, so neither the kernel's parent-death signal (PR_SET_PDEATHSIG, set too) nor the
forkserver's own exit can be relied on. The watchdog counts a job that has exited but not yet been reaped
(a zombie) as gone, and a recycled pid as gone: a harness that reads the job's output pipes before it
waits for the job (`subprocess.communicate`) would otherwise wait for workers that wait for the job.
So a killed job leaves no process behind and its device lock is free at once.

No main guard is needed in the caller's script. multiprocessing's `spawn`/`forkserver` children import
the parent's main module again (by `__main__.__file__` or `__spec__`) before they run anything: a script
without `if __name__ == "__main__":` would run its tuning again in every worker (which then finds the
device locked), and `python - <<EOF` (main `<stdin>`) could not start a worker at all. A worker needs
nothing from the caller's main (it runs `tune_job`, imported by name), so aoe's worker processes are
launched with the standard launcher minus those two entries of its preparation data (`_launcher`); where
that launcher cannot be adapted (another Python's multiprocessing), the cases are tuned in this process
with one `WorkerWarning`. A pool whose workers fail to start or die raises `WorkersFailed`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import multiprocessing
import os
import signal
import sys
import threading
import time
import types
import warnings
from concurrent.futures import Executor, ProcessPoolExecutor
from multiprocessing import context as mp_context
from multiprocessing import forkserver as mp_forkserver
from multiprocessing import spawn as mp_spawn
from typing import Any

from ..errors import AoeError
from .graph_tune import InProcess

_PR_SET_PDEATHSIG = 1
_CTX_LOCK = threading.Lock()
_CTX: multiprocessing.context.BaseContext | None = None
_NO_CTX = False            # the launcher could not be adapted: tune in this process
_MAIN_KEYS = ("init_main_from_name", "init_main_from_path")


class WorkerWarning(RuntimeWarning):
    """Worker processes are not used (the cases are tuned in this process)."""


class WorkersFailed(AoeError):
    """Worker processes could not start, or died: the job stops (its result file says incomplete)."""


def _preparation_data(name: str) -> dict[str, Any]:
    """multiprocessing's preparation data for a new child, without the caller's main module."""
    data = mp_spawn.get_preparation_data(name)
    for key in _MAIN_KEYS:
        data.pop(key, None)
    return data


class _SpawnWithoutMain:
    """`multiprocessing.spawn` as a worker launcher sees it: the same, minus the main module."""

    get_preparation_data = staticmethod(_preparation_data)

    def __getattr__(self, name: str) -> Any:
        return getattr(mp_spawn, name)


def _launcher(popen_cls: type) -> type:
    """A subclass of the standard `Popen` of a start method whose launch leaves out the main module.

    Its `_launch` is the standard one's own code run with `spawn` bound to `_SpawnWithoutMain` (no copy
    of it, and no change to multiprocessing for anyone else: other processes of the caller still get
    their main module). Raises TypeError where that launch does not get its data from `spawn`.
    """
    launch = popen_cls._launch
    if "spawn" not in launch.__code__.co_names or "get_preparation_data" not in launch.__code__.co_names:
        raise TypeError(f"{popen_cls.__module__}.Popen._launch does not take its data from spawn")
    glob = dict(launch.__globals__, spawn=_SpawnWithoutMain())
    new = types.FunctionType(launch.__code__, glob, launch.__name__, launch.__defaults__, launch.__closure__)
    return type("AoeWorkerPopen", (popen_cls,), {"_launch": new, "__module__": __name__})


def _adapted(module: str) -> type | None:
    """The adapted `Popen` of `multiprocessing.<module>`, None where it cannot be adapted."""
    try:
        return _launcher(importlib.import_module(f"multiprocessing.{module}").Popen)
    except (TypeError, AttributeError, ImportError):
        return None


# module-level classes: a process object is pickled for its child, which finds its class by name
_POPEN = {"forkserver": _adapted("popen_forkserver"), "spawn": _adapted("popen_spawn_posix")}


class ForkServerWorker(mp_context.ForkServerProcess):
    """A forkserver process that does not import the caller's main module."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _POPEN["forkserver"](process_obj)  # type: ignore[misc]


class SpawnWorker(mp_context.SpawnProcess):
    """A spawned process that does not import the caller's main module."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _POPEN["spawn"](process_obj)  # type: ignore[misc]


class _ForkServerContext(mp_context.ForkServerContext):
    Process = ForkServerWorker


class _SpawnContext(mp_context.SpawnContext):
    Process = SpawnWorker


def _context() -> multiprocessing.context.BaseContext | None:
    """The forkserver context (spawn where there is none) without the main module, its preload set
    once; None where the launcher cannot be adapted (then the cases are tuned in this process)."""
    global _CTX, _NO_CTX
    with _CTX_LOCK:
        if _CTX is None and not _NO_CTX:
            method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
            if _POPEN[method] is None:
                _NO_CTX = True
                return None
            ctx: multiprocessing.context.BaseContext = (_ForkServerContext() if method == "forkserver"
                                                        else _SpawnContext())
            if method == "forkserver":
                # The fork server imports numpy once (most of a worker's start-up); each worker is a
                # fork of it and imports aoe itself. Not aoe in the fork server: Python 3.11's fork
                # server puts its working directory (the job's, when it starts) first on its import
                # path and ignores the job's, so from a source checkout it would import the unbuilt
                # `aoe/` there and every worker would inherit that. A worker gets the job's path.
                # Added to the caller's own preload list (one fork server per process, shared with the
                # caller's forkserver pools): set_forkserver_preload replaces the list.
                own = list(getattr(getattr(mp_forkserver, "_forkserver", None), "_preload_modules", None) or [])
                ctx.set_forkserver_preload(own + [m for m in ("numpy",) if m not in own])
            _CTX = ctx
        return _CTX


def _proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), None where there is no /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].decode("ascii", "replace").split()
    except FileNotFoundError:
        return []          # no such process
    except (OSError, IndexError):
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc), to tell a recycled pid apart."""
    fields = _proc_stat(pid)
    return fields[19] if fields and len(fields) > 19 else None


def job_alive(pid: int, start: str | None) -> bool:
    """Whether the job `pid` (started at `start`, see `_start_time`) still runs: not gone, not a zombie."""
    fields = _proc_stat(pid)
    if fields is None:     # no /proc: the signal-0 probe (a zombie counts as alive there)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    if not fields or fields[0] in ("Z", "X"):
        return False
    return start is None or len(fields) <= 19 or fields[19] == start


def _die_with(parent_pid: int, parent_start: str | None = None) -> None:
    """Worker initializer: exit when the job `parent_pid` (started at `parent_start`) is gone."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watchdog below still ends the worker

    def watch() -> None:
        while job_alive(parent_pid, parent_start):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="aoe-worker-watchdog", daemon=True).start()
    # the job handles SIGINT/SIGTERM (it stops between cases); a signal sent to the process group
    # must not kill a worker in the middle of a case
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def worker_pool(workers: int) -> Executor | InProcess:
    """A process pool of `workers` that is thread-safe to create and never outlives this process, whose
    workers never import the caller's main module; `InProcess` (with one WorkerWarning) where there
    can be none."""
    ctx = _context()
    if ctx is None:
        warnings.warn(f"worker processes are not available in this Python ({sys.version.split()[0]}); "
                      f"the {workers} worker(s) asked for are not used and the cases are tuned in this process",
                      WorkerWarning, stacklevel=2)
        return InProcess()
    return ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_die_with,
                               initargs=(os.getpid(), _start_time(os.getpid())))
