"""OPAT results: one record per operator, the live report, its result-file section and schema.

A case (one distinct operator shape) may be shared by several operators: each operator gets its own
record, and the counters count the case once (records carry the case's identity in `case`).
Records save and restore their own resume state, so an interrupted job can go on where it stopped.

Counting rule: every distinct tunable case counts once in `total_num`, failed ones included. A case
whose tuning failed writes nothing, so it is `reserved` when a bank already held it and
`unsatisfied` otherwise. Operators that are not cases are not counted: skipped ones (no kernel
model, dynamic shapes) and ones whose attributes are inconsistent (no case, no key can be built: they
are listed as failed). So `hit = update + reserved`, `total = add + hit + unsatisfied`, and `total`
counts every distinct case of the walk (restored ones of a resumed run included), whatever happened.

A fused operator (`fused_names`: the original operators it replaced) is written under the names of
all its operators joined, as the product does, and its `op_type` is the list of their types.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..tuning import (FAILED, INCOMPLETE, PCT_SCHEMA, STATUSES, SUMMARY_SCHEMA, TIME_SCHEMA, Counters, Outcome,
                      improvement, strict_object)
from .tune import KindGain


@dataclass
class OpRecord:
    """What happened to one operator."""

    op_name: str
    op_type: str | list[str]
    outcome: str | None = None           # add / update / reserved / unsatisfied; None when skipped/failed
    before_us: float | None = None       # strategy in use before (bank or default)
    after_us: float | None = None        # strategy in use after
    kinds: dict[str, KindGain] = field(default_factory=dict)
    skipped: str | None = None           # reason it was not tunable
    error: str | None = None             # why tuning failed
    case: str | None = None              # identity of its case (operators sharing one count once)
    fused_names: tuple[str, ...] = ()    # the original operators a fused operator replaced (>= 2), else ()
    default_us: float | None = None      # CANN's default strategy (a bank hit's `before_us` is the bank's)
    source: str | None = None            # where the strategy in use before came from: builtin / custom / None
    # the case's kernels in detail (`aoe.opat.detail.case_detail`), filled only for an events object that
    # asks for it (`Events.detail`): the job's record; never part of the resume state
    detail: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def result_name(self) -> str:
        """The `op_name` a result file shows: the fused operators' names joined, else the name."""
        return "".join(self.fused_names) if len(self.fused_names) > 1 else self.op_name

    @property
    def key(self) -> str:
        """Resume identity: the operator's name."""
        return self.op_name

    @property
    def label(self) -> str:
        """Short text for progress output."""
        return self.op_name

    @property
    def n_ops(self) -> int:
        """Operators this record covers."""
        return 1

    @property
    def modified(self) -> bool:
        """True if its strategy was added to or updated in the custom bank."""
        return self.outcome in ("add", "update")

    def to_result(self) -> dict[str, Any]:
        """The operator's `repo_modified_operators` entry: one before/after per kind that helped."""
        perf = {}
        for kind, g in self.kinds.items():
            if g.helped:
                perf[kind] = {"performance_after_tune(us)": round(g.after_us, 3),
                              "performance_before_tune(us)": round(g.before_us, 3),
                              "performance_improvement": improvement(g.before_us, g.after_us),
                              "update_mode": self.outcome}
        return {"op_name": self.result_name, "op_type": self.op_type, "tune_performance": perf}

    def to_state(self) -> dict[str, Any]:
        """JSON-ready resume state (`record_from_state` reads it back)."""
        return {"op_name": self.op_name, "op_type": self.op_type, "outcome": self.outcome,
                "before_us": self.before_us, "after_us": self.after_us,
                "kinds": {k: [g.before_us, g.after_us] for k, g in self.kinds.items()},
                "skipped": self.skipped, "error": self.error, "case": self.case,
                "fused_names": list(self.fused_names), "default_us": self.default_us, "source": self.source}


def record_from_state(d: Mapping[str, Any]) -> OpRecord:
    """An `OpRecord` from its resume state (raises KeyError/TypeError/ValueError when damaged)."""
    return OpRecord(str(d["op_name"]), d["op_type"], d.get("outcome"), d.get("before_us"), d.get("after_us"),
                    {str(k): KindGain(float(v[0]), float(v[1])) for k, v in (d.get("kinds") or {}).items()},
                    d.get("skipped"), d.get("error"), d.get("case"),
                    tuple(str(n) for n in (d.get("fused_names") or ())),
                    None if d.get("default_us") is None else float(d["default_us"]),
                    None if d.get("source") is None else str(d["source"]))


