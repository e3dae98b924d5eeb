"""OPAT results: records and their resume state, the live report's counters, the section and its schema."""
from __future__ import annotations

import json

import jsonschema
import pytest

from aoe.opat import OpatReport, OpRecord
from aoe.opat.report import OPAT_SECTION_SCHEMA, record_from_state
from aoe.opat.tune import KindGain
from aoe.tuning import FAILED, INCOMPLETE, SUCCESS, Counters


def _rec(name, outcome="add", case=None, before=10.0, after=5.0, **kw):
    kinds = kw.pop("kinds", {"Schedule": KindGain(before, 7.0), "Format": KindGain(7.0, 7.0),
                             "Impl": KindGain(7.0, after)} if outcome in ("add", "update") else {})
    return OpRecord(name, kw.pop("op_type", "MatMulV2"), outcome, before, after if outcome in ("add", "update")
                    else before, kinds, case=case, **kw)


def test_record_state_round_trips_through_json():
    recs = [_rec("mm", case="c1"), _rec("relu", "reserved", op_type="Relu"),
            OpRecord("odd", "Opaque", skipped="no kernel model"), OpRecord("sm", "SoftmaxV2", error="boom", case="c3"),
            _rec("fused", "update", op_type=["MatMulV2", "Add"], case="c4", fused_names=("enc/MatMul", "enc/add")),
            OpRecord("bad", "Relu", "unsatisfied", 3.0, 3.0, error="boom", case="c5")]
    for r in recs:
        back = record_from_state(json.loads(json.dumps(r.to_state())))
        assert back == r
        assert back.key == r.op_name and back.n_ops == 1 and back.label == r.op_name
    with pytest.raises((KeyError, TypeError, ValueError)):
        record_from_state({"op_type": "Relu"})
    with pytest.raises((KeyError, TypeError, ValueError)):
        record_from_state({"op_name": "x", "op_type": "Relu", "kinds": {"Schedule": ["a", 1.0]}})


def test_the_result_entry_lists_only_the_kinds_that_helped():
    entry = _rec("mm").to_result()
    assert entry["op_name"] == "mm" and entry["op_type"] == "MatMulV2"
    perf = entry["tune_performance"]
    assert set(perf) == {"Schedule", "Impl"}                   # Format did not help
    assert perf["Schedule"] == {"performance_after_tune(us)": 7.0, "performance_before_tune(us)": 10.0,
                                "performance_improvement": "42.86%", "update_mode": "add"}
    assert perf["Impl"]["performance_improvement"] == "40.00%"


def test_counters_count_a_shared_case_once():
    rep = OpatReport("g", "Ascend910B2", ["a", "b", "c", "d", "e"])
    rep.add(_rec("a", case="mm"))
    rep.add(_rec("b", case="mm"))           # the same case as a
    rep.add(_rec("c", "reserved", case="relu"))
    rep.add(_rec("d", "unsatisfied", case="sm"))
    rep.add(OpRecord("e", "Opaque", skipped="no model"))
    assert rep.counters == Counters(repo_add_num=1, repo_hit_num=1, repo_reserved_num=1, repo_update_num=0,
                                    repo_unsatisfied_num=1, total_num=3)
    assert rep.counters.consistent()
    with pytest.raises(AttributeError):
        rep.counters = Counters()            # computed from the records, never assigned
    # records without a case identity count one each
    solo = OpatReport("g", "s")
    solo.add(_rec("x"))
    solo.add(_rec("y"))
    assert solo.counters.repo_add_num == 2


def test_records_come_back_in_graph_order_and_replace_by_name():
    rep = OpatReport("g", "s", ["a", "b", "c"])
    rep.add(_rec("c"))
    rep.add(_rec("a", "reserved"))
    assert [r.op_name for r in rep.records] == ["a", "c"] and not rep.complete
    rep.add(_rec("a"))                      # a record replaces the earlier one of its operator
    rep.add(_rec("b"))
    assert [(r.op_name, r.outcome) for r in rep.records] == [("a", "add"), ("b", "add"), ("c", "add")]
    assert rep.complete
    rep.add(_rec("extra"))                  # not in the walk: kept after it
    assert rep.records[-1].op_name == "extra"


@pytest.mark.parametrize("status", [SUCCESS, INCOMPLETE, FAILED])
def test_the_section_validates_against_its_schema(status):
    rep = OpatReport("g", "Ascend910B2", ["a", "b", "c", "d"])
    rep.add(_rec("a", case="1"))
    rep.add(_rec("b", "update", case="2", op_type=["MatMulV2", "Add"]))
    rep.add(_rec("c", "reserved", case="3"))
    if status == FAILED:
        rep.add(OpRecord("d", "SoftmaxV2", error="device lost", case="4"))
    rep.status = status
    sec = rep.to_result_section()
    jsonschema.validate(sec, OPAT_SECTION_SCHEMA)
    assert sec["opat_tuning_result"] == status
    assert [o["op_name"] for o in sec["repo_modified_operators"]] == ["a", "b"]
    assert sec["repo_summary"] == rep.counters.to_dict()
    assert ("tuning_failed_operators" in sec) == (status == FAILED)
    if status == FAILED:
        assert sec["tuning_failed_operators"] == ["d"]


def test_the_schema_rejects_what_the_product_never_writes():
    rep = OpatReport("g", "s", ["a"])
    rep.add(_rec("a", case="1"))
    rep.status = SUCCESS
    good = rep.to_result_section()
    for bad in ({**good, "opat_tuning_result": "done"},
                {**good, "tuning_failed_operators": ["a"]},           # only with "tuning failed"
                {**good, "opat_tuning_result": FAILED},               # ... and then always
                {**good, "extra": 1},
                {**good, "repo_summary": {**good["repo_summary"], "total_num": -1}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, OPAT_SECTION_SCHEMA)
    perf = json.loads(json.dumps(good))
    perf["repo_modified_operators"][0]["tune_performance"]["Schedule"]["performance_improvement"] = "42.9%"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(perf, OPAT_SECTION_SCHEMA)


def test_nothing_tunable_has_no_section():
    rep = OpatReport("g", "s", ["odd"])
    rep.add(OpRecord("odd", "Opaque", skipped="no model"))
    rep.status = SUCCESS
    assert rep.to_result_section() is None
    assert [r.op_name for r in rep.skipped] == ["odd"] and rep.failed == []
