"""Single-operator files (`aoe --singleop`, `load(path, framework="singleop")`): the graph they describe
and the validation of their untrusted contents."""
import json

import pytest

from aoe.cli import main as aoe_main
from aoe.errors import AoeError
from aoe.graph import load
from aoe.graph.singleop import load_single_ops, single_ops_graph

OPS = [
    {"op": "MatMulV2", "name": "mm0",
     "input_desc": [{"shape": [1024, 4096], "type": "float16", "format": "ND"},
                    {"shape": [4096, 1024], "type": "float16", "format": "ND"}],
     "output_desc": [{"shape": [1024, 1024], "type": "float16", "format": "ND"}],
     "attr": [{"name": "transpose_a", "type": "bool", "value": True}]},
    {"op": "Relu", "input_desc": [{"shape": [64, 1024], "type": "FLOAT32", "format": "nd"}],
     "output_desc": [{"shape": [64, 1024], "type": "float32"}], "attr": {}},
]


@pytest.fixture
def ops_file(tmp_path):
    p = tmp_path / "ops.json"
    p.write_text(json.dumps(OPS))
    return p


def test_operators_become_independent_ops(ops_file):
    g = load_single_ops(ops_file)
    assert g.name == "ops.json"
    assert [(op.name, op.type) for op in g.ops] == [("mm0", "MatMulV2"), ("Relu_1", "Relu")]
    mm, relu = g.ops
    assert mm.inputs == ["mm0:in0", "mm0:in1"] and mm.outputs == ["mm0:out0"]
    assert mm.attrs == {"transpose_x1": True}  # TensorFlow's name mapped to the IR's
    assert [g.tensors[t].kind for t in mm.inputs] == ["input", "param"]
    assert g.tensors["mm0:in1"].shape == (4096, 1024)
    t = g.tensors[relu.inputs[0]]
    assert (t.dtype, t.format) == ("float32", "ND")
    assert g.inputs == ["mm0:in0", "Relu_1:in0"] and g.outputs == ["mm0:out0", "Relu_1:out0"]


def test_load_with_framework_singleop_is_the_same_graph(ops_file):
    assert load(ops_file, framework="singleop") == load_single_ops(ops_file)
    assert load(str(ops_file), framework="SingleOp ").name == "ops.json"


def test_one_operator_object_and_repeated_names():
    g = single_ops_graph([OPS[1], dict(OPS[1], name="Relu_1")], name="x")
    assert [op.name for op in g.ops] == ["Relu_0", "Relu_1"]
    g = single_ops_graph([dict(OPS[1], name="r"), dict(OPS[1], name="r")])
    assert [op.name for op in g.ops] == ["r", "r#1"]
    assert len(single_ops_graph(OPS[0]).ops) == 1


def test_singleop_files_are_validated(tmp_path):
    bad = tmp_path / "bad.json"
    for text, msg in [("{", "not a valid"), ("[]", "no operators"), ('[{"op": "../x"}]', "CANN operator type"),
                      ('[{"op": "Add", "input_desc": [{"shape": [-3, 3]}]}]', "static dimensions"),
                      ('[{"op": "Add", "input_desc": [{"shape": [1, NaN]}]}]', "not a valid"),
                      ('[{"op": "Add"}]', "input_desc is missing"),
                      ('[{"op": "Add", "input_desc": [{"shape": [2]}], "attr": 3}]', "'attr' must be"),
                      ('[{"op": "Add", "name": "", "input_desc": []}]', "'name' must be")]:
        bad.write_text(text)
        with pytest.raises(AoeError, match=msg):
            load_single_ops(bad)
        with pytest.raises(AoeError, match=msg):
            load(bad, framework="singleop")
    with pytest.raises(AoeError, match="does not exist"):
        load_single_ops(tmp_path / "missing.json")
    with pytest.raises(AoeError, match="single-operator file .* does not exist"):
        load(tmp_path / "missing.json", framework="singleop")
    with pytest.raises(AoeError, match="not a regular file"):
        load(tmp_path, framework="singleop")


def test_singleop_refuses_input_shape_and_training(ops_file):
    with pytest.raises(AoeError, match="input_shape does not apply"):
        load(ops_file, "mm0:in0:1024,4096", framework="singleop")
    with pytest.raises(AoeError, match="--training cannot be used with --singleop"):
        load(ops_file, training=True, framework="singleop")


def test_a_singleop_file_is_not_taken_for_a_json_graph(ops_file):
    # .json means the project's graph form unless the framework says otherwise: no silent guessing
    with pytest.raises(AoeError):
        load(ops_file)


def test_graph_cli_reads_singleop_files(ops_file, capsys):
    assert aoe_main(["graph", str(ops_file), "--framework", "singleop", "--per_op"]) == 0
    out = capsys.readouterr().out
    assert "graph 'ops.json': 2 operators" in out and "'mm0'" in out
