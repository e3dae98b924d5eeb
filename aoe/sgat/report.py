"""SGAT results: per-subgraph records (with their resume state), the live report and its result section."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..tuning import (INCOMPLETE, PCT_SCHEMA, SUMMARY_SCHEMA, TIME_SCHEMA, Counters, Outcome, improvement,
                      strict_object)


def _ms(us: float) -> float:
    # result files carry ms; keep enough digits that the improvement can be recomputed from them
    return round(us / 1000.0, 6)


@dataclass
class SubgraphRecord:
    """One distinct subgraph case (its identical instances share the key and the plan)."""

    repo_key: str
    ops: list[str]                      # operator names of the first instance (views included)
    op_types: list[str]                 # kernel types in order
    instances: list[list[str]]          # operator names of every instance
    baseline_us: float                  # the compiler's default-fusion plan (default_fusion.py)
    before_us: float                    # the strategy in use before tuning (bank plan or default fusion)
    after_us: float                     # the strategy in use after (best found, or the banked plan)
    outcome: Outcome
    method: str                         # search that produced the tuned plan ("" when not tuned)
    plan: list[int]                     # the plan in use after tuning
    evaluated: int = 0                  # plans priced
    source: str | None = None           # where the plan in use before came from: builtin / custom / None
    # the subgraph's plans and kernels (`subgraph_detail`), filled only for an events object that asks
    # for it (`Events.detail`): the job's record; never part of the resume state
    detail: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def count(self) -> int:
        """Number of instances in the graph."""
        return len(self.instances)

    @property
    def label(self) -> str:
        """Short text for progress output: the kernel types."""
        return "+".join(self.op_types)[:60]

    @property
    def n_ops(self) -> int:
        """Operators this record covers (every instance)."""
        return self.count * len(self.op_types)

    @property
    def key(self) -> str:
        """Resume identity: the subgraph's repo_key."""
        return self.repo_key

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (logs, progress output and the resume state)."""
        return {"repo_key": self.repo_key, "ops": self.ops, "op_types": self.op_types, "count": self.count,
                "instances": self.instances, "baseline_us": self.baseline_us, "before_us": self.before_us,
                "after_us": self.after_us, "outcome": self.outcome.value, "method": self.method,
                "plan": self.plan, "evaluated": self.evaluated, "source": self.source}

    to_state = to_dict


def record_from_state(d: Mapping[str, Any]) -> SubgraphRecord:
    """A `SubgraphRecord` from its resume state (raises KeyError/TypeError/ValueError when damaged)."""
    return SubgraphRecord(
        repo_key=str(d["repo_key"]), ops=[str(o) for o in d["ops"]], op_types=[str(t) for t in d["op_types"]],
        instances=[[str(o) for o in inst] for inst in d["instances"]], baseline_us=float(d["baseline_us"]),
        before_us=float(d["before_us"]), after_us=float(d["after_us"]), outcome=Outcome(d["outcome"]),
        method=str(d.get("method", "")), plan=[int(v) for v in d["plan"]], evaluated=int(d.get("evaluated", 0)),
        source=None if d.get("source") is None else str(d["source"]))


def _groups(n: int, edges: list[tuple[int, int]], plan: Any) -> list[list[int]]:
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


def _flags(rd: Any, plan: Any) -> dict[str, Any]:
    from .evaluator import TILE_BASE  # lazily: the evaluator pulls in Numba's glue

    e = rd.n_edges
    return {"split": ("rows", "columns")[int(plan[e])], "tile": TILE_BASE << int(plan[e + 1]),
            "l2": bool(plan[e + 2])}


def subgraph_detail(case: Any, plan: Any, tuned_us: float, in_bank: bool) -> dict[str, Any]:
    """One distinct subgraph's default-fusion plan against `plan` (the one in use), as plain values."""
    rd = case.rd
    edges = [(int(a), int(b)) for a, b in rd.edges.tolist()]
    return {"op_types": [op.type for op in case.subs[0].kernels], "edges": [list(e) for e in edges],
            "default_groups": _groups(rd.n, edges, case.default_plan), "tuned_groups": _groups(rd.n, edges, plan),
            "default_flags": _flags(rd, case.default_plan), "tuned_flags": _flags(rd, plan),
            "default_us": float(case.default_us), "tuned_us": float(tuned_us), "unfused_us": float(case.unfused_us),
            "instances": len(case.subs), "in_bank": bool(in_bank)}


