"""Operator tuning: drivers, kinds, precision modes, bank outcomes, failures."""
from __future__ import annotations

import numpy as np
import pytest

from aoe import AoeError, sim
from aoe.bank import OpBank
from aoe.ops import HIGH_PRECISION, describe
from aoe.opat import (Budget, beam, case_for, exhaustive, random_search, search, simulator_measure, space_for,
                      tune_case, tune_graph, tune_op)
from aoe.opat.single import single_ops_graph
from aoe.opat.tune import matmul_impl_class
from aoe.soc import load_soc

SOC = load_soc("Ascend910B2")


def _mm(m, k, n, name="mm", kind_b="param", **attrs):
    return {"op": "MatMulV2", "name": name,
            "input_desc": [{"shape": [m, k], "type": "float16"}, {"shape": [k, n], "type": "float16"}],
            "output_desc": [{"shape": [m, n], "type": "float16"}], "attr": attrs}


def _vec(op, shape, name, **attrs):
    return {"op": op, "name": name, "input_desc": [{"shape": list(shape), "type": "float16"}],
            "output_desc": [{"shape": list(shape), "type": "float16"}], "attr": attrs}


def small_graph():
    return single_ops_graph([
        _mm(256, 512, 256, "mm_a"),
        _mm(256, 512, 256, "mm_b"),           # same case as mm_a: tuned once
        _vec("SoftmaxV2", (64, 1024), "softmax", axes=[-1]),
        _vec("Relu", (64, 1024), "relu"),
        _vec("FrobnicateV9", (64, 1024), "mystery"),  # no kernel model: skipped and reported
    ], name="small")


# --- drivers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", [sim.MatMul(m=128, n=128, k=64), sim.MatMul(m=96, n=80, k=200, batch=3),
                                sim.VectorOp("SoftmaxV2", (64, 1000)),
                                sim.Conv2D(x=(2, 16, 14, 14), weight=(32, 16, 3, 3), pads=(1, 1, 1, 1))])
def test_search_finds_the_known_optimum_of_small_spaces(op):
    space = space_for(SOC, op)
    measure = simulator_measure(SOC)
    brute = min(float(np.min(measure(op, chunk))) for chunk in space.chunks())
    res = search(space, op, measure, Budget(evaluations=10_000_000))
    assert res.driver == "exhaustive"
    assert res.time_us == brute
    # the beam search on the same space reaches the same optimum here
    assert beam(space, op, measure, Budget(evaluations=10_000_000)).time_us == pytest.approx(brute, rel=0.01)


@pytest.mark.parametrize("shape", [(4096, 768, 3072), (768, 768, 4096), (4096, 3072, 768)])
def test_beam_is_within_one_percent_of_exhaustive(shape):
    m, n, k = shape
    op = sim.MatMul(m=m, n=n, k=k)
    space = space_for(SOC, op)
    measure = simulator_measure(SOC, threads=2)
    best = exhaustive(space, op, measure).time_us
    found = beam(space, op, measure, Budget(evaluations=100_000))
    assert found.evaluations <= 100_000
    assert found.time_us <= best * 1.01


def test_search_is_deterministic_and_respects_the_budget():
    op = sim.MatMul(m=2048, n=1024, k=1024)
    space = space_for(SOC, op)
    calls = []

    def measure(o, rows):
        calls.append(len(rows))
        return simulator_measure(SOC)(o, rows)

    a = beam(space, op, measure, Budget(evaluations=5_000), seed=7)
    assert sum(calls) == a.evaluations <= 5_000
    b = beam(space, op, measure, Budget(evaluations=5_000), seed=7)
    assert a.time_us == b.time_us and np.array_equal(a.row, b.row)
    r = random_search(space.all_rows(), op, measure, Budget(evaluations=777), seed=1)
    assert r.evaluations == 777
    t1 = tune_op(op, budget=Budget(evaluations=3_000), seed=3)
    t2 = tune_op(op, budget=Budget(evaluations=3_000), seed=3)
    assert t1.strategy == t2.strategy and t1.after_us == t2.after_us
    assert t1.evaluations <= 3_000 * 3  # each kind stays within its share of the budget


