"""Issue 26's PyTorch items, each on a model built here (nothing downloaded):

- recurrent layers: nn.LSTM / nn.GRU become CANN's DynamicRNN / DynamicGRUV2 (+ their gradients) with
  a simulator model; a module dynamo declines under torch.compile is named in a warning;
- every torch.optim implementation of Adam, AdamW and SGD(momentum) becomes the CANN apply operator;
- nn.Dropout(inplace=True), tril and the scatter writes convert;
- the built-in bank switch is accepted by the in-script doors.
"""
from __future__ import annotations

import copy
import warnings
from pathlib import Path

import pytest

from conftest import frontend_options, import_extra

pytestmark = [pytest.mark.extra("torch"), pytest.mark.usefixtures("fresh_dynamo")]
torch = import_extra("torch", "torch")

import aoe.torch  # noqa: E402
from aoe.errors import AoeError  # noqa: E402
from aoe.graph.ir import Graph, Op, Tensor  # noqa: E402
from aoe.ops import describe  # noqa: E402
from aoe.ops.coverage import unmodelled  # noqa: E402
from aoe.opat.apply import price  # noqa: E402
from aoe.opat.search import simulator_measure  # noqa: E402
from aoe.opat.tune import tune_case  # noqa: E402
from aoe.soc import load_soc  # noqa: E402

RECURRENT = {"DynamicRNN", "DynamicRNNGrad", "DynamicGRUV2", "DynamicGRUV2Grad"}
BUDGET = 300


