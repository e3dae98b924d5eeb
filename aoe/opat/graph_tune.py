"""Graph-level operator tuning: walk the graph once, de-duplicate cases, consult the banks, tune misses.

For every operator: `aoe.ops.describe` gives its case (or a reason to skip it); identical cases are
tuned once and their result applies to every operator that shares them. A case found in the custom
or built-in bank is a *hit* and is not tuned again unless `repeat_tune`; everything else is tuned
and the decision add / update / reserved / unsatisfied (`aoe.bank.decide`, SPEC §3) says what is
written to the custom bank. A failure inside one case marks its operators failed and tuning goes on.
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..bank import BankChain, BuiltinBank, Counters, OpBank, Outcome, decide, make_pending, should_tune
from ..errors import AoeError
from ..graph import Graph
from ..ops import HIGH_PERFORMANCE, OpCase, Unsupported, Variant, describe
from ..sim import default_strategy, strategy_fields
from ..soc import Soc, load_soc
from .search import Budget, Measure, simulator_measure
from .tune import KINDS, KindGain, TuneResult, conversion_us, tune_case

SUCCESS, FAILED, INCOMPLETE = "tuning successful", "tuning failed", "tuning incomplete"


@dataclass
class OpRecord:
    """What happened to one operator (one per operator, cases shared between operators)."""

    op_name: str
    op_type: str | list[str]
    outcome: str | None = None           # add / update / reserved / unsatisfied; None when skipped/failed
    before_us: float | None = None       # strategy in use before (bank or default)
    after_us: float | None = None        # strategy in use after
    kinds: dict[str, KindGain] = field(default_factory=dict)
    skipped: str | None = None           # reason it was not tunable
    error: str | None = None             # why tuning failed
    case: str | None = None              # identity of its case (operators sharing one count once)

    @property
    def modified(self) -> bool:
        """True if its strategy was added to or updated in the custom bank."""
        return self.outcome in ("add", "update")

    def to_result(self) -> dict[str, Any]:
        """The `repo_modified_operators` entry of SPEC §4."""
        perf = {}
        for kind, g in self.kinds.items():
            if g.helped:
                perf[kind] = {"performance_after_tune(us)": round(g.after_us, 3),
                              "performance_before_tune(us)": round(g.before_us, 3),
                              "performance_improvement": improvement(g.before_us, g.after_us),
                              "update_mode": self.outcome}
        return {"op_name": self.op_name, "op_type": self.op_type, "tune_performance": perf}


def improvement(before: float, after: float) -> str:
    """SPEC §4: (before / after - 1) x 100 with two decimals, as a string with '%'."""
    if after <= 0:
        return "0.00%"
    return f"{(before / after - 1.0) * 100.0:.2f}%"


@dataclass
class OpatReport:
    """The result of operator tuning one graph."""

    graph_name: str
    soc: str
    records: list[OpRecord]
    counters: Counters
    status: str
    seconds: float
    evaluations: int
    cases_tuned: int

    @property
    def failed(self) -> list[str]:
        """Names of operators whose tuning failed."""
        return [r.op_name for r in self.records if r.error]

    @property
    def skipped(self) -> list[OpRecord]:
        """Operators that could not be tuned (unsupported, dynamic, views)."""
        return [r for r in self.records if r.skipped]

    def to_result_section(self) -> dict[str, Any] | None:
        """The `OPAT` object of a result file (SPEC §4); None when nothing was tunable."""
        if self.counters.total_num == 0 and not self.failed:
            return None
        out: dict[str, Any] = {
            "opat_tuning_result": self.status,
            "repo_modified_operators": [r.to_result() for r in self.records if r.modified],
            "repo_summary": self.counters.to_dict(),
        }
        if self.status == FAILED:
            out["tuning_failed_operators"] = self.failed
        return out


# --- applying a stored strategy ----------------------------------------------------------------

def variant_for(case: OpCase, knowledge: Mapping[str, Any]) -> tuple[Variant, dict[str, int] | None]:
    """The kernel and tiling a bank knowledge describes (None tiling: use the kernel's default)."""
    impl = knowledge.get("impl")
    if isinstance(impl, str):  # a named kernel other than the default one (GEMV, 1x1 as matmul, ...)
        for v in case.impls[1:]:
            if v.knowledge.get("impl") == impl:
                kernel = knowledge.get("kernel")
                strat = kernel.get("strategy") if isinstance(kernel, Mapping) else None
                return v, dict(strat) if isinstance(strat, Mapping) else None
    variant = case.default
    formats = knowledge.get("formats")
    if formats:
        for v in case.formats:
            if v.knowledge.get("formats") == list(formats):
                variant = v
                break
    fields = strategy_fields(variant.sim_op)
    if all(f in knowledge for f in fields):
        return variant, {f: int(knowledge[f]) for f in fields}
    return variant, None


def price(case: OpCase, soc: Soc, knowledge: Mapping[str, Any] | None, measure: Measure,
          extra_cache: dict[Any, float] | None = None) -> float:
    """Time (µs) of an operator case under a stored strategy (None = CANN's default), conversions included."""
    if knowledge is None:
        variant, strat = case.default, None
    else:
        variant, strat = variant_for(case, knowledge)
    if strat is None:
        strat = default_strategy(soc, variant.sim_op)
    fields = strategy_fields(variant.sim_op)
    row = np.array([[strat[f] for f in fields]], dtype=np.int64)
    t = float(measure(variant.sim_op, row)[0])
    return t + conversion_us(soc, variant, extra_cache if extra_cache is not None else {})


# --- the graph walk ----------------------------------------------------------------------------

def _op_type_label(op: Any) -> str | list[str]:
    fused = op.attrs.get("fused_ops") if isinstance(op.attrs, Mapping) else None
    if isinstance(fused, list) and len(fused) > 1 and all(isinstance(t, str) for t in fused):
        return list(fused)
    return op.type


def select_ops(graph: Graph, names: Iterable[str] = (), types: Iterable[str] = ()) -> set[str] | None:
    """Operators chosen by a tune_ops file (names and types are a union; a fused op with a listed type counts)."""
    names, types = set(names), set(types)
    if not names and not types:
        return None
    chosen = set()
    for op in graph.ops:
        label = _op_type_label(op)
        op_types = set(label) if isinstance(label, list) else {label}
        if op.name in names or op_types & types:
            chosen.add(op.name)
    return chosen


def _tune_worker(args: tuple[OpCase, str, tuple[str, ...], Budget, str, int, int]) -> TuneResult | str:
    case, soc_src, kinds, budget, implmode, seed, threads = args
    try:
        return tune_case(case, soc_src, kinds=kinds, budget=budget, implmode=implmode, seed=seed, threads=threads)
    except Exception as exc:  # noqa: BLE001 - one case failing must not stop the others
        return f"{type(exc).__name__}: {exc}"


def tune_graph(graph: Graph, soc: Soc | str, bank_dir: str | os.PathLike[str] | None = None, *,
               builtin: bool = True, repeat_tune: bool = False, kinds: Sequence[str] = KINDS,
               budget: Budget | None = None, measure: Measure | None = None,
               implmode: str = HIGH_PERFORMANCE, tune_ops: set[str] | None = None, workers: int = 1,
               seed: int = 0, threads: int = 1, on_start: Callable[[int], None] | None = None,
               on_case: Callable[[list[OpRecord], bool], None] | None = None,
               should_stop: Callable[[], bool] | None = None,
               done_ops: Mapping[str, OpRecord] | None = None) -> OpatReport:
    """Operator-tune every operator of `graph` once; write improvements to the custom bank in `bank_dir`.

    `bank_dir` is the operator bank directory of this SoC (`aoe.bank.resolve_op_bank_dir`), None for
    no custom bank (nothing is written). `threads` = simulator threads per tuning process (with the
    default measure). `on_case(records, hit)` is called after every case (for the real-time result
    file and progress); `should_stop()` between cases ends the run as "tuning incomplete";
    `done_ops` (from an interrupted run) are kept without re-tuning.
    """
    t0 = time.perf_counter()
    soc = load_soc(soc)
    budget = budget or Budget()
    if workers < 1:
        raise AoeError("the number of tuning workers must be at least 1")
    custom = OpBank(bank_dir, soc.name, soc.cube_cores) if bank_dir is not None else None
    chain = BankChain(custom, BuiltinBank(soc.name, soc.cube_cores) if builtin else None)
    user_measure = measure
    measure = measure or simulator_measure(soc, threads)
    done_ops = dict(done_ops or {})

    records: dict[str, OpRecord] = {}
    cases: dict[tuple[str, str], tuple[OpCase, list[Any]]] = {}
    order: list[str] = []
    for op in graph.ops:
        if tune_ops is not None and op.name not in tune_ops:
            continue
        if getattr(op, "is_view", False) or op.attrs.get("view"):
            continue  # views are not operators at run time: nothing to tune or report
        order.append(op.name)
        if op.name in done_ops:
            records[op.name] = done_ops[op.name]
            continue
        try:
            case = describe(graph, op)
        except Unsupported as exc:
            records[op.name] = OpRecord(op.name, _op_type_label(op), skipped=str(exc))
            continue
        except AoeError as exc:
            records[op.name] = OpRecord(op.name, _op_type_label(op), error=str(exc))
            continue
        cases.setdefault(case.case_id, (case, []))[1].append(op)

    counters = Counters()
    counted: set[str] = set()
    for rec in done_ops.values():  # a case shared by several finished operators counts once
        ident = rec.case or rec.op_name
        if rec.outcome and ident not in counted:
            counted.add(ident)
            counters.record(Outcome(rec.outcome))
    if on_start is not None:
        on_start(len(cases))

    pending_tune: list[tuple[tuple[str, str], OpCase, Any, float | None, float]] = []
    stopped = False
    evaluations = 0
    extra_cache: dict[Any, float] = {}

    def finish(cid: tuple[str, str], case: OpCase, entry: Any, in_use: float | None, default_t: float,
               result: TuneResult | str | None) -> None:
        nonlocal evaluations
        ops = cases[cid][1]
        in_bank = entry is not None
        ident = repr(cid)
        if isinstance(result, str):
            for op in ops:
                records[op.name] = OpRecord(op.name, _op_type_label(op), error=result, case=ident)
            if on_case is not None:
                on_case([records[op.name] for op in ops], in_bank)
            return
        tuned = result.after_us if result is not None else None
        outcome = decide(in_bank, repeat_tune, in_use, tuned)
        counters.record(outcome)
        kinds_out: dict[str, KindGain] = {}
        if result is not None:
            evaluations += result.evaluations
            if outcome.writes:
                kinds_out = _kinds_against(result, in_use if in_bank else result.before_us)
                if custom is not None:
                    custom.save([make_pending(case.op_type, case.key, result.knowledge, result.after_us,
                                              default_t, {"soc": soc.name, "kinds": sorted(result.helped_kinds())})])
        after = tuned if outcome.writes else in_use
        for op in ops:
            records[op.name] = OpRecord(op.name, _op_type_label(op), outcome.value, in_use, after, kinds_out,
                                        case=ident)
        if on_case is not None:
            on_case([records[op.name] for op in ops], in_bank)

    for cid, (case, ops) in cases.items():
        if should_stop is not None and should_stop():
            stopped = True
            break
        try:
            entry = chain.lookup(case.op_type, case.key)
            default_t = price(case, soc, None, measure, extra_cache)
            in_use = default_t
            if entry is not None:
                try:
                    in_use = price(case, soc, entry.knowledge, measure, extra_cache)
                except (AoeError, KeyError, ValueError, TypeError):
                    in_use = entry.perf_us  # a record aoe cannot re-price (e.g. from real CANN)
                if in_use is None or not np.isfinite(in_use):
                    in_use = entry.perf_us
        except Exception as exc:  # noqa: BLE001 - a broken measure fails this case only
            finish(cid, case, None, None, 0.0, f"{type(exc).__name__}: {exc}")
            continue
        if not should_tune(entry is not None, repeat_tune):
            finish(cid, case, entry, in_use, default_t, None)
            continue
        if workers > 1 and user_measure is None:
            pending_tune.append((cid, case, entry, in_use, default_t))
            continue
        try:
            # the simulator's own measure stays implicit so the search may prune with its bound
            result: TuneResult | str = tune_case(case, soc, kinds=kinds, budget=budget, measure=user_measure,
                                                 implmode=implmode, seed=seed, threads=threads)
        except Exception as exc:  # noqa: BLE001 - one case failing must not stop the others
            result = f"{type(exc).__name__}: {exc}"
        finish(cid, case, entry, in_use, default_t, result)

    if pending_tune and not stopped:
        soc_src = soc.source or soc.name
        jobs = [(case, soc_src, tuple(kinds), budget, implmode, seed, threads) for _, case, _, _, _ in pending_tune]
        with ProcessPoolExecutor(max_workers=workers) as pool:
            # results come back in submission order, so the run is identical to a serial one
            for (cid, case, entry, in_use, default_t), result in zip(pending_tune, pool.map(_tune_worker, jobs)):
                finish(cid, case, entry, in_use, default_t, result)
                if should_stop is not None and should_stop():
                    stopped = True
                    pool.shutdown(cancel_futures=True)
                    break

    missing = [name for name in order if name not in records]
    recs = [records[name] for name in order if name in records]
    if stopped or missing:
        status = INCOMPLETE
    elif any(r.error for r in recs):
        status = FAILED
    else:
        status = SUCCESS
    return OpatReport(graph.name, soc.name, recs, counters, status, time.perf_counter() - t0, evaluations,
                      sum(1 for _ in cases))


def _kinds_against(result: TuneResult, in_use: float | None) -> dict[str, KindGain]:
    """Per-kind gains of a tuned case; for an update the first helping kind starts from the bank's time."""
    kinds = dict(result.kinds)
    if in_use is not None and kinds:
        first = next((k for k in KINDS if k in kinds and kinds[k].helped), None)
        if first is not None and in_use != result.before_us:
            g = kinds[first]
            kinds[first] = KindGain(in_use if in_use > g.after_us else g.before_us, g.after_us)
    return kinds
