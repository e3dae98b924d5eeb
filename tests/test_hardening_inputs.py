"""Input errors are input errors (exit 2, naming the operator), not tracebacks or "tuning failed"."""
from __future__ import annotations

import json

import pytest

from aoe.cli import main
from conftest import mm_op


def _desc(shape, dtype="float16"):
    return {"shape": list(shape), "type": dtype}


def _run(capsys, env, ops, *extra):
    (env / "ops.json").write_text(json.dumps(ops))
    rc = main(["--singleop", "ops.json", "-j", "2", *extra])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


@pytest.mark.parametrize("ops,needle", [
    ([{"op": "MatMulV2", "name": "a", "input_desc": [], "output_desc": [_desc((4, 4))]}], "'a' (MatMulV2)"),
    ([{"op": "MatMulV2", "name": "a", "input_desc": [_desc((4, 4))], "output_desc": [_desc((4, 4))]}], "1 input"),
    ([mm_op(0, 4, 4)], "[0, 4]"),
    ([mm_op(1 << 20, 1 << 20, 1 << 20)], "GiB"),
    ([mm_op(16, 1 << 20, 1 << 20)], "GiB"),
    ([{"op": "Conv2D", "name": "c", "input_desc": [_desc((1, 3, 8, 8)), _desc((4, 5, 3, 3))],
      "output_desc": [_desc((1, 4, 6, 6))], "attr": {"strides": [1, 1], "pads": [0, 0, 0, 0]}}], "channels 3"),
    ([{"op": "MatMulV2", "name": "k", "input_desc": [_desc((16, 32)), _desc((48, 16))],
       "output_desc": [_desc((16, 16))]}], "mismatch"),
])
def test_impossible_single_ops_are_input_errors(env, capsys, ops, needle):
    rc, _, err = _run(capsys, env, ops)
    assert rc == 2 and err.startswith("aoe: error: ") and needle in err, err
    assert not [p for p in (env / "bank").rglob("*") if p.is_file()]   # nothing reached the bank


def test_a_dynamic_single_op_is_skipped_and_the_others_tuned(env, capsys):
    dyn = {"op": "MatMulV2", "name": "dyn", "input_desc": [_desc((-1, 64)), _desc((64, 64))],
           "output_desc": [_desc((-1, 64))]}
    rc, out, err = _run(capsys, env, [dyn, mm_op(128, 256, 128, "ok")])
    assert rc == 0, err
    assert "'dyn' (MatMulV2) skipped: dynamic shape" in err


def test_batch_2_20_is_an_input_error(env, capsys):
    rc = main(["-m", "zoo:resnet50", "-j", "2", "--input_shape", "input:1048576,3,224,224"])
    _, err = capsys.readouterr()
    assert rc == 2 and "GiB" in err and "Traceback" not in err


def test_work_path_name_over_255_characters_is_an_error(env, capsys):
    rc = main(["-m", "zoo:mobilenet_v2", "-j", "2", "--work_path", "w" * 300])
    _, err = capsys.readouterr()
    assert rc == 2 and "work path" in err and "Traceback" not in err


def test_reduce_sum_over_n_h_w_simulates(capsys):
    rc = main(["simulate", "--op", "ReduceSumD", "--shape", "1,32,6,6", "--attrs", '{"axes":[0,2,3]}'])
    out, err = capsys.readouterr()
    assert rc == 0 and "Traceback" not in err, err


def test_a_failed_case_names_the_operator_and_the_reason(env, capsys, monkeypatch):
    import aoe.opat.graph_tune as gt

    real = gt.tune_case

    def flaky(case, *a, **kw):
        if case.op_type == "MatMulV2":
            raise RuntimeError("the simulator refused this strategy")
        return real(case, *a, **kw)

    monkeypatch.setattr(gt, "tune_case", flaky)
    (env / "aoe.ini").write_text("tuning_parallel_num = 1\n")   # in this process, where the patch applies
    rc, out, err = _run(capsys, env, [mm_op(128, 256, 128, "mm_x")])
    assert rc == 1
    assert "mm_x (MatMulV2): RuntimeError: the simulator refused this strategy" in out
