"""The PyTorch frontend: FX/ATen conversion, the torch.compile backend, and aoe.torch.tune.

Real models with random weights (nothing downloaded): ResNet-50 and Hugging Face
BertForSequenceClassification built from a small BertConfig. The ResNet-50 is not torchvision's:
torchvision cannot be installed here beside the CPU torch wheel (PyPI's torchvision fails to import,
"operator torchvision::nms does not exist"; the only matching build is a multi-gigabyte CUDA one), so
tests/torch_models.py writes torchvision's ResNet-50 v1.5 out by hand, and
test_resnet50_forward_macs_match_the_onnx_route checks it is that network (parameter count, state-dict
names, strides, MACs against the zoo's torchvision export). Tuning runs with a search budget of 2000
evaluations per case.
"""
from __future__ import annotations

import copy
import json
import logging
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest

from aoe.errors import AoeError
from conftest import frontend_options, import_extra

pytestmark = [pytest.mark.extra("torch"), pytest.mark.usefixtures("fresh_dynamo")]
torch = import_extra("torch", "torch")

import aoe.ops  # noqa: E402
import aoe.torch  # noqa: E402
from aoe.graph import load  # noqa: E402
from aoe.graph.fx import from_fx  # noqa: E402
from aoe.job.schema import validate  # noqa: E402
from torch_models import bert_config, resnet50  # noqa: E402

BUDGET = 2000


def _train(model, data, step, compiled_with=None, steps=None):
    """Adam training steps; returns the losses (compiled with `compiled_with` when given)."""
    mod = torch.compile(model, backend=compiled_with) if compiled_with is not None else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    losses = []
    for x, y in data[:steps]:
        opt.zero_grad()
        loss = step(mod, x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _resnet_case():
    torch.manual_seed(0)
    model = resnet50(num_classes=10)
    # small images keep the eager comparison cheap; every stage still has real spatial extent until layer4
    data = [(torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))) for _ in range(2)]
    return model, data, lambda m, x, y: torch.nn.functional.cross_entropy(m(x), y)


def _bert_case():
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification(bert_config())
    data = [(torch.randint(0, 1000, (8, 32)), torch.randint(0, 2, (8,))) for _ in range(2)]
    return model, data, lambda m, x, y: m(input_ids=x, labels=y).loss


def _describable(graph) -> None:
    """Every operator the converter emits is accepted by the tuner's catalogue, or is one the simulator
    has no kernel model for (reported and skipped, as for ONNX models)."""
    for op in graph.ops:
        if op.is_view:
            continue
        assert op.type != "Opaque", (op.name, op.attrs)
        try:
            aoe.ops.describe(graph, op)
        except aoe.ops.Unsupported as exc:
            assert "no kernel model" in str(exc), (op.name, op.type, exc)


# ---- the converter -----------------------------------------------------------------------------------

def test_missing_torch_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from aoe.graph.fx.convert import import_torch

    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(AoeError, match=r"pip install 'aoe\[torch\]'"):
        import_torch()
    with pytest.raises(AoeError, match=r"aoe\[torch\]"):
        aoe.torch.backend(mode="op")


def _export(module, *args):
    from torch._functorch.aot_autograd import aot_export_module

    gm, sig = aot_export_module(module, args, trace_joint=False)
    return gm, {k: "param" for k in sig.inputs_to_parameters}


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(64, 192)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 16, 3, 4, 16).permute(2, 0, 3, 1, 4)
        s = torch.softmax(q @ k.transpose(-1, -2) / 4.0, dim=-1)
        return ((s @ v).transpose(1, 2).reshape(2, 16, 64).cumsum(1),)


def test_matmuls_fold_transposes_and_unknown_ops_are_opaque_with_a_warning(caplog) -> None:
    gm, kinds = _export(_Attention(), torch.randn(2, 16, 64))
    with caplog.at_level(logging.WARNING, logger="aoe.graph"):
        g = from_fx(gm, "attn", kinds)
    mms = [op for op in g.ops if op.type in ("MatMulV2", "BatchMatMulV2")]
    assert [op.type for op in mms] == ["MatMulV2", "BatchMatMulV2", "BatchMatMulV2"]
    assert mms[0].attrs["transpose_x2"] and mms[0].attrs["has_bias"]     # x @ W^T + b, W^T folded
    assert g.op_counts()["SoftmaxV2"] == 1
    assert g.tensors[mms[0].inputs[1]].kind == "param"
    assert [u["onnx_type"] for u in g.unsupported] == ["aten.cumsum.default"]
    assert "aten.cumsum.default" in caplog.text
    assert g.summary()["total_macs"] == 2 * 16 * 64 * 192 + 2 * (2 * 4 * 16 * 16 * 16)