def test_a_user_measure_function_is_called_and_obeyed():
    op = sim.MatMul(m=512, n=512, k=512)
    seen = []

    def fewest_cores_win(o, rows):
        """A 'device' on which only the core count matters: fewer cores, faster."""
        seen.append(len(rows))
        t = sim.simulate_times(SOC, o, rows)[0]
        return np.where(np.isfinite(t), rows[:, 0].astype(float), np.inf)

    res = tune_op(op, kinds=("Schedule",), measure=fewest_cores_win, budget=Budget(evaluations=10_000_000))
    assert seen and sum(seen) == res.evaluations
    rows = space_for(SOC, op).all_rows()
    valid = np.isfinite(sim.simulate_times(SOC, op, rows)[0])
    fewest = int(rows[valid, 0].min())  # the fewest cores any strategy of the space uses
    assert res.strategy["usedCoreNum"] == fewest
    assert res.after_us == float(fewest)


def test_a_broken_measure_is_a_clear_error():
    op = sim.MatMul(m=64, n=64, k=64)
    with pytest.raises(AoeError, match="returned"):
        tune_op(op, kinds=("Schedule",), measure=lambda o, rows: np.zeros(3))


# --- kinds --------------------------------------------------------------------------------------

def test_format_tuning_charges_the_transdata_it_needs():
    g = single_ops_graph([_mm(4096, 1024, 4096, "proj")])
    g.tensors["proj:in0"].kind = "activation"
    case = describe(g, g.ops[0])
    nz_a = next(v for v in case.formats if v.label.startswith("NZ,"))
    assert nz_a.extra_ops and nz_a.extra_ops[0].op_type == "TransData"
    free_b = next(v for v in case.formats if v.label == "ND,NZ,ND")
    assert not free_b.extra_ops  # the weight can be stored in FRACTAL_NZ: no conversion
    res = tune_case(case, SOC)
    kernel_only = {v.label: sim.simulate(SOC, v.sim_op, res.strategy).time_us
                   for v in case.formats if sim.simulate(SOC, v.sim_op, res.strategy).valid}
    if res.variant.startswith("NZ,"):
        transdata = sum(sim.simulate(SOC, t).time_us for t in nz_a.extra_ops)
        assert res.after_us == pytest.approx(kernel_only[res.variant] + transdata)
    else:
        assert res.after_us == pytest.approx(kernel_only[res.variant])


def test_each_kind_reports_its_own_gain():
    res = tune_op(sim.Conv2D(x=(8, 64, 28, 28), weight=(64, 1, 3, 3), pads=(1, 1, 1, 1), groups=64))
    gains = res.helped_kinds()
    assert "Impl" in gains and res.impl == "depthwise_vector"  # depthwise on the Vector unit beats the Cube
    chain = [res.before_us] + [gains[k].after_us for k in ("Schedule", "Format", "Impl") if k in gains]
    assert chain == sorted(chain, reverse=True) and chain[-1] == pytest.approx(res.after_us)
    only = tune_op(sim.Conv2D(x=(8, 64, 28, 28), weight=(64, 1, 3, 3), pads=(1, 1, 1, 1), groups=64),
                   kinds=("Schedule",))
    assert set(only.kinds) == {"Schedule"} and only.impl != "depthwise_vector"


@pytest.mark.parametrize("op", [sim.VectorOp("ReduceSumD", (4096, 1024), axes=(0, 1)),
                                sim.VectorOp("ReduceMeanD", (16, 65536), axes=(1,)),
                                sim.MatMul(m=4, n=8192, k=4096)])
