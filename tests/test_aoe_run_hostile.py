"""`aoe run` against scripts and callers that do not behave: signals, forks, threads, odd arguments."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from aoe.job.lock import DeviceLock

AOE_RUN = [sys.executable, "-m", "aoe.cli", "run"]

# prints "start", then counts the SIGINTs it gets for a while and exits 130 (or 0 without one)
COUNT_SIGINT = """\
import os, signal, sys, time
got = []
signal.signal(signal.SIGINT, lambda s, f: got.append(s))
print("start", flush=True)
end = time.time() + 60
while time.time() < end and not got:
    time.sleep(0.05)
time.sleep(1.0)                       # a second copy of the signal would arrive by now
print("SIGINTS", len(got), flush=True)
sys.exit(130 if got else 0)
"""


def _env(job_env: dict[str, str], **kw: str) -> dict[str, str]:
    return dict(job_env, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="3", **kw)


def _plain_and_tuned(tmp_path: Path, job_env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], ...]:
    """train.py run plainly, then under `aoe run` with AOE_MODE=2, which must tune its step successfully."""
    plain = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=_env(job_env), capture_output=True,
                           text=True, timeout=600)
    p = subprocess.run([*AOE_RUN, "--work_path", ".", "--", sys.executable, "train.py"], cwd=tmp_path,
                       env=_env(job_env, AOE_MODE="2"), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "not tuned" not in p.stderr, p.stdout[-2000:] + p.stderr[-2000:]
    assert "OPAT tuning successful" in p.stdout
    return plain, p


def _start(argv: list[str], cwd: Path, env: dict[str, str], **kw: object) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kw)  # type: ignore[call-overload]


def _signal_when(p: subprocess.Popen[str], word: str, sig: int, timeout: float) -> tuple[str, str]:
    """Send `sig` to `p` once it prints `word`; its remaining output (killed if it outlives `timeout`)."""
    try:
        _wait_for(p, word)
        p.send_signal(sig)
        return p.communicate(timeout=timeout)
    finally:
        p.kill()


def _wait_for(p: subprocess.Popen[str], word: str) -> list[str]:
    lines = []
    assert p.stdout is not None
    for line in p.stdout:
        lines.append(line)
        if word in line:
            return lines
    raise AssertionError("".join(lines) + (p.stderr.read() if p.stderr else ""))


def test_the_scripts_own_double_dash_is_its_argument(tmp_path: Path, job_env: dict[str, str]) -> None:
    code = "import sys; print('ARGV', sys.argv[1:])"
    p = subprocess.run([*AOE_RUN, sys.executable, "-c", code, "--", "--lr", "3"], cwd=tmp_path, env=job_env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "ARGV ['--', '--lr', '3']" in p.stdout, p.stdout + p.stderr


def test_sigint_sent_to_aoe_run_alone_stops_the_child(tmp_path: Path, job_env: dict[str, str]) -> None:
    """A supervisor's `kill -INT <aoe pid>`: passed on once (aoe run once ignored it and waited forever)."""
    p = _start([*AOE_RUN, "--", sys.executable, "-c", COUNT_SIGINT], tmp_path, job_env)
    out, err = _signal_when(p, "start", signal.SIGINT, 60)
    assert p.returncode == 130 and "SIGINTS 1" in out, out + err


def test_terminal_ctrl_c_reaches_the_child_once(tmp_path: Path, job_env: dict[str, str]) -> None:
    """^C on a terminal goes to the whole foreground group: aoe run must not pass on a second copy."""
    import fcntl
    import pty
    import termios

    master, slave = pty.openpty()

    def controlling_tty() -> None:     # a new session whose controlling terminal is the pty
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen([*AOE_RUN, "--", sys.executable, "-c", COUNT_SIGINT], cwd=tmp_path, env=job_env,
                         stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=controlling_tty)
    os.close(slave)
    try:
        _wait_for(p, "start")
        os.write(master, b"\x03")       # the terminal's interrupt character
        out, err = p.communicate(timeout=60)
    finally:
        p.kill()
        os.close(master)
    assert p.returncode == 130 and "SIGINTS 1" in out, out + err