class OpatReport:
    """The result of operator tuning one graph; live while tuning runs (status `INCOMPLETE`)."""

    def __init__(self, graph_name: str, soc: str, order: list[str] | None = None) -> None:
        self.graph_name = graph_name
        self.soc = soc
        self.status = INCOMPLETE
        self.seconds = 0.0
        self.evaluations = 0
        self.cases_tuned = 0
        self._order = {name: i for i, name in enumerate(order or [])}
        self._records: dict[str, OpRecord] = {}

    def add(self, rec: OpRecord) -> None:
        """Set (or replace) the record of one operator."""
        if rec.op_name not in self._order:
            self._order[rec.op_name] = len(self._order)
        self._records[rec.op_name] = rec

    @property
    def index(self) -> dict[str, int]:
        """Operator name -> its position in the walk (graph order); read-only by convention."""
        return self._order

    @property
    def records(self) -> list[OpRecord]:
        """The records so far, in graph order."""
        return sorted(self._records.values(), key=lambda r: self._order[r.op_name])

    @property
    def complete(self) -> bool:
        """True when every operator of the walk has a record."""
        return len(self._records) == len(self._order)

    @property
    def counters(self) -> Counters:
        """The six counters: one per finished case (operators sharing a case count once)."""
        c = Counters()
        seen: set[str] = set()
        for r in self._records.values():
            ident = r.case or r.op_name
            if r.outcome and ident not in seen:
                seen.add(ident)
                c.record(Outcome(r.outcome))
        return c

    @property
    def failed(self) -> list[str]:
        """Names of operators whose tuning failed."""
        return [r.op_name for r in self.records if r.error]

    @property
    def skipped(self) -> list[OpRecord]:
        """Operators that could not be tuned (unsupported, dynamic)."""
        return [r for r in self.records if r.skipped]

    def to_result_section(self) -> dict[str, Any] | None:
        """The `OPAT` object of a result file; None when nothing was tunable (a job stopped before its
        first case still says "tuning incomplete")."""
        counters = self.counters
        if counters.total_num == 0 and not self.failed and not (self.status == INCOMPLETE and self.cases_tuned):
            return None
        records = self.records
        out: dict[str, Any] = {
            "opat_tuning_result": self.status,
            "repo_modified_operators": [r.to_result() for r in records if r.modified],
            "repo_summary": counters.to_dict(),
        }
        if self.status == FAILED:
            out["tuning_failed_operators"] = [r.result_name for r in records if r.error]
        return out


_KIND_PERF = strict_object({"performance_after_tune(us)": TIME_SCHEMA, "performance_before_tune(us)": TIME_SCHEMA,
                            "performance_improvement": PCT_SCHEMA, "update_mode": {"enum": ["add", "update"]}})

OPAT_SECTION_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "OPAT result section",
    "type": "object",
    "required": ["opat_tuning_result", "repo_modified_operators", "repo_summary"],
    "additionalProperties": False,
    "properties": {
        "opat_tuning_result": {"enum": list(STATUSES)},
        "repo_modified_operators": {"type": "array", "items": {
            "type": "object", "required": ["op_name", "op_type", "tune_performance"], "additionalProperties": False,
            "properties": {
                "op_name": {"type": "string", "minLength": 1},
                "op_type": {"oneOf": [{"type": "string", "minLength": 1},
                                      {"type": "array", "minItems": 2, "items": {"type": "string", "minLength": 1}}]},
                "tune_performance": {"type": "object", "minProperties": 1, "additionalProperties": False,
                                     "properties": {k: _KIND_PERF for k in ("Format", "Schedule", "Impl")}},
            }}},
        "repo_summary": SUMMARY_SCHEMA,
        "tuning_failed_operators": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    },
    # tuning_failed_operators only (and always) with "tuning failed"
    "if": {"properties": {"opat_tuning_result": {"const": FAILED}}},
    "then": {"required": ["tuning_failed_operators"]},
    "else": {"not": {"required": ["tuning_failed_operators"]}},
}
