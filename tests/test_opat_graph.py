"""OPAT over a graph: the walk, bank outcomes, failures, workers, resume (`done`) and the events contract."""
from __future__ import annotations

import dataclasses

import jsonschema
import numpy as np
import pytest

from aoe import AoeError, sim
from aoe.bank import OpBank, make_pending
from aoe.ops import describe
from aoe.opat import Budget, OpatConfig, simulator_measure, tune_graph
from aoe.opat.apply import select_ops
from aoe.opat.report import OPAT_SECTION_SCHEMA, record_from_state
from aoe.opat.tune import tune_case
from aoe.soc import load_soc
from aoe.tuning import FAILED, INCOMPLETE, SUCCESS, Events
from conftest import mm_op, single_ops_graph, small_opat_graph, vec_op

SOC = load_soc("Ascend910B2")
NO_BUILTIN = OpatConfig(builtin=False)


class Recorder(Events):
    """Remembers every event in order; stops after `stop_after` cases when asked to."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.log: list[tuple] = []
        self.report = None
        self.stop_after = stop_after
        self.cases = 0

    def start(self, n_cases, report):
        self.log.append(("start", n_cases))
        self.report = report

    def case_done(self, records, hit):
        self.cases += 1
        self.log.append(("case", tuple(r.op_name for r in records), hit, self.report.status))

    def should_stop(self):
        return self.stop_after is not None and self.cases >= self.stop_after


def _bank_items(path):
    return sorted((e.op, e.id, str(e.knowledge)) for e in OpBank(path, SOC.name, SOC.cube_cores).entries())


# --- the graph walk and the bank ----------------------------------------------------------------

def test_graph_tuning_outcomes_follow_the_bank_rules(tmp_path):
    g = small_opat_graph()
    first = tune_graph(g, SOC, tmp_path, NO_BUILTIN)
    c = first.counters
    assert c.consistent() and c.repo_hit_num == 0
    assert c.total_num == 3  # mm_a/mm_b share a case; mystery is skipped
    assert c.repo_add_num + c.repo_unsatisfied_num == 3
    assert first.cases_tuned == 3
    assert [r.op_name for r in first.skipped] == ["mystery"]
    assert first.status == SUCCESS
    section = first.to_result_section()
    jsonschema.validate(section, OPAT_SECTION_SCHEMA)
    assert {r["op_name"] for r in section["repo_modified_operators"]} >= {"mm_a", "mm_b"}
    assert len(_bank_items(tmp_path)) == c.repo_add_num

    second = tune_graph(g, SOC, tmp_path, NO_BUILTIN)
    assert second.counters.repo_hit_num == c.repo_add_num
    assert second.counters.repo_reserved_num == c.repo_add_num
    assert second.evaluations <= first.evaluations - 1  # hits are not tuned again
    assert not second.to_result_section()["repo_modified_operators"]

    again = tune_graph(g, SOC, tmp_path, dataclasses.replace(NO_BUILTIN, repeat_tune=True))
    assert again.counters.repo_update_num == 0  # nothing better than the tuned strategies exists
    assert again.counters.repo_reserved_num == c.repo_add_num and again.counters.consistent()


def test_without_a_bank_dir_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rep = tune_graph(small_opat_graph(), SOC, None, NO_BUILTIN)
    assert rep.counters.total_num == 3 and rep.counters.repo_add_num >= 1
    assert not list(tmp_path.iterdir())


def test_a_worse_bank_entry_is_updated_under_repeat_tune(tmp_path):
    g = single_ops_graph([mm_op(1024, 1024, 1024, "mm")])
    case = describe(g, g.ops[0])
    bad = sim.default_strategy(SOC, case.default.sim_op)
    bad = dict(bad, usedCoreNum=1, singleCoreM=1024, singleCoreN=1024)  # one core: slow but valid
    slow = sim.simulate(SOC, case.default.sim_op, bad)
    assert slow.valid
    bank = OpBank(tmp_path, SOC.name, SOC.cube_cores)
    bank.save([make_pending(case.op_type, case.key, {**bad, "impl": "standard"}, slow.time_us)])[0]
    hit = tune_graph(g, SOC, tmp_path, NO_BUILTIN)
    assert hit.counters.repo_reserved_num == 1 and hit.records[0].before_us == pytest.approx(slow.time_us)
    upd = tune_graph(g, SOC, tmp_path, dataclasses.replace(NO_BUILTIN, repeat_tune=True))
    assert upd.counters.repo_update_num == 1
    rec = upd.to_result_section()["repo_modified_operators"][0]
    first_kind = next(iter(rec["tune_performance"].values()))
    assert first_kind["update_mode"] == "update"
    assert first_kind["performance_before_tune(us)"] == pytest.approx(slow.time_us, abs=1e-3)
    assert bank.lookup(case.op_type, case.key).perf_us < slow.time_us


def test_unsatisfied_when_nothing_beats_the_default(tmp_path):
    g = single_ops_graph([vec_op("Relu", (64, 1024), "relu")])
    case = describe(g, g.ops[0])
    d = sim.default_strategy(SOC, case.default.sim_op)
    default_row = np.array([d[f] for f in sim.strategy_fields(case.default.sim_op)])

    def default_is_best(o, rows):
        return np.where((rows == default_row).all(axis=1), 1.0, 2.0)

    r = tune_graph(g, SOC, tmp_path, dataclasses.replace(NO_BUILTIN, measure=default_is_best))
    assert r.counters.repo_unsatisfied_num == 1 and r.counters.repo_add_num == 0
    assert r.records[0].outcome == "unsatisfied" and r.records[0].after_us == r.records[0].before_us == 1.0
    assert not _bank_items(tmp_path)


def test_a_failing_operator_does_not_stop_the_others(tmp_path):
    g = small_opat_graph()

    def flaky(o, rows):
        if isinstance(o, sim.VectorOp) and o.op_type == "SoftmaxV2":
            raise RuntimeError("device lost")
        return simulator_measure(SOC)(o, rows)

    r = tune_graph(g, SOC, tmp_path, dataclasses.replace(NO_BUILTIN, measure=flaky))
    assert r.status == FAILED
    assert r.failed == ["softmax"]
    assert "device lost" in next(x.error for x in r.records if x.op_name == "softmax")
    section = r.to_result_section()
    jsonschema.validate(section, OPAT_SECTION_SCHEMA)
    assert section["tuning_failed_operators"] == ["softmax"]
    assert any(x.op_name == "relu" and x.outcome for x in r.records)


def test_only_limits_the_operators():
    g = small_opat_graph()
    only = tune_graph(g, SOC, None, NO_BUILTIN, only={"relu", "mm_b"})
    assert [r.op_name for r in only.records] == ["mm_b", "relu"]
    assert only.counters.total_num == 2
    nothing = tune_graph(g, SOC, None, NO_BUILTIN, only=set())
    assert nothing.records == [] and nothing.to_result_section() is None


def test_config_values_are_checked():
    with pytest.raises(AoeError, match="workers"):
        OpatConfig(workers=0)
    with pytest.raises(AoeError, match="tuning kinds"):
        OpatConfig(kinds=("Tiling",))
    with pytest.raises(AoeError, match="op_select_implmode"):
        OpatConfig(implmode="exact")


def test_parallel_workers_give_the_serial_result(tmp_path):
    g = small_opat_graph()
    serial = tune_graph(g, SOC, tmp_path / "a", NO_BUILTIN)
    parallel = tune_graph(g, SOC, tmp_path / "b", dataclasses.replace(NO_BUILTIN, workers=2, inline_s=0))
    assert [(r.op_name, r.outcome, r.after_us) for r in serial.records] == \
        [(r.op_name, r.outcome, r.after_us) for r in parallel.records]
    assert serial.to_result_section() == parallel.to_result_section()
    assert _bank_items(tmp_path / "a") == _bank_items(tmp_path / "b")


class _RecordingPool:
    """A stand-in for the worker pool: runs each job here and records which cases were handed to it."""

    def __init__(self, jobs: list) -> None:
        self.jobs = jobs

    def __enter__(self) -> "_RecordingPool":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn, jobs):
        jobs = list(jobs)
        self.jobs.extend(job[0].key for job in jobs)
        return [fn(job) for job in jobs]

    def shutdown(self, cancel_futures: bool = False) -> None:
        return None


def test_a_job_with_workers_tunes_its_first_cpu_seconds_itself(monkeypatch):
    """Workers start only once `inline_s` CPU seconds went into tuning here; the result is the serial one."""
    import aoe.opat.graph_tune as gt

    g = small_opat_graph()
    cfg = dataclasses.replace(NO_BUILTIN, budget=Budget(evaluations=500))
    serial = tune_graph(g, SOC, None, cfg).to_result_section()
    monkeypatch.setattr(gt, "WORKERS_WORTH", 0.0)   # whatever the estimate of the work left: workers
    handed: dict[float, list] = {}
    for inline_s in (0.0, 1e-9, 3600.0):    # workers at once; after the first case; never
        handed[inline_s] = []
        monkeypatch.setattr(gt, "worker_pool", lambda n, rec=handed[inline_s]: _RecordingPool(rec))
        mixed = tune_graph(g, SOC, None, dataclasses.replace(cfg, workers=2, inline_s=inline_s))
        assert mixed.to_result_section() == serial
    n = len(handed[0.0])
    assert n >= 3
    assert handed[1e-9] == handed[0.0][1:] and handed[3600.0] == []
    with pytest.raises(AoeError, match="inline_s"):
        OpatConfig(inline_s=-1.0)
    # an embedding program's wrong types are input errors too, not a TypeError from a comparison
    for bad in ("0.5", True, None, [1]):
        with pytest.raises(AoeError, match="inline_s" if bad is not None else "workers"):
            OpatConfig(inline_s=bad) if bad is not None else OpatConfig(workers=bad)
    for bad in ("2", 2.0, True):
        with pytest.raises(AoeError, match="workers"):
            OpatConfig(workers=bad)
    assert OpatConfig(workers=np.int64(2), inline_s=np.float64(0.5)).workers == 2


def test_workers_start_only_when_the_work_left_is_worth_them(monkeypatch):
    """After `inline_s`, the cases left stay in this process when their estimated CPU (cases x the CPU per
    case so far) is under WORKERS_WORTH x the pool's start-up CPU; the result is the serial one."""
    import aoe.opat.graph_tune as gt

    assert gt.workers_worth(10_000, 0.01, 2) and not gt.workers_worth(10, 0.01, 2)
    assert not gt.workers_worth(1, 1000.0, 8)           # one case left: a worker would only add its start-up
    g = small_opat_graph()
    cfg = dataclasses.replace(NO_BUILTIN, budget=Budget(evaluations=500))
    serial = tune_graph(g, SOC, None, cfg).to_result_section()
    handed: list = []
    monkeypatch.setattr(gt, "worker_pool", lambda n: _RecordingPool(handed))
    small = tune_graph(g, SOC, None, dataclasses.replace(cfg, workers=2, inline_s=1e-9))
    assert small.to_result_section() == serial and handed == []     # a few small cases: no workers
    monkeypatch.setattr(gt, "WORKER_START_CPU_S", (0.0, 0.0))          # free workers are always worth it
    free = tune_graph(g, SOC, None, dataclasses.replace(cfg, workers=2, inline_s=1e-9))
    assert free.to_result_section() == serial and len(handed) >= 2