def test_a_bad_setting_stops_aoe_run_before_the_script_starts(tmp_path: Path, job_env: dict[str, str]) -> None:
    (tmp_path / "afile").write_text("")
    code = "open('ran', 'w').close()"
    p = subprocess.run([*AOE_RUN, "--work_path", "afile", "--", sys.executable, "-c", code], cwd=tmp_path,
                       env=_env(job_env, AOE_MODE="2"), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "aoe: error:" in p.stderr and "not a directory" in p.stderr, p.stderr
    assert not (tmp_path / "ran").exists()


TORCH_STEP = """\
import os, sys, threading, time, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
lossf = torch.nn.CrossEntropyLoss()
x, y = torch.rand(64, 16), torch.randint(0, 4, (64,))
def train(tag):
    for i in range(0, 64, 16):
        opt.zero_grad(); loss = lossf(model(x[i:i + 16]), y[i:i + 16]); loss.backward(); opt.step()
    print("LOSS", tag, loss.item(), flush=True)
"""


@pytest.mark.extra("torch")
def test_a_forked_trainer_is_not_tuned_twice(tmp_path: Path, job_env: dict[str, str]) -> None:
    """Parent and a fork both train: one of them tunes; the other does not stop on the busy device."""
    code = TORCH_STEP + ("pid = os.fork()\ntrain('child' if pid == 0 else 'parent')\n"
                         "if pid:\n    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n")
    (tmp_path / "train.py").write_text(code)
    p = subprocess.run([*AOE_RUN, "--work_path", ".", "--", sys.executable, "train.py"], cwd=tmp_path,
                       env=_env(job_env, AOE_MODE="2"), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "LOSS child" in p.stdout and "LOSS parent" in p.stdout and "aoe: error" not in p.stderr
    assert len(list(tmp_path.glob("aoe_result_opat_*.json"))) == 1


@pytest.mark.extra("torch")
def test_a_tuning_error_in_a_training_thread_ends_the_script_with_2(tmp_path: Path, job_env: dict[str, str]) -> None:
    """SystemExit in a thread ends only the thread: the script once went on and exited 0."""
    code = TORCH_STEP + "t = threading.Thread(target=train, args=('thread',)); t.start(); t.join()\nprint('END')\n"
    (tmp_path / "train.py").write_text(code)
    with DeviceLock(0, tmp_path / "locks"):       # the device is busy
        p = subprocess.run([*AOE_RUN, "--", sys.executable, "train.py"], cwd=tmp_path,
                           env=_env(job_env, AOE_MODE="2"), capture_output=True, text=True, timeout=600)
    assert p.returncode == 2 and "aoe: error: device 0 is in use" in p.stderr, p.stdout + p.stderr
    assert "END" not in p.stdout


@pytest.mark.extra("torch")
def test_sigterm_while_tuning_ends_the_script_as_sigterm_does(tmp_path: Path, job_env: dict[str, str]) -> None:
    """The job holds SIGTERM back to write its result file, then the script ends by it: 143, not a
    KeyboardInterrupt traceback and 130; the device is free."""
    code = ("import time, torch\n"
            "dims = [64 + 16 * i for i in range(40)]\n"
            "model = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(dims, dims[1:])])\n"
            "opt = torch.optim.Adam(model.parameters())\n"
            "for i in range(600):\n"
            "    opt.zero_grad(); model(torch.rand(8, 64)).square().mean().backward(); opt.step(); time.sleep(0.1)\n")
    (tmp_path / "train.py").write_text(code)
    p = _start([*AOE_RUN, "--work_path", ".", "--", sys.executable, "train.py"], tmp_path,
               _env(job_env, AOE_MODE="2", AOE_SEARCH_BUDGET="20000"))
    out, err = _signal_when(p, "Aoe tuning graph", signal.SIGTERM, 120)
    assert p.returncode == 128 + signal.SIGTERM, out[-2000:] + err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    (result,) = tmp_path.glob("aoe_result_opat_*.json")
    assert "tuning incomplete" in json.dumps(json.loads(result.read_text()))
    with DeviceLock(0, tmp_path / "locks"):     # free: a busy device raises DeviceBusy at once
        pass


KERAS_FIT = """\
import numpy as np, keras
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(np.random.rand(32, 16).astype("float32"), np.random.randint(0, 4, 32), batch_size=16, epochs=1, verbose=0)
print("END")
"""

V1_BAD_MODE = """\
import tensorflow as tf
config = tf.compat.v1.ConfigProto()
custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
custom_op.name = "NpuOptimizer"
custom_op.parameter_map["aoe_mode"].s = tf.compat.as_bytes("7")
with tf.compat.v1.Session(config=config) as sess:
    print("END")
"""


@pytest.mark.extra("tensorflow")
def test_tensorflow_routes_end_a_tuning_error_with_2_not_a_traceback(tmp_path: Path, job_env: dict[str, str]) -> None:
    """A Keras fit whose device is busy, a v1 session config with a bad aoe_mode: `aoe: error`, exit 2
    (they were an AoeError traceback and exit 1)."""
    (tmp_path / "fit.py").write_text(KERAS_FIT)
    (tmp_path / "v1.py").write_text(V1_BAD_MODE)
    with DeviceLock(0, tmp_path / "locks"):
        fit = subprocess.run([*AOE_RUN, "--", sys.executable, "fit.py"], cwd=tmp_path,
                             env=_env(job_env, AOE_MODE="2"), capture_output=True, text=True, timeout=600)
    assert fit.returncode == 2 and "aoe: error: device 0 is in use" in fit.stderr, fit.stdout + fit.stderr[-3000:]
    v1 = subprocess.run([*AOE_RUN, "--", sys.executable, "v1.py"], cwd=tmp_path, env=_env(job_env),
                        capture_output=True, text=True, timeout=600)
    assert v1.returncode == 2 and "aoe: error: aoe_mode='7' is not valid" in v1.stderr, v1.stdout + v1.stderr[-3000:]
    for p in (fit, v1):
        assert "Traceback" not in p.stderr and "END" not in p.stdout


@pytest.mark.extra("torch")
def test_a_torch_compiled_model_is_tuned(tmp_path: Path, job_env: dict[str, str]) -> None:
    """`torch.compile(model)` (PyTorch 2's usual loop): the hook saw only the OptimizedModule wrapper, which
    FX cannot trace, and left the step untuned; it captures the module the wrapper runs."""
    code = TORCH_STEP.replace("opt = ", "cmodel = torch.compile(model, backend='eager')\nopt = ").replace(
        "lossf(model(", "lossf(cmodel(") + "train('compiled')\n"
    (tmp_path / "train.py").write_text(code)
    plain, p = _plain_and_tuned(tmp_path, job_env)
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("LOSS")] == plain.stdout.splitlines()
    (result,) = tmp_path.glob("aoe_result_opat_*.json")
    assert "tuning successful" in result.read_text()


@pytest.mark.extra("torch")
def test_a_model_called_with_keyword_arguments_is_tuned(tmp_path: Path, job_env: dict[str, str]) -> None:
    """`model(x, labels=y)` returning a dict with its loss (the Hugging Face convention): the hook kept
    only the positional inputs, the capture called the model without labels and the step went untuned."""
    code = """\
import torch
torch.manual_seed(0)
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 4)
    def forward(self, x, labels=None, reduction="mean"):
        logits = self.a(x)
        return {"logits": logits, "loss": torch.nn.functional.cross_entropy(logits, labels, reduction=reduction)}
m = Net()
opt = torch.optim.AdamW(m.parameters())
for _ in range(2):
    out = m(torch.rand(8, 16), labels=torch.randint(0, 4, (8,)), reduction="mean")
    opt.zero_grad(); out["loss"].backward(); opt.step()
print("LOSS", out["loss"].item())
"""
    (tmp_path / "train.py").write_text(code)
    plain, p = _plain_and_tuned(tmp_path, job_env)
    records = [f.read_text() for f in tmp_path.rglob("*.records.jsonl")]
    assert records and any('"NLLLoss' in r for r in records), records  # the model's own loss captured
    assert [ln for ln in p.stdout.splitlines() if ln.startswith("LOSS")] == plain.stdout.splitlines()
