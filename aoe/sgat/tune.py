"""Subgraph tuning of a whole graph: partition, price, search, bank decision, report."""
from __future__ import annotations

import os
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple

import numpy as np

from ..bank.decision import decide, should_tune
from ..bank.paths import check_name
from ..bank.store import BUILTIN_ROOT
from ..bank.subgraph import SUBGRAPH_FILE, SubgraphBank, make_subgraph_pending
from ..errors import AoeError
from ..graph.ir import Graph, Op
from ..ops import Unsupported, describe
from ..soc import Soc, require_soc
from ..tuning import SUCCESS, Events, restore
from .default_fusion import default_plan
from .evaluator import evaluate
from .keys import describe_structure, plan_from_knowledge, plan_knowledge, repo_key
from .model import CostCache, RegionData, region_data
from .partition import Subgraph, partition
from .report import SgatReport, SubgraphRecord, subgraph_detail
from .search import search

UNSUPPORTED_PREFIXES = ("Ascend910B", "Ascend910_93")
TIE = 1e-9      # relative: a tuned plan must beat the plan in use by more than this to count as better

# A pluggable subgraph search (e.g. aoe.batch's Dask farm), set for a context (thread- and task-local):
# an object with `prepared(graph, soc)` -> the `Prepared` it already made of this very graph, or None, and
# `search(soc, case, method)` -> what `search(case.rd, method)` returns, computed elsewhere. Banks and
# records stay with tune_graph: the executor only finds plans.
subgraph_executor: ContextVar[Any] = ContextVar("aoe_sgat_subgraph_executor", default=None)


def check_soc(soc: Soc) -> None:
    """Refuse SoCs on which real AOE does not support subgraph tuning (Atlas A2/A3).

    Decided by what the SoC is, not only by its name: Atlas A2/A3 cores split Cube and Vector
    (cube_vector_split=1), so a renamed A2-style description is refused too.
    """
    if soc.separated or soc.name.startswith(UNSUPPORTED_PREFIXES):
        why = "Atlas A2/A3 series" if soc.name.startswith(UNSUPPORTED_PREFIXES) else \
            "its AI cores split Cube and Vector (cube_vector_split=1), as the Atlas A2/A3 series"
        raise AoeError(f"subgraph tuning (AOE_MODE=1) is not supported on {soc.name} ({why}); use operator "
                       "tuning (AOE_MODE=2) on this SoC, or subgraph-tune for Ascend910A / Ascend310P3")


@dataclass
class Case:
    """One distinct subgraph: its cost data, key, every instance in the graph, and the compiler's plan."""

    key: str
    rd: RegionData
    subs: list[Subgraph]
    default_plan: np.ndarray     # the compiler's default fusion (the baseline; default_fusion.py)
    default_us: float            # its time

    @property
    def unfused_us(self) -> float:
        """Time with every kernel on its own (no fusion at all)."""
        return self.rd.unfused_us()


@dataclass
class Prepared:
    """A partitioned, priced graph: the distinct tunable cases and the time of everything else."""

    subgraphs: list[Subgraph]
    cases: list[Case]
    fixed_us: float          # kernels outside tunable subgraphs, at their default time
    baseline_us: float       # the whole graph as the compiler fuses it by default (the SGAT baseline)
    unfused_us: float        # the whole graph with every kernel on its own
    skipped: list[dict[str, str]]   # operators that cannot be priced: {"op", "op_type", "reason"}


def prepare(graph: Graph, soc: Soc) -> Prepared:
    """Partition `graph`, price every kernel once, group identical subgraphs by repo_key, and give
    each distinct subgraph the compiler's default-fusion plan (the baseline).

    Operators the simulator cannot price (views excepted) are listed in `skipped` with the reason
    (a dynamic dimension, an unknown operator type) and carried along at zero cost.
    """
    costs = CostCache(soc)
    skipped: list[dict[str, str]] = []

    def priceable(g: Graph, op: Op) -> bool:
        try:
            costs.price(describe(g, op).default.sim_op)
        except (Unsupported, AoeError, ValueError, AssertionError) as exc:
            skipped.append({"op": op.name, "op_type": op.type, "reason": str(exc) or type(exc).__name__})
            return False
        return True

    subs = partition(graph, priceable)
    producer, readers, outputs = graph.links()  # the index describe() already built
    cases: dict[str, Case] = {}
    fixed = 0.0
    unfused = 0.0
    for sub in subs:
        if sub.unsupported:
            continue
        if not sub.tunable:
            for op in sub.kernels:
                t = costs.price(describe(graph, op).default.sim_op)[0]
                fixed += t
            continue
        rd = region_data(graph, sub, soc, costs, producer, readers, outputs)
        key = repo_key(describe_structure(graph, sub, soc, rd, producer))
        if key not in cases:
            # identical subgraphs (same key: same kernel types, wiring and SoC) get the same plan
            plan = default_plan(rd, sub.kernels, soc.name)
            cases[key] = Case(key, rd, [], plan, _time(rd, plan))
        cases[key].subs.append(sub)
        unfused += rd.unfused_us()
    # summed as apply_bank sums (fixed part first, then case by case): an empty bank gives this exactly
    baseline = fixed
    for case in cases.values():
        baseline += case.default_us * len(case.subs)
    return Prepared(subs, list(cases.values()), fixed, baseline, fixed + unfused, skipped)