def test_workers_tune_a_what_if_soc_as_given():
    """A SoC changed in memory reaches the worker processes; they must not reload the shipped file."""
    g = small_opat_graph()
    slow_hbm = SOC.replace(hbm_gbps=SOC.hbm_gbps / 8)
    cfg = dataclasses.replace(NO_BUILTIN, budget=Budget(evaluations=2000))
    serial = tune_graph(g, slow_hbm, None, cfg)
    parallel = tune_graph(g, slow_hbm, None, dataclasses.replace(cfg, workers=2, inline_s=0))
    shipped = tune_graph(g, SOC, None, cfg)
    assert [r.after_us for r in parallel.records] == [r.after_us for r in serial.records]
    assert sum(r.after_us or 0 for r in parallel.records) > sum(r.after_us or 0 for r in shipped.records)


# --- the tuner contract: events, stop, resume ------------------------------------------------------

def test_events_start_once_then_one_case_done_per_case():
    ev = Recorder()
    rep = tune_graph(small_opat_graph(), SOC, None, NO_BUILTIN, events=ev)
    assert ev.log[0] == ("start", 3) and sum(1 for e in ev.log if e[0] == "start") == 1
    cases = ev.log[1:]
    assert [c[1] for c in cases] == [("mm_a", "mm_b"), ("softmax",), ("relu",)]   # a shared case: one event
    assert all(c[2] is False for c in cases)                  # nothing was in a bank
    assert all(c[3] == INCOMPLETE for c in cases)             # the live report says so until the end
    assert ev.report is rep and rep.status == SUCCESS


