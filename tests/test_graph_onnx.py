"""ONNX import: operator mapping and shapes (checked against onnx's reference runtime), static shapes,
the zoo's MAC counts, and untrusted input (missing, corrupt, cyclic, hostile files)."""
import json
import logging

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from aoe.cli import main as aoe_main
from aoe.errors import AoeError
from aoe.graph import Graph, load

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def make_model(nodes, inputs, outputs, inits=(), opset=17, name="t"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def save(tmp_path, model, name="m.onnx"):
    p = tmp_path / name
    p.write_bytes(model.SerializeToString())
    return p


def bare_tensor(name, dims, dtype=F):
    """An initializer with dims and type but no data (as in the zoo files)."""
    t = TensorProto()
    t.name, t.data_type = name, dtype
    t.dims.extend(dims)
    return t


def init(name, shape, dtype=np.float32, value=None):
    arr = np.asarray(value, dtype=dtype) if value is not None else np.random.rand(*shape).astype(dtype)
    return numpy_helper.from_array(arr, name)


def check_against_reference(tmp_path, model, feeds, compute_dtype="float32"):
    """Import the model and compare every graph output's shape with onnx's reference runtime."""
    ref = ReferenceEvaluator(model)
    results = ref.run(None, feeds)
    shapes = ";".join(f"{k}:{','.join(map(str, v.shape))}" for k, v in feeds.items())
    g = load(save(tmp_path, model), shapes, compute_dtype=compute_dtype)
    for out, val in zip([o.name for o in model.graph.output], results):
        assert g.tensors[out].shape == val.shape, out
    return g


# ---- operator coverage ---------------------------------------------------------------------------
def test_conv_family_shapes_and_attrs(tmp_path):
    x = helper.make_tensor_value_info("x", F, ["N", 8, 17, 19])
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 2, 1, 0], dilations=[1, 2], name="conv"),
        helper.make_node("Conv", ["c1", "wd"], ["c2"], group=16, pads=[1, 1, 1, 1], name="dw"),
        helper.make_node("Conv", ["c2", "wg"], ["c3"], group=4, auto_pad="SAME_UPPER", strides=[2, 2], name="grouped"),
        helper.make_node("ConvTranspose", ["c3", "wt"], ["c4"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1], name="deconv"),
        helper.make_node("BatchNormalization", ["c4", "s", "o", "m", "v"], ["bn"], name="bn"),
        helper.make_node("Relu", ["bn"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
        helper.make_node("AveragePool", ["mp"], ["ap"], kernel_shape=[2, 2], strides=[1, 1]),
        helper.make_node("GlobalAveragePool", ["ap"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fw", "fb"], ["y"], transB=1),
    ]
    inits = [init("w1", (16, 8, 3, 3)), init("b1", (16,)), init("wd", (16, 1, 3, 3)), init("wg", (8, 4, 3, 3)),
             init("wt", (8, 6, 4, 4)), init("s", (6,)), init("o", (6,)), init("m", (6,)), init("v", (6,), value=np.ones(6)),
             init("fw", (5, 6)), init("fb", (5,))]
    model = make_model(nodes, [x], [helper.make_tensor_value_info("y", F, None),
                                     helper.make_tensor_value_info("c4", F, None),
                                     helper.make_tensor_value_info("mp", F, None)], inits)
    g = check_against_reference(tmp_path, model, {"x": np.random.rand(2, 8, 17, 19).astype(np.float32)})
    ops = {o.name: o for o in g.ops}
    conv = ops["conv"]
    assert conv.type == "Conv2D" and conv.attrs["strides"] == [2, 2] and conv.attrs["pads"] == [1, 1, 2, 0]
    assert conv.attrs["dilations"] == [1, 2] and conv.attrs["kernel"] == [3, 3] and conv.attrs["has_bias"]
    assert ops["dw"].attrs["groups"] == 16 and ops["grouped"].attrs["groups"] == 4
    assert ops["deconv"].type == "Conv2DTranspose"
    assert ops["bn"].type == "BNInfer"
    assert g.tensors["m"].kind == "const" and g.tensors["s"].kind == "param"  # running stats are not trained
    assert g.tensors["x"].format == "NCHW"
    types = [o.type for o in g.ops]
    assert types.count("MaxPool") == 1 and types.count("AvgPool") == 1 and "ReduceMeanD" in types
    gemm = next(o for o in g.ops if o.type == "MatMulV2")
    assert gemm.attrs == {"transpose_x1": False, "transpose_x2": True, "has_bias": True}
    assert g.batch_size == 2
    # depthwise conv: every output element costs kh*kw MACs
    dw_out = g.tensors[ops["dw"].outputs[0]]
    assert g.summary()["ops"][[o.name for o in g.ops].index("dw")]["macs"] == dw_out.numel * 9


def test_transformer_style_ops(tmp_path):
    x = helper.make_tensor_value_info("x", F, ["B", "S", 12])
    ids = helper.make_tensor_value_info("ids", I64, ["B", "S"])
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"], name="embed"),
        helper.make_node("Add", ["x", "e"], ["h"]),
        helper.make_node("LayerNormalization", ["h", "g", "b"], ["ln"], axis=-1, epsilon=1e-5, name="ln"),
        helper.make_node("MatMul", ["ln", "wq"], ["q0"]),
        helper.make_node("Add", ["q0", "bq"], ["q"], name="bias_add"),
        # shape-computing subgraph: Shape -> Gather -> Unsqueeze -> Concat -> Reshape (folded)
        helper.make_node("Shape", ["q"], ["qs"]),
        helper.make_node("Gather", ["qs", "i0"], ["d0"]),
        helper.make_node("Gather", ["qs", "i1"], ["d1"]),
        helper.make_node("Unsqueeze", ["d0", "ax0"], ["d0u"]),
        helper.make_node("Unsqueeze", ["d1", "ax0"], ["d1u"]),
        helper.make_node("Concat", ["d0u", "d1u", "heads"], ["newshape"], axis=0),
        helper.make_node("Reshape", ["q", "newshape"], ["q4"]),
        helper.make_node("Transpose", ["q4"], ["qt"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["q4"], ["kt"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["qt", "kt"], ["sc"]),
        helper.make_node("Div", ["sc", "scale"], ["scd"]),
        helper.make_node("Softmax", ["scd"], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "qt"], ["ctx"]),
        # exact GELU as exported by PyTorch: x*0.5*(1+erf(x/sqrt(2)))  (operand order shuffled)
        helper.make_node("Div", ["ctx", "sqrt2"], ["g1"]),
        helper.make_node("Erf", ["g1"], ["g2"]),
        helper.make_node("Add", ["one", "g2"], ["g3"]),
        helper.make_node("Mul", ["ctx", "g3"], ["g4"]),
        helper.make_node("Mul", ["g4", "half"], ["gelu"]),
        helper.make_node("ReduceMean", ["gelu"], ["rm"], axes=[-1], keepdims=0),
        helper.make_node("Split", ["gelu", "split"], ["s1", "s2"], axis=1),
        helper.make_node("Slice", ["s2", "st", "en", "axs", "stp"], ["sl"]),
        helper.make_node("Pad", ["sl", "pads"], ["pd"]),
        helper.make_node("Pow", ["pd", "two"], ["pw"]),
        helper.make_node("Sqrt", ["pw"], ["sq"]),
        helper.make_node("Clip", ["sq", "zero", "six"], ["cl"]),
        helper.make_node("Cast", ["cl"], ["cs"], to=TensorProto.FLOAT16),
        helper.make_node("Greater", ["rm", "zero"], ["cond"]),
        helper.make_node("Where", ["cond", "rm", "zero"], ["wh"]),
        helper.make_node("Expand", ["wh", "exshape"], ["ex"]),
        helper.make_node("Squeeze", ["s1", "sq_ax"], ["s1s"]),
        helper.make_node("ReduceSum", ["s1s", "rs_ax"], ["rsum"], keepdims=1),
        helper.make_node("Sigmoid", ["rsum"], ["sg"]),
        helper.make_node("Tanh", ["sg"], ["th"]),
    ]
    c = lambda n, v, dt=np.float32: numpy_helper.from_array(np.array(v, dtype=dt), n)  # noqa: E731
    inits = [init("emb", (50, 12)), init("g", (12,)), init("b", (12,)), init("wq", (12, 12)), init("bq", (12,)),
             c("i0", 0, np.int64), c("i1", 1, np.int64), c("ax0", [0], np.int64), c("heads", [3, 4], np.int64),
             c("scale", 2.0), c("sqrt2", 1.4142135), c("one", 1.0), c("half", 0.5), c("split", [1, 2], np.int64),
             c("st", [0, 1], np.int64), c("en", [100, -1], np.int64), c("axs", [0, 3], np.int64),
             c("stp", [1, 2], np.int64), c("pads", [0, 0, 1, 0, 0, 0, 2, 0], np.int64), c("two", 2.0),
             c("zero", 0.0), c("six", 6.0), c("exshape", [2, 1, 1, 1], np.int64), c("sq_ax", [1], np.int64),
             c("rs_ax", [1], np.int64)]
    outs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("cs", "ex", "th", "ln")]
    model = make_model(nodes, [x, ids], outs, inits)
    feeds = {"x": np.random.rand(2, 5, 12).astype(np.float32), "ids": np.random.randint(0, 50, (2, 5)).astype(np.int64)}
    g = check_against_reference(tmp_path, model, feeds)
    types = [o.type for o in g.ops]
    assert "Gelu" in types and "Erf" not in types  # the Erf pattern was fused
    gelu = next(o for o in g.ops if o.type == "Gelu")
    assert gelu.inputs == ["ctx"] and gelu.outputs == ["gelu"] and gelu.attrs["approximate"] == "none"
    assert "Shape" not in types and "Concat" not in types  # shape arithmetic folded away
    assert next(o for o in g.ops if o.type == "Reshape").attrs == {"view": True, "shape": [2, 5, 3, 4]}
    mm = [o for o in g.ops if o.type in ("MatMulV2", "BatchMatMulV2")]
    assert mm[0].attrs["has_bias"] and mm[0].inputs == ["ln", "wq", "bq"] and mm[0].outputs == ["q"]
    assert len(mm[0].attrs["fused_names"]) == 2 and mm[0].attrs["fused_ops"] == ["BatchMatMulV2", "Add"]
    assert len(mm) == 3 and all(o.type == "BatchMatMulV2" for o in mm)
    assert next(o for o in g.ops if o.type == "SoftmaxV2").attrs["axes"] == [3]
    assert next(o for o in g.ops if o.type == "LayerNorm").attrs["begin_norm_axis"] == 2
    assert next(o for o in g.ops if o.type == "Relu6").inputs == ["sq"]
    assert next(o for o in g.ops if o.type == "ReduceMeanD").attrs == {"axes": [3], "keep_dims": False}
    assert next(o for o in g.ops if o.type == "Gather").inputs == ["emb", "ids"]
    assert {"Select", "BroadcastToD", "SplitV", "StridedSliceD", "Pad", "Pow", "Sqrt", "Cast", "Squeeze",
            "Sigmoid", "Tanh", "ReduceSumD", "Transpose", "Greater"} <= set(types)
    assert g.tensors["emb"].kind == "param" and g.tensors["ids"].dtype == "int64"


def test_gpt2_style_tanh_gelu_fused(tmp_path):
    x = helper.make_tensor_value_info("x", F, [3, 8])
    c = lambda n, v: numpy_helper.from_array(np.array(v, dtype=np.float32), n)  # noqa: E731
    nodes = [
        helper.make_node("Mul", ["x", "half"], ["a"]),
        helper.make_node("Pow", ["x", "three"], ["b"]),
        helper.make_node("Mul", ["b", "k"], ["c"]),
        helper.make_node("Add", ["x", "c"], ["d"]),
        helper.make_node("Mul", ["d", "s"], ["e"]),
        helper.make_node("Tanh", ["e"], ["f"]),
        helper.make_node("Add", ["f", "one"], ["h"]),
        helper.make_node("Mul", ["a", "h"], ["y"]),
    ]
    inits = [c("half", 0.5), c("three", 3.0), c("k", 0.044715), c("s", 0.7978846), c("one", 1.0)]
    model = make_model(nodes, [x], [helper.make_tensor_value_info("y", F, None)], inits)
    g = load(save(tmp_path, model))
    assert [(o.type, o.inputs, o.outputs, o.attrs) for o in g.ops] == [("Gelu", ["x"], ["y"], {
        "approximate": "tanh",     # the fused operator keeps the names of the operators it replaced
        "fused_names": ["Mul_0", "Pow_1", "Mul_2", "Add_3", "Mul_4", "Tanh_5", "Add_6", "Mul_7"]})]


def test_lookalike_formula_is_not_fused(tmp_path):
    x = helper.make_tensor_value_info("x", F, [3, 8])
    c = lambda n, v: numpy_helper.from_array(np.array(v, dtype=np.float32), n)  # noqa: E731
    nodes = [helper.make_node("Div", ["x", "s2"], ["a"]), helper.make_node("Erf", ["a"], ["b"]),
             helper.make_node("Add", ["b", "one"], ["c"]), helper.make_node("Mul", ["x", "c"], ["y"])]  # no 0.5
    model = make_model(nodes, [x], [helper.make_tensor_value_info("y", F, None)],
                       [c("s2", 1.4142135), c("one", 1.0)])
    g = load(save(tmp_path, model))
    assert "Gelu" not in [o.type for o in g.ops] and "Erf" in [o.type for o in g.ops]


def test_compute_dtype(tmp_path):
    x = helper.make_tensor_value_info("x", F, [2, 4])
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x],
                       [helper.make_tensor_value_info("y", F, None)], [init("w", (4, 3))])
    p = save(tmp_path, model)
    g16 = load(p)
    assert g16.compute_dtype == "float16" and {t.dtype for t in g16.tensors.values()} == {"float16"}
    g32 = load(p, compute_dtype="float32")
    assert g32.compute_dtype == "float32" and {t.dtype for t in g32.tensors.values()} == {"float32"}
    with pytest.raises(AoeError, match="compute_dtype"):
        load(p, compute_dtype="int8")