@dataclass
class SgatReport:
    """Outcome of subgraph tuning of one graph."""

    soc: str
    model_baseline_us: float            # the compiler's default fusion everywhere (the SGAT baseline)
    model_result_us: float
    model_unfused_us: float = 0.0       # every kernel on its own (shown beside the baseline, labelled)
    records: list[SubgraphRecord] = field(default_factory=list)
    status: str = INCOMPLETE
    n_subgraphs: int = 0                # every subgraph of the partition (singletons included)
    n_cases: int = 0                    # distinct tunable subgraphs (what the counters count)
    tuning_time_s: float = 0.0
    skipped: list[dict[str, str]] = field(default_factory=list)   # operators that could not be priced

    @property
    def complete(self) -> bool:
        """False while tuning runs (or when it was interrupted)."""
        return self.status != INCOMPLETE

    @property
    def counters(self) -> Counters:
        """The six counters, one per distinct subgraph reached."""
        c = Counters()
        for r in self.records:
            c.record(r.outcome)
        return c

    @property
    def model_baseline_ms(self) -> float:
        """Whole-graph time as the compiler fuses it by default (no subgraph bank), ms."""
        return self.model_baseline_us / 1000.0

    @property
    def model_unfused_ms(self) -> float:
        """Whole-graph time with every kernel on its own (CANN default strategies, no fusion), ms."""
        return self.model_unfused_us / 1000.0

    @property
    def model_result_ms(self) -> float:
        """Whole-graph time with the subgraph plans in use after tuning, ms."""
        return self.model_result_us / 1000.0

    def to_result_section(self) -> dict[str, Any]:
        """The `SGAT` object of a result file."""
        add, update = [], []
        for r in self.records:
            if not r.outcome.writes:
                continue
            entry = {"performance_before_tune(ms)": _ms(r.before_us),
                     "performance_after_tune(ms)": _ms(r.after_us),
                     "performance_improvement": improvement(r.before_us, r.after_us),
                     "repo_key": r.repo_key}
            (add if r.outcome is Outcome.ADD else update).append(entry)
        return {
            "model_baseline_performance(ms)": _ms(self.model_baseline_us),
            "model_result_performance(ms)": _ms(self.model_result_us),
            "model_performance_improvement": improvement(self.model_baseline_us, self.model_result_us),
            "repo_modified_subgraphs": {"add_repo_subgraphs": add, "update_repo_subgraphs": update},
            "repo_summary": self.counters.to_dict(),
        }


_PERF = TIME_SCHEMA
_PCT = PCT_SCHEMA
_ENTRY = strict_object({"performance_before_tune(ms)": _PERF, "performance_after_tune(ms)": _PERF,
                        "performance_improvement": _PCT, "repo_key": {"type": "string", "minLength": 1}})
SGAT_SECTION_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "SGAT result section",
    "type": "object",
    "required": ["model_baseline_performance(ms)", "model_result_performance(ms)",
                 "model_performance_improvement", "repo_modified_subgraphs", "repo_summary"],
    "additionalProperties": False,
    "properties": {
        "model_baseline_performance(ms)": _PERF,
        "model_result_performance(ms)": _PERF,
        "model_performance_improvement": _PCT,
        "repo_modified_subgraphs": {
            "type": "object", "required": ["add_repo_subgraphs", "update_repo_subgraphs"],
            "additionalProperties": False,
            "properties": {"add_repo_subgraphs": {"type": "array", "items": _ENTRY},
                           "update_repo_subgraphs": {"type": "array", "items": _ENTRY}},
        },
        "repo_summary": SUMMARY_SCHEMA,
    },
}
