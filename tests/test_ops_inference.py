"""Kernel models of common inference operators (BNInfer, LRN, activations, Resize, ...) and the naming
of every operator tuning cannot price: the job's console and log, and `aoe graph`."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import aoe.graph
from aoe.opat import apply_bank
from aoe.ops import describe
from aoe.ops.coverage import format_counts, skipped_log_path, unmodelled, write_skipped_log
from aoe.sim import VectorOp, simulate

SOCS = ("Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend310P3")

UNARY = ("HardSigmoid", "HardSwish", "Swish", "Softplus", "Elu", "Mish", "Sin", "Floor", "Sign", "Softsign")
BINARY = ("FloorMod", "PRelu", "HardSwishGrad", "HardSigmoidGrad", "SoftplusGrad", "EluGrad", "ErfGrad",
          "SinGrad", "MishGrad", "SoftsignGrad", "AbsGrad", "LeakyReluGrad", "SqrtGrad")
SMALL, LARGE = (8, 128, 56, 56), (32, 128, 56, 56)


def _ops(shape: tuple[int, ...]) -> list[VectorOp]:
    n, c, h, w = shape
    out = [VectorOp("BNInfer", shape), VectorOp("LRN", shape, ksize=(5, 1)),
           VectorOp("ResizeNearestNeighborV2", (n, c, 2 * h, 2 * w), ksize=(h, w)),
           VectorOp("ResizeBilinearV2", (n, c, 2 * h, 2 * w), ksize=(h, w)),
           VectorOp("ArgMaxV2", (n * 1024, 1000), axes=(1,))]
    out += [VectorOp(t, shape) for t in UNARY + BINARY + ("MaximumGrad", "PReluGrad")]
    out.append(VectorOp("LRNGrad", shape, ksize=(5, 1)))
    return out


@pytest.mark.parametrize("soc", SOCS)
def test_each_new_model_prices_finitely_and_scales_with_bytes(soc: str) -> None:
    for small, large in zip(_ops(SMALL), _ops(LARGE)):
        rs, rl = simulate(soc, small), simulate(soc, large)
        assert math.isfinite(rs.time_us) and rs.time_us > 0, (soc, small.op_type)
        assert math.isfinite(rl.time_us) and rl.time_us > rs.time_us, (soc, small.op_type)
        # 4x the data: 4x the bytes (BNInfer's per-channel parameters do not grow with the batch)
        assert rl.hbm_bytes == pytest.approx(4 * rs.hbm_bytes, rel=0.01), (soc, small.op_type)
        assert rl.time_us > 2 * rs.time_us, (soc, small.op_type, rs.time_us, rl.time_us)


def test_byte_counts_are_the_tensors_moved() -> None:
    n, c, h, w = SMALL
    e = n * c * h * w
    bn = simulate("Ascend910B2", VectorOp("BNInfer", SMALL))
    assert bn.hbm_bytes == 2 * e * 2 + 4 * c * 4          # x in, y out (fp16), 4 fp32 channel vectors
    lrn = simulate("Ascend910B2", VectorOp("LRN", SMALL, ksize=(5, 1)))
    assert lrn.hbm_bytes == 2 * e * 2                     # the window's halo re-reads hit L2, not counted
    up = simulate("Ascend910B2", VectorOp("ResizeNearestNeighborV2", (n, c, 2 * h, 2 * w), ksize=(h, w)))
    assert up.hbm_bytes == e * 2 + 4 * e * 2              # the small input once, the 4x output once


def test_lrn_window_and_bilinear_cost_more_vector_work() -> None:
    def vec(op: VectorOp) -> float:
        return simulate("Ascend910A", op).busy_us["Vector"]

    assert vec(VectorOp("LRN", LARGE, ksize=(9, 1))) > vec(VectorOp("LRN", LARGE, ksize=(3, 1)))
    n, c, h, w = LARGE
    near = VectorOp("ResizeNearestNeighborV2", (n, c, 2 * h, 2 * w), ksize=(h, w))
    lin = VectorOp("ResizeBilinearV2", (n, c, 2 * h, 2 * w), ksize=(h, w))
    assert vec(lin) > vec(near)


def _patterns(path: Path) -> Path:
    """One small ONNX graph with the layer patterns of common CNNs that used to be skipped."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def z(name: str, shape: list[int]) -> object:
        return numpy_helper.from_array(np.zeros(shape, np.float32), name)

    inits = [z("cw", [16, 3, 3, 3]), z("s", [16]), z("b", [16]), z("m", [16]), z("v", [16]), z("gw", [32, 4, 3, 3]),
             z("tw", [32, 16, 2, 2]), z("slope", [16, 1, 1]), z("in_s", [16]), z("in_b", [16]),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([], np.float32), "roi")]
    nodes = [helper.make_node("Conv", ["x", "cw"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("LRN", ["r"], ["l"], size=5, name="lrn"),
             helper.make_node("Conv", ["l", "gw"], ["g"], group=4, pads=[1, 1, 1, 1], name="gconv"),
             helper.make_node("HardSwish", ["g"], ["hs"], name="hswish"),
             helper.make_node("HardSigmoid", ["hs"], ["hg"], name="hsig"),
             helper.make_node("ConvTranspose", ["hg", "tw"], ["t"], strides=[2, 2], name="deconv"),
             helper.make_node("Resize", ["t", "roi", "scales"], ["rz"], mode="nearest", name="up_nearest"),
             helper.make_node("Resize", ["rz", "roi", "scales"], ["rl"], mode="linear", name="up_linear"),
             helper.make_node("InstanceNormalization", ["rl", "in_s", "in_b"], ["inorm"], name="inorm"),
             helper.make_node("PRelu", ["inorm", "slope"], ["pr"], name="prelu"),
             helper.make_node("Softplus", ["pr"], ["y"], name="softplus")]
    g = helper.make_graph(nodes, "patterns", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("soc", SOCS)
def test_cnn_layer_patterns_are_all_priced(tmp_path: Path, soc: str) -> None:
    graph = aoe.graph.load(str(_patterns(tmp_path / "p.onnx")))
    assert not graph.unsupported
    types = {op.type for op in graph.ops}
    assert {"BNInfer", "LRN", "ResizeNearestNeighborV2", "ResizeBilinearV2", "InstanceNorm", "Conv2DTranspose",
            "HardSwish", "PRelu"} <= types
    priced, skipped = apply_bank(graph, soc, None, builtin=False)
    assert skipped == []
    assert len(priced) == len(graph.ops) and all(math.isfinite(o.default_us) and o.default_us > 0 for o in priced)
    assert unmodelled(graph) == []


@pytest.mark.parametrize("model", ["patterns", "blocks"])
def test_training_graphs_of_the_patterns_are_complete_and_priced(tmp_path: Path, model: str) -> None:
    if model == "patterns":
        path = _patterns(tmp_path / "p.onnx")
    else:
        path = _blocks(tmp_path / "b.onnx")
    graph = aoe.graph.load(str(path), training=True)
    assert graph.unsupported == []          # every forward operator has a gradient rule
    grads = {op.type for op in graph.ops}
    if model == "patterns":
        assert {"LRNGrad", "ResizeNearestNeighborV2Grad", "ResizeBilinearV2Grad", "InstanceNormGrad",
                "HardSwishGrad", "HardSigmoidGrad", "SoftplusGrad", "BNTrainingUpdateGrad"} <= grads
    else:
        assert {"GroupNormGrad", "DepthToSpace", "SpaceToDepth"} <= grads
    for soc in SOCS:
        priced, skipped = apply_bank(graph, soc, None, builtin=False)
        assert skipped == [] and all(math.isfinite(o.default_us) and o.default_us > 0 for o in priced)


def test_resize_output_is_its_main_shape_and_lrn_takes_its_window(tmp_path: Path) -> None:
    graph = aoe.graph.load(str(_patterns(tmp_path / "p.onnx")))
    by_name = {op.name: op for op in graph.ops}
    up = describe(graph, by_name["up_nearest"]).default.sim_op
    assert up.shape == (1, 16, 128, 128) and up.ksize == (64, 64)   # output 2x of the 64x64 deconv output
    assert describe(graph, by_name["lrn"]).default.sim_op.ksize == (5, 1)
    deconv = describe(graph, by_name["deconv"]).default.sim_op
    assert deconv.op_type == "Conv2DBackpropInput" and deconv.x == (1, 16, 64, 64) and deconv.weight == (32, 16, 2, 2)


def _blocks(path: Path) -> Path:
    """SpaceToDepth, DepthToSpace (DCR, CRD) and GroupNormalization after a conv (so x needs a gradient)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    z = [numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in
         (("gs", [16]), ("gb", [16]), ("w", [64, 64, 1, 1]))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["cv"], name="conv"),
             helper.make_node("SpaceToDepth", ["cv"], ["s"], blocksize=2, name="s2d"),
             helper.make_node("DepthToSpace", ["s"], ["d"], blocksize=2, mode="DCR", name="dcr"),
             helper.make_node("DepthToSpace", ["d"], ["c"], blocksize=2, mode="CRD", name="crd"),
             helper.make_node("GroupNormalization", ["c", "gs", "gb"], ["y"], num_groups=4, name="gn")]
    g = helper.make_graph(nodes, "blocks", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], z)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


@pytest.mark.parametrize("soc", SOCS)
def test_block_rearrangements_and_group_norm(tmp_path: Path, soc: str) -> None:
    graph = aoe.graph.load(str(_blocks(tmp_path / "b.onnx")))
    ops = {op.name: op for op in graph.ops}
    assert graph.tensors[ops["crd"].outputs[0]].shape == (1, 16, 64, 64)
    views = {n: describe(graph, ops[n]).default.sim_op for n in ops}
    assert (views["s2d"].shape, views["s2d"].perm) == ((1, 64, 16, 2, 16, 2), (0, 3, 5, 1, 2, 4))
    assert (views["dcr"].shape, views["dcr"].perm) == ((1, 2, 2, 64, 16, 16), (0, 3, 4, 1, 5, 2))
    assert (views["crd"].shape, views["crd"].perm) == ((1, 16, 2, 2, 32, 32), (0, 1, 4, 2, 5, 3))
    assert (views["gn"].op_type, views["gn"].shape, views["gn"].axes) == ("LayerNorm", (1, 4, 16384), (2,))
    priced, skipped = apply_bank(graph, soc, None, builtin=False)
    assert skipped == [] and all(math.isfinite(o.default_us) and o.default_us > 0 for o in priced)


def test_conv_bninfer_relu_chain_is_priced_end_to_end(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from aoe.sgat.tune import prepare
    from aoe.soc import load_soc

    z = [numpy_helper.from_array(np.zeros(s, np.float32), n) for n, s in
         (("w", [32, 16, 3, 3]), ("s", [32]), ("b", [32]), ("m", [32]), ("v", [32]))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 28, 28])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 28, 28])], z)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "cbr.onnx")
    graph = aoe.graph.load(str(tmp_path / "cbr.onnx"))
    assert [op.type for op in graph.ops] == ["Conv2D", "BNInfer", "Relu"]
    for soc in SOCS:
        priced, skipped = apply_bank(graph, soc, None, builtin=False)
        assert skipped == [] and [o.op_type for o in priced] == ["Conv2D", "BNInfer", "Relu"]
    prep = prepare(graph, load_soc("Ascend910A"))
    assert prep.skipped == []
    tunable = [s for s in prep.subgraphs if s.tunable]
    assert len(tunable) == 1 and [op.type for op in tunable[0].kernels] == ["Conv2D", "BNInfer", "Relu"]


def test_zoo_inference_and_training_graphs_have_no_skipped_operator() -> None:
    for name in ("zoo:resnet50", "zoo:mobilenet_v2", "zoo:bert_base", "zoo:gpt2"):
        for training in (False, True):
            graph = aoe.graph.load(name, training=training)
            assert unmodelled(graph) == [], (name, training)


def test_skipped_log_names_every_operator(tmp_path: Path) -> None:
    entries = [{"op": "a/LRN_1", "op_type": "Foo", "reason": "no model"},
               {"op": "b\tbad\nname", "op_type": "Foo", "reason": "no model"},
               {"op": "c", "op_type": ["MatMulV2", "Add"], "reason": "x"}]
    assert format_counts(entries) == "Foo x2, MatMulV2+Add x1"
    path = skipped_log_path(tmp_path / "aoe_result_opat_20260101000000000_pid42.json")
    assert path.name == "aoe_skipped_opat_20260101000000000_pid42.log"
    write_skipped_log(path, entries)
    rows = [ln.split("\t") for ln in path.read_text().splitlines() if not ln.startswith("#")]
    assert [r[0] for r in rows] == ["a/LRN_1", "b\\tbad\\nname", "c"]   # control characters escaped: one line each
    assert [r[1] for r in rows] == ["Foo", "Foo", "MatMulV2+Add"]


def _unmodelled_graph(path: Path) -> Path:
    """A JSON graph: Relu, an ONNX op the importer keeps Opaque (Atan), and a CANN type with no kernel model."""
    import json

    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Atan", ["r"], ["a"], name="atan1"),
             helper.make_node("Relu", ["a"], ["y"], name="hyp")]
    g = helper.make_graph(nodes, "unmod", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path.with_suffix(".onnx"))
    data = json.loads(aoe.graph.load(str(path.with_suffix(".onnx"))).to_json())
    next(op for op in data["ops"] if op["name"] == "hyp")["type"] = "Hypot"   # a type nothing models
    path.write_text(json.dumps(data))
    return path


def test_aoe_graph_flags_unmodelled_operators(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from aoe.cli import main

    model = _unmodelled_graph(tmp_path / "u.json")
    assert main(["graph", str(model)]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("unmodelled:"))
    assert "2 operators" in line and "Hypot x1" in line and "Opaque(Atan) x1" in line
    assert "'hyp'" in out and "'atan1'" in out
    assert main(["graph", "zoo:mobilenet_v2"]) == 0
    assert "unmodelled: none" in capsys.readouterr().out


def test_job_console_and_log_name_each_skipped_operator(env: Path) -> None:
    import os

    import aoe.job
    from aoe.job.run import JobSpec, run_job

    model = _unmodelled_graph(env / "u.json")
    for mode, soc in ((2, "Ascend910B2"), (1, "Ascend910A")):
        work = env / f"work{mode}"
        work.mkdir()
        settings = aoe.job.settings_from_env(dict(os.environ), cwd=work)
        settings.progress = False
        res = run_job(JobSpec(mode=mode, model=str(model), soc=soc), settings, out=None)
        assert res.skipped_log is not None and res.skipped_log.parent == res.result_file.parent
        assert res.skipped_log.name == res.result_file.name.replace("aoe_result_", "aoe_skipped_").replace(
            ".json", ".log")
        rows = [ln.split("\t") for ln in res.skipped_log.read_text().splitlines() if not ln.startswith("#")]
        assert sorted((r[0], r[1]) for r in rows) == [("atan1", "Opaque(Atan)"), ("hyp", "Hypot")]
        text = "\n".join(res.summary_lines())
        assert "Opaque(Atan) x1" in text and "Hypot x1" in text and str(res.skipped_log) in text


# --- losses, GatherElements and SquaredDifference (issue 26: converted but skipped before) -----------------
def _graph(op_type: str, inputs: list[tuple], outputs: list[tuple], **attrs: object) -> aoe.graph.Graph:
    """One operator; tensors as (shape, dtype)."""
    from aoe.graph.ir import Graph, Op, Tensor

    tensors = {}
    for prefix, specs in (("in", inputs), ("out", outputs)):
        for i, (shape, dtype) in enumerate(specs):
            tensors[f"{prefix}{i}"] = Tensor(f"{prefix}{i}", tuple(shape), dtype, "ND",
                                             "input" if prefix == "in" else "activation")
    ins, outs = [f"in{i}" for i in range(len(inputs))], [f"out{i}" for i in range(len(outputs))]
    return Graph("g", tensors, [Op("op", op_type, ins, outs, dict(attrs))], ins, outs)


def _loss_graphs(n: int) -> dict[str, aoe.graph.Graph]:
    c, h = "float16", "int32"
    return {
        "SparseSoftmaxCrossEntropyWithLogits": _graph("SparseSoftmaxCrossEntropyWithLogits",
                                                      [((n, 1000), c), ((n,), h)], [((n,), c), ((n, 1000), c)]),
        "SoftmaxCrossEntropyWithLogits": _graph("SoftmaxCrossEntropyWithLogits", [((n, 1000), c), ((n, 1000), c)],
                                                [((n,), c), ((n, 1000), c)]),
        "NLLLoss": _graph("NLLLoss", [((n, 1000), c), ((n,), h), ((1000,), c)], [((), c), ((), c)], reduction=1),
        "NLLLossGrad": _graph("NLLLossGrad", [((n, 1000), c), ((), c), ((n,), h), ((1000,), c), ((), c)],
                              [((n, 1000), c)], reduction=1),
        "GatherElements": _graph("GatherElements", [((n, 1000), c), ((n, 256), h)], [((n, 256), c)], axis=1),
        "SquaredDifference": _graph("SquaredDifference", [((n, 64, 56, 56), c), ((1, 64, 1, 1), c)],
                                    [((n, 64, 56, 56), c)]),
    }


def test_losses_gather_elements_and_squared_difference_are_priced_and_tuned() -> None:
    """Every Keras classifier's loss, torch's NLLLoss pair, GatherElements and a decomposed norm's
    SquaredDifference have a kernel model: priced (more data, more time), none skipped, and tuned."""
    from aoe import opat

    small, large = _loss_graphs(32), _loss_graphs(1024)
    for name in small:
        cs, cl = describe(small[name], small[name].ops[0]), describe(large[name], large[name].ops[0])
        rs, rl = simulate("Ascend910B2", cs.default.sim_op), simulate("Ascend910B2", cl.default.sim_op)
        assert rs.valid and rl.valid and 0 < rs.time_us < rl.time_us and rs.hbm_bytes < rl.hbm_bytes, name
        assert unmodelled(small[name]) == [], name
        report = opat.tune_graph(small[name], "Ascend910B2", None, opat.OpatConfig(budget=opat.Budget(evaluations=200)))
        assert report.counters.total_num == 1, name   # a case, not a skipped operator
    # the cross-entropy is a softmax plus the label term: dearer than the softmax of the same logits
    xent = simulate("Ascend910B2", describe(large["SparseSoftmaxCrossEntropyWithLogits"],
                                            large["SparseSoftmaxCrossEntropyWithLogits"].ops[0]).default.sim_op)
    soft = simulate("Ascend910B2", VectorOp("SoftmaxV2", (1024, 1000), axes=(1,)))
    assert xent.time_us > soft.time_us
    # NLLLoss reads one 32-byte block per row, not the whole [N, C] input
    nll = simulate("Ascend910B2", describe(large["NLLLoss"], large["NLLLoss"].ops[0]).default.sim_op)
    assert nll.hbm_bytes < 1024 * 1000 * 2 / 10