def test_hits_are_reported_as_hits(tmp_path):
    g = small_opat_graph()
    first = tune_graph(g, SOC, tmp_path, NO_BUILTIN)
    ev = Recorder()
    tune_graph(g, SOC, tmp_path, NO_BUILTIN, events=ev)
    added = {r.op_name for r in first.records if r.outcome == "add"}
    for _, names, hit, _ in ev.log[1:]:
        assert hit == bool(set(names) & added)


@pytest.mark.parametrize("workers", [1, 2])
def test_should_stop_ends_incomplete_with_a_valid_partial_section(tmp_path, workers):
    g = small_opat_graph()
    ev = Recorder(stop_after=1)
    rep = tune_graph(g, SOC, tmp_path, dataclasses.replace(NO_BUILTIN, workers=workers), events=ev)
    assert rep.status == INCOMPLETE
    assert [e[1] for e in ev.log[1:]] == [("mm_a", "mm_b")]          # no case after the stop
    assert {r.op_name for r in rep.records if r.outcome} == {"mm_a", "mm_b"}
    sec = rep.to_result_section()
    jsonschema.validate(sec, OPAT_SECTION_SCHEMA)
    assert sec["opat_tuning_result"] == INCOMPLETE and sec["repo_summary"]["total_num"] == 1
    assert "tuning_failed_operators" not in sec


