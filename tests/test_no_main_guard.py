"""No main guard: the Python API from a guard-less script, `python -c` and stdin; a failed worker start."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aoe.job import config as cfg
from aoe.job.lock import DeviceLock

two_cpus = pytest.mark.skipif(cfg.cpu_count() < 2, reason="needs two CPUs for two worker processes")

# ResNet-50 training with the built-in bank set aside (isolated_environ: AOE_BUILTIN_BANK=off) and a small
# budget; aoe.ini's inline_cpu_s = 0 sends every case to the two workers. Each import of the script adds
# a line to imports.txt: a worker that imported the user's main module would add one (and tune again).
SCRIPT = """\
import os, aoe
with open("imports.txt", "a") as f:
    f.write(f"{os.getpid()}\\n")
opts = aoe.TuneOptions(builtin=False, budget=40, workers=2)
rs = aoe.{call}
print("STATUS", rs[0].status if isinstance(rs, list) else rs.status)
"""
CALLS = {"script": 'tune("zoo:resnet50", bank="bank", work_path="work", training=True, options=opts)',
         "-c": 'tune("zoo:resnet50", bank="bank", work_path="work", training=True, options=opts)',
         "stdin": 'tune_models(["zoo:resnet50"], bank="bank", work_path="work", training=True, options=opts)'}


@two_cpus
@pytest.mark.parametrize("how", sorted(CALLS))
def test_guardless_main_tunes_resnet50_training_with_workers(how: str, tmp_path: Path, job_env: dict[str, str]) -> None:
    (tmp_path / "aoe.ini").write_text("inline_cpu_s = 0\n")
    (tmp_path / "work").mkdir()
    code = SCRIPT.replace("{call}", CALLS[how])
    if how == "script":
        (tmp_path / "train.py").write_text(code)
        argv, stdin = [sys.executable, "train.py"], None
    elif how == "-c":
        argv, stdin = [sys.executable, "-c", code], None
    else:
        argv, stdin = [sys.executable, "-"], code
    p = subprocess.run(argv, input=stdin, cwd=tmp_path, env=job_env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "STATUS tuning successful" in p.stdout, p.stdout + p.stderr[-2000:]
    assert len((tmp_path / "imports.txt").read_text().split()) == 1  # no worker ran the script again
    (result,) = (tmp_path / "work").glob("aoe_result_opat_*.json")
    parts = next(iter(json.loads(result.read_text()).values()))      # [{"basic": ...}, {"OPAT": ...}]
    summary = next(p["OPAT"] for p in parts if "OPAT" in p)["repo_summary"]
    assert summary["repo_hit_num"] == 0 and summary["repo_add_num"] > 0   # tuned afresh, nothing built in
    assert any(f.stat().st_size for f in (tmp_path / "bank").rglob("*.json*"))
    assert "WorkerWarning" not in p.stderr and "worker processes are not" not in p.stderr


# The CLI job with its worker start made to fail: the fork server's connection breaks (BrokenPipeError,
# which `aoe` once took for "stdout closed by | head" and exited 0), or every worker dies as it starts.
FAILING = {
    "broken pipe": "import multiprocessing.forkserver as fs\n"
                   "def boom(fds):\n    raise BrokenPipeError(32, 'Broken pipe')\n"
                   "fs.connect_to_new_process = boom\n",
    "worker dies": "import os, concurrent.futures, aoe.opat.graph_tune as gt\n"
                   "gt.worker_pool = lambda n: concurrent.futures.ProcessPoolExecutor(n, initializer=os._exit, "
                   "initargs=(3,))\n",
}


@pytest.mark.parametrize("how", sorted(FAILING))
def test_failed_worker_start_exits_nonzero_and_frees_the_device(how: str, tmp_path: Path,
                                                                job_env: dict[str, str]) -> None:
    (tmp_path / "aoe.ini").write_text("inline_cpu_s = 0\ntuning_parallel_num = 2\n")
    code = FAILING[how] + ("import sys, aoe.cli\n"
                           "sys.exit(aoe.cli.main(['-m', 'zoo:resnet50', '-j', '2', '--training', "
                           "'--work_path', 'work']))\n")
    p = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=job_env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode != 0, p.stdout + p.stderr
    assert p.returncode == 2 and "aoe: error: the worker processes of this job could not start" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr
    (result,) = (tmp_path / "work").glob("aoe_result_opat_*.json")
    assert "tuning incomplete" in result.read_text()
    with DeviceLock(0, tmp_path / "locks"):   # free at once: nothing of the job holds it
        pass


FRONTENDS = {
    "torch": """\
import os, torch, aoe.torch
with open("imports.txt", "a") as f:
    f.write(f"{os.getpid()}\\n")
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(16 * 14 * 14, 10))
r = aoe.torch.tune(model, (torch.randn(8, 3, 16, 16),), loss_fn=torch.nn.functional.cross_entropy,
                   targets=(torch.randint(0, 10, (8,)),), mode="op", bank="bank", work_path="work", budget=40, verbose=True)
