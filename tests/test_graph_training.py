"""Training-graph derivation: exact operators and shapes, numerically correct MatMul gradients, zoo models."""
import itertools

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from aoe.errors import AoeError
from aoe.graph import Graph, Op, Tensor, load
from aoe.graph.training import derive_training

F = TensorProto.FLOAT


def _save(tmp_path, nodes, inputs, outputs, inits, name="m.onnx"):
    g = helper.make_graph(nodes, "net", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / name
    p.write_bytes(m.SerializeToString())
    return p


def _w(name, *shape):
    return numpy_helper.from_array(np.zeros(shape, np.float32), name)


def mlp(tmp_path):
    """x[B,784] -> MatMul+Add(256) -> Relu -> MatMul+Add(10), as PyTorch exports nn.Linear on 2-D input."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h0"], name="fc1"), helper.make_node("Add", ["h0", "b1"], ["h"]),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y0"], name="fc2"), helper.make_node("Add", ["y0", "b2"], ["y"])]
    return _save(tmp_path, nodes, [helper.make_tensor_value_info("x", F, ["B", 784])],
                 [helper.make_tensor_value_info("y", F, None)], [_w("w1", 784, 256), _w("b1", 256), _w("w2", 256, 10), _w("b2", 10)])


def describe(g, op):
    return (op.type, [g.tensors[i].shape for i in op.inputs], [g.tensors[o].shape for o in op.outputs],
            {k: v for k, v in op.attrs.items() if k in ("transpose_x1", "transpose_x2", "has_bias", "axes", "keep_dims")})


def test_two_layer_mlp_training_graph_is_exact(tmp_path):
    g = load(mlp(tmp_path), "x:32,784", training=True)
    assert g.training and g.batch_size == 32
    mm = {"has_bias": True, "transpose_x1": False, "transpose_x2": False}
    S = ()  # Adam scalars
    adam = lambda p: ("ApplyAdamD", [p, p, p, S, S, S, S, S, S, p], [p, p, p], {})  # noqa: E731
    expected = [
        # forward
        ("MatMulV2", [(32, 784), (784, 256), (256,)], [(32, 256)], mm),
        ("Relu", [(32, 256)], [(32, 256)], {}),
        ("MatMulV2", [(32, 256), (256, 10), (10,)], [(32, 10)], mm),
        # backward of fc2: dr = dy·W2ᵀ, dW2 = rᵀ·dy, db2 = Σ_batch dy
        ("MatMulV2", [(32, 10), (256, 10)], [(32, 256)], {"transpose_x1": False, "transpose_x2": True, "has_bias": False}),
        ("MatMulV2", [(32, 256), (32, 10)], [(256, 10)], {"transpose_x1": True, "transpose_x2": False, "has_bias": False}),
        ("ReduceSumD", [(32, 10)], [(10,)], {"axes": [0], "keep_dims": False}),
        ("ReluGrad", [(32, 256), (32, 256)], [(32, 256)], {}),
        # backward of fc1: no gradient for the data input x
        ("MatMulV2", [(32, 784), (32, 256)], [(784, 256)], {"transpose_x1": True, "transpose_x2": False, "has_bias": False}),
        ("ReduceSumD", [(32, 256)], [(256,)], {"axes": [0], "keep_dims": False}),
        # one Adam update per parameter
        adam((784, 256)), adam((256,)), adam((256, 10)), adam((10,)),
    ]
    assert [describe(g, op) for op in g.ops] == expected
    assert g.inputs == ["x", "grad/y"] and g.tensors["grad/y"].kind == "input"
    relu_grad = g.ops[6]
    assert relu_grad.inputs[1] == "r"  # ReluGrad reads the forward output
    assert [op.inputs[0] for op in g.ops if op.type == "ApplyAdamD"] == ["w1", "b1", "w2", "b2"]
    assert g.tensors["w1/adam_m"].kind == "param" and g.tensors["adam/lr"].kind == "const"
    s = g.summary()
    assert s["total_macs"] == 3 * 32 * 784 * 256 - 0 + 3 * 32 * 256 * 10 - 32 * 784 * 256  # no dx for the input
    assert Graph.from_json(g.to_json()) == g


def test_conv_bn_training_graph(tmp_path):
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "s1", "o1", "m1", "v1"], ["b1"], name="bn1"),
        helper.make_node("Relu", ["b1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "cb2"], ["c2"], strides=[2, 2], group=2, name="conv2"),
        helper.make_node("Add", ["c2", "c2"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["gap"]),
        helper.make_node("Flatten", ["gap"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
    ]
    inits = [_w("w1", 8, 3, 3, 3), _w("s1", 8), _w("o1", 8), _w("m1", 8), _w("v1", 8), _w("w2", 16, 4, 3, 3),
             _w("cb2", 16), _w("fw", 5, 16), _w("fb", 5)]
    p = _save(tmp_path, nodes, [helper.make_tensor_value_info("x", F, ["N", 3, 32, 32])],
              [helper.make_tensor_value_info("y", F, None)], inits)
    g = load(p, "x:4,3,32,32", training=True)
    types = [o.type for o in g.ops]
    for t in ("BNTrainingReduce", "BNTrainingUpdate", "BNTrainingUpdateGrad", "BNTrainingReduceGrad", "MaxPoolGrad",
              "Conv2DBackpropFilter", "Conv2DBackpropInput", "ReluGrad", "AddN", "BroadcastToD"):
        assert t in types, t
    assert "BNInfer" not in types
    # conv1's input is data: only its filter gradient is computed
    assert [o.name for o in g.ops if o.type == "Conv2DBackpropInput"] == ["conv2/grad_input"]
    by_name = {o.name: o for o in g.ops}
    dfilter = by_name["conv2/grad_filter"]
    assert g.tensors[dfilter.outputs[0]].shape == (16, 4, 3, 3) and dfilter.attrs["groups"] == 2
    dinput = by_name["conv2/grad_input"]
    assert g.tensors[dinput.outputs[0]].shape == (4, 8, 16, 16) and dinput.attrs["input_size"] == [4, 8, 16, 16]
    # the running statistics are updated by BNTrainingUpdate but not trained
    trained = [o.inputs[0] for o in g.ops if o.type == "ApplyAdamD"]
    assert sorted(trained) == sorted(["w1", "s1", "o1", "w2", "cb2", "fw", "fb"])
    for op in g.ops:
        if op.type == "ApplyAdamD":
            assert g.tensors[op.inputs[-1]].shape == g.tensors[op.inputs[0]].shape


def _run(g, feeds):
    """A tiny numpy interpreter for the operators MatMul gradients use."""
    env = dict(feeds)
    for op in g.ops:
        x = [env.get(i) for i in op.inputs]
        if op.type in ("MatMulV2", "BatchMatMulV2"):
            a = np.swapaxes(x[0], -1, -2) if op.attrs["transpose_x1"] else x[0]
            c = np.swapaxes(x[1], -1, -2) if op.attrs["transpose_x2"] else x[1]
            r = a @ c + (x[2] if op.attrs["has_bias"] else 0)
        elif op.type == "ReduceSumD":
            r = x[0].sum(axis=tuple(op.attrs["axes"]), keepdims=op.attrs["keep_dims"])
        elif op.type == "Reshape":
            r = x[0].reshape(op.attrs["shape"])
        elif op.type == "ApplyAdamD":
            env[op.outputs[0]] = x[-1]  # expose the gradient
            continue
        else:
            raise AssertionError(op.type)
        assert r.shape == g.tensors[op.outputs[0]].shape, op.name
        env[op.outputs[0]] = r
    return env


@pytest.mark.parametrize("ta,tb,batched", list(itertools.product([False, True], [False, True], [None, "both", "weight"])))
def test_matmul_gradients_are_numerically_right(ta, tb, batched):
    rng = np.random.default_rng(0)
    M, K, N, B = 3, 4, 5, 2
    a_shape = (K, M) if ta else (M, K)
    b_shape = (N, K) if tb else (K, N)
    if batched in ("both", "weight"):
        a_shape = (B,) + a_shape
    if batched == "both":
        b_shape = (B,) + b_shape
    kind = "MatMulV2" if batched is None else "BatchMatMulV2"
    out_shape = ((B,) if batched else ()) + (M, N)
    g = Graph("mm", {"a": Tensor("a", a_shape, "float32", "ND", "param"), "b": Tensor("b", b_shape, "float32", "ND", "param"),
                     "bias": Tensor("bias", (N,), "float32", "ND", "param"),
                     "y": Tensor("y", out_shape, "float32", "ND", "activation")},
              [Op("mm", kind, ["a", "b", "bias"], ["y"], {"transpose_x1": ta, "transpose_x2": tb, "has_bias": True})],
              [], ["y"], [], 1, "float32", False)
    t = derive_training(g)
    A, Bm, bias = rng.normal(size=a_shape), rng.normal(size=b_shape), rng.normal(size=(N,))
    gy = rng.normal(size=out_shape)
    env = _run(t, {"a": A, "b": Bm, "bias": bias, "grad/y": gy})
    grads = {op.inputs[0]: env[op.outputs[0]] for op in t.ops if op.type == "ApplyAdamD"}
    # reference: y = op(A)·op(B) + bias, gradients by the chain rule written out with einsum
    opA = np.swapaxes(A, -1, -2) if ta else A
    opB = np.swapaxes(Bm, -1, -2) if tb else Bm
    d_opA = gy @ np.swapaxes(opB, -1, -2)
    d_opB = np.swapaxes(opA, -1, -2) @ gy
    if batched == "weight":
        d_opB = d_opB.sum(axis=0)
    np.testing.assert_allclose(grads["a"], np.swapaxes(d_opA, -1, -2) if ta else d_opA, rtol=1e-9)
    np.testing.assert_allclose(grads["b"], np.swapaxes(d_opB, -1, -2) if tb else d_opB, rtol=1e-9)
    np.testing.assert_allclose(grads["bias"], gy.reshape(-1, N).sum(axis=0), rtol=1e-9)


@pytest.mark.parametrize("name", ["resnet50", "bert_base", "mobilenet_v2", "gpt2"])
def test_zoo_training_graphs(name):
    fwd = load(f"zoo:{name}")
    g = load(f"zoo:{name}", training=True)
    params = fwd.params()
    adam = [op for op in g.ops if op.type == "ApplyAdamD"]
    assert sorted(op.inputs[0] for op in adam) == sorted(params)  # every parameter is trained
    for op in adam:
        assert g.tensors[op.inputs[-1]].shape == g.tensors[op.inputs[0]].shape
    # backward work is about twice the forward work (first-layer input gradients are skipped)
    ratio = g.summary()["total_macs"] / fwd.summary()["total_macs"]
    assert 2.9 < ratio <= 3.0
    assert g.unsupported == []
    assert Graph.from_json(g.to_json()) == g


def test_training_twice_is_an_error():
    g = load("zoo:mobilenet_v2", training=True)
    with pytest.raises(AoeError, match="already a training graph"):
        derive_training(g)