def test_resume_from_state_gives_the_uninterrupted_result(tmp_path):
    g = small_opat_graph()
    full = tune_graph(g, SOC, tmp_path / "full", NO_BUILTIN)
    ev = Recorder(stop_after=2)
    cut = tune_graph(g, SOC, tmp_path / "cut", NO_BUILTIN, events=ev)
    assert cut.status == INCOMPLETE
    # what the job keeps on disk between the runs: the records' JSON state
    done = {r.key: record_from_state(r.to_state()) for r in cut.records if not r.skipped}
    assert set(done) == {"mm_a", "mm_b", "softmax"}
    ev2 = Recorder()
    resumed = tune_graph(g, SOC, tmp_path / "cut", NO_BUILTIN, events=ev2, done=done)
    assert ev2.log[0] == ("start", 1) and [e[1] for e in ev2.log[1:]] == [("relu",)]   # only what was left
    assert resumed.status == SUCCESS
    assert resumed.to_result_section() == full.to_result_section()
    assert resumed.counters == full.counters
    assert _bank_items(tmp_path / "cut") == _bank_items(tmp_path / "full")


def test_a_resumed_run_counts_shared_cases_once(tmp_path):
    g = small_opat_graph()
    full = tune_graph(g, SOC, tmp_path / "a", NO_BUILTIN)
    done = {r.op_name: r for r in full.records if r.op_name in ("mm_a", "mm_b")}  # one shared case
    resumed = tune_graph(g, SOC, tmp_path / "b", NO_BUILTIN, done=done)
    assert resumed.counters.total_num == full.counters.total_num
    assert resumed.counters.consistent()
    assert resumed.cases_tuned == 2           # softmax and relu; the matmul case was kept