# ---- static shapes -------------------------------------------------------------------------------
def dynamic_model():
    ids = helper.make_tensor_value_info("input_ids", I64, ["batch", "seq"])
    mask = helper.make_tensor_value_info("attention_mask", I64, ["batch", "seq"])
    nodes = [helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
             helper.make_node("Cast", ["attention_mask"], ["mf"], to=F),
             helper.make_node("Unsqueeze", ["mf", "ax"], ["mu"]),
             helper.make_node("Mul", ["e", "mu"], ["y"])]
    inits = [init("emb", (100, 16)), numpy_helper.from_array(np.array([2], np.int64), "ax")]
    return make_model(nodes, [ids, mask], [helper.make_tensor_value_info("y", F, None)], inits)


def test_dynamic_axes_need_input_shape(tmp_path):
    p = save(tmp_path, dynamic_model())
    with pytest.raises(AoeError) as info:
        load(p)
    msg = str(info.value)
    assert "input_ids" in msg and "dynamic dimension 0" in msg and "'batch'" in msg and "--input_shape" in msg
    g = load(p, "input_ids:32,128;attention_mask:32,128")
    assert g.tensors["y"].shape == (32, 128, 16) and g.batch_size == 32
    # one input fixes the shared symbols of the others
    assert load(p, "input_ids:4,7").tensors["attention_mask"].shape == (4, 7)
    for bad, what in [("input_ids:32", "rank"), ("nosuch:1,2", "not an input"), ("input_ids:2,3;attention_mask:2,4", "broadcast")]:
        with pytest.raises(AoeError, match=what):
            load(p, bad)