class _Seq(torch.nn.Module):
    """An LSTM (2 layers, bidirectional, batch first) then a GRU, then a classifier on the last step."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(12, 16, num_layers=2, bidirectional=True, batch_first=True)
        self.gru = torch.nn.GRU(32, 24, batch_first=True)
        self.fc = torch.nn.Linear(24, 5)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, h = self.gru(y)
        return self.fc(y[:, -1]) + h[0].sum()


# ---- item 3: recurrent layers ----------------------------------------------------------------------

def test_lstm_and_gru_become_cann_recurrent_operators_that_compute_the_same() -> None:
    torch.manual_seed(0)
    model, x = _Seq(), torch.randn(3, 7, 12)
    ref = model(x)
    ref.sum().backward()
    twin = copy.deepcopy(model)
    for p in twin.parameters():
        p.grad = None
    from aoe.torch.recurrent import as_cann_ops

    with as_cann_ops(twin) as names:
        out = twin(x)
        out.sum().backward()
    assert names == ["lstm", "gru"]
    assert torch.allclose(ref, out, atol=1e-5)                     # the custom operators compute the modules
    for (n, a), b in zip(model.named_parameters(), twin.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-5), n        # and their analytic backwards the gradients
    assert "forward" not in twin.lstm.__dict__                     # the modules are restored

    g = aoe.torch.capture_train_step(model, (x,), loss_fn=lambda o: o.sum())
    counts = g.op_counts()
    # one operator per layer and direction (2 x 2 LSTM, 1 GRU), forward and backward
    assert {k: counts.get(k) for k in RECURRENT} == {"DynamicRNN": 4, "DynamicRNNGrad": 4, "DynamicGRUV2": 1,
                                                     "DynamicGRUV2Grad": 1}
    lstm = [op for op in g.ops if op.type == "DynamicRNN"]
    assert sorted(op.attrs["direction"] for op in lstm) == ["REDIRECTIONAL", "REDIRECTIONAL", "UNIDIRECTIONAL",
                                                            "UNIDIRECTIONAL"]
    first = next(op for op in lstm if g.tensors[op.inputs[0]].shape[-1] == 12)
    assert g.tensors[first.inputs[0]].shape == (7, 3, 12)          # time major
    assert g.tensors[first.inputs[1]].shape == (12 + 16, 4 * 16)  # w: [input + hidden, 4 * hidden]
    assert first.attrs["gate_order"] == "ifjo" and len(first.outputs) == 8
    gru = next(op for op in g.ops if op.type == "DynamicGRUV2")
    assert [g.tensors[t].shape for t in gru.inputs[:3]] == [(7, 3, 32), (32, 72), (24, 72)]
    assert not g.unsupported and unmodelled(g) == []              # every operator has a kernel model


def _lstm_graph(steps: int, typ: str = "DynamicRNN") -> Graph:
    b, i, h = 16, 64, 128
    ts = {}

    def t(name, shape, kind="activation"):
        ts[name] = Tensor(name, shape, "float16", "ND", kind)
        return name

    ins = [t("x", (steps, b, i), "input"), t("w", (i + h, 4 * h), "param"), t("b", (4 * h,), "param")]
    if typ == "DynamicRNNGrad":
        ins += [t(n, (steps, b, h)) for n in ("y", "init_h", "init_c", "h", "c", "dy", "dh", "dc", "i", "j", "f",
                                              "o", "tanhct")]
        outs = [t("dw", (i + h, 4 * h)), t("db", (4 * h,)), t("dx", (steps, b, i)), t("dh_prev", (1, b, h)),
                t("dc_prev", (1, b, h))]
    else:
        outs = [t(n, (steps, b, h)) for n in ("y", "output_h", "output_c", "i", "j", "f", "o", "tanhc")]
    return Graph("lstm", ts, [Op("rnn", typ, ins, outs, {"time_major": True})], ins[:3], outs, [], b, "float16", True)


def test_the_recurrent_kernel_model_prices_sequential_steps_and_tuning_sticks() -> None:
    soc = load_soc("Ascend910B2")
    measure = simulator_measure(soc)
    t16, t32 = (price(describe(g, g.ops[0]), soc, None, measure) for g in (_lstm_graph(16), _lstm_graph(32)))
    # the steps run one after the other (one launch per operator): twice the steps, twice the time less a launch
    assert t32 == pytest.approx(2 * t16 - soc.launch_us, rel=1e-9)
    g = _lstm_graph(16)
    case = describe(g, g.ops[0])
    assert case.default.sim_op.m == 16 and case.default.sim_op.k == 64 + 128 and case.default.sim_op.n == 512
    res = tune_case(case, soc, budget=None)
    assert res.before_us == pytest.approx(t16)
    assert res.knowledge["kernel"]["op"] == "RecurrentMatMul"
    # a bank hit prices the stored tiling of the step's matmul, not CANN's default
    assert price(case, soc, res.knowledge, measure) == pytest.approx(res.after_us)
    grad = describe(*(lambda gg: (gg, gg.ops[0]))(_lstm_graph(16, "DynamicRNNGrad")))
    # the gradient also computes dw over all T*B rows once, beside its own step loop
    assert [type(o).__name__ for o in grad.default.extra_ops] == ["MatMul", "VectorOp"]


def test_a_torch_compiled_lstm_says_dynamo_declined_it(tmp_path: Path) -> None:
    model = torch.nn.LSTM(11, 13)      # sizes no other test uses: the warning is once per module
    be = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    with pytest.warns(UserWarning, match=r"did not capture LSTM\(11, 13\): dynamo declines RNN, GRU and LSTM"):
        torch.compile(model, backend=be)(torch.randn(4, 2, 11))
    assert be.graphs == []             # it really never reached the backend


def test_backend_by_name_says_it_too_in_a_fresh_process(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = ("import torch, aoe.torch\n"      # aoe imported before dynamo is loaded, then the backend by name
              "torch.compile(torch.nn.GRU(5, 7), backend='aoe')(torch.randn(3, 2, 5))\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "did not capture GRU(5, 7): dynamo declines RNN, GRU and LSTM" in r.stderr


def test_tune_reaches_the_recurrent_model_dynamo_declines(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Seq()
    r = aoe.torch.tune(model, (torch.randn(2, 5, 12),), loss_fn=lambda o: o.sum(), mode="op", **frontend_options(tmp_path, BUDGET))
    tuned = {op["op_type"] for op in r.section["repo_modified_operators"]}
    assert RECURRENT <= tuned, tuned   # every recurrent operator was tuned and added to the bank
    r2 = aoe.torch.tune(model, (torch.randn(2, 5, 12),), loss_fn=lambda o: o.sum(), mode="op", **frontend_options(tmp_path, BUDGET))
    assert r2.section["repo_summary"]["repo_add_num"] == 0 and r2.section["repo_summary"]["repo_hit_num"] > 0


# ---- item 4: every optimizer implementation --------------------------------------------------------

def _compiled_step(tmp_path: Path, cls, **kw):
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    model(torch.randn(4, 16)).sum().backward()
    opt = cls(model.parameters(), lr=1e-3, **kw)
    opt.step()                          # the state exists: the steady-state step is compiled
    be = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # dynamo's note on the profiler markers
        torch.compile(opt.step, backend=be)()
    (g,) = be.graphs
    return g


@pytest.mark.parametrize("cls,kw,apply", [
    ("Adam", {}, "ApplyAdamD"),                      # the stock step: foreach is off for CPU tensors
    ("Adam", {"foreach": False}, "ApplyAdamD"),
    ("Adam", {"foreach": True}, "ApplyAdamD"),
    ("Adam", {"weight_decay": 0.01}, "ApplyAdamD"),
    ("AdamW", {}, "ApplyAdamD"),
    ("AdamW", {"foreach": True}, "ApplyAdamD"),
    ("SGD", {"momentum": 0.9}, "ApplyMomentum"),
    ("SGD", {"momentum": 0.9, "foreach": True}, "ApplyMomentum"),
    ("SGD", {"momentum": 0.9, "nesterov": True}, "ApplyMomentum"),
])
def test_every_compiled_optimizer_implementation_becomes_the_apply_operator(tmp_path: Path, cls, kw, apply) -> None:
    g = _compiled_step(tmp_path, getattr(torch.optim, cls), **kw)
    ops = [op for op in g.ops if op.type == apply]
    assert len(ops) == 4 and not g.unsupported, g.op_counts()
    # one per parameter, on the parameters themselves (AdamW: their decayed values, a Muls each)
    shapes = sorted(g.tensors[op.inputs[0]].shape for op in ops)
    assert shapes == [(4,), (4, 8), (8,), (8, 16)]
    other = set(g.op_counts()) - {apply, "Muls", "Add"}
    assert not other, g.op_counts()    # nothing of the step is left elementwise but AdamW's decay / an L2 term
    assert unmodelled(g) == []


def test_tune_maps_every_optimizer_implementation_by_type() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    x = torch.randn(4, 16)
    for opt, apply in ((torch.optim.Adam(model.parameters(), fused=True), "ApplyAdamD"),
                       (torch.optim.AdamW(model.parameters(), foreach=False), "ApplyAdamD"),
                       (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), "ApplyMomentum"),
                       (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, fused=True), "ApplyMomentum")):
        g = aoe.torch.capture_train_step(model, (x,), optimizer=opt)
        assert g.op_counts()[apply] == 4 and unmodelled(g) == [], (opt, g.op_counts())


def test_a_compiled_fused_step_says_dynamo_declined_it(tmp_path: Path) -> None:
    model = torch.nn.Linear(5, 3)
    model(torch.randn(2, 5)).sum().backward()
    opt = torch.optim.AdamW(model.parameters(), fused=True)
    be = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    with pytest.warns(UserWarning, match="fused optimizer step"):
        torch.compile(opt.step, backend=be)()


# ---- item 7: coverage --------------------------------------------------------------------------------

class _Coverage(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.drop = torch.nn.Dropout(0.1, inplace=True)

    def forward(self, ids, x):
        y = self.drop(self.fc(x))                                   # in-place dropout
        causal = torch.tril(torch.ones(8, 8))                       # GPT-2's mask
        y = y @ causal + torch.tril(y, diagonal=-1)
        shifted = ids.new_zeros(ids.shape)                          # T5's _shift_right
        shifted[..., 1:] = ids[..., :-1].clone()
        shifted[..., 0] = 3
        z = torch.zeros_like(y).scatter_add(1, shifted.clamp(0, 7), y)
        return (z + torch.zeros_like(y).scatter(1, shifted.clamp(0, 7), y)).sum()


def test_inplace_dropout_tril_and_scatters_convert_and_are_priced() -> None:
    g = aoe.torch.capture_train_step(_Coverage(), (torch.randint(0, 8, (4, 8)), torch.randn(4, 8)))
    counts = g.op_counts()
    assert not g.unsupported, g.unsupported
    for t in ("DropOutGenMask", "Tril", "ScatterElements", "StridedSliceAssignD"):
        assert counts.get(t), (t, counts)
    # the scatters' backward is a GatherElements, priced like the other operators
    assert counts.get("GatherElements"), counts
    assert not unmodelled(g), unmodelled(g)


# ---- item 5: the built-in bank switch ----------------------------------------------------------------

def test_the_builtin_switch_in_the_torch_and_keras_doors(tmp_path: Path) -> None:
    from aoe.tf import session

    be = aoe.torch.backend(mode="op", builtin=False, **frontend_options(tmp_path, BUDGET))
    assert be._settings(2)[0].builtin is False
    assert aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))._settings(2)[0].builtin is True
    with pytest.raises(AoeError, match="builtin must be True or False"):
        aoe.torch.backend(builtin="no")
    s = session.resolve({"aoe_mode": 2, "builtin": False}, env={})   # TuneCallback({...})'s options
    assert session.job_settings(s, warn=False).builtin is False
    with pytest.raises(AoeError, match="'builtin' must be True or False"):
        session.resolve({"aoe_mode": 2, "builtin": "off"}, env={})
    model = torch.nn.Linear(8, 4)
    r = aoe.torch.tune(model, (torch.randn(2, 8),), mode="op", builtin=False, **frontend_options(tmp_path, BUDGET))
    assert r.status == "tuning successful"