# --- honest figures: the strategy in use, failed cases, fused operators, precision mode -------------

def test_an_update_starts_from_the_bank_strategy_not_from_the_default(tmp_path):
    g = single_ops_graph([mm_op(4096, 4096, 1024, "mm")])
    g.tensors["mm:in0"].kind = "activation"
    case = describe(g, g.ops[0])
    budget = Budget(evaluations=3_000)
    # the bank holds a strategy better than CANN's default but worse than what full tuning finds
    held = tune_case(case, SOC, kinds=("Schedule",), budget=budget)
    default_t = held.before_us
    assert held.after_us < default_t
    OpBank(tmp_path, SOC.name, SOC.cube_cores).save([make_pending(case.op_type, case.key, held.knowledge,
                                                                  held.after_us)])
    upd = tune_graph(g, SOC, tmp_path, dataclasses.replace(NO_BUILTIN, repeat_tune=True, budget=budget))
    rec = upd.records[0]
    assert rec.outcome == "update" and rec.before_us == pytest.approx(held.after_us)
    steps = list(rec.kinds.values())
    assert steps and steps[0].before_us == pytest.approx(held.after_us)            # not the default's time
    assert all(s.before_us > s.after_us for s in steps)
    ratio = float(np.prod([s.before_us / s.after_us for s in steps]))
    assert ratio == pytest.approx(rec.before_us / rec.after_us)                   # the kinds add up
    perf = upd.to_result_section()["repo_modified_operators"][0]["tune_performance"]
    first = perf[next(iter(rec.kinds))]
    assert first["performance_before_tune(us)"] == pytest.approx(held.after_us, abs=1e-3)
    assert all(v["performance_before_tune(us)"] < default_t - 1e-3 for v in perf.values())


def test_failed_cases_are_counted_so_every_case_is_in_the_total(tmp_path):
    g = small_opat_graph()

    def flaky(o, rows):
        if isinstance(o, sim.VectorOp) and o.op_type == "SoftmaxV2":
            raise RuntimeError("device lost")
        return simulator_measure(SOC)(o, rows)

    r = tune_graph(g, SOC, tmp_path, dataclasses.replace(NO_BUILTIN, measure=flaky))
    c = r.counters
    assert r.status == FAILED and c.total_num == r.cases_tuned == 3 and c.consistent()
    sm = next(x for x in r.records if x.op_name == "softmax")
    assert sm.error and sm.outcome == "unsatisfied"             # not in a bank, nothing written
    assert c.repo_unsatisfied_num >= 1
    # in a bank already: the failed case keeps the bank's strategy, so it is reserved
    case = describe(g, next(op for op in g.ops if op.name == "softmax"))
    strat = sim.default_strategy(SOC, case.default.sim_op)
    OpBank(tmp_path, SOC.name, SOC.cube_cores).save([make_pending(case.op_type, case.key, strat, 9.0)])
    again = tune_graph(g, SOC, tmp_path, dataclasses.replace(NO_BUILTIN, measure=flaky, repeat_tune=True))
    sm = next(x for x in again.records if x.op_name == "softmax")
    assert sm.error and sm.outcome == "reserved" and again.counters.consistent()
    assert again.counters.total_num == 3 and again.counters.repo_hit_num >= 1
    jsonschema.validate(again.to_result_section(), OPAT_SECTION_SCHEMA)