def test_symbolic_shapes_are_reported_naming_the_tensor() -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda x, w: torch.relu(x @ w), tracing_mode="symbolic")(torch.randn(8, 16), torch.randn(16, 4))
    with pytest.raises(AoeError, match=r"tensor 'x_1' has a symbolic dimension 0.*dynamic=False"):
        from_fx(gm, "dyn")


def test_resnet50_forward_macs_match_the_onnx_route() -> None:
    """tests/torch_models.py's ResNet-50 is torchvision's ResNet-50 v1.5, converted like its ONNX export."""
    torch.manual_seed(0)
    model = resnet50().eval()
    # torchvision's resnet50(): 25,557,032 parameters, 320 state-dict entries under these names
    assert sum(p.numel() for p in model.parameters()) == 25_557_032
    state = model.state_dict()
    assert len(state) == 320 and state["layer1.0.downsample.0.weight"].shape == (256, 64, 1, 1)
    assert state["layer4.2.conv3.weight"].shape == (2048, 512, 1, 1) and state["fc.weight"].shape == (1000, 2048)
    # v1.5: a stage's first Bottleneck strides in its 3x3 convolution (v1 strides in the first 1x1)
    assert [(b.conv1.stride, b.conv2.stride) for b in (model.layer1[0], model.layer2[0], model.layer4[0])] == \
        [((1, 1), (1, 1)), ((1, 1), (2, 2)), ((1, 1), (2, 2))]
    g = aoe.torch.capture(model, (torch.randn(1, 3, 224, 224),))
    onnx = load("zoo:resnet50", "input:1,3,224,224")
    # the zoo's export of torchvision's model: the same MACs (v1 would be 5.7% fewer) and conv shapes
    assert g.summary()["total_macs"] == onnx.summary()["total_macs"] == 4_089_184_256
    for t in ("Conv2D", "BNInfer", "Relu", "MaxPool", "MatMulV2"):
        assert g.op_counts()[t] == onnx.op_counts()[t], t

    def convs(graph) -> Counter:
        return Counter((graph.tensors[op.inputs[1]].shape, tuple(op.attrs["strides"])) for op in graph.ops
                       if op.type == "Conv2D")

    assert convs(g) == convs(onnx)


@pytest.mark.extra("torch-test")
def test_bert_base_forward_macs_match_the_onnx_route() -> None:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig()).eval()        # bert-base: 12 layers, 768 hidden
    g = aoe.torch.capture(model, (torch.randint(0, 1000, (1, 128)),))
    onnx = load("zoo:bert_base", "input_ids:1,128;attention_mask:1,128")
    assert g.summary()["total_macs"] == pytest.approx(onnx.summary()["total_macs"], rel=0.02)
    for t in ("LayerNorm", "Gelu", "SoftmaxV2", "Tanh"):
        assert g.op_counts()[t] == onnx.op_counts()[t], t


@pytest.mark.extra("torch-test")
def test_bert_training_step_has_the_backward_ops_of_the_onnx_route() -> None:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=2, attn_implementation="eager"))
    step = aoe.torch.capture_train_step(model, (torch.randint(0, 1000, (1, 128)),))
    # the ONNX zoo model has 12 layers: compare per-layer counts of the gradient operators
    onnx = load("zoo:bert_base", "input_ids:1,128;attention_mask:1,128", training=True)
    got, want = step.op_counts(), onnx.op_counts()
    for t, per_layer in (("LayerNormGrad", 2), ("GeluGrad", 1), ("SoftmaxGrad", 1), ("LayerNorm", 2)):
        assert got[t] - want[t] == per_layer * (2 - 12), (t, got[t], want[t])
    assert {"EmbeddingDenseGrad", "TanhGrad", "ApplyAdamD"} <= set(got) and {"TanhGrad", "ApplyAdamD"} <= set(want)
    _describable(step)


# ---- torch.compile(backend="aoe") -----------------------------------------------------------------------

def test_backend_entry_point_is_registered() -> None:
    from torch._dynamo.backends.registry import lookup_backend

    assert lookup_backend("aoe") is aoe.torch._dynamo_backend


def test_without_aoe_mode_the_graph_runs_untouched_and_nothing_is_written(env: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 14 * 14, 10))
    data = [(torch.randn(8, 3, 16, 16), torch.randint(0, 10, (8,))) for _ in range(2)]
    step = lambda m, x, y: torch.nn.functional.cross_entropy(m(x), y)  # noqa: E731
    eager = copy.deepcopy(model)
    assert _train(model, data, step, compiled_with="aoe") == _train(eager, data, step)
    assert not any((env / "bank").iterdir())
    assert not list(env.glob("aoe_result_*")) and not (env / "wp").exists()