def _time(rd: RegionData, plan: np.ndarray) -> float:
    return float(evaluate(rd, plan[None])[0])


@dataclass(frozen=True)
class SgatConfig:
    """How subgraph tuning runs (a value)."""

    repeat_tune: bool = False       # tune subgraphs found in the bank again
    method: str = "auto"            # search: auto / dp / exhaustive / beam
    builtin: bool = True            # consult the built-in subgraph bank after the custom one


def builtin_subgraph_bank(soc: Soc) -> SubgraphBank | None:
    """The read-only subgraph bank shipped for `soc` (aoe/bank/builtin/<soc>/subgraph.json), if any."""
    try:
        root = BUILTIN_ROOT / check_name(soc.name, "SoC version")  # a name, never a path
    except AoeError:
        return None  # a what-if SoC under a name no file could carry: nothing is shipped for it
    return SubgraphBank(root) if (root / SUBGRAPH_FILE).is_file() else None


def tune_graph(graph: Graph, soc: Soc, bank_dir: str | os.PathLike[str] | None = None,
               config: SgatConfig | None = None, *, only: set[str] | None = None, events: Events | None = None,
               done: Mapping[str, SubgraphRecord] | None = None) -> SgatReport:
    """Subgraph-tune `graph` on `soc`; with `bank_dir`, read and write its subgraph bank.

    Lookup: the custom bank in `bank_dir` first, then (`config.builtin`) the built-in subgraph bank;
    a built-in hit is kept (reserved) unless REPEAT_TUNE, and every write goes to the custom bank.
    Without `bank_dir` nothing is read or written, built-in bank included (every case counts as not
    in a bank). Identical
    subgraphs (same repo_key) are tuned once. `only` (operator names, e.g. a tune_ops selection)
    limits tuning to subgraphs holding one of them; the others keep their baseline and are not
    counted. `events` and `done` follow the tuner contract of `aoe.tuning`: the report is live
    (subgraphs not reached yet count at their baseline), `done` maps repo_keys of an interrupted run
    to their restored records, kept without tuning again.
    """
    soc = require_soc(soc, "aoe.sgat.tune.tune_graph")
    check_soc(soc)
    cfg = config or SgatConfig()
    events = events or Events()
    done = restore(done)
    start = time.perf_counter()
    farm = subgraph_executor.get()
    prep = (farm.prepared(graph, soc) if farm is not None else None) or prepare(graph, soc)
    bank = SubgraphBank(bank_dir) if bank_dir is not None else None
    builtin = builtin_subgraph_bank(soc) if bank is not None and cfg.builtin else None
    cases = prep.cases if only is None else [c for c in prep.cases if _selected(c, only)]
    report = SgatReport(soc=soc.name, model_baseline_us=prep.baseline_us, model_result_us=prep.baseline_us,
                        model_unfused_us=prep.unfused_us, n_subgraphs=len(prep.subgraphs), n_cases=len(cases),
                        skipped=prep.skipped)
    events.start(len(cases), report)
    for case in cases:
        if events.should_stop():
            break
        rec = done.get(case.key)
        if rec is None:
            rec = _tune_case(case, bank, builtin, cfg, soc, farm, detail=events.detail)
        report.records.append(rec)
        report.model_result_us += (rec.after_us - case.default_us) * len(case.subs)
        report.tuning_time_s = time.perf_counter() - start
        events.case_done([rec], rec.outcome.hit)
    else:
        report.status = SUCCESS
    report.tuning_time_s = time.perf_counter() - start
    return report


def _tune_case(case: Case, bank: SubgraphBank | None, builtin: SubgraphBank | None,
               cfg: SgatConfig, soc: Soc | None = None, farm: Any = None, detail: bool = False) -> SubgraphRecord:
    """Look one distinct subgraph up (custom, then built-in), tune it if the rule says so, write the
    custom bank, return its record."""
    rd = case.rd
    base, base_t = case.default_plan, case.default_us
    entry, source = _lookup_source(case.key, bank, builtin)
    in_bank = entry is not None
    in_use_plan, in_use_t = base, base_t
    if entry is not None:
        banked = plan_from_knowledge(rd, entry.knowledge)
        if banked is not None and np.isfinite(t := _time(rd, banked)):
            in_use_plan, in_use_t = banked, t
    tuned = None
    method_used = ""
    evaluated = 0
    if should_tune(in_bank, cfg.repeat_tune):
        found = farm.search(soc, case, cfg.method) if farm is not None else search(rd, cfg.method)
        method_used, evaluated = found.method, found.evaluated
        if np.isfinite(found.time_us):
            tuned = found
    # a plan only counts as better beyond float noise: a tie with the compiler's plan is no gain
    outcome = decide(in_bank, cfg.repeat_tune, in_use_t, tuned.time_us if tuned else None, min_gain=TIE)
    if outcome.writes:
        assert tuned is not None
        after_plan, after_t = tuned.plan, tuned.time_us
        if bank is not None:
            knowledge = plan_knowledge(rd, tuned.plan, [op.type for op in case.subs[0].kernels])
            bank.save([make_subgraph_pending(case.key, knowledge, tuned.time_us, base_t,
                                             {"method": tuned.method, "instances": len(case.subs)})])
    else:
        after_plan, after_t = in_use_plan, in_use_t
    return SubgraphRecord(
        repo_key=case.key, ops=case.subs[0].op_names, op_types=[op.type for op in case.subs[0].kernels],
        instances=[s.op_names for s in case.subs], baseline_us=base_t, before_us=in_use_t,
        after_us=after_t, outcome=outcome, method=method_used, plan=[int(v) for v in after_plan],
        evaluated=evaluated, source=source,
        detail=subgraph_detail(case, after_plan, after_t, in_bank or outcome.writes) if detail else None)


