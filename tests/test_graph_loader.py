"""`aoe.graph.load`, the one loader of every model source: framework codes and names, detection from
the model, bad values, optional frameworks that are not installed, and lazy imports."""
import json
import subprocess
import sys

import pytest
from onnx import TensorProto, helper

from aoe.errors import AoeError
from aoe.graph import load
from aoe.graph.loader import framework_name

VALID = "5 or 'onnx', 3 or 'tensorflow', 'json', 'singleop'"
TF_EXTRA = "TensorFlow models need the tensorflow extra: pip install 'aoe[tensorflow]'"


@pytest.fixture
def onnx_file(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    p = tmp_path / "relu.onnx"
    p.write_bytes(m.SerializeToString())
    return p


@pytest.mark.parametrize("fw", [5, "5", " 5 ", "onnx", "ONNX"])
def test_onnx_by_code_or_name(onnx_file, fw):
    g = load(onnx_file, "x:4,8", framework=fw)
    assert g == load(onnx_file, "x:4,8")
    assert [op.type for op in g.ops] == ["Relu"] and g.tensors["y"].shape == (4, 8)


def test_keywords_and_positional_shape(onnx_file):
    g = load(onnx_file, {"x": (2, 8)}, training=True, compute_dtype="float32", framework=5)
    assert g.training and g.tensors["x"].dtype == "float32"
    with pytest.raises(TypeError):
        load(onnx_file, "x:2,8", True)  # training is keyword-only


def test_zoo_models_are_onnx(tmp_path):
    assert load("zoo:mobilenet_v2", framework=5) == load("zoo:mobilenet_v2")
    for fw in ("json", "singleop", 3):
        with pytest.raises(AoeError, match="bundled ONNX model"):
            load("zoo:mobilenet_v2", framework=fw)


def test_json_graphs_by_suffix_or_framework(onnx_file, tmp_path):
    g = load(onnx_file, "x:4,8")
    p = tmp_path / "saved.json"
    p.write_text(g.to_json())
    assert load(p) == g
    assert load(p, framework="json") == g
    assert load(p, framework=5) == g  # the saved form of an imported ONNX model, as `aoe -f 5` accepts
    other = tmp_path / "graph.txt"
    other.write_text(g.to_json())
    assert load(other, framework="json") == g  # the framework decides, not the suffix
    with pytest.raises(AoeError):
        load(other)  # no framework and no .json suffix: read as ONNX, which it is not


@pytest.mark.parametrize("fw", [2, 4, 7, -5, 10**30, "caffe", "pytorch", "", "5.0", "٥", 5.0, True, b"5", ["onnx"]])
def test_unknown_frameworks_list_the_valid_ones(onnx_file, fw):
    with pytest.raises(AoeError, match=f"is not valid; use {VALID}"):
        load(onnx_file, framework=fw)


@pytest.mark.parametrize("code, name", [(0, "Caffe"), ("1", "MindSpore")])
def test_frameworks_aoe_knows_but_this_does_not(onnx_file, code, name):
    with pytest.raises(AoeError, match=f"framework {code} \\({name}\\) is not supported.*export the model to ONNX"):
        load(onnx_file, framework=code)


def test_a_bad_framework_is_reported_before_the_file(tmp_path):
    with pytest.raises(AoeError, match="is not valid"):
        load(tmp_path / "missing.onnx", framework="keras")


def test_framework_names():
    assert [framework_name(v) for v in (None, 5, "5", 3, "3", "tensorflow", "json", "singleop")] == \
        [None, "onnx", "onnx", "tensorflow", "tensorflow", "tensorflow", "json", "singleop"]


def test_tensorflow_without_its_loader_says_what_to_install(tmp_path, monkeypatch):
    model = tmp_path / "frozen.pb"
    model.write_bytes(b"\x00not a graph")
    monkeypatch.setitem(sys.modules, "aoe.graph.tf", None)  # as if the frontend could not be imported
    for fw in (3, "3", "tensorflow"):
        with pytest.raises(AoeError) as info:
            load(model, framework=fw)
        assert str(info.value) == TF_EXTRA
    # a SavedModel is a directory: it reaches the TensorFlow loader instead of being refused as a non-file
    with pytest.raises(AoeError) as info:
        load(tmp_path, framework=3)
    assert str(info.value) == TF_EXTRA
    with pytest.raises(AoeError, match="TensorFlow model .* does not exist"):
        load(tmp_path / "missing.pb", framework=3)


def test_tensorflow_not_installed_is_an_aoe_error(tmp_path, monkeypatch):
    model = tmp_path / "frozen.pb"
    model.write_bytes(b"\x00not a graph")
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if tensorflow were not installed
    with pytest.raises(AoeError, match="(?i)tensorflow"):
        load(model, framework=3)


def test_other_frameworks_need_a_regular_file(tmp_path):
    for fw in (None, 5, "json"):
        with pytest.raises(AoeError, match="not a regular file"):
            load(tmp_path, framework=fw)


def test_onnx_is_imported_only_for_onnx_models(onnx_file, tmp_path):
    saved = tmp_path / "g.json"
    saved.write_text(load(onnx_file, "x:1,8").to_json())
    ops = tmp_path / "ops.json"
    ops.write_text(json.dumps([{"op": "Relu", "input_desc": [{"shape": [4]}]}]))
    code = ("import sys, aoe.graph as g; g.load(sys.argv[1]); g.load(sys.argv[2], framework='singleop'); "
            "assert 'onnx' not in sys.modules, 'onnx imported'; g.load(sys.argv[3], 'x:1,8'); "
            "assert 'onnx' in sys.modules")
    r = subprocess.run([sys.executable, "-c", code, str(saved), str(ops), str(onnx_file)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