def test_no_impl_violates_high_precision(op):
    case = case_for(op)
    res = tune_case(case, SOC, implmode=HIGH_PRECISION)
    if isinstance(op, sim.VectorOp):
        assert res.strategy["impl"] != 1  # atomic multi-core accumulation is high_performance only
    chosen = [v for v in case.impls if v.label == res.impl or v.knowledge.get("impl") == res.strategy.get("impl")]
    for v in chosen:
        assert HIGH_PRECISION in v.modes
    assert res.impl != "vector_gemv"


def test_matmul_impl_classes_partition_the_space():
    op = sim.MatMul(m=1024, n=1024, k=1024)
    rows = space_for(SOC, op).all_rows()
    classes = matmul_impl_class(op, rows)
    assert set(np.unique(classes)) == {0, 1, 2, 3}


# --- the graph walk and the bank ----------------------------------------------------------------

def test_graph_tuning_outcomes_follow_the_bank_rules(tmp_path):
    g = small_graph()
    first = tune_graph(g, SOC, tmp_path, builtin=False)
    c = first.counters
    assert c.consistent() and c.repo_hit_num == 0
    assert c.total_num == 3  # mm_a/mm_b share a case; mystery is skipped
    assert c.repo_add_num + c.repo_unsatisfied_num == 3
    assert [r.op_name for r in first.skipped] == ["mystery"]
    assert first.status == "tuning successful"
    section = first.to_result_section()
    assert {r["op_name"] for r in section["repo_modified_operators"]} >= {"mm_a", "mm_b"}
    bank = OpBank(tmp_path, SOC.name, SOC.cube_cores)
    assert len(list(bank.entries())) == c.repo_add_num

    second = tune_graph(g, SOC, tmp_path, builtin=False)
    assert second.counters.repo_hit_num == c.repo_add_num
    assert second.counters.repo_reserved_num == c.repo_add_num
    assert second.evaluations <= first.evaluations - 1  # hits are not tuned again
    assert not second.to_result_section()["repo_modified_operators"]

    again = tune_graph(g, SOC, tmp_path, builtin=False, repeat_tune=True)
    assert again.counters.repo_update_num == 0  # nothing better than the tuned strategies exists
    assert again.counters.repo_reserved_num == c.repo_add_num and again.counters.consistent()


def test_a_worse_bank_entry_is_updated_under_repeat_tune(tmp_path):
    g = single_ops_graph([_mm(1024, 1024, 1024, "mm")])
    case = describe(g, g.ops[0])
    bad = sim.default_strategy(SOC, case.default.sim_op)
    bad = dict(bad, usedCoreNum=1, singleCoreM=1024, singleCoreN=1024)  # one core: slow but valid
    slow = sim.simulate(SOC, case.default.sim_op, bad)
    assert slow.valid
    bank = OpBank(tmp_path, SOC.name, SOC.cube_cores)
    bank.put(case.op_type, case.key, {**bad, "impl": "standard"}, slow.time_us)
    hit = tune_graph(g, SOC, tmp_path, builtin=False)
    assert hit.counters.repo_reserved_num == 1 and hit.records[0].before_us == pytest.approx(slow.time_us)
    upd = tune_graph(g, SOC, tmp_path, builtin=False, repeat_tune=True)
    assert upd.counters.repo_update_num == 1
    rec = upd.to_result_section()["repo_modified_operators"][0]
    first_kind = next(iter(rec["tune_performance"].values()))
    assert first_kind["update_mode"] == "update"
    assert bank.lookup(case.op_type, case.key).perf_us < slow.time_us


def test_unsatisfied_when_nothing_beats_the_default(tmp_path):
    g = single_ops_graph([_vec("Relu", (64, 1024), "relu")])
    case = describe(g, g.ops[0])
    d = sim.default_strategy(SOC, case.default.sim_op)
    default_row = np.array([d[f] for f in sim.strategy_fields(case.default.sim_op)])

    def default_is_best(o, rows):
        return np.where((rows == default_row).all(axis=1), 1.0, 2.0)

    r = tune_graph(g, SOC, tmp_path, builtin=False, measure=default_is_best)
    assert r.counters.repo_unsatisfied_num == 1 and r.counters.repo_add_num == 0
    assert not list(OpBank(tmp_path, SOC.name, SOC.cube_cores).entries())


