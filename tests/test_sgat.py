"""Subgraph tuning (SGAT): partition, evaluator, search quality, repo keys, bank outcomes, result section.

Models: BERT-base (batch 32, seq 128) and ResNet-50 (batch 32) training graphs as in the issue, plus
GPT-2 and MobileNetV2 training graphs at their default batch 1 (to keep the suite fast). Search quality
is checked on every distinct subgraph of all four (all have <= 65,536 plans).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aoe.graph
from aoe.bank.subgraph import SubgraphBank, make_subgraph_pending
from aoe.errors import AoeError
from aoe.graph.ir import Graph, Op, Tensor
from aoe.opat.apply import select_ops
from aoe.sgat import SGAT_SECTION_SCHEMA, SgatConfig, apply_bank, prepare, tune_graph
from aoe.sgat.evaluator import evaluate, unfused_plan
from aoe.sgat.keys import plan_knowledge
from aoe.sgat.partition import partition
from aoe.sgat.report import record_from_state
from aoe.sgat.model import BARRIER, N_SPLITS, N_TILES, S_SEPARATED, S_UB
from aoe.sgat.partition import MAX_CUBE, MAX_OPS, is_cube
from aoe.sgat.search import EXHAUSTIVE_LIMIT, all_plans, beam, dp_chain, exhaustive, search
from aoe.soc import load_soc
from aoe.tuning import INCOMPLETE, SUCCESS, Events, Outcome, improvement

SOC = "Ascend910A"
# these tests are about the custom bank: the built-in one (tests/test_bank_builtin.py) stays out
OWN = SgatConfig(builtin=False)
REPEAT = SgatConfig(repeat_tune=True, builtin=False)
MODELS = {
    "bert_base": ("zoo:bert_base", "input_ids:32,128;attention_mask:32,128"),
    "resnet50": ("zoo:resnet50", "input:32,3,224,224"),
    "gpt2": ("zoo:gpt2", None),
    "mobilenet_v2": ("zoo:mobilenet_v2", None),
}


@lru_cache(maxsize=None)
def _graph(name: str) -> Graph:
    model, shape = MODELS[name]
    return aoe.graph.load(model, shape, training=True)


@lru_cache(maxsize=None)
def _prepared(name: str):
    return prepare(_graph(name), load_soc(SOC))


class Recorder(Events):
    """Remembers what a tuner reports; stops after `stop_after` subgraphs when asked to."""

    def __init__(self, sink: list | None = None, stop_after: int | None = None) -> None:
        self.records = sink if sink is not None else []
        self.started: list[int] = []
        self.hits: list[bool] = []
        self.partial: list[tuple[int, float, str]] = []
        self.report = None
        self.stop_after = stop_after

    def start(self, n_cases, report) -> None:
        self.started.append(n_cases)
        self.report = report

    def case_done(self, records, hit) -> None:
        self.records.extend(records)
        self.hits.append(hit)
        rep = self.report
        self.partial.append((len(rep.records), rep.model_result_us, rep.status))

    def should_stop(self) -> bool:
        return self.stop_after is not None and len(self.hits) >= self.stop_after


# --- partition -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(MODELS))
def test_partition_covers_every_operator_once(name: str) -> None:
    g = _graph(name)
    subs = partition(g)
    names = [n for s in subs for n in s.op_names]
    assert sorted(names) == sorted(op.name for op in g.ops)
    assert len(set(names)) == len(names)
    region = {n: s.index for s in subs for n in s.op_names}
    for s in subs:
        assert len(s.kernels) <= MAX_OPS and sum(is_cube(op) for op in s.kernels) <= MAX_CUBE
        assert all(not op.is_view for op in s.kernels)
        if s.unsupported:
            assert len(s.kernels) == 0
    # the subgraph graph is acyclic (every subgraph can run as a unit): edges go to later starts
    first = {}
    for i, op in enumerate(g.ops):
        first.setdefault(region[op.name], i)
    producer = {t: op for op in g.ops for t in op.outputs}
    for op in g.ops:
        if op.is_view:
            continue
        for t in op.inputs:
            p = producer.get(t)
            while p is not None and p.is_view and p.inputs:
                p = producer.get(p.inputs[0])
            if p is not None and region[p.name] != region[op.name]:
                assert first[region[p.name]] < first[region[op.name]]


def test_partition_is_deterministic_and_finds_fusion_regions() -> None:
    g = _graph("bert_base")
    a = [s.op_names for s in partition(g)]
    assert a == [s.op_names for s in partition(g)]
    types = {tuple(op.type for op in s.kernels) for s in partition(g)}
    assert any("SoftmaxV2" in t and "BatchMatMulV2" in t for t in types)      # attention score region
    assert any(t[:2] == ("BatchMatMulV2", "Gelu") for t in types)             # matmul + GELU epilogue
    assert any("LayerNorm" in t and "Add" in t for t in types)                 # residual + LayerNorm
    r = {tuple(op.type for op in s.kernels) for s in partition(_graph("resnet50"))}
    assert any(t[:4] == ("Conv2D", "BNTrainingReduce", "BNTrainingUpdate", "Relu") for t in r)


def test_views_and_unsupported_ops_are_carried_at_zero_cost() -> None:
    t = {n: Tensor(n, (64, 256), "float16") for n in ("x", "a", "b", "c", "d")}
    t["x"].kind = "input"
    ops = [Op("relu", "Relu", ["x"], ["a"]), Op("view", "Reshape", ["a"], ["b"], {"view": True}),
           Op("odd", "Opaque", ["b"], ["c"], {"onnx_type": "Foo"}), Op("exp", "Exp", ["c"], ["d"])]
    g = Graph("g", t, ops, ["x"], ["d"])
    subs = partition(g)
    assert sorted(n for s in subs for n in s.op_names) == ["exp", "odd", "relu", "view"]
    odd = next(s for s in subs if "odd" in s.op_names)
    assert odd.unsupported and odd.kernels == []
    assert next(s for s in subs if "view" in s.op_names) is next(s for s in subs if "relu" in s.op_names)
    rep = tune_graph(g, SOC)
    assert rep.counters.total_num == 0 and rep.model_result_us == rep.model_baseline_us > 0


# --- evaluator -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["bert_base", "resnet50"])
def test_unfused_plan_costs_the_default_times(name: str) -> None:
    prep = _prepared(name)
    for case in prep.cases:
        rd = case.rd
        t = evaluate(rd, unfused_plan(rd)[None])[0]
        assert t == pytest.approx(rd.unfused_us(), rel=1e-12)
    total = prep.fixed_us + sum(c.rd.unfused_us() * len(c.subs) for c in prep.cases)
    assert total == pytest.approx(prep.unfused_us, rel=1e-12)
    # the baseline is the compiler's default fusion of every subgraph
    fused = prep.fixed_us + sum(c.default_us * len(c.subs) for c in prep.cases)
    assert fused == pytest.approx(prep.baseline_us, rel=1e-12) and prep.baseline_us < prep.unfused_us


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_batched_evaluation_matches_one_by_one(data: st.DataObject) -> None:
    cases = _prepared("bert_base").cases + _prepared("resnet50").cases
    rd = cases[data.draw(st.integers(0, len(cases) - 1))].rd
    e = rd.n_edges
    wild = st.lists(st.integers(-1, N_TILES), min_size=rd.plan_width, max_size=rd.plan_width)
    sane = st.tuples(st.lists(st.integers(0, 1), min_size=e, max_size=e), st.integers(0, N_SPLITS - 1),
                     st.integers(0, N_TILES - 1), st.integers(0, 1)).map(lambda r: r[0] + [r[1], r[2], r[3]])
    rows = data.draw(st.lists(st.one_of(sane, wild), min_size=1, max_size=20))
    plans = np.array(rows, dtype=np.int64)
    batched = evaluate(rd, plans)
    single = np.array([evaluate(rd, p[None])[0] for p in plans])
    assert np.array_equal(batched, single)
    bad = (plans[:, :e] < 0).any(1) | (plans[:, :e] > 1).any(1) | (plans[:, e] < 0) | (plans[:, e] >= N_SPLITS) \
        | (plans[:, e + 1] >= N_TILES) | (plans[:, e + 1] < 0) | (plans[:, e + 2] < 0) | (plans[:, e + 2] > 1)
    assert np.isinf(batched[bad]).all()
    assert not np.isnan(batched).any()
    launch = load_soc(SOC).launch_us
    for p, t in zip(plans, batched):
        if np.isfinite(t):
            # every kernel pays at least its launch
            comp = list(range(rd.n))
            for k, (a, b) in enumerate(rd.edges.tolist()):
                if p[k] == 1:
                    ra, rb = comp[a], comp[b]
                    comp = [min(ra, rb) if c in (ra, rb) else c for c in comp]
            assert t >= len(set(comp)) * launch


def test_capacity_and_barriers_make_plans_invalid() -> None:
    prep = _prepared("resnet50")
    rd = next(c.rd for c in prep.cases if c.rd.edgef[:, BARRIER].any())
    e = int(np.flatnonzero(rd.edgef[:, BARRIER])[0])
    plans = all_plans(rd)
    t = evaluate(rd, plans)
    rows = plans[:, rd.n_edges] == 0
    assert np.isinf(t[rows & (plans[:, e] == 1)]).all()   # under the row split a reduction result never
    #                                                       fuses with its reader
    # UB too small for any fused tile: every plan that fuses two Vector operators is invalid
    tiny = rd.socp.copy()
    tiny[S_UB] = 1024.0
    small = type(rd)(rd.n, rd.edges, rd.opf, rd.edgef, rd.tens, rd.tensf, rd.reach, rd.anc, tiny)
    ts = evaluate(small, plans)
    vec = rd.opf[:, 5] < 0.5
    fuses_vec = np.zeros(len(plans), dtype=bool)
    for k, (a, b) in enumerate(rd.edges):
        if vec[a] and vec[b]:
            fuses_vec |= plans[:, k] == 1
    assert fuses_vec.any() and np.isinf(ts[fuses_vec]).all()
    best = search(small)
    assert np.isfinite(best.time_us) and np.isfinite(evaluate(small, best.plan[None])[0])


def test_inconsistent_and_non_convex_plans_are_invalid() -> None:
    # a -> b -> c and a -> c: fusing a-b and b-c but not a-c is no plan; fusing only a-c is not
    # convex (b would run between two halves of one kernel)
    t = {n: Tensor(n, (64, 1024), "float16") for n in ("x", "a", "b", "c")}
    t["x"].kind = "input"
    ops = [Op("a", "Relu", ["x"], ["a"]), Op("b", "Exp", ["a"], ["b"]), Op("c", "Add", ["a", "b"], ["c"])]
    g = Graph("tri", t, ops, ["x"], ["c"])
    rd = prepare(g, load_soc(SOC)).cases[0].rd
    edges = rd.edges.tolist()
    assert edges == [[0, 1], [0, 2], [1, 2]]
    plans = all_plans(rd)
    times = evaluate(rd, plans)
    bits = plans[:, :3]
    inconsistent = (bits.sum(1) == 2)
    assert np.isinf(times[inconsistent]).all()
    assert np.isinf(times[(bits == [0, 1, 0]).all(1)]).all()
    assert np.isfinite(times[(bits == [1, 1, 1]).all(1)]).any()
    assert np.isfinite(times[(bits == [0, 0, 0]).all(1)]).all()


def test_separated_soc_hands_cube_results_through_l2() -> None:
    rd = next(c.rd for c in _prepared("bert_base").cases if c.rd.opf[0, 5] > 0.5 and c.rd.n == 2)
    plans = all_plans(rd)
    coupled = evaluate(rd, plans)
    socp = rd.socp.copy()
    socp[S_SEPARATED] = 1.0
    sep = evaluate(type(rd)(rd.n, rd.edges, rd.opf, rd.edgef, rd.tens, rd.tensf, rd.reach, rd.anc, socp), plans)
    fused = plans[:, 0] == 1
    ok = np.isfinite(coupled) & np.isfinite(sep) & fused
    assert ok.any() and (sep[ok] >= coupled[ok]).all()
    assert np.array_equal(sep[~fused], coupled[~fused])


# --- search --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(MODELS))
def test_search_is_within_one_percent_of_exhaustive(name: str) -> None:
    checked = 0
    for case in _prepared(name).cases:
        rd = case.rd
        if rd.n_plans > EXHAUSTIVE_LIMIT:
            continue
        best = exhaustive(rd)
        assert np.isfinite(best.time_us)
        for res in (search(rd), beam(rd)):
            assert np.isfinite(evaluate(rd, res.plan[None])[0])           # never an invalid plan
            assert res.time_us <= best.time_us * 1.01
            assert res.time_us >= best.time_us * (1 - 1e-12)
        if rd.is_chain:
            assert dp_chain(rd).time_us == pytest.approx(best.time_us, rel=1e-9)
        checked += 1
    assert checked == len(_prepared(name).cases) > 0


def _chain_graph(kinds: list[str], b: int, s: int, h: int, head: bool) -> Graph:
    tensors = {"x": Tensor("x", (b, s, h), "float16", kind="input")}
    ops: list[Op] = []
    cur = "x"
    if head:
        tensors["w"] = Tensor("w", (h, h), "float16", kind="param")
        tensors["mm"] = Tensor("mm", (b, s, h), "float16")
        ops.append(Op("mm", "BatchMatMulV2", ["x", "w"], ["mm"]))
        cur = "mm"
    for i, k in enumerate(kinds):
        out = f"t{i}"
        tensors[out] = Tensor(out, (b, s, h), "float16")
        ins, attrs, outs = [cur], {}, [out]
        if k in ("Add", "Mul"):
            tensors[f"p{i}"] = Tensor(f"p{i}", (h,), "float16", kind="param")
            ins.append(f"p{i}")
        if k == "SoftmaxV2":
            attrs = {"axes": [2]}
        if k == "LayerNorm":
            for n in ("g", "be"):
                tensors[f"{n}{i}"] = Tensor(f"{n}{i}", (h,), "float16", kind="param")
                ins.append(f"{n}{i}")
            attrs = {"begin_norm_axis": 2, "begin_params_axis": 2, "epsilon": 1e-5}
        ops.append(Op(f"op{i}", k, ins, outs, attrs))
        cur = out
    return Graph("chain", tensors, ops, ["x"], [cur])


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(["Relu", "Gelu", "Exp", "Add", "Mul", "SoftmaxV2", "LayerNorm", "Tanh"]),
                      min_size=1, max_size=6),
       b=st.sampled_from([1, 4, 32]), s=st.sampled_from([16, 128, 512]), h=st.sampled_from([64, 768, 4096]),
       head=st.booleans(), soc=st.sampled_from(["Ascend910A", "Ascend310P3"]))
def test_dp_is_exact_on_chains(kinds: list[str], b: int, s: int, h: int, head: bool, soc: str) -> None:
    g = _chain_graph(kinds, b, s, h, head)
    prep = prepare(g, load_soc(soc))
    for case in prep.cases:
        rd = case.rd
        assert rd.is_chain
        dp = dp_chain(rd)
        ex = exhaustive(rd)
        assert np.isfinite(dp.time_us)
        assert dp.time_us == pytest.approx(ex.time_us, rel=1e-9)
        assert evaluate(rd, dp.plan[None])[0] == pytest.approx(dp.time_us, rel=1e-12)


# --- keys ----------------------------------------------------------------------------------------

_KEYS_SCRIPT = """
import json, aoe.graph
from aoe.sgat import prepare
from aoe.soc import load_soc
g = aoe.graph.load("zoo:resnet50", "input:2,3,224,224", training=True)
print(json.dumps([c.key for c in prepare(g, load_soc("Ascend910A")).cases]))
"""


def test_repo_keys_are_stable_across_processes_and_change_with_shapes(tmp_path) -> None:
    g = aoe.graph.load("zoo:resnet50", "input:2,3,224,224", training=True)
    keys = [c.key for c in prepare(g, load_soc(SOC)).cases]
    assert len(set(keys)) == len(keys) and all(k.isdigit() for k in keys)
    env = dict(os.environ, PYTHONHASHSEED="12345")
    # outside the source tree, so the child imports the installed package (with its extension)
    out = subprocess.run([sys.executable, "-c", _KEYS_SCRIPT], capture_output=True, text=True, check=True, env=env,
                         cwd=tmp_path)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == keys
    g4 = aoe.graph.load("zoo:resnet50", "input:4,3,224,224", training=True)
    assert not set(keys) & {c.key for c in prepare(g4, load_soc(SOC)).cases}
    assert not set(keys) & {c.key for c in prepare(g, load_soc("Ascend310P3")).cases}
    # identical layers share one key: BERT's 12 encoder layers are tuned once
    bert = _prepared("bert_base")
    assert max(len(c.subs) for c in bert.cases) >= 11


# --- tune_graph, bank, report -------------------------------------------------------------------

def test_result_section_validates_and_is_deterministic() -> None:
    g = _graph("bert_base")
    a = tune_graph(g, SOC)
    b = tune_graph(g, SOC)
    sec = a.to_result_section()
    jsonschema.validate(sec, SGAT_SECTION_SCHEMA)
    assert sec == b.to_result_section()
    assert [r.to_dict() for r in a.records] == [r.to_dict() for r in b.records]
    assert a.model_result_ms < a.model_baseline_ms
    assert sec["model_performance_improvement"] == improvement(a.model_baseline_us, a.model_result_us)
    assert a.counters.consistent()
    assert len(sec["repo_modified_subgraphs"]["add_repo_subgraphs"]) == a.counters.repo_add_num
    json.dumps(sec)


def test_improvement_format() -> None:
    assert improvement(58.781, 26.876) == "118.71%"
    assert improvement(10.0, 10.0) == "0.00%"


@pytest.mark.parametrize("soc", ["Ascend910B2", "Ascend910B3"])
def test_atlas_a2_a3_is_refused(soc: str) -> None:
    g = _graph("gpt2")
    with pytest.raises(AoeError, match=rf"{soc}.*AOE_MODE=1|AOE_MODE=1.*{soc}"):
        tune_graph(g, soc)
    with pytest.raises(AoeError, match=soc):
        apply_bank(g, soc, "/nonexistent")


def test_ascend910_93_is_refused() -> None:
    from aoe.sgat.tune import check_soc

    with pytest.raises(AoeError, match="Ascend910_9391"):
        check_soc(load_soc("Ascend910B2").replace(name="Ascend910_9391"))


def test_bank_outcomes_follow_the_decision_rule(tmp_path) -> None:
    g = _graph("resnet50")
    seen = []
    first = tune_graph(g, SOC, bank_dir=tmp_path, events=Recorder(seen), config=OWN)
    c = first.counters
    assert c.consistent() and c.repo_add_num > 0 and c.repo_hit_num == 0
    assert c.repo_add_num + c.repo_unsatisfied_num == c.total_num == len(first.records) == len(seen)
    bank = SubgraphBank(tmp_path)
    stored = {e.repo_key for e in bank.entries()}
    assert stored == {r.repo_key for r in first.records if r.outcome is Outcome.ADD}
    unsat = [r for r in first.records if r.outcome is Outcome.UNSATISFIED]
    assert all(r.after_us == r.before_us == r.baseline_us for r in unsat)
    # the bank applied by `aoe verify` gives exactly the tuned model time, against the default fusion
    times = apply_bank(g, SOC, tmp_path, builtin=False)
    assert times.default_ms == pytest.approx(first.model_baseline_ms)
    assert times.tuned_ms == pytest.approx(first.model_result_ms)
    assert times.unfused_ms == pytest.approx(first.model_unfused_ms) and times.unfused_ms > times.default_ms

    # REPEAT_TUNE=False: banked cases are hits kept as they are (reserved), nothing re-tuned
    second = tune_graph(g, SOC, bank_dir=tmp_path, config=OWN)
    assert second.counters.repo_reserved_num == c.repo_add_num == second.counters.repo_hit_num
    assert second.counters.repo_unsatisfied_num == c.repo_unsatisfied_num
    assert all(r.method == "" for r in second.records if r.outcome is Outcome.RESERVED)
    assert second.model_result_us == pytest.approx(first.model_result_us)
    assert second.to_result_section()["repo_modified_subgraphs"] == {"add_repo_subgraphs": [],
                                                                     "update_repo_subgraphs": []}
    # REPEAT_TUNE=True with the optimum already banked: nothing better, all reserved
    third = tune_graph(g, SOC, bank_dir=tmp_path, config=REPEAT)
    assert third.counters.repo_reserved_num == c.repo_add_num and third.counters.repo_update_num == 0


def test_worse_banked_plan_is_updated_only_with_repeat_tune(tmp_path) -> None:
    g = _graph("bert_base")
    prep = _prepared("bert_base")
    bank = SubgraphBank(tmp_path)
    # plant the unfused plan of every case: a strategy that is in the bank but can be beaten
    for case in prep.cases:
        rd = case.rd
        base = unfused_plan(rd)
        bank.save([make_subgraph_pending(case.key, plan_knowledge(rd, base, [op.type for op in case.subs[0].kernels]),
                 rd.unfused_us(), case.default_us)])[0]
    kept = tune_graph(g, SOC, bank_dir=tmp_path, config=OWN)
    assert kept.counters.repo_reserved_num == kept.counters.total_num == len(prep.cases)
    # the banked plans are what the compiler uses: here every tunable subgraph runs unfused
    assert kept.model_result_us == pytest.approx(kept.model_unfused_us)
    assert kept.model_result_us > kept.model_baseline_us
    upd = tune_graph(g, SOC, bank_dir=tmp_path, config=REPEAT)
    cu = upd.counters
    assert cu.consistent() and cu.repo_update_num > 0 and cu.repo_add_num == 0
    assert cu.repo_update_num + cu.repo_reserved_num == cu.total_num
    sec = upd.to_result_section()
    jsonschema.validate(sec, SGAT_SECTION_SCHEMA)
    assert len(sec["repo_modified_subgraphs"]["update_repo_subgraphs"]) == cu.repo_update_num
    for r in upd.records:
        if r.outcome is Outcome.UPDATE:
            assert r.after_us < r.before_us
            entry = SubgraphBank(tmp_path).lookup(r.repo_key)
            assert entry.knowledge["plan"] == r.plan and entry.perf_us == pytest.approx(r.after_us)
    assert upd.model_result_us < kept.model_result_us


# --- more behaviour --------------------------------------------------------------------------------

def test_dynamic_and_unknown_operators_are_skipped_with_a_reason() -> None:
    t = {"x": Tensor("x", (64, 256), "float16", kind="input"), "a": Tensor("a", (64, 256), "float16"),
         "b": Tensor("b", (-1, 256), "float16"), "c": Tensor("c", (-1, 256), "float16"),
         "d": Tensor("d", (64, 256), "float16"), "e": Tensor("e", (64, 256), "float16")}
    ops = [Op("relu", "Relu", ["x"], ["a"]), Op("odd", "Opaque", ["a"], ["b"], {"onnx_type": "NonZero"}),
           Op("exp", "Exp", ["b"], ["c"]), Op("gelu", "Gelu", ["a"], ["d"]), Op("add", "Add", ["d", "a"], ["e"])]
    g = Graph("dyn", t, ops, ["x"], ["c", "e"])
    rep = tune_graph(g, SOC)
    skipped = {s["op"]: s for s in rep.skipped}
    assert set(skipped) == {"odd", "exp"}
    assert "dynamic" in skipped["exp"]["reason"]
    assert rep.counters.total_num == 1 and rep.records[0].op_types == ["Relu", "Gelu", "Add"]
    jsonschema.validate(rep.to_result_section(), SGAT_SECTION_SCHEMA)


def test_events_see_every_case_in_order() -> None:
    g = _graph("gpt2")
    ev = Recorder()
    rep = tune_graph(g, SOC, events=ev)
    assert ev.started == [rep.n_cases] and ev.report is rep
    assert [r.repo_key for r in ev.records] == [r.repo_key for r in rep.records]
    assert ev.hits == [False] * len(rep.records)                           # no bank: nothing is a hit
    assert [p[0] for p in ev.partial] == list(range(1, len(rep.records) + 1))
    assert all(p[2] == INCOMPLETE for p in ev.partial) and rep.status == SUCCESS and rep.complete
    assert ev.partial[-1][1] == pytest.approx(rep.model_result_us)
    assert all(b[1] <= a[1] + 1e-9 for a, b in zip(ev.partial, ev.partial[1:]))   # only ever gets faster


def test_should_stop_leaves_incomplete_and_done_resumes_to_the_same_section(tmp_path) -> None:
    g = _graph("bert_base")
    full = tune_graph(g, SOC, bank_dir=tmp_path / "full", config=OWN)
    assert full.status == SUCCESS and full.n_cases > 3
    ev = Recorder(stop_after=3)
    cut = tune_graph(g, SOC, bank_dir=tmp_path / "cut", events=ev, config=OWN)
    assert cut.status == INCOMPLETE and not cut.complete
    assert len(cut.records) == len(ev.records) == 3
    sec = cut.to_result_section()
    jsonschema.validate(sec, SGAT_SECTION_SCHEMA)
    assert sec["repo_summary"]["total_num"] == 3
    # the subgraphs not reached count at their baseline
    reached = sum((r.after_us - r.baseline_us) * r.count for r in cut.records)
    assert cut.model_result_us == pytest.approx(cut.model_baseline_us + reached)
    # the job stores the records' state as JSON and restores them for the next run
    done = {}
    for r in cut.records:
        back = record_from_state(json.loads(json.dumps(r.to_state())))
        assert back == r
        done[back.key] = back
    ev2 = Recorder()
    resumed = tune_graph(g, SOC, bank_dir=tmp_path / "cut", events=ev2, done=done, config=OWN)
    assert resumed.status == SUCCESS and ev2.started == [full.n_cases]
    assert all(resumed.records[i] is done[r.key] for i, r in enumerate(cut.records))   # kept, not tuned again
    assert resumed.to_result_section() == full.to_result_section()
    assert {e.repo_key: e.knowledge for e in SubgraphBank(tmp_path / "cut").entries()} == \
        {e.repo_key: e.knowledge for e in SubgraphBank(tmp_path / "full").entries()}


@pytest.mark.parametrize("name", list(MODELS))
def test_inference_graphs_tune_and_never_get_slower(name: str) -> None:
    model, shape = MODELS[name]
    g = aoe.graph.load(model, shape if name != "bert_base" else "input_ids:1,128;attention_mask:1,128")
    rep = tune_graph(g, "Ascend310P3")
    assert rep.model_result_us <= rep.model_baseline_us
    assert all(r.after_us <= r.before_us for r in rep.records)
    assert rep.counters.consistent() and rep.counters.total_num == len(rep.records)
    jsonschema.validate(rep.to_result_section(), SGAT_SECTION_SCHEMA)


def test_unusable_banked_plan_runs_the_default_fusion_and_is_replaced_with_repeat_tune(tmp_path) -> None:
    g = _graph("gpt2")
    prep = prepare(g, load_soc(SOC))
    bank = SubgraphBank(tmp_path)
    case = max(prep.cases, key=lambda c: c.rd.unfused_us())
    bank.save([make_subgraph_pending(case.key, {"plan": [7, 7, 7], "edges": []}, None)])[0]      # damaged knowledge, unknown perf
    times = apply_bank(g, SOC, tmp_path, builtin=False)
    assert times.tuned_ms == pytest.approx(times.default_ms)
    kept = tune_graph(g, SOC, bank_dir=tmp_path, config=OWN)
    rec = next(r for r in kept.records if r.repo_key == case.key)
    assert rec.outcome is Outcome.RESERVED and rec.after_us == pytest.approx(case.default_us)
    upd = tune_graph(g, SOC, bank_dir=tmp_path, config=REPEAT)
    rec = next(r for r in upd.records if r.repo_key == case.key)
    assert rec.outcome is Outcome.UPDATE and rec.after_us < rec.before_us
    assert SubgraphBank(tmp_path).lookup(case.key).knowledge["plan"] == rec.plan


def test_empty_bank_changes_nothing(tmp_path) -> None:
    g = _graph("gpt2")
    times = apply_bank(g, SOC, tmp_path, builtin=False)
    assert times.tuned_ms == pytest.approx(times.default_ms, rel=1e-12) and times.default_ms > 0
    assert not (tmp_path / "subgraph.json").exists()


def test_only_limits_the_subgraphs() -> None:
    g = _graph("bert_base")
    full = tune_graph(g, SOC)
    only = tune_graph(g, SOC, only=select_ops(g, types=["SoftmaxV2"]))
    assert 0 < only.counters.total_num < full.counters.total_num == full.n_cases
    assert only.n_cases == only.counters.total_num
    assert all("SoftmaxV2" in r.op_types for r in only.records)
    assert full.model_result_us < only.model_result_us < only.model_baseline_us
    name = next(op.name for op in g.ops if op.type == "Gelu")
    one = tune_graph(g, SOC, only={name})
    assert one.counters.total_num == 1 and any(name in inst for inst in one.records[0].instances)
    none = tune_graph(g, SOC, only=set())
    assert none.records == [] and none.model_result_us == none.model_baseline_us and none.status == SUCCESS


@pytest.mark.parametrize("shape", [(32, 64, 112, 112), (4096, 768), (8, 1024)])
def test_fused_unary_pair_costs_about_one_pass_of_the_simulator(shape: tuple[int, ...]) -> None:
    # Relu -> Abs fused moves the bytes of one Relu and adds only Abs's compute: the evaluator's
    # best plan should cost about what the simulator gives a single Relu over the same tensor
    from aoe import sim

    t = {n: Tensor(n, shape, "float16") for n in ("x", "a", "b")}
    t["x"].kind = "input"
    g = Graph("pair", t, [Op("r", "Relu", ["x"], ["a"]), Op("s", "Abs", ["a"], ["b"])], ["x"], ["b"])
    rd = prepare(g, load_soc(SOC)).cases[0].rd
    best = search(rd)
    single = sim.simulate(load_soc(SOC), sim.VectorOp("Relu", shape)).time_us
    assert best.plan[0] == 1
    assert 0.95 * single <= best.time_us <= 1.15 * single
    assert best.time_us < rd.unfused_us()


def test_column_split_needs_whole_aligned_columns_and_no_row_operators() -> None:
    from aoe.sgat.model import CROWS, CRUN

    for case in _prepared("bert_base").cases + _prepared("resnet50").cases:
        rd = case.rd
        plans = all_plans(rd)
        t = evaluate(rd, plans)
        e = rd.n_edges
        for row, time_us in zip(plans, t):
            if row[e] != 1 or not np.isfinite(time_us):
                continue
            # every fused kernel of a valid column-split plan holds whole columns, 32-byte aligned
            tile = 512 << int(row[e + 1])
            comp = list(range(rd.n))
            for k, (a, b) in enumerate(rd.edges.tolist()):
                if row[k] == 1:
                    ra, rb = comp[a], comp[b]
                    comp = [min(ra, rb) if c in (ra, rb) else c for c in comp]
            for label in set(comp):
                ops = [i for i in range(rd.n) if comp[i] == label]
                if len(ops) < 2:
                    continue
                emax = rd.opf[ops, 6].max()
                need = max(rd.opf[i, CROWS] * emax / rd.opf[i, 6] for i in ops)
                assert tile >= need
                assert all((tile // need) * rd.opf[i, CRUN] >= 32 for i in ops)
                assert all(rd.opf[i, 7] == 0 for i in ops)          # no Softmax / LayerNorm rows