def test_zoo_models_load_by_name_with_defaults_and_overrides():
    g = load("zoo:bert_base", "input_ids:32,128;attention_mask:32,128")
    assert g.batch_size == 32 and g.tensors["input_ids"].shape == (32, 128)
    assert g.summary()["total_macs"] == pytest.approx(32 * 11.2e9, rel=0.05)
    g = load("zoo:gpt2", "input_ids:2,64")
    assert g.tensors["last_hidden_state"].shape == (2, 64, 768)
    g = load("zoo:mobilenet_v2")
    assert g.summary()["total_macs"] == pytest.approx(0.3e9, rel=0.05)
    assert any(o.attrs.get("groups", 1) > 1 for o in g.ops)  # depthwise convolutions
    with pytest.raises(AoeError, match="unknown zoo model"):
        load("zoo:../../etc/passwd")


def test_resnet50_forward_macs():
    s = load("zoo:resnet50").summary()
    # convention: MACs = Cube multiply-accumulates; FLOPs = 2*MACs (+ small vector work)
    assert s["total_macs"] == pytest.approx(4.1e9, rel=0.05)
    assert s["total_flops"] == pytest.approx(8.2e9, rel=0.05)
    assert s["op_counts"]["Conv2D"] == 53 and s["unsupported"] == []