def test_a_failing_operator_does_not_stop_the_others(tmp_path):
    g = small_graph()

    def flaky(o, rows):
        if isinstance(o, sim.VectorOp) and o.op_type == "SoftmaxV2":
            raise RuntimeError("device lost")
        return simulator_measure(SOC)(o, rows)

    r = tune_graph(g, SOC, tmp_path, builtin=False, measure=flaky)
    assert r.status == "tuning failed"
    assert r.failed == ["softmax"]
    section = r.to_result_section()
    assert section["tuning_failed_operators"] == ["softmax"]
    assert any(x.op_name == "relu" and x.outcome for x in r.records)


def test_parallel_workers_give_the_serial_result(tmp_path):
    g = small_graph()
    serial = tune_graph(g, SOC, tmp_path / "a", builtin=False)
    parallel = tune_graph(g, SOC, tmp_path / "b", builtin=False, workers=2)
    assert [(r.op_name, r.outcome, r.after_us) for r in serial.records] == \
        [(r.op_name, r.outcome, r.after_us) for r in parallel.records]
    a = sorted((e.op, e.id, str(e.knowledge)) for e in OpBank(tmp_path / "a", SOC.name, 24).entries())
    b = sorted((e.op, e.id, str(e.knowledge)) for e in OpBank(tmp_path / "b", SOC.name, 24).entries())
    assert a == b


def test_single_op_files_are_validated(tmp_path):
    from aoe.opat.single import load_single_ops

    bad = tmp_path / "bad.json"
    for text, msg in [("{", "not a valid"), ("[]", "no operators"), ('[{"op": "../x"}]', "CANN operator type"),
                      ('[{"op": "Add", "input_desc": [{"shape": [-1, 3]}]}]', "static dimensions"),
                      ('[{"op": "Add", "input_desc": [{"shape": [1, NaN]}]}]', "not a valid")]:
        bad.write_text(text)
        with pytest.raises(AoeError, match=msg):
            load_single_ops(bad)
    with pytest.raises(AoeError, match="does not exist"):
        load_single_ops(tmp_path / "missing.json")


def test_a_small_budget_climbs_from_canns_default():
    op = sim.MatMul(m=768, n=3072, k=4096, trans_a=True)
    space = space_for(SOC, op)
    measure = simulator_measure(SOC)
    a = search(space, op, measure, Budget(evaluations=150), seed=2)
    assert a.driver == "local" and a.evaluations <= 150
    assert a.time_us <= sim.simulate(SOC, op).time_us  # never worse than where it started
    assert space.member(a.row[None, :])[0]  # stays inside the space it searches
    b = search(space, op, measure, Budget(evaluations=150), seed=2)
    assert np.array_equal(a.row, b.row)


def test_local_search_stops_when_the_reachable_space_is_used_up():
    # a tiny space and a budget larger than it: the climb must end, not spin on seen points
    op = sim.MatMul(m=1, n=2048, k=1000)
    space = space_for(SOC, op)
    res = search(space, op, simulator_measure(SOC), Budget(evaluations=len(space.outer) - 1))
    assert res.driver == "local" and res.found and res.evaluations < len(space.outer)


def test_a_resumed_run_counts_shared_cases_once(tmp_path):
    g = small_graph()
    full = tune_graph(g, SOC, tmp_path / "a", builtin=False)
    done = {r.op_name: r for r in full.records if r.op_name in ("mm_a", "mm_b")}  # one shared case
    resumed = tune_graph(g, SOC, tmp_path / "b", builtin=False, done_ops=done)
    assert resumed.counters.total_num == full.counters.total_num
    assert resumed.counters.consistent()
