"""Graph IR: exact JSON round-trip, validation of untrusted JSON, summaries and input-shape parsing."""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoe.errors import AoeError
from aoe.graph import Graph, Op, Tensor, parse_input_shape
from aoe.graph.ir import topo_order


def small_mlp_ir() -> Graph:
    t = {
        "x": Tensor("x", (4, 8), "float16", "ND", "input"),
        "w": Tensor("w", (8, 3), "float16", "ND", "param"),
        "b": Tensor("b", (3,), "float16", "ND", "param"),
        "y": Tensor("y", (4, 3), "float16", "ND", "activation"),
        "z": Tensor("z", (4, 3), "float16", "ND", "activation"),
    }
    ops = [
        Op("fc", "MatMulV2", ["x", "w", "b"], ["y"], {"transpose_x1": False, "transpose_x2": False, "has_bias": True}),
        Op("act", "Relu", ["y"], ["z"], {}),
    ]
    return Graph("mlp", t, ops, ["x"], ["z"], [], 4, "float16", False)


def test_round_trip_exact_small():
    g = small_mlp_ir()
    text = g.to_json()
    g2 = Graph.from_json(text)
    assert g2 == g
    assert g2.to_json() == text
    assert Graph.from_json(g.to_json(indent=2)) == g


def test_attrs_normalised_for_json():
    op = Op("c", "ClipByValue", ["a"], ["b"], {"max": float("inf"), "min": float("-inf"), "t": (1, 2), "n": None})
    assert op.attrs == {"max": "inf", "min": "-inf", "t": [1, 2], "n": None}


names = st.text(min_size=1, max_size=12)  # any unicode, including NUL, quotes, '../'
attr_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=8,
)


@st.composite
def random_graphs(draw):
    n_in = draw(st.integers(1, 3))
    tensor_names = draw(st.lists(names, min_size=n_in + 1, max_size=n_in + 8, unique=True))
    tensors = {}
    for i, n in enumerate(tensor_names):
        kind = "input" if i < n_in else "activation"
        shape = tuple(draw(st.lists(st.integers(0, 4096), max_size=5)))
        dtype = draw(st.sampled_from(["float16", "float32", "int64", "bool"]))
        fmt = draw(st.sampled_from(["ND", "NCHW"]))
        tensors[n] = Tensor(n, shape, dtype, fmt, kind)
    ops = []
    op_names = draw(st.lists(names, min_size=len(tensor_names) - n_in, max_size=len(tensor_names) - n_in, unique=True))
    for j, n in enumerate(tensor_names[n_in:]):
        avail = tensor_names[: n_in + j]
        ins = draw(st.lists(st.sampled_from(avail), min_size=1, max_size=3))
        attrs = draw(st.dictionaries(st.text(max_size=6), attr_values, max_size=3))
        ops.append(Op(op_names[j], draw(st.sampled_from(["Add", "MatMulV2", "Opaque", "Reshape"])), ins, [n], attrs))
    unsupported = [{"op": o.name, "onnx_type": "X", "reason": "r"} for o in ops if o.type == "Opaque"]
    return Graph(draw(names), tensors, ops, tensor_names[:n_in], [tensor_names[-1]], unsupported,
                 draw(st.integers(1, 512)), draw(st.sampled_from(["float16", "float32"])), draw(st.booleans()))


@settings(max_examples=60, deadline=None)
@given(random_graphs())
def test_round_trip_exact_random(g):
    text = g.to_json()
    g2 = Graph.from_json(text)
    assert g2 == g
    assert g2.to_json() == text
    g.summary()  # must not fail on odd but valid graphs


def test_from_json_rejects_bad_structure():
    good = json.loads(small_mlp_ir().to_json())
    bad_cases = [
        "not json",
        "[]",
        json.dumps({**good, "format": "other"}),
        json.dumps({**good, "version": 99}),
        json.dumps({k: v for k, v in good.items() if k != "tensors"}),
        json.dumps({**good, "ops": [{"name": "a", "type": "Relu", "inputs": ["nope"], "outputs": ["z"], "attrs": {}}]}),
        json.dumps({**good, "ops": list(reversed(good["ops"]))}),  # not topological
        json.dumps({**good, "tensors": [{**good["tensors"][0], "shape": "x"}] + good["tensors"][1:]}),
        json.dumps({**good, "tensors": [{**good["tensors"][0], "kind": "weird"}] + good["tensors"][1:]}),
        json.dumps({**good, "batch_size": "4"}),
        "[" * 100000,
        json.dumps(good).replace('"has_bias": true', '"has_bias": NaN'),
    ]
    for text in bad_cases:
        with pytest.raises(AoeError):
            Graph.from_json(text)


def test_topo_order_detects_cycle_and_keeps_valid_order():
    a = Op("a", "Relu", ["x", "c"], ["y"])
    b = Op("b", "Relu", ["y"], ["c"])
    with pytest.raises(AoeError, match="cycle"):
        topo_order([a, b], {"x"})
    ops = [Op("p", "Relu", ["x"], ["p1"]), Op("q", "Relu", ["x"], ["q1"]), Op("r", "Add", ["p1", "q1"], ["r1"])]
    assert [o.name for o in topo_order(ops, {"x"})] == ["p", "q", "r"]
    assert [o.name for o in topo_order(list(reversed(ops)), {"x"})] == ["q", "p", "r"]