def _lookup_source(key: str, bank: SubgraphBank | None, builtin: SubgraphBank | None) -> tuple[Any, str | None]:
    """`_lookup` and where the entry came from: "custom", "builtin" or None."""
    for b, name in ((bank, "custom"), (builtin, "builtin")):
        if b is not None and (e := b.lookup(key)) is not None:
            return e, name
    return None, None


def _lookup(key: str, bank: SubgraphBank | None, builtin: SubgraphBank | None) -> Any:
    """The stored strategy in use for one subgraph: the custom bank's, else the built-in one's."""
    for b in (bank, builtin):
        if b is not None and (e := b.lookup(key)) is not None:
            return e
    return None


def _selected(case: Case, only: set[str]) -> bool:
    """True if a subgraph holds one of the operators in `only`."""
    return any(op.name in only for sub in case.subs for op in sub.kernels)


class BankTimes(NamedTuple):
    """Whole-graph times (ms) for `aoe verify`: the compiler's default fusion, with the bank, unfused."""

    default_ms: float
    tuned_ms: float
    unfused_ms: float


def apply_bank(graph: Graph, soc: Soc, bank_dir: str | os.PathLike[str], *,
               builtin: bool = True) -> BankTimes:
    """Times of `graph` with the compiler's default fusion and with the subgraph bank's plans applied.

    Plans come from the custom bank, then (`builtin`) the built-in one. A subgraph without a usable
    bank entry runs with the default-fusion plan, as the compiler would compile it. The fully
    unfused time is returned beside them (labelled). The banks are only read.
    """
    soc = require_soc(soc, "aoe.sgat.tune.apply_bank")
    check_soc(soc)
    prep = prepare(graph, soc)
    bank = SubgraphBank(bank_dir)
    shipped = builtin_subgraph_bank(soc) if builtin else None
    total = prep.fixed_us
    for case in prep.cases:
        rd = case.rd
        t = case.default_us
        entry = _lookup(case.key, bank, shipped)
        if entry is not None:
            plan = plan_from_knowledge(rd, entry.knowledge)
            if plan is not None:
                tp = _time(rd, plan)
                if np.isfinite(tp):
                    t = tp
        total += t * len(case.subs)
    return BankTimes(prep.baseline_us / 1000.0, total / 1000.0, prep.unfused_us / 1000.0)


def priced_subgraphs(graph: Graph, soc: Soc, bank_dir: str | os.PathLike[str] | None, *, builtin: bool = True
                     ) -> tuple[dict[str, dict[str, Any]], Any]:
    """Every distinct subgraph priced under the subgraph banks, in the form of a run record's subgraph lines
    (`aoe.job.records`; the banks are only read), and the `Prepared` graph (baseline, unfused, skipped)."""
    check_soc(soc)
    prep = prepare(graph, soc)
    bank = SubgraphBank(bank_dir) if bank_dir is not None else None
    shipped = builtin_subgraph_bank(soc) if builtin else None
    lines: dict[str, dict[str, Any]] = {}
    for case in prep.cases:
        plan, t = case.default_plan, case.default_us
        entry, source = _lookup_source(case.key, bank, shipped)
        if entry is not None:
            banked = plan_from_knowledge(case.rd, entry.knowledge)
            if banked is not None and np.isfinite(tp := _time(case.rd, banked)):
                plan, t = banked, tp
            else:
                source = None
        d = subgraph_detail(case, plan, t, entry is not None)
        lines[case.key] = dict(d, repo_key=case.key, outcome="reserved" if source else "unsatisfied",
                               provenance=source, source=source, baseline_us=case.default_us, before_us=t,
                               after_us=t, edges=[tuple(e) for e in d["edges"]])
    return lines, prep


__all__ = ["tune_graph", "priced_subgraphs", "subgraph_executor", "SgatConfig", "apply_bank", "BankTimes", "check_soc", "prepare", "Prepared", "Case"]
