"""`aoe run -- python train.py`: unmodified training scripts tuned on their first step, loss unchanged."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

KERAS_FIT = """\
import numpy as np, keras
keras.utils.set_random_seed(0)
x = np.random.RandomState(0).rand(64, 8, 8, 3).astype("float32")
y = np.random.RandomState(1).randint(0, 4, size=(64,))
model = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(8, 3, activation="relu"),
                          keras.layers.Flatten(), keras.layers.Dense(4)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
h = model.fit(x, y, batch_size=16, epochs=2, verbose=0, shuffle=False)
print("LOSS", repr(h.history["loss"]))
"""

TF_FUNCTION = """\
import keras, tensorflow as tf
keras.utils.set_random_seed(0)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
opt = keras.optimizers.Adam(1e-3)
lossf = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
x = tf.random.stateless_uniform((64, 16), seed=(1, 2))
y = tf.random.stateless_uniform((64,), seed=(3, 4), maxval=4, dtype=tf.int32)

@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = lossf(yb, model(xb, training=True))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss

print("LOSS", repr([float(train_step(x[i:i + 16], y[i:i + 16])) for e in range(2) for i in range(0, 64, 16)]))
"""

# the product's route: tuning configured in the session config (no AOE_MODE in the environment)
TF_SESSION = """\
import numpy as np, tensorflow as tf
tf.compat.v1.disable_eager_execution()
x = tf.compat.v1.placeholder(tf.float32, (None, 16), name="x")
y = tf.compat.v1.placeholder(tf.int32, (None,), name="y")
init = tf.compat.v1.initializers.glorot_uniform(seed=1)
w1 = tf.compat.v1.get_variable("w1", (16, 32), initializer=init)
b1 = tf.compat.v1.get_variable("b1", (32,), initializer=tf.compat.v1.zeros_initializer())
w2 = tf.compat.v1.get_variable("w2", (32, 4), initializer=init)
logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2)
loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
train_op = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(loss)
config = tf.compat.v1.ConfigProto()
custom_op = config.graph_options.rewrite_options.custom_optimizers.add()
custom_op.name = "NpuOptimizer"
custom_op.parameter_map["use_off_line"].b = True
custom_op.parameter_map["aoe_mode"].s = tf.compat.as_bytes("2")
custom_op.parameter_map["work_path"].s = tf.compat.as_bytes("work")
rs = np.random.RandomState(0)
xs, ys = rs.rand(64, 16).astype("float32"), rs.randint(0, 4, size=64)
losses = []
with tf.compat.v1.Session(config=config) as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    for e in range(2):
        for i in range(0, 64, 16):
            _, l = sess.run([train_op, loss], feed_dict={x: xs[i:i + 16], y: ys[i:i + 16]})
            losses.append(float(l))
print("LOSS", repr(losses))
"""

TORCH_LOOP = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
lossf = torch.nn.CrossEntropyLoss()
g = torch.Generator().manual_seed(1)
x, y = torch.rand(64, 3, 8, 8, generator=g), torch.randint(0, 4, (64,), generator=g)
losses = []
for epoch in range(2):
    for i in range(0, 64, 16):
        opt.zero_grad()
        loss = lossf(model(x[i:i + 16]), y[i:i + 16])
        loss.backward()
        opt.step()
        losses.append(loss.item())
print("LOSS", repr(losses))
"""


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = dict(env, TF_CPP_MIN_LOG_LEVEL="3", AOE_SEARCH_BUDGET="60")
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _loss(p: subprocess.CompletedProcess[str]) -> str:
    m = re.search(r"^LOSS (.*)$", p.stdout, re.M)
    assert m, p.stdout[-2000:] + p.stderr[-3000:]
    return m.group(1)


def _check_tuned(tmp_path: Path, env: dict[str, str], script: str, aoe_mode: str | None) -> None:
    (tmp_path / "train.py").write_text(script)
    (tmp_path / "work").mkdir()
    plain = _run([sys.executable, "train.py"], tmp_path, env)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert not list((tmp_path / "work").iterdir())            # a plain run writes nothing
    run_env = dict(env, AOE_MODE=aoe_mode) if aoe_mode else env
    tuned = _run([sys.executable, "-m", "aoe.cli", "run", "--work_path", "work", "--", sys.executable, "train.py"],
                 tmp_path, run_env)
    assert tuned.returncode == 0, tuned.stdout[-2000:] + tuned.stderr[-3000:]
    assert _loss(tuned) == _loss(plain)                       # training untouched, to the last bit
    (result,) = (tmp_path / "work").glob("aoe_result_opat_*.json")
    parts = next(iter(json.loads(result.read_text()).values()))
    opat = next(p["OPAT"] for p in parts if "OPAT" in p)
    assert opat["opat_tuning_result"] == "tuning successful"
    assert opat["repo_summary"]["total_num"] > 0 and opat["repo_summary"]["repo_add_num"] > 0
    assert any(f.stat().st_size for f in (tmp_path / "bank").rglob("*") if f.is_file())   # the bank written
    assert "not tuned" not in tuned.stderr, tuned.stderr[-3000:]


@pytest.mark.extra("tensorflow")
def test_keras_fit_script_tuned_unchanged(tmp_path: Path, job_env: dict[str, str]) -> None:
    _check_tuned(tmp_path, job_env, KERAS_FIT, "2")


@pytest.mark.extra("tensorflow")
def test_tf_function_step_script_tuned_unchanged(tmp_path: Path, job_env: dict[str, str]) -> None:
    _check_tuned(tmp_path, job_env, TF_FUNCTION, "2")


@pytest.mark.extra("tensorflow")
def test_v1_session_parameter_map_script_tuned_unchanged(tmp_path: Path, job_env: dict[str, str]) -> None:
    _check_tuned(tmp_path, job_env, TF_SESSION, None)   # aoe_mode from the session config only


@pytest.mark.extra("torch")
def test_torch_loop_script_tuned_unchanged(tmp_path: Path, job_env: dict[str, str]) -> None:
    _check_tuned(tmp_path, job_env, TORCH_LOOP, "2")


def test_exit_code_of_the_command_passed_through(tmp_path: Path, job_env: dict[str, str]) -> None:
    code = "import sys; print('ran', 'aoe.launch.hooks' in sys.modules); sys.exit(7)"
    p = _run([sys.executable, "-m", "aoe.cli", "run", "--", sys.executable, "-c", code], tmp_path, job_env)
    assert p.returncode == 7 and "ran True" in p.stdout, p.stdout + p.stderr
    p = _run([sys.executable, "-m", "aoe.cli", "run", "--", sys.executable, "-c", "import os; os.kill(os.getpid(), 15)"],
             tmp_path, job_env)
    assert p.returncode == 128 + 15


def test_bad_use_is_an_error_without_traceback(tmp_path: Path, job_env: dict[str, str]) -> None:
    for argv, words in ((["run"], "no command"), (["run", "-j", "2"], "after `--`"),
                        (["run", "--", "/nonexistent/python"], "cannot run")):
        p = _run([sys.executable, "-m", "aoe.cli", *argv], tmp_path, job_env)
        assert p.returncode == 2 and words in p.stderr and "Traceback" not in p.stderr, p.stderr
    p = _run([sys.executable, "-m", "aoe.cli", "run", "--", sys.executable, "-c", "pass"], tmp_path,
             dict(job_env, AOE_MODE="7"))
    assert p.returncode == 2 and "AOE_MODE" in p.stderr, p.stderr