print("STATUS", r.status)
""",
    "tensorflow": """\
import os, keras, tensorflow as tf, aoe.tf
with open("imports.txt", "a") as f:
    f.write(f"{os.getpid()}\\n")
model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(16, 3, activation="relu"),
                          keras.layers.Flatten(), keras.layers.Dense(10)])
opt = keras.optimizers.Adam()
lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = lossf(y, model(x, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss

step = aoe.tf.tune_step(train_step, {"aoe_mode": "2", "work_path": "work", "tune_bank_path": "bank"})
step(tf.random.uniform((8, 16, 16, 3)), tf.zeros((8,), tf.int32))
print("STATUS", step.result.status)
""",
}


@two_cpus
@pytest.mark.parametrize("frontend", [pytest.param("torch", marks=pytest.mark.extra("torch")),
                                      pytest.param("tensorflow", marks=pytest.mark.extra("tensorflow"))])
def test_guardless_frontend_script_tunes_with_workers(frontend: str, tmp_path: Path, job_env: dict[str, str]) -> None:
    (tmp_path / "aoe.ini").write_text("inline_cpu_s = 0\ntuning_parallel_num = 2\n")
    (tmp_path / "work").mkdir()
    (tmp_path / "train.py").write_text(FRONTENDS[frontend])
    p = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=dict(job_env, TF_CPP_MIN_LOG_LEVEL="3"),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert "STATUS tuning successful" in p.stdout, p.stdout[-2000:]
    assert "2 worker process(es)" in p.stdout          # the workers were used, not a one-process fallback
    assert len((tmp_path / "imports.txt").read_text().split()) == 1


def test_closed_stdout_is_the_only_quiet_broken_pipe(tmp_path: Path, job_env: dict[str, str]) -> None:
    """`aoe ... | head` after head exited: exit 0 and nothing on stderr (the other pipes: see above)."""
    import os

    r, w = os.pipe()
    os.close(r)                      # the reader is gone before aoe writes its first line
    try:
        p = subprocess.run([sys.executable, "-m", "aoe.cli", "graph", "zoo:resnet50"], cwd=tmp_path, env=job_env,
                           stdout=w, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(w)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    from aoe.cli import stdout_closed

    assert not stdout_closed()       # pytest's own stdout (a file or a terminal) is not a closed pipe


def test_without_an_adaptable_launcher_the_cases_are_tuned_in_process_with_one_warning(
        env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aoe
    from aoe.opat import workers
    from conftest import mm_op, single_ops_graph, vec_op

    assert workers._POPEN["forkserver"] is not None      # this Python's launcher is adapted (the normal case)
    monkeypatch.setattr(workers, "_POPEN", {"forkserver": None, "spawn": None})
    monkeypatch.setattr(workers, "_CTX", None)
    monkeypatch.setattr(workers, "_NO_CTX", False)
    (env / "aoe.ini").write_text("inline_cpu_s = 0\n")
    g = single_ops_graph([mm_op(128, 256, 128, "mm"), vec_op("Relu", (32, 1024), "relu")], name="g")
    with pytest.warns(workers.WorkerWarning, match="tuned in this process") as caught:
        r = aoe.tune(g, bank=env / "bank", work_path=env, options=aoe.TuneOptions(workers=2, budget=100))
    assert len(caught) == 1 and r.status == "tuning successful"
    assert r.section["repo_summary"]["total_num"] == 2


# The caller's own multiprocessing around aoe's workers: spawn children still get its main module, and
# its forkserver preload list (one fork server per process, shared with aoe's) is kept.
OWN_POOLS = """\
import multiprocessing as mp, sys, aoe
def probe(x):
    return x * x, "xml.dom.minidom" in sys.modules, getattr(sys.modules["__main__"], "__file__", None)
if __name__ == "__main__":
    mp.set_forkserver_preload(["xml.dom.minidom"])
    r = aoe.tune("zoo:mobilenet_v2", bank="bank", work_path="work", options=aoe.TuneOptions(budget=20, workers=2))
    print("STATUS", r.status)
    with mp.get_context("spawn").Pool(2) as p:
        print("SPAWN", p.map(probe, range(2)))
    with mp.get_context("forkserver").Pool(2) as p:
        print("FORKSERVER", p.map(probe, range(2)))
"""


@two_cpus
def test_the_callers_own_pools_keep_their_main_and_preload(tmp_path: Path, job_env: dict[str, str]) -> None:
    (tmp_path / "aoe.ini").write_text("inline_cpu_s = 0\n")
    (tmp_path / "work").mkdir()
    (tmp_path / "train.py").write_text(OWN_POOLS)
    p = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=job_env, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0 and "STATUS tuning successful" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
    main = str(tmp_path / "train.py")
    assert f"SPAWN [(0, False, {main!r}), (1, False, {main!r})]" in p.stdout, p.stdout[-1000:]
    assert f"FORKSERVER [(0, True, {main!r}), (1, True, {main!r})]" in p.stdout, p.stdout[-1000:]