def test_a_fused_operator_is_reported_under_all_its_names_and_types(tmp_path):
    g = small_opat_graph()
    mm = g.ops[0]
    mm.attrs.update(fused_names=["enc/dense/MatMul", "enc/output/add"], fused_ops=["MatMulV2", "Add"])
    rep = tune_graph(g, SOC, tmp_path, NO_BUILTIN)
    entry = next(e for e in rep.to_result_section()["repo_modified_operators"] if e["op_name"].startswith("enc/"))
    assert entry["op_name"] == "enc/dense/MatMulenc/output/add" and entry["op_type"] == ["MatMulV2", "Add"]
    rec = next(r for r in rep.records if r.op_name == mm.name)
    assert record_from_state(rec.to_state()) == rec and rec.result_name == entry["op_name"]
    assert select_ops(g, names=["enc/output/add"]) == {mm.name}        # a tune_ops name of one of its operators
    assert select_ops(g, types=["Add"]) == {mm.name}
    # the names are provenance, never part of a bank key
    assert describe(g, mm).key == describe(small_opat_graph(), small_opat_graph().ops[0]).key


def test_the_precision_mode_reaches_the_tuner_from_the_job(env):
    from aoe.job.api import TuneOptions, tune
    from aoe.job.cli import job_parser
    from aoe.job.settings import settings_from_env

    with pytest.raises(AoeError, match="--op_select_implmode 'fast' is not valid; use high_performance"):
        settings_from_env(soc="Ascend910B2", implmode="fast")
    assert settings_from_env(soc="Ascend910B2").implmode == "high_performance"
    assert job_parser().parse_args(["-m", "x", "--op_select_implmode", "high_precision"]).op_select_implmode \
        == "high_precision"
    g = single_ops_graph([mm_op(64, 16384, 64, "long_k")])
    impls = {}
    for mode in ("high_performance", "high_precision"):
        bank = env / mode
        bank.mkdir()
        res = tune(g, "op", "Ascend910B2", bank, env, options=TuneOptions(implmode=mode, budget=4000, lock=False))
        assert res.status == SUCCESS
        (entry,) = OpBank(bank / "Ascend910B2", SOC.name, SOC.cube_cores).entries()
        impls[mode] = entry.knowledge["impl"]
    assert impls == {"high_performance": "split_k", "high_precision": impls["high_precision"]}
    assert impls["high_precision"] != "split_k"


def test_a_stored_strategy_invalid_on_this_soc_never_wins(tmp_path):
    """An in-range record whose tiling the simulator rejects (here: L0A overflow) with a tiny claimed time:
    the compiler would run its default, so that is the time in use, verify says so, and tuning replaces it
    even without REPEAT_TUNE."""
    from aoe.opat.apply import apply_bank, price

    g = single_ops_graph([mm_op(256, 512, 256, "mm")])
    case = describe(g, g.ops[0])
    bad = dict(sim.default_strategy(SOC, case.default.sim_op), baseM=256, baseK=256, baseN=256)
    measure = simulator_measure(SOC)
    assert not np.isfinite(price(case, SOC, bad, measure))          # invalid, not merely slow
    bank = OpBank(tmp_path, SOC.name, SOC.cube_cores)
    bank.save([make_pending(case.op_type, case.key, bad, 0.001)])   # the claim: 0.001 us
    ops, _ = apply_bank(g, SOC, tmp_path, builtin=False)
    default_t = price(case, SOC, None, measure)
    assert ops[0].source == "invalid custom record" and ops[0].tuned_us == pytest.approx(default_t)
    r = tune_graph(g, SOC, tmp_path, dataclasses.replace(NO_BUILTIN, budget=Budget(evaluations=2000)))
    rec = r.records[0]
    assert rec.outcome == "update" and rec.before_us == pytest.approx(default_t) and rec.after_us < default_t
    stored = OpBank(tmp_path, SOC.name, SOC.cube_cores).lookup(case.op_type, case.key)
    assert stored.knowledge != bad and np.isfinite(price(case, SOC, stored.knowledge, measure))
