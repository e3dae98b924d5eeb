"""What a report shows, gathered once: the result file's task and the run's record beside it.

Every figure comes from the record the job wrote (`aoe.job.records`, read back by `record.py`): each
operator's CANN-default and in-use time, each distinct case's kernels simulated in detail when the job
ran them (busy time per pipe, bound, bytes, FLOPs), each subgraph's plans. Nothing is re-priced here;
a result file without a record is given a record re-priced under the banks by the caller
(`record.repriced_record`, the pricing rooms `aoe verify` uses).
"""
from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AoeError
from ..opat.detail import kernel_detail, variant_label
from ..safeio import parse_json, read_regular
from ..soc import Soc
from ..tuning import INCOMPLETE, SUCCESS, improvement
from .record import RunRecord, read_record, record_path

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
    hits: dict[str, int] = field(default_factory=dict)   # bank hits by provenance: builtin / custom / this run
    repeat_tune: bool = False

    @property
    def improvement(self) -> str:
        """The whole model's gain figure."""
        return improvement(self.model_default_us, self.model_tuned_us)


def kernel(soc: Soc, op: Any, strat: Mapping[str, int] | None, label: str) -> Kernel:
    """Simulate one strategy (None: the default) of a simulator descriptor in detail."""
    d = kernel_detail(soc, op, strat, label)
    return Kernel(d["label"], d["time_us"], d["bound"], d["busy_us"], d["hbm_bytes"], d["l2_bytes"], d["flops"],
                  d["strategy"])


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


# --- from the run's record -------------------------------------------------------------------------

def _kernel(d: Mapping[str, Any]) -> Kernel:
    return Kernel(d["label"], d["time_us"], d["bound"], dict(d["busy_us"]), d["hbm_bytes"], d["l2_bytes"],
                  d["flops"], dict(d["strategy"]))


def _row_source(line: Mapping[str, Any]) -> str:
    """Where the strategy in use after the run came from: this run (tuned), a bank (by provenance), default."""
    if line["outcome"] in ("add", "update"):
        return "this run"
    return line["provenance"] or ("default" if line["source"] is None else line["source"])


def record_ops(rec: RunRecord) -> tuple[list[OpRow], list[CaseView]]:
    """The priced operators of an OPAT record in graph order, and one view per distinct case."""
    rows: list[tuple[int, OpRow]] = []
    cases: list[CaseView] = []
    for line in rec.cases.values():
        det = line["detail"]
        if det is None:
            continue   # a case whose tuning failed: no figures (the job's totals leave it out too)
        priced = [o for o in line["ops"] if o[3] is not None and o[5] is not None]
        if not priced:
            continue
        i = len(cases)
        cases.append(CaseView(det["op_type"], det["family"], _kernel(det["default"]), _kernel(det["tuned"]),
                              len(priced)))
        src = _row_source(line)
        rows += [(o[0], OpRow(o[1], o[2], o[3], o[5], src, i)) for o in priced]
    rows.sort(key=lambda r: r[0])      # the job's order: its totals are sums in graph order
    return [r for _, r in rows], cases


def record_subgraphs(rec: RunRecord, result_keys: set[str]) -> tuple[list[SubgraphView], float]:
    """The distinct subgraphs of an SGAT record and the model's time with the plans in use (µs), summed as
    the tuner sums it (the default-fusion time, plus each subgraph's change, in tuning order)."""
    views: list[SubgraphView] = []
    total = rec.baseline_us
    for s in rec.subgraphs.values():
        total += (s["after_us"] - s["baseline_us"]) * s["instances"]
        views.append(SubgraphView(s["repo_key"], s["op_types"], s["edges"], s["default_groups"], s["tuned_groups"],
                                  s["default_flags"], s["tuned_flags"], s["default_us"], s["tuned_us"],
                                  s["unfused_us"], s["instances"], s["in_bank"], s["repo_key"] in result_keys))
    return views, total


# --- the whole report -------------------------------------------------------------------------------

def collect(result_file: str | os.PathLike[str], *, task: str | None = None, record: RunRecord | None = None,
            settings: list[str] | None = None) -> ReportData:
    """Read one task of `result_file` and its run's record (beside it, or `record`): nothing is re-priced."""
    key, kind, basic, section, n_tasks = read_result(result_file, task)
    if record is None:
        path = record_path(result_file)
        if not path.exists():
            raise AoeError(f"{result_file} has no run record beside it ({path.name}): it was written by an older "
                           "aoe; pass -m MODEL (and --input_shape / --training / --soc_version as the job had them) "
                           "to re-price the model")
        record = read_record(path, key)
    if record.kind != kind:
        raise AoeError(f"the run's record {record.path} describes a {record.kind.upper()} task, the result file "
                       f"a {kind.upper()} one")
    credits = _opat_credits(section) if kind == "opat" else {}
    rows, cases = record_ops(record) if kind == "opat" else ([], [])
    for r in rows:
        if r.name in credits:
            r.kinds, r.update = credits[r.name]
    tuning_name = str(basic.get("tuning_name", ""))
    secs = basic.get("tuning_time(s)")
    summary = section.get("repo_summary")
    counters = dict(summary) if isinstance(summary, dict) else {}
    model = str(record.model.get("model") or record.tuning_name)
    data = ReportData(kind, tuning_name, model, key, _status(kind, basic, section),
                      float(secs) if isinstance(secs, (int, float)) else None, record.soc, counters,
                      list(settings if settings is not None else record.settings), rows, cases,
                      list(record.skipped), n_tasks=n_tasks, hits=record.hits,
                      repeat_tune=bool(record.options.get("repeat_tune")))
    if tuning_name and record.tuning_name and tuning_name != record.tuning_name:
        data.notes.append(f"the result file's tuning_name is {tuning_name!r}, the record's {record.tuning_name!r}")
    if kind == "opat":
        data.model_default_us = sum(r.default_us for r in rows)
        data.model_tuned_us = sum(r.tuned_us for r in rows)
        gained = {r.source for r in rows if r.saved_us > 0}
        if gained and "this run" not in gained:
            data.notes.append("every gain on this page comes from bank hits (" + ", ".join(sorted(gained)) +
                              "): this run's tuning improved no case")
    else:
        subs, tuned = record_subgraphs(record, _sgat_keys(section))
        data.subgraphs = subs
        data.model_default_us, data.model_tuned_us, data.model_unfused_us = record.baseline_us, tuned, record.unfused_us
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
    "record_ops",
    "record_subgraphs",
    "variant_label",
]