def test_resnet50_training_under_aoe_mode_2_tunes_into_the_bank_and_then_hits(env: Path, monkeypatch,
                                                                              capsys) -> None:
    monkeypatch.setenv("AOE_MODE", "2")
    monkeypatch.setenv("ASCEND_WORK_PATH", str(env / "wp"))
    (env / "wp").mkdir()
    model, data, step = _resnet_case()
    eager = copy.deepcopy(model)
    twin = copy.deepcopy(model)
    be = aoe.torch.backend()                                   # everything from the environment
    losses = _train(model, data, step, compiled_with=be)
    assert losses == _train(eager, data, step)                 # tuning does not change the numerics
    out = capsys.readouterr().out
    assert "in tune mode, training graph handled by tools." in out and "Aoe tuning graph." in out
    files = sorted((env / "wp").glob("aoe_result_opat_*_pid*.json"))
    assert files == [be.result_file]                           # one file: the forward and backward tasks
    result = json.loads(files[0].read_text())
    validate(result, "opat")
    assert [r.status for r in be.results] == ["tuning successful"] * 2
    assert [t[0]["basic"]["tuning_name"] for t in result.values()] == ["torch_graph1_forward", "torch_graph1_backward"]
    assert all(t[1]["OPAT"]["repo_summary"]["repo_add_num"] > 0 for t in result.values())
    assert [p for p in (env / "bank" / "Ascend910B2").rglob("*") if p.is_file()]

    # the same operator types as the ONNX route's training graph (forward, backward, same counts)
    fw, bw = (g.op_counts() for g in be.graphs)
    onnx = load("zoo:resnet50", "input:8,3,224,224", training=True).op_counts()
    for t in ("Conv2D", "BNTrainingReduce", "BNTrainingUpdate", "Relu", "MaxPool", "ReduceMeanD"):
        assert fw[t] == onnx[t], t
    for t in ("Conv2DBackpropInput", "Conv2DBackpropFilter", "BNTrainingUpdateGrad", "BNTrainingReduceGrad",
              "ReluGrad", "MaxPoolGrad"):
        assert bw[t] == onnx[t], t
    for g in be.graphs:
        assert not g.unsupported
        _describable(g)

    torch._dynamo.reset()
    _train(twin, data, step, compiled_with="aoe", steps=1)     # a second run, by name: all from the bank
    files2 = sorted((env / "wp").glob("aoe_result_opat_*_pid*.json"))
    assert len(files2) == 2
    new = json.loads([f for f in files2 if f != files[0]][0].read_text())
    validate(new, "opat")
    assert len(new) == 2
    for t in new.values():
        summary = t[1]["OPAT"]["repo_summary"]
        assert summary["repo_add_num"] == 0 and summary["repo_hit_num"] > 0


@pytest.mark.extra("torch-test")
def test_bert_training_under_the_backend_equals_eager_and_every_op_is_tunable(tmp_path: Path) -> None:
    """Hugging Face BertForSequenceClassification under torch.compile(backend=aoe.torch.backend(mode="op")):
    eager's losses, every operator tunable, the op bank written; a fresh compile on the same bank adds
    nothing and finds every case the first run stored."""
    from aoe.bank.store import OpBank

    model, data, step = _bert_case()
    eager, twin = copy.deepcopy(model), copy.deepcopy(model)
    be = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    assert _train(model, data, step, compiled_with=be) == _train(eager, data, step)
    assert [r.tuning_name for r in be.results] == ["torch_graph1_forward", "torch_graph1_backward"]
    assert all(r.status == "tuning successful" for r in be.results)
    validate(json.loads(be.result_file.read_text()), "opat")
    fw, bw = be.graphs
    assert {"MatMulV2", "LayerNorm", "Gelu", "SoftmaxV2", "BatchMatMulV2"} <= set(fw.op_counts())
    assert {"LayerNormGrad", "GeluGrad", "SoftmaxGrad", "EmbeddingDenseGrad", "BatchMatMulV2"} <= set(bw.op_counts())
    for g in be.graphs:
        assert not g.unsupported
        _describable(g)
    first = [r.section["repo_summary"] for r in be.results]
    added = sum(s["repo_add_num"] for s in first)
    assert first[0]["repo_add_num"] > 0 and first[0]["repo_hit_num"] == 0
    bank = OpBank(tmp_path / "bank" / "Ascend910B2", "Ascend910B2")
    assert {"MatMulV2", "BatchMatMulV2"} <= set(bank.op_types()) and len(list(bank.entries())) == added

    torch._dynamo.reset()                                  # a fresh compile, as a new training run does
    be2 = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    _train(twin, data, step, compiled_with=be2, steps=1)
    assert [r.tuning_name for r in be2.results] == ["torch_graph1_forward", "torch_graph1_backward"]
    assert be2.result_file != be.result_file
    for s1, s2 in zip(first, (r.section["repo_summary"] for r in be2.results)):
        assert s2["repo_add_num"] == 0 and s2["repo_hit_num"] == s1["repo_add_num"] + s1["repo_hit_num"] > 0
    assert len(list(bank.entries())) == added


