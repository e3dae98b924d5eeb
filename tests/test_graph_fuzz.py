"""Fuzzing the ONNX importer with mutated bytes of a real model: the only allowed failure is AoeError."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoe.errors import AoeError
from aoe.graph import Graph, load
from aoe.graph import onnx_import
from aoe.graph.zoo import zoo_model

SEED = zoo_model("mobilenet_v2")[0].read_bytes()


@pytest.fixture(autouse=True)
def strict_importer(monkeypatch):
    # without the safety net an internal bug surfaces as its own exception and fails the test
    monkeypatch.setattr(onnx_import, "STRICT", True)


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