def test_summary_counts_and_macs():
    s = small_mlp_ir().summary()
    assert s["op_counts"] == {"MatMulV2": 1, "Relu": 1}
    assert s["total_macs"] == 4 * 8 * 3
    assert s["cube_flops"] == 2 * 4 * 8 * 3
    # bias add (12 elements) + relu (12 elements) are vector flops
    assert s["total_flops"] == 2 * 96 + 12 + 12
    assert s["ops"][0]["bytes"] == (32 + 24 + 3 + 12) * 2
    assert "2*MACs" in s["convention"]


def test_parse_input_shape():
    assert parse_input_shape("input_ids:32,128;attention_mask:32,128") == {
        "input_ids": (32, 128), "attention_mask": (32, 128)}
    assert parse_input_shape("x:0:1,3") == {"x:0": (1, 3)}
    assert parse_input_shape("s:") == {"s": ()}
    assert parse_input_shape({"a": [2, 3], "b": "4,5"}) == {"a": (2, 3), "b": (4, 5)}
    assert parse_input_shape(None) == {}
    for bad in ["x", "x:1,a", "x:-1,3", "x:0", ":3", "x:1;x:2", "x:99999999999"]:
        with pytest.raises(AoeError):
            parse_input_shape(bad)


def test_from_json_rejects_unsafe_op_types_and_shapes():
    good = json.loads(small_mlp_ir().to_json())
    for op_type in ["../../bank/x", "Mat Mul", "", "a" * 100, "1Relu", "Relu\x00"]:
        bad = {**good, "ops": [{**good["ops"][0], "type": op_type}] + good["ops"][1:]}
        with pytest.raises(AoeError):
            Graph.from_json(json.dumps(bad))
    for shape in [[-2, 3], [2**40], [1] * 17]:
        bad = {**good, "tensors": [{**good["tensors"][0], "shape": shape}] + good["tensors"][1:]}
        with pytest.raises(AoeError):
            Graph.from_json(json.dumps(bad))


def test_summary_survives_malformed_ops():
    g = small_mlp_ir()
    g.ops[0] = Op("fc", "Conv2D", ["x"], ["y"], {"ksize": ["a"]})
    g.ops[1] = Op("act", "MaxPool", ["y"], ["z"], {"ksize": ["a", None]})
    s = g.summary()
    assert s["total_macs"] == 0


def _variants(g: Graph) -> list[Graph]:
    """Graphs differing from `g` in one field of the JSON form (or in none: the last two)."""
    def copy() -> Graph:
        return Graph.from_json(g.to_json())
    out = []
    for field, value in (("name", g.name + "x"), ("batch_size", g.batch_size + 1), ("training", not g.training),
                         ("compute_dtype", "float32" if g.compute_dtype == "float16" else "float16"),
                         ("inputs", g.inputs[::-1]), ("outputs", g.outputs + g.inputs[:1]),
                         ("unsupported", g.unsupported + [{"op": "o", "onnx_type": "X", "reason": "r"}])):
        c = copy()
        setattr(c, field, value)
        out.append(c)
    c = copy()
    op = c.ops[-1]
    c.ops[-1] = Op(op.name, op.type, op.inputs, op.outputs, dict(op.attrs, extra=1))  # a replaced operator
    out.append(c)
    c = copy()
    c.ops[0], c.ops[-1] = c.ops[-1], c.ops[0]                                            # the order
    out.append(c)
    c = copy()
    last = list(c.tensors)[-1]
    t = c.tensors[last]
    c.tensors = dict(c.tensors, **{last: Tensor(t.name, t.shape + (1,), t.dtype, t.format, t.kind)})  # a shape
    out.append(c)
    c = copy()
    c.tensors = dict(reversed(list(c.tensors.items())))                                  # the tensors' order
    out.append(c)
    out.append(copy())                                   # the same JSON form
    c = copy()
    c.ops[-1] = Op(op.name, op.type, tuple(op.inputs), op.outputs, {k: v for k, v in op.attrs.items()})
    out.append(c)                                        # the same values, other Python containers
    return out


@settings(max_examples=40, deadline=None)
@given(random_graphs())
def test_fingerprint_is_equal_exactly_when_the_json_form_is(g):
    """The identity --reload and the batch's SGAT partitions use: what changes to_json() changes it."""
    text, fp = g.to_json(), g.fingerprint()
    assert len(fp) == 64 and g.fingerprint() == fp
    for v in _variants(g):
        assert (v.fingerprint() == fp) == (v.to_json() == text), v.to_json()


def test_fingerprint_encodes_the_graph_once_per_revision(monkeypatch):
    """Asked again (the job, then the batch's SGAT lookups) it costs no second pass over the graph."""
    import aoe.graph.ir as ir

    calls = []
    body = ir._fingerprint_body
    monkeypatch.setattr(ir, "_fingerprint_body", lambda graph: calls.append(1) or body(graph))
    g = small_mlp_ir()
    first = g.fingerprint()
    assert g.fingerprint() == first and len(calls) == 1
    g.name = "other"                       # a header field: seen at once, no pass over the operators
    assert g.fingerprint() != first and len(calls) == 1
    g.name = "mlp"
    assert g.fingerprint() == first
    g.ops.append(Op("act2", "Relu", ["z"], ["z2"]))
    g.tensors = dict(g.tensors, z2=Tensor("z2", (4, 3), "float16"))
    assert g.fingerprint() != first and len(calls) == 2