@pytest.mark.extra("torch-test")
def test_bert_under_subgraph_tuning_on_ascend910a(tmp_path: Path) -> None:
    model, data, step = _bert_case()
    be = aoe.torch.backend(mode=1, soc_version="Ascend910A", **frontend_options(tmp_path, BUDGET))
    _train(model, data, step, compiled_with=be, steps=1)
    assert [r.kind for r in be.results] == ["sgat", "sgat"]
    validate(json.loads(be.result_file.read_text()), "sgat")
    assert be.results[0].section["repo_summary"]["repo_add_num"] > 0
    assert any((tmp_path / "bank").rglob("*"))


class _Breaks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(32, 64)
        self.b = torch.nn.Linear(64, 8)

    def forward(self, x):
        h = torch.relu(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h).sum()


def test_a_graph_break_tunes_each_graph_and_is_reported(tmp_path: Path) -> None:
    be = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    m = _Breaks()
    with pytest.warns(UserWarning, match="graph break"):
        torch.compile(m, backend=be)(torch.randn(16, 32)).backward()
    names = [r.tuning_name for r in be.results]
    assert names == ["torch_graph1_forward", "torch_graph2_forward", "torch_graph2_backward",
                     "torch_graph1_backward"]
    assert [g.op_counts().get("MatMulV2") for g in be.graphs[:2]] == [1, 1]
    validate(json.loads(be.result_file.read_text()), "opat")


def test_symbolic_recompilation_is_reported_and_still_runs(tmp_path: Path) -> None:
    be = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    f = torch.compile(lambda x: torch.relu(x @ x.T), backend=be, dynamic=True)
    x = torch.randn(8, 16)
    with pytest.warns(UserWarning, match=r"not tuned: .*symbolic"):
        y = f(x)
    assert torch.equal(y, torch.relu(x @ x.T))
    assert be.results == [] and len(be.skipped) == 1


def test_a_new_static_shape_is_a_new_graph_tuned_into_the_bank(tmp_path: Path) -> None:
    """torch.compile(..., dynamic=False): a call at a new shape recompiles, and that static graph is
    tuned as a graph of its own (its own task, the new shape's cases in the bank). Left to dynamo's
    default, the recompilation is symbolic instead, and reported as not tuned."""
    from aoe.bank.store import OpBank

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16))
    be = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    f = torch.compile(model, backend=be, dynamic=False)
    with torch.no_grad():
        for n in (16, 48):
            x = torch.randn(n, 64)
            assert torch.equal(f(x), model(x))
    assert [r.tuning_name for r in be.results] == ["torch_graph1_inference", "torch_graph2_inference"]
    assert not be.skipped and all(r.status == "tuning successful" for r in be.results)
    assert [[g.tensors[t].shape for t in g.inputs if g.tensors[t].kind == "input"] for g in be.graphs] == \
        [[(16, 64)], [(48, 64)]]
    assert [r.section["repo_summary"]["repo_hit_num"] for r in be.results] == [0, 0]   # nothing shared
    result = json.loads(be.result_file.read_text())
    validate(result, "opat")
    assert [t[0]["basic"]["tuning_name"] for t in result.values()] == ["torch_graph1_inference",
                                                                      "torch_graph2_inference"]
    bank = OpBank(tmp_path / "bank" / "Ascend910B2", "Ascend910B2")
    mm = sorted((e.info_dict["m"], e.info_dict["k"], e.info_dict["n"]) for e in bank.entries("MatMulV2"))
    assert mm == [(16, 64, 128), (16, 128, 16), (48, 64, 128), (48, 128, 16)]

    torch._dynamo.reset()
    be_default = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    g = torch.compile(model, backend=be_default)
    with torch.no_grad():
        g(torch.randn(16, 64))
        with pytest.warns(UserWarning, match=r"torch_graph2_inference is not tuned: .*symbolic"):
            g(torch.randn(48, 64))
    assert [r.tuning_name for r in be_default.results] == ["torch_graph1_inference"]
    assert len(be_default.skipped) == 1


