"""Real `dask scheduler` and `dask worker` processes on 127.0.0.1, started from Dask's own command line as a
team starts them, and always stopped: what bench/batch_bench.py measures and tests/test_batch_dask.py
tests against (the test loads this file by its path).

It lives here, not in `aoe.batch`: a team starts its cluster with its own tooling, and one machine has
`cluster="local:N"` (a TLS LocalCluster); this only reproduces that start for measuring and testing.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence


class DaskCli(NamedTuple):
    """The running cluster: the scheduler's address, its process and each worker's (with its nanny)."""

    address: str
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen]


def stop(procs: Sequence[subprocess.Popen], grace_s: float = 15.0) -> None:
    """SIGTERM each process group (a worker's nanny and its worker), SIGKILL what is still there after
    `grace_s` seconds."""
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.time() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait(timeout=15)


@contextmanager
def dask_cli(tmp: Path, workers: int = 2, *, tls: Sequence[str] = (), env: dict[str, str] | None = None,
             lifetime: str = "20 minutes", start_timeout_s: float = 180.0) -> Iterator[DaskCli]:
    """`dask scheduler` and `workers` x `dask worker` (one single-threaded process each, under its nanny).

    Ports are chosen by the OS (port 0, the address read from the scheduler file); the processes run in
    `tmp` (outside the source tree, so they import the installed aoe) with `env` (default: this
    process's), log to `tmp/scheduler.log` and `tmp/worker<i>.log`, end by themselves after `lifetime`
    (the scheduler when idle that long) should the caller be killed, and are stopped on exit. `tls`:
    the arguments both take for TLS (the scheduler then speaks tls://). Every worker has registered
    when the cluster is yielded (a loaded machine starts them slowly, and a caller may count them).
    """
    tmp.mkdir(parents=True, exist_ok=True)
    sfile = tmp / "scheduler.json"
    procs: list[subprocess.Popen] = []
    logs = []

    def start(args: list[str], name: str) -> subprocess.Popen:
        log = open(tmp / f"{name}.log", "wb")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-m", "dask", *args], cwd=tmp, env=env, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
        return procs[-1]

    def fail(what: str, name: str) -> RuntimeError:
        return RuntimeError(f"{what}:\n{(tmp / f'{name}.log').read_text(errors='replace')[-2000:]}")

    proto = ["--protocol", "tls", *tls] if tls else []
    try:
        sched = start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file",
                       str(sfile), "--idle-timeout", lifetime, *proto], "scheduler")
        deadline = time.time() + start_timeout_s
        while not sfile.exists():
            if sched.poll() is not None or time.time() > deadline:
                raise fail("dask scheduler did not start", "scheduler")
            time.sleep(0.1)
        time.sleep(0.2)  # the file is written in one go, but let a slow writer finish
        address = json.loads(sfile.read_text())["address"]
        for i in range(workers):
            start(["worker", address, "--host", "127.0.0.1", "--nthreads", "1", "--nworkers", "1",
                   "--no-dashboard", "--lifetime", lifetime, "--name", f"w{i}", *tls], f"worker{i}")
        deadline = time.time() + start_timeout_s
        for i in range(workers):   # each worker's log says when it has registered
            while b"Registered to:" not in (tmp / f"worker{i}.log").read_bytes():
                if procs[1 + i].poll() is not None or time.time() > deadline:
                    raise fail(f"dask worker {i} did not register", f"worker{i}")
                time.sleep(0.2)
        yield DaskCli(address, sched, procs[1:])
    finally:
        stop(procs)
        for log in logs:
            log.close()
