"""The `aoe` tuning job end to end, as separate processes (run outside the source tree).

The `job_env` fixture (conftest.py) is a clean environment: bank, locks and HOME in tmp_path.
"""
from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path


from aoe.job.schema import validate


def aoe(tmp_path, env, *argv, **kw):
    return subprocess.run([sys.executable, "-m", "aoe.cli", *argv], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300, **kw)


def start(tmp_path, env, *argv):
    return subprocess.Popen([sys.executable, "-m", "aoe.cli", *argv], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result_files(d: Path, kind: str = "opat") -> list[Path]:
    return sorted(d.glob(f"aoe_result_{kind}_*_pid*.json"))


def section(path: Path) -> dict:
    data = json.loads(path.read_text())
    validate(data, "opat")
    (task,) = data.values()
    return task


def test_end_to_end_bundled_model(tmp_path, job_env):
    p = aoe(tmp_path, job_env, "-m", "zoo:mobilenet_v2", "-j", "2")
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr
    assert p.stdout.splitlines()[0] == "Aoe tuning graph."
    assert "top 10 of" in p.stdout and "result file:" in p.stdout
    (f,) = result_files(tmp_path)
    task = section(f)
    sec = task[1]["OPAT"]
    assert sec["opat_tuning_result"] == "tuning successful" and "tuning_time(s)" in task[0]["basic"]
    s = sec["repo_summary"]
    assert s["repo_add_num"] > 30 and s["repo_hit_num"] == 0
    assert len(list((tmp_path / "bank" / "Ascend910B2" / "unified_bank").glob("*_runtime_kb.json"))) >= 2

    # the environment-driven form, with ASCEND_WORK_PATH: everything is a hit now
    env2 = dict(job_env, AOE_MODE="2", ASCEND_WORK_PATH=str(tmp_path / "results"))
    p = aoe(tmp_path, env2, "-m", "zoo:mobilenet_v2")
    assert p.returncode == 0, p.stderr
    (f2,) = result_files(tmp_path / "results")
    s2 = section(f2)[1]["OPAT"]["repo_summary"]
    assert s2["repo_add_num"] == 0 and s2["repo_hit_num"] == s["repo_add_num"]


def test_bad_environment_is_a_clean_error(tmp_path, job_env):
    for var, value in (("AOE_MODE", "9"), ("ASCEND_DEVICE_ID", "99"), ("TE_PARALLEL_COMPILER", "64"),
                       ("REPEAT_TUNE", "maybe"), ("TUNE_BANK_PATH", str(tmp_path / "missing"))):
        e = dict(job_env, AOE_MODE="2")
        e[var] = value
        p = aoe(tmp_path, e, "-m", "zoo:mobilenet_v2")
        assert p.returncode == 2, (var, p.stderr)
        assert p.stderr.startswith("aoe: error: ") and var in p.stderr and "Traceback" not in p.stderr


# Interruption tests need a job that is still tuning when the signal comes. The result file is rewritten
# at most once a second while a job runs (and a job at the test budget can end within that second), but
# every finished case is appended to the journal at once: the tests watch the journal.
SLOW_BUDGET = "100000"


def _wait_for_ops(path_dir: Path, proc: subprocess.Popen, n: int, timeout: float = 60.0) -> Path:
    """The result file once the job has finished `n` cases (journal lines) and still runs."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        assert proc.poll() is None, proc.communicate()
        for f in result_files(path_dir):
            json.loads(f.read_text())      # valid JSON at every instant ({} the instant it is created)
            journal = f.with_name(f".{f.name}.journal")
            if journal.exists() and journal.read_bytes().count(b"\n") >= n:
                return f
        time.sleep(0.02)
    raise AssertionError("the job made no progress")


def test_sigint_leaves_incomplete_and_reload_completes(tmp_path, job_env):
    (tmp_path / "aoe.ini").write_text("[tuning]\ntuning_parallel_num = 1\n")
    args = ("-m", "zoo:resnet50", "-j", "2", "--training")
    proc = start(tmp_path, dict(job_env, AOE_SEARCH_BUDGET=SLOW_BUDGET), *args)
    f = _wait_for_ops(tmp_path, proc, 3)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "--reload" in err
    task = section(f)
    assert "tuning_time(s)" not in task[0]["basic"]
    first = task[1]["OPAT"]
    assert first["opat_tuning_result"] == "tuning incomplete"
    done = first["repo_summary"]["total_num"]
    assert 0 < done < 186

    p = aoe(tmp_path, job_env, *args, "--reload")
    assert p.returncode == 0, p.stderr
    assert "--reload: resuming" in p.stdout and "resumed," in p.stdout
    # one count of the finished operators, not the state's and the journal's added up
    kept = re.search(r"\((\d+) operators already done\)", p.stdout).group(1)
    assert f"(resumed, {kept} operators kept)" in p.stdout
    assert result_files(tmp_path) == [f]          # the same file, completed
    task = section(f)
    final = task[1]["OPAT"]
    assert final["opat_tuning_result"] == "tuning successful" and "tuning_time(s)" in task[0]["basic"]
    assert final["repo_summary"]["total_num"] == 186          # every distinct case of the graph once
    kept = {o["op_name"]: o for o in first["repo_modified_operators"]}
    now = {o["op_name"]: o for o in final["repo_modified_operators"]}
    assert all(now[name] == o for name, o in kept.items())   # finished operators kept as they were
    assert not list(tmp_path.glob(".aoe_result_*.state"))


def test_sigterm_exits_143_with_incomplete_file(tmp_path, job_env):
    proc = start(tmp_path, dict(job_env, AOE_SEARCH_BUDGET=SLOW_BUDGET), "-m", "zoo:resnet50", "-j", "2", "--training")
    f = _wait_for_ops(tmp_path, proc, 1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err, f.read_text()[:3000])
    assert section(f)[1]["OPAT"]["opat_tuning_result"] == "tuning incomplete"


HOLD = """
import sys, time
from aoe.job.lock import DeviceLock
lk = DeviceLock(int(sys.argv[1]), sys.argv[2], model="holder").acquire()
print("locked", flush=True)
time.sleep(60)
"""


def test_two_jobs_on_one_device_conflict_and_a_dead_holder_is_recovered(tmp_path, job_env):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "0", str(tmp_path / "locks")], cwd=tmp_path,
                              env=job_env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        p = aoe(tmp_path, job_env, "-m", "zoo:mobilenet_v2", "-j", "2")
        assert p.returncode == 2 and "Traceback" not in p.stderr
        assert f"device 0 is in use by another tuning job (pid {holder.pid} of user " in p.stderr
        assert not result_files(tmp_path)
        p = aoe(tmp_path, dict(job_env, ASCEND_DEVICE_ID="1"), "-m", "zoo:mobilenet_v2", "-j", "2",
                "--tune_ops_file", _ops(tmp_path))
        assert p.returncode == 0, p.stderr                   # another device is free
    finally:
        holder.kill()                                        # SIGKILL: the lock is left behind
        holder.wait()
    p = aoe(tmp_path, job_env, "-m", "zoo:mobilenet_v2", "-j", "2", "--device", "0", "--tune_ops_file",
            _ops(tmp_path))
    assert p.returncode == 0, p.stderr
    assert f"recovered the lock of device 0 left by pid {holder.pid}" in p.stderr


def _ops(tmp_path: Path) -> str:
    f = tmp_path / "ops.json"
    f.write_text(json.dumps({"tune_ops_type": ["ReduceMeanD"]}))
    return str(f)
