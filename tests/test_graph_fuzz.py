"""Fuzzing the ONNX importer with mutated bytes of a real model: the only allowed failure is AoeError."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoe.errors import AoeError
from aoe.graph import Graph, load
from aoe.graph.onnx import fold, importer, import_onnx_model, mapping
from aoe.graph.zoo import zoo_model

SEED = zoo_model("mobilenet_v2")[0].read_bytes()


@pytest.fixture(autouse=True)
def strict_importer(monkeypatch):
    # without the safety net an internal bug surfaces as its own exception and fails the test
    monkeypatch.setattr(importer, "STRICT", True)


mutations = st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)), min_size=1, max_size=12)


def _mutate(muts, cut):
    data = bytearray(SEED)
    for pos, byte in muts:
        data[pos] = byte
    return bytes(data[:cut]) if cut else bytes(data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations, st.one_of(st.none(), st.integers(1, len(SEED))))
def test_mutated_model_bytes(tmp_path_factory, muts, cut):
    path = tmp_path_factory.mktemp("fuzz") / "m.onnx"
    path.write_bytes(_mutate(muts, cut))
    try:
        g = load(path, "input:1,3,224,224")
    except AoeError:
        return
    assert isinstance(g, Graph)
    g.summary()
    assert Graph.from_json(g.to_json()) == g


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, len(SEED) * 8 - 1))
def test_single_bit_flips(tmp_path_factory, bit):
    data = bytearray(SEED)
    data[bit // 8] ^= 1 << (bit % 8)
    path = tmp_path_factory.mktemp("flip") / "m.onnx"
    path.write_bytes(bytes(data))
    try:
        load(path, "input:1,3,224,224").summary()
    except AoeError:
        pass


_OPS = sorted(set(mapping.HANDLERS) | set(fold.EVALUATORS)) + ["Foo", "If", "TopK", "NonZero", "Resize"]
_INTS = [0, 1, -1, 2, 3, -7, 2**31, -(2**40), 10**12]
_ATTRS = ["axis", "axes", "perm", "group", "strides", "pads", "to", "keepdims", "split", "kernel_shape"]


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_structurally_mutated_models(data):
    """Change operator types, attributes, dims and wiring of a real model: AoeError or a valid graph."""
    import onnx

    from aoe.graph.training import derive_training

    model = onnx.ModelProto()
    model.ParseFromString(SEED)
    g = model.graph
    for _ in range(data.draw(st.integers(1, 4))):
        node = g.node[data.draw(st.integers(0, len(g.node) - 1))]
        what = data.draw(st.sampled_from(["type", "attr", "dims", "input", "new_attr"]))
        if what == "type":
            node.op_type = data.draw(st.sampled_from(_OPS))
        elif what == "attr" and len(node.attribute):
            a = node.attribute[data.draw(st.integers(0, len(node.attribute) - 1))]
            if a.type == onnx.AttributeProto.INT:
                a.i = data.draw(st.sampled_from(_INTS))
            elif a.type == onnx.AttributeProto.INTS and len(a.ints):
                a.ints[data.draw(st.integers(0, len(a.ints) - 1))] = data.draw(st.sampled_from(_INTS))
        elif what == "dims":
            init = g.initializer[data.draw(st.integers(0, len(g.initializer) - 1))]
            if len(init.dims):
                init.dims[data.draw(st.integers(0, len(init.dims) - 1))] = data.draw(st.sampled_from(_INTS))
        elif what == "input" and len(node.input):
            other = g.node[data.draw(st.integers(0, len(g.node) - 1))]
            node.input[data.draw(st.integers(0, len(node.input) - 1))] = other.output[0]
        elif what == "new_attr":
            a = node.attribute.add()
            a.name = data.draw(st.sampled_from(_ATTRS))
            a.type = onnx.AttributeProto.INTS
            a.ints.extend(data.draw(st.lists(st.sampled_from(_INTS), max_size=5)))
    try:
        graph = import_onnx_model(model, {"input": (1, 3, 224, 224)}, "float16", {}, "fuzz")
    except AoeError:
        return
    graph.summary()
    assert Graph.from_json(graph.to_json()) == graph
    try:
        derive_training(graph).summary()
    except AoeError:
        pass
