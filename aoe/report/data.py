"""What a report shows, gathered once: the result file's task, and the model re-priced under the banks.

The result file only lists the operators (or subgraphs) a job modified, so the figures of the whole
model come from pricing its graph again, exactly as `aoe verify` does: every operator with CANN's
default strategy and with the strategy the operator banks give (`aoe.opat.apply`: `price`,
`variant_for`), and for subgraph tuning every distinct subgraph with the compiler's default fusion and
with the subgraph bank's plan (`aoe.sgat.prepare`). Identical operators (same case) are simulated once
in detail (`aoe.sim.simulate_batch`: busy time per pipe, bound, bytes, FLOPs).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import sim
from ..bank import BankChain, BuiltinBank, OpBank
from ..errors import AoeError
from ..safeio import parse_json, read_regular
from ..graph import Graph
from ..opat.apply import op_type_label, operator_cases, price, variant_for
from ..opat.search import simulator_measure
from ..ops import OpCase, Variant
from ..soc import Soc, load_soc
from ..tuning import INCOMPLETE, SUCCESS, improvement

MAX_RESULT_BYTES = 64 << 20      # a result file larger than this is not one of ours


@dataclass(frozen=True)
class Kernel:
    """One strategy of one operator case, simulated: what the roofline and the pipe charts draw."""

    label: str                    # kernel variant (format / implementation), "default" for CANN's own
    time_us: float                # kernel time (conversions excluded)
    bound: str                    # the pipe with the most busy time
    busy_us: dict[str, float]
    hbm_bytes: float
    l2_bytes: float
    flops: float
    strategy: dict[str, int]

    @property
    def intensity(self) -> float:
        """FLOPs per HBM byte (the roofline's x)."""
        return self.flops / self.hbm_bytes if self.hbm_bytes > 0 else 0.0

    @property
    def tflops(self) -> float:
        """Achieved TFLOP/s (the roofline's y)."""
        return self.flops / (self.time_us * 1e-6) / 1e12 if self.time_us > 0 else 0.0


@dataclass
class CaseView:
    """A distinct operator case: its default and in-use kernels and how many operators share it."""

    op_type: str
    family: str
    default: Kernel
    tuned: Kernel
    count: int = 0


@dataclass
class OpRow:
    """One operator of the model, priced both ways (µs, conversions included, as `aoe verify`)."""

    name: str
    op_type: str
    default_us: float
    tuned_us: float
    source: str                   # custom / builtin / default
    case: int                     # index into ReportData.cases
    kinds: list[str] = field(default_factory=list)   # tuning kinds the result file credits
    update: str = ""              # the bank outcome the result file records (add / update / ...)

    @property
    def saved_us(self) -> float:
        """Time tuning saved on this operator."""
        return self.default_us - self.tuned_us


@dataclass
class SubgraphView:
    """A distinct subgraph under SGAT: the default-fusion plan against the plan in use."""

    key: str
    op_types: list[str]           # kernel types, topological order
    edges: list[tuple[int, int]]
    default_groups: list[list[int]]
    tuned_groups: list[list[int]]
    default_flags: dict[str, Any]
    tuned_flags: dict[str, Any]
    default_us: float
    tuned_us: float
    unfused_us: float
    instances: int
    in_bank: bool
    in_result: bool               # the result file lists this repo_key

    @property
    def gain_us(self) -> float:
        """Time saved over all instances."""
        return (self.default_us - self.tuned_us) * self.instances


@dataclass
class ReportData:
    """Everything the page shows (plain values: the page and the charts only read it)."""

    kind: str                     # "opat" | "sgat"
    tuning_name: str
    model: str
    task: str
    status: str
    tuning_seconds: float | None
    soc: Soc
    counters: dict[str, Any]
    settings: list[str]
    ops: list[OpRow]
    cases: list[CaseView]
    skipped: list[dict[str, str]]
    subgraphs: list[SubgraphView] = field(default_factory=list)
    model_default_us: float = 0.0
    model_tuned_us: float = 0.0
    model_unfused_us: float | None = None
    notes: list[str] = field(default_factory=list)
    n_tasks: int = 1              # tasks in the result file (several: one report per task)

    @property
    def improvement(self) -> str:
        """The whole model's gain figure."""
        return improvement(self.model_default_us, self.model_tuned_us)


# --- the result file ------------------------------------------------------------------------------

def read_result(path: str | os.PathLike[str], task: str | None = None
                ) -> tuple[str, str, dict[str, Any], dict[str, Any], int]:
    """(task key, kind, basic, section, number of tasks) of one task of a result file (the last unless `task`)."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise AoeError(f"cannot read the result file {p}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise AoeError(f"{p} is not a regular file: give the aoe_result_*.json file a job wrote")
    if st.st_size > MAX_RESULT_BYTES:
        raise AoeError(f"{p} is {st.st_size} bytes, larger than any result file ({MAX_RESULT_BYTES} max)")
    try:
        doc = parse_json(read_regular(p, MAX_RESULT_BYTES, "result file"), str(p))
    except AoeError as exc:
        raise AoeError(f"not a readable JSON result file: {exc}; give the aoe_result_*.json a job wrote") from None
    if not isinstance(doc, dict) or not doc:
        raise AoeError(f"{p} holds no tuning task: give the aoe_result_*.json file a job wrote")
    keys = [k for k, v in doc.items() if isinstance(v, list)]
    if task is not None and task not in keys:
        raise AoeError(f"{p} has no task {task!r}; its tasks: {', '.join(keys) or 'none'}")
    key = task if task is not None else (keys[-1] if keys else "")
    parts = doc.get(key)
    if not isinstance(parts, list):
        raise AoeError(f"{p} holds no tuning task: give the aoe_result_*.json file a job wrote")
    basic: dict[str, Any] = {}
    for part in parts:
        if isinstance(part, dict):
            if isinstance(part.get("basic"), dict):
                basic = part["basic"]
            for kind, name in (("opat", "OPAT"), ("sgat", "SGAT")):
                if isinstance(part.get(name), dict):
                    return key, kind, basic, part[name], len(keys)
    raise AoeError(f"task {key} of {p} has no OPAT or SGAT section yet (the job wrote nothing to report)")


def _status(kind: str, basic: Mapping[str, Any], section: Mapping[str, Any]) -> str:
    if kind == "opat":
        return str(section.get("opat_tuning_result", "unknown"))
    # the SGAT section has no status field: a finished task has its tuning time
    return SUCCESS if "tuning_time(s)" in basic else INCOMPLETE


def _opat_credits(section: Mapping[str, Any]) -> dict[str, tuple[list[str], str]]:
    """Operator name -> (kinds credited, bank outcome) from the result file's modified operators."""
    out: dict[str, tuple[list[str], str]] = {}
    mods = section.get("repo_modified_operators")
    for m in mods if isinstance(mods, list) else []:
        if not isinstance(m, dict) or not isinstance(m.get("op_name"), str):
            continue
        perf = m.get("tune_performance")
        kinds = [k for k in perf if isinstance(k, str)] if isinstance(perf, dict) else []
        modes = {str(v.get("update_mode", "")) for v in perf.values() if isinstance(v, dict)} if kinds else set()
        out[m["op_name"]] = (kinds, "/".join(sorted(m for m in modes if m)))
    return out


def _sgat_keys(section: Mapping[str, Any]) -> set[str]:
    keys: set[str] = set()
    mods = section.get("repo_modified_subgraphs")
    for lst in mods.values() if isinstance(mods, dict) else []:
        for m in lst if isinstance(lst, list) else []:
            if isinstance(m, dict) and isinstance(m.get("repo_key"), str):
                keys.add(m["repo_key"])
    return keys


# --- re-pricing -----------------------------------------------------------------------------------

def kernel(soc: Soc, op: Any, strat: Mapping[str, int] | None, label: str) -> Kernel:
    """Simulate one strategy (None: the default) of a simulator descriptor in detail."""
    s = dict(strat) if strat is not None else sim.default_strategy(soc, op)
    fields = sim.strategy_fields(op)
    out = sim.simulate_batch(soc, op, np.array([[int(s[f]) for f in fields]], dtype=np.int64))
    valid = int(out.reason[0]) == 0
    return Kernel(label, float(out.time_us[0]), sim.PIPES[int(out.bound[0])] if valid else "invalid",
                  {p: float(v) for p, v in zip(sim.PIPES, out.busy_us[0])}, float(out.hbm_bytes[0]),
                  float(out.l2_bytes[0]), float(out.flops[0]), {f: int(s[f]) for f in fields})


def variant_label(case: OpCase, variant: Variant) -> str:
    """A short name of a kernel variant: "default" for CANN's own, else its format / implementation."""
    return "default" if variant is case.default else variant.label


def reprice_ops(graph: Graph, soc: Soc, op_bank_dir: str | os.PathLike[str] | None, *, builtin: bool = True
                ) -> tuple[list[OpRow], list[CaseView], list[dict[str, str]]]:
    """Every operator priced with the default and with the banks (the figures of `aoe.opat.apply_bank`),
    plus one detailed simulation per distinct case and strategy."""
    measure = simulator_measure(soc)
    custom = OpBank(op_bank_dir, soc.name, soc.cube_cores) if op_bank_dir is not None else None
    chain = BankChain(custom, BuiltinBank(soc.name, soc.cube_cores) if builtin else None)
    extra: dict[Any, float] = {}
    rows: list[OpRow] = []
    cases: list[CaseView] = []
    index: dict[Any, int] = {}
    times: dict[Any, tuple[float, float, str]] = {}
    priced, skipped = operator_cases(graph)
    for op, case in priced:
        cid = case.case_id
        if cid not in index:
            default_t = price(case, soc, None, measure, extra)
            entry = chain.lookup(case.op_type, case.key)
            tuned_t, source, variant, strat = default_t, "default", case.default, None
            if entry is not None:
                try:
                    t = price(case, soc, entry.knowledge, measure, extra)
                    v, s = variant_for(case, entry.knowledge)
                except (AoeError, KeyError, ValueError, TypeError):
                    t = float("nan")
                if np.isfinite(t):
                    tuned_t, source, variant, strat = t, entry.source, v, s
            d = kernel(soc, case.default.sim_op, None, "default")
            tk = d if source == "default" else kernel(soc, variant.sim_op, strat, variant_label(case, variant))
            index[cid] = len(cases)
            cases.append(CaseView(case.op_type, case.family, d, tk))
            times[cid] = (default_t, tuned_t, source)
        i = index[cid]
        cases[i].count += 1
        dt, tt, src = times[cid]
        label = op_type_label(op)
        rows.append(OpRow(op.name, "+".join(label) if isinstance(label, list) else label, dt, tt, src, i))
    return rows, cases, skipped


def _groups(n: int, edges: list[tuple[int, int]], plan: np.ndarray) -> list[list[int]]:
    """Kernels that run as one fused kernel: the components of the edges the plan fuses."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for e, (a, b) in enumerate(edges):
        if int(plan[e]):
            parent[find(a)] = find(b)
    comps: dict[int, list[int]] = {}
    for i in range(n):
        comps.setdefault(find(i), []).append(i)
    return sorted(comps.values())


def _flags(rd: Any, plan: np.ndarray) -> dict[str, Any]:
    from ..sgat.evaluator import TILE_BASE  # lazily: only reports of SGAT jobs need it

    e = rd.n_edges
    return {"split": ("rows", "columns")[int(plan[e])], "tile": TILE_BASE << int(plan[e + 1]),
            "l2": bool(plan[e + 2])}


def reprice_subgraphs(graph: Graph, soc: Soc, subgraph_bank_dir: str | os.PathLike[str] | None,
                      result_keys: set[str]) -> tuple[list[SubgraphView], float, float, float]:
    """Distinct subgraphs with the default fusion and the bank's plan (as `aoe.sgat.apply_bank`),
    and the model's (default-fusion, with-bank, unfused) times in µs."""
    from .. import sgat  # lazily: only reports of SGAT jobs need it
    from ..bank.subgraph import SubgraphBank
    from ..sgat.evaluator import evaluate
    from ..sgat.keys import plan_from_knowledge

    sgat.check_soc(soc)
    prep = sgat.prepare(graph, soc)
    bank = SubgraphBank(subgraph_bank_dir) if subgraph_bank_dir is not None else None
    views: list[SubgraphView] = []
    total = prep.fixed_us
    for case in prep.cases:
        rd = case.rd
        plan, t = case.default_plan, case.default_us
        entry = bank.lookup(case.key) if bank is not None else None
        if entry is not None:
            banked = plan_from_knowledge(rd, entry.knowledge)
            if banked is not None:
                tp = float(evaluate(rd, banked[None])[0])
                if np.isfinite(tp):
                    plan, t = banked, tp
        total += t * len(case.subs)
        edges = [(int(a), int(b)) for a, b in rd.edges.tolist()]
        views.append(SubgraphView(
            case.key, [op.type for op in case.subs[0].kernels], edges, _groups(rd.n, edges, case.default_plan),
            _groups(rd.n, edges, plan), _flags(rd, case.default_plan), _flags(rd, plan), case.default_us, t,
            case.unfused_us, len(case.subs), entry is not None, case.key in result_keys))
    return views, prep.baseline_us, total, prep.unfused_us


# --- the whole report -------------------------------------------------------------------------------

def collect(result_file: str | os.PathLike[str], graph: Graph, soc: Soc | str, *,
            op_bank_dir: str | os.PathLike[str] | None = None,
            subgraph_bank_dir: str | os.PathLike[str] | None = None, task: str | None = None,
            model: str = "", settings: list[str] | None = None) -> ReportData:
    """Read one task of `result_file` and re-price `graph` (the model that job tuned) under the banks."""
    soc = load_soc(soc)
    key, kind, basic, section, n_tasks = read_result(result_file, task)
    credits = _opat_credits(section) if kind == "opat" else {}
    rows, cases, skipped = reprice_ops(graph, soc, op_bank_dir)
    names = {r.name for r in rows} | {s["op"] for s in skipped}
    if credits and not names & set(credits):
        raise AoeError(f"{result_file} does not describe this model: none of the {len(credits)} operators it "
                       f"lists is in {graph.name or 'the graph'}; pass the model (and --input_shape / "
                       "--training) the job tuned")
    for r in rows:
        if r.name in credits:
            r.kinds, r.update = credits[r.name]
    tuning_name = str(basic.get("tuning_name", ""))
    secs = basic.get("tuning_time(s)")
    summary = section.get("repo_summary")
    counters = dict(summary) if isinstance(summary, dict) else {}
    data = ReportData(kind, tuning_name, model or graph.name or "", key, _status(kind, basic, section),
                      float(secs) if isinstance(secs, (int, float)) else None, soc, counters, list(settings or []),
                      rows, cases, skipped, n_tasks=n_tasks)
    if tuning_name and graph.name and tuning_name != graph.name:
        data.notes.append(f"the result file's tuning_name is {tuning_name!r}, the model's name {graph.name!r}")
    if kind == "opat":
        data.model_default_us = sum(r.default_us for r in rows)
        data.model_tuned_us = sum(r.tuned_us for r in rows)
    else:
        wanted = _sgat_keys(section)
        subs, base, tuned, unfused = reprice_subgraphs(graph, soc, subgraph_bank_dir, wanted)
        if wanted and not wanted & {s.key for s in subs}:
            raise AoeError(f"{result_file} does not describe this model: none of its {len(wanted)} subgraphs "
                           f"is in {graph.name or 'the graph'} on {soc.name}; pass the model (and "
                           "--input_shape / --training / --soc_version) the job tuned")
        data.subgraphs = subs
        data.model_default_us, data.model_tuned_us, data.model_unfused_us = base, tuned, unfused
    return data


__all__ = [
    "CaseView",
    "Kernel",
    "OpRow",
    "ReportData",
    "SubgraphView",
    "collect",
    "kernel",
    "read_result",
    "reprice_ops",
    "reprice_subgraphs",
    "variant_label",
]