def test_bert_base_forward_macs():
    s = load("zoo:bert_base").summary()
    assert s["total_macs"] == pytest.approx(11.2e9, rel=0.05)
    assert s["total_flops"] == pytest.approx(22.4e9, rel=0.05)
    assert s["op_counts"]["Gelu"] == 12 and s["op_counts"]["LayerNorm"] == 25 and s["op_counts"]["SoftmaxV2"] == 12
    assert s["unsupported"] == []


def test_zoo_graph_json_round_trip_and_reload(tmp_path):
    g = load("zoo:bert_base")
    text = g.to_json()
    assert Graph.from_json(text) == g and Graph.from_json(text).to_json() == text
    p = tmp_path / "bert.json"
    p.write_text(text)
    assert load(p) == g
    with pytest.raises(AoeError, match="cannot be re-shaped"):
        load(p, "input_ids:2,128")


def test_cli_json(capsys):
    assert aoe_main(["graph", "zoo:resnet50", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["total_macs"] == pytest.approx(4.1e9, rel=0.05) and out["total_flops"] > 2 * out["total_macs"] * 0.99
    assert out["batch_size"] == 1 and out["op_counts"]["Conv2D"] == 53 and out["unsupported"] == []
    assert aoe_main(["graph", "zoo:bert_base", "--input_shape", "input_ids:8,128;attention_mask:8,128"]) == 0
    text = capsys.readouterr().out
    assert "batch size 8" in text and "2*MACs" in text


# ---- untrusted input -----------------------------------------------------------------------------
def test_missing_and_non_onnx_files(tmp_path, capsys):
    with pytest.raises(AoeError, match="does not exist"):
        load(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_text("this is not a model\n" * 20)
    with pytest.raises(AoeError):
        load(junk)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(AoeError, match="not an ONNX model"):
        load(empty)
    with pytest.raises(AoeError):
        load(tmp_path)  # a directory
    assert aoe_main(["graph", str(junk)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("aoe: error:") and "Traceback" not in err


def test_truncated_zoo_file(tmp_path):
    from aoe.graph.zoo import zoo_model

    data = zoo_model("mobilenet_v2")[0].read_bytes()
    for cut in (10, len(data) // 3, len(data) - 7):
        p = tmp_path / f"cut{cut}.onnx"
        p.write_bytes(data[:cut])
        with pytest.raises(AoeError):
            load(p, "input:1,3,224,224")


def test_cyclic_graph(tmp_path):
    x = helper.make_tensor_value_info("x", F, [2, 2])
    nodes = [helper.make_node("Add", ["x", "b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2")]
    model = make_model(nodes, [x], [helper.make_tensor_value_info("b", F, None)])
    with pytest.raises(AoeError, match="cycle"):
        load(save(tmp_path, model))


def test_unknown_operator_is_opaque_with_warning(tmp_path, caplog):
    x = helper.make_tensor_value_info("x", F, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("FancyOp", ["a"], ["b"], domain="com.example", name="fancy"),
             helper.make_node("Relu", ["b"], ["c"]),
             helper.make_node("Einsum", ["a", "a"], ["d"], equation="ij,ij->ij", name="ein")]
    model = make_model(nodes, [x], [helper.make_tensor_value_info("c", F, None), helper.make_tensor_value_info("d", F, None)])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with caplog.at_level(logging.WARNING, logger="aoe.graph"):
        g = load(save(tmp_path, model))
    assert "FancyOp" in caplog.text
    fancy = next(o for o in g.ops if o.name == "fancy")
    assert fancy.type == "Opaque" and fancy.attrs["onnx_type"] == "FancyOp"
    ein = next(o for o in g.ops if o.name == "ein")
    assert ein.type == "Opaque" and g.tensors["d"].shape == (2, 3)  # shape from ONNX's own inference
    # the Relu after the unknown op has an unknown shape: it is listed and skipped, not guessed
    assert {u["op"] for u in g.unsupported} >= {"fancy", "ein"}
    assert not g.tensors["c"].is_static
    g.summary()
    Graph.from_json(g.to_json())


def test_hostile_contents(tmp_path):
    x = helper.make_tensor_value_info("../../x\x00y", F, [2, 3])
    nodes = [helper.make_node("Relu", ["../../x\x00y"], ["/etc/passwd"], name="../evil\nname")]
    model = make_model(nodes, [x], [helper.make_tensor_value_info("/etc/passwd", F, None)])
    g = load(save(tmp_path, model))
    assert g.ops[0].name == "../evil\nname" and g.outputs == ["/etc/passwd"]
    assert Graph.from_json(g.to_json()) == g
    # absurd or negative dimensions, undefined tensors, duplicated producers
    cases = []
    big = bare_tensor("w", [2**40, 2**40])
    cases.append(make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [helper.make_tensor_value_info("x", F, [2, 2])],
                            [helper.make_tensor_value_info("y", F, None)], [big]))
    neg = helper.make_tensor_value_info("x", F, [2, 3])
    neg.type.tensor_type.shape.dim[0].dim_value = -5
    cases.append(make_model([helper.make_node("Relu", ["x"], ["y"])], [neg], [helper.make_tensor_value_info("y", F, None)]))
    cases.append(make_model([helper.make_node("Relu", ["nowhere"], ["y"])], [helper.make_tensor_value_info("x", F, [1])],
                            [helper.make_tensor_value_info("y", F, None)]))
    cases.append(make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Relu", ["x"], ["y"])],
                            [helper.make_tensor_value_info("x", F, [1])], [helper.make_tensor_value_info("y", F, None)]))
    cases.append(make_model([helper.make_node("Reshape", ["x", "s"], ["y"])], [helper.make_tensor_value_info("x", F, [2, 3])],
                            [helper.make_tensor_value_info("y", F, None)],
                            [numpy_helper.from_array(np.array([4, 4], np.int64), "s")]))
    cases.append(make_model([helper.make_node("ConstantOfShape", ["s"], ["y"])], [helper.make_tensor_value_info("x", F, [1])],
                            [helper.make_tensor_value_info("y", F, None)],
                            [numpy_helper.from_array(np.array([2**30, 2**30, 2**30], np.int64), "s")]))
    for i, m in enumerate(cases):
        with pytest.raises(AoeError):
            load(save(tmp_path, m, f"case{i}.onnx"))


def test_external_data_is_never_opened(tmp_path):
    x = helper.make_tensor_value_info("x", F, [2, 4])
    w = bare_tensor("w", [4, 3])
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "/etc/shadow"), ("offset", "0"), ("length", "48")):
        e = w.external_data.add()
        e.key, e.value = k, v
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [helper.make_tensor_value_info("y", F, None)], [w])
    g = load(save(tmp_path, model))
    assert g.tensors["w"].shape == (4, 3) and g.tensors["w"].kind == "param"


def test_cli_training_full_json_and_help(tmp_path, capsys):
    assert aoe_main(["graph", "zoo:mobilenet_v2", "--training", "--json", "--full"]) == 0
    text = capsys.readouterr().out
    p = tmp_path / "mnv2_train.json"
    p.write_text(text)
    g = Graph.from_json(text)
    assert g.training and any(o.type == "ApplyAdamD" for o in g.ops)
    assert aoe_main(["graph", str(p), "--json"]) == 0  # the saved graph loads again by path
    out = json.loads(capsys.readouterr().out)
    assert out["training"] is True and out["op_counts"]["Conv2DBackpropFilter"] == 52
    assert aoe_main(["graph", "zoo:resnet50", "--per_op"]) == 0
    assert "'/conv1/Conv'" in capsys.readouterr().out
    with pytest.raises(SystemExit) as info:
        aoe_main(["graph", "--help"])
    assert info.value.code == 0 and "--input_shape" in capsys.readouterr().out
    assert aoe_main(["graph", "zoo:bert_base", "--compute_dtype", "int4"]) == 2
    assert aoe_main(["graph", "zoo:nope"]) == 2
    assert "zoo:resnet50" in capsys.readouterr().err


def test_decomposed_layernorm_is_fused(tmp_path):
    """The LayerNorm formula of pre-opset-17 PyTorch exports becomes one LayerNorm operator."""
    x = helper.make_tensor_value_info("x", F, ["B", 6, 16])
    c = lambda n, v: numpy_helper.from_array(np.array(v, dtype=np.float32), n)  # noqa: E731
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["p"]),
        helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
        helper.make_node("Add", ["v", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["s"]),
        helper.make_node("Div", ["d", "s"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["y"]),
        helper.make_node("Relu", ["y"], ["z"]),
    ]
    inits = [c("two", 2.0), c("eps", 1e-12), init("gamma", (16,)), init("beta", (16,))]
    model = make_model(nodes, [x], [helper.make_tensor_value_info("z", F, None)], inits, opset=13)
    g = check_against_reference(tmp_path, model, {"x": np.random.rand(2, 6, 16).astype(np.float32)})
    assert [(o.type, o.inputs, o.outputs) for o in g.ops] == [("LayerNorm", ["x", "gamma", "beta"], ["y"]),
                                                              ("Relu", ["y"], ["z"])]
    assert g.ops[0].attrs == {"begin_norm_axis": 2, "begin_params_axis": 2, "epsilon": pytest.approx(1e-12),
                              "fused_names": [f"{t}_{i}" for i, t in enumerate(
                                  ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"])]}
    # a variant that is not a LayerNorm (variance over a different axis) is left alone
    nodes[3] = helper.make_node("ReduceMean", ["p"], ["v"], axes=[1])
    model = make_model(nodes, [x], [helper.make_tensor_value_info("z", F, None)], inits, opset=13)
    g = load(save(tmp_path, model, "notln.onnx"), "x:2,6,16")
    assert "LayerNorm" not in [o.type for o in g.ops]


def test_many_nodes_with_one_name(tmp_path):
    # naming stays linear: a hostile file may give every node the same name
    n = 20000
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name="same") for i in range(n)]
    model = make_model(nodes, [helper.make_tensor_value_info("t0", F, [2])], [helper.make_tensor_value_info(f"t{n}", F, None)])
    g = load(save(tmp_path, model))
    assert len(g.ops) == n and len({o.name for o in g.ops}) == n
