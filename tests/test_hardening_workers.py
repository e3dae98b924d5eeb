"""Worker processes: safe to start from many threads at once, and gone (with the device lock) when the job dies."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import aoe
from aoe.job import config as cfg
from aoe.job.lock import DeviceBusy, DeviceLock
from conftest import mm_op, single_ops_graph, vec_op

two_cpus = pytest.mark.skipif(cfg.cpu_count() < 2, reason="needs two CPUs for two worker processes")
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the process tree from /proc")


def _graph(i: int):
    return single_ops_graph([mm_op(128 + 16 * i, 256, 128, f"mm{i}"), mm_op(64, 512 + 32 * i, 256, f"mm{i}b"),
                             vec_op("Relu", (32, 1024 + 64 * i), f"relu{i}")], name=f"g{i}")


@two_cpus
def test_tune_from_several_threads_with_two_workers_each(env):
    """Threads share one bank (its file lock) and one work path; none hangs, every case reaches the bank."""
    (env / "aoe.ini").write_text("inline_cpu_s = 0\n")   # workers from the first case, however small the graph
    n = 4
    results: dict[int, object] = {}

    def run(i: int) -> None:
        try:
            results[i] = aoe.tune(_graph(i), bank=env / "bank", work_path=env / "work",
                                  options=aoe.TuneOptions(workers=2, budget=300, device=i))
        except BaseException as exc:  # noqa: BLE001 - reported below
            results[i] = exc

    for _ in range(2):
        results.clear()
        threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)  # a hang, not a speed limit: the runs take seconds
        assert not any(t.is_alive() for t in threads), "a tuning thread hangs"
        for i in range(n):
            assert getattr(results[i], "status", results[i]) == "tuning successful", results[i]
    files = sorted((env / "work").glob("aoe_result_opat_*.json"))
    assert len(files) == 2 * n  # no result file lost to a name clash
    bank_lines = [ln for f in (env / "bank").rglob("*.json*") for ln in f.read_text().splitlines() if ln.strip()]
    assert bank_lines


def _children(pid: int) -> set[int]:
    kids: set[int] = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.add(int(d.name))
    return kids


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        for c in _children(todo.pop()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _job_with_workers(job_env: dict, tmp_path: Path, pipes: bool) -> tuple[subprocess.Popen, set[int]]:
    """A cold ResNet-50 job with two worker processes, once its forkserver and both workers run."""
    (tmp_path / "aoe.ini").write_text("tuning_parallel_num = 2\ninline_cpu_s = 0\n")
    out = subprocess.PIPE if pipes else subprocess.DEVNULL
    proc = subprocess.Popen([sys.executable, "-m", "aoe.cli", "-m", "zoo:resnet50", "-j", "2", "--training"],
                            cwd=tmp_path, env=dict(job_env, AOE_SEARCH_BUDGET="100000"), stdout=out, stderr=out)
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while time.monotonic() < deadline and len(workers) < 3:   # forkserver + 2 workers
        assert proc.poll() is None, "the job ended before its workers started"
        workers = _descendants(proc.pid)
        time.sleep(0.1)
    assert len(workers) >= 3, workers
    return proc, workers


@linux
@two_cpus
def test_kill_9_with_two_workers_frees_the_device_within_5_seconds(job_env, tmp_path):
    """A job killed by SIGKILL leaves no worker behind and the next job gets the device at once."""
    proc, workers = _job_with_workers(job_env, tmp_path, pipes=False)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        lock = DeviceLock(0, Path(job_env["AOE_LOCK_DIR"]))
        got = False
        end = time.monotonic() + 5
        while time.monotonic() < end and not got:
            try:
                lock.acquire()
                got = True
            except DeviceBusy:
                time.sleep(0.05)
        assert got, "the device lock is still held 5 s after kill -9"
        lock.release()
        end = time.monotonic() + 5
        while time.monotonic() < end and any(_alive(p) for p in workers):
            time.sleep(0.05)
        assert not [p for p in workers if _alive(p)], "orphan workers survive their job"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@linux
@two_cpus
def test_kill_9_under_a_harness_that_reads_the_pipes_before_it_reaps(job_env, tmp_path):
    """`subprocess.communicate()` after a kill -9 reads to EOF before it reaps the job: the workers (which
    hold the job's stdout and stderr) must count the unreaped job as gone, or both sides wait forever."""
    proc, workers = _job_with_workers(job_env, tmp_path, pipes=True)
    try:
        os.kill(proc.pid, signal.SIGKILL)
        try:
            proc.communicate(timeout=30)   # a deadlock, not a speed limit: EOF comes within a second
        except subprocess.TimeoutExpired:
            pytest.fail("the job's pipes stay open after kill -9: its workers wait for the unreaped job")
        assert proc.returncode == -signal.SIGKILL
    finally:
        for p in {w for w in workers if _alive(w)} | ({proc.pid} if proc.poll() is None else set()):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait()
