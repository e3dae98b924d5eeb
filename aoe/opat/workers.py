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

As for any `spawn`/`forkserver` program, a script that starts workers (TUNING_PARALLEL_NUM > 1) is
imported once by the forkserver: keep its top-level work under `if __name__ == "__main__":`.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

_PR_SET_PDEATHSIG = 1
_CTX_LOCK = threading.Lock()
_CTX: multiprocessing.context.BaseContext | None = None


def _context() -> multiprocessing.context.BaseContext:
    """The forkserver context (spawn where there is none), its preload set once."""
    global _CTX
    with _CTX_LOCK:
        if _CTX is None:
            if "forkserver" in multiprocessing.get_all_start_methods():
                ctx = multiprocessing.get_context("forkserver")
                # The fork server imports numpy once (most of a worker's start-up); each worker is a
                # fork of it and imports aoe itself. Not aoe in the fork server: Python 3.11's fork
                # server puts its working directory (the job's, when it starts) first on its import
                # path and ignores the job's, so from a source checkout it would import the unbuilt
                # `aoe/` there and every worker would inherit that. A worker gets the job's path.
                ctx.set_forkserver_preload(["numpy"])
            else:
                ctx = multiprocessing.get_context("spawn")
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


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """A process pool of `workers` that is thread-safe to create and never outlives this process."""
    return ProcessPoolExecutor(max_workers=workers, mp_context=_context(), initializer=_die_with,
                               initargs=(os.getpid(), _start_time(os.getpid())))
