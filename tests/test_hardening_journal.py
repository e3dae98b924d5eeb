"""Result file and resume state: an append-only journal plus a checkpoint at most once a second.

A `kill -9` at any instant leaves a valid result file saying "tuning incomplete"; `--reload` continues
from the last checkpoint plus the journal, and removes the temp files a killed rewrite left behind.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ARGS = ("-m", "zoo:resnet50", "-j", "2", "--training")


def _aoe(cwd: Path, env: dict[str, str], *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aoe.cli", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)


def _journal_lines(d: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in d.glob(".aoe_result_opat_*.journal"))


def test_kill_9_then_reload_keeps_the_journal_and_cleans_temps(tmp_path, job_env):
    (tmp_path / "aoe.ini").write_text("tuning_parallel_num = 1\n")
    env = dict(job_env, AOE_SEARCH_BUDGET="3000")
    proc = _aoe(tmp_path, env, *ARGS)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _journal_lines(tmp_path) < 8:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    journaled = _journal_lines(tmp_path)
    assert journaled >= 8
    (result,) = tmp_path.glob("aoe_result_opat_*.json")
    data = json.loads(result.read_text())            # valid JSON after a kill at any instant
    (task,) = data.values()
    assert "tuning_time(s)" not in task[0]["basic"]
    if len(task) > 1:
        assert task[1]["OPAT"]["opat_tuning_result"] == "tuning incomplete"
    # a temp file as a kill in the middle of a rewrite leaves it (its pid is not running)
    stale = tmp_path / f".{result.name}.k1ll3d.tmp"
    stale.write_text('{"half": ')
    p = _aoe(tmp_path, env, *ARGS, "--reload")
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    assert "removed" in out and not stale.exists()
    kept = int(out.split("--reload: resuming the interrupted job in ")[1].split("(")[1].split()[0])
    assert kept >= journaled                         # every journaled case kept, not tuned again
    final = json.loads(result.read_text())[next(iter(data))]
    assert final[1]["OPAT"]["opat_tuning_result"] == "tuning successful"
    assert final[1]["OPAT"]["repo_summary"]["total_num"] == 186
    assert not list(tmp_path.glob(".aoe_result_*"))  # state, journal and temps gone