def test_a_tune_ops_file_limits_what_the_backend_tunes(tmp_path: Path) -> None:
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps({"tune_ops_type": ["MatMulV2"]}))
    be = aoe.torch.backend(mode="op", aoe_config_file=str(ops), **frontend_options(tmp_path, BUDGET))
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16))
    torch.compile(model, backend=be)(torch.randn(32, 64)).sum().backward()
    for r in be.results:
        tuned = {rec.op_type for rec in r.report.records if rec.outcome is not None}
        assert tuned == {"MatMulV2"}, (r.tuning_name, tuned)
    assert sum(r.section["repo_summary"]["total_num"] for r in be.results) >= 3   # 2 forward + backward matmuls


def test_options_are_checked() -> None:
    with pytest.raises(AoeError, match="unknown option"):
        aoe.torch.backend(mod="op")
    be = aoe.torch.backend(env={"AOE_MODE": "3"})
    with pytest.raises(AoeError, match="AOE_MODE='3'"):
        be.mode()


# ---- aoe.torch.tune ------------------------------------------------------------------------------

def test_tune_a_training_step_without_a_loop(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                                torch.nn.Linear(128, 10))
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    before = [p.detach().clone() for p in model.parameters()]
    r = aoe.torch.tune(model, (x,), loss_fn=torch.nn.functional.cross_entropy, targets=(y,), mode="op",
                       **frontend_options(tmp_path, BUDGET))
    assert r.status == "tuning successful" and r.section["repo_summary"]["repo_add_num"] > 0
    validate(json.loads(Path(r.result_file).read_text()), "opat")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # nothing was trained
    r2 = aoe.torch.tune(model, (x,), loss_fn=torch.nn.functional.cross_entropy, targets=(y,), mode="op",
                        **frontend_options(tmp_path, BUDGET))
    assert r2.section["repo_summary"]["repo_add_num"] == 0


def test_train_step_optimizers() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    x = torch.randn(16, 64)
    adam = aoe.torch.capture_train_step(model, (x,))
    assert adam.op_counts()["ApplyAdamD"] == 4
    adamw = aoe.torch.capture_train_step(model, (x,), optimizer=torch.optim.AdamW(model.parameters()))
    assert adamw.op_counts()["ApplyAdamD"] == 4 and adamw.op_counts()["Muls"] == adam.op_counts().get("Muls", 0) + 4
    sgd = aoe.torch.capture_train_step(model, (x,), optimizer=torch.optim.SGD(model.parameters(), lr=0.1,
                                                                              momentum=0.9))
    assert "ApplyAdamD" not in sgd.op_counts() and not sgd.unsupported
    # SGD with momentum is CANN's ApplyMomentum per parameter (issue 26)
    assert sgd.op_counts()["ApplyMomentum"] == 4
    for g in (adam, adamw, sgd):
        _describable(g)
    with pytest.raises(AoeError, match="no trainable parameters"):
        aoe.torch.capture_train_step(torch.nn.ReLU(), (x,))


def test_a_compiled_adam_step_becomes_apply_adam_per_parameter(tmp_path: Path) -> None:
    model = torch.nn.Linear(16, 8)
    model(torch.randn(4, 16)).sum().backward()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    be = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # dynamo's note that it ignores the profiler markers
        torch.compile(opt.step, backend=be)()
    (g,) = be.graphs
    assert g.op_counts() == {"ApplyAdamD": 2}, g.op_counts()
    adam = [op for op in g.ops if op.type == "ApplyAdamD"]
    assert sorted(g.tensors[op.inputs[0]].shape for op in adam) == [(8,), (8, 16)]
    assert all(g.tensors[op.inputs[0]].kind == "param" for op in adam)
    _describable(g)


def test_other_foreach_steps_map_per_tensor() -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    def step(p1, p2, g1, g2):
        return torch._foreach_add(torch._foreach_mul([p1, p2], 0.9), [g1, g2], alpha=-0.1)

    gm = make_fx(step, tracing_mode="fake")(torch.zeros(4, 8), torch.zeros(8), torch.zeros(4, 8), torch.zeros(8))
    g = from_fx(gm, "sgd")
    assert g.op_counts() == {"Muls": 4, "Add": 2}      # mul per tensor, alpha * grad, add per tensor
    assert not g.unsupported
