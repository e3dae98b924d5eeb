"""The run's record: what the tuner measured, beside the result file, one JSON line per finished case.

`aoe_result_<kind>_<ts>_pid<pid>.records.jsonl` sits beside its result file (whose schema is the
product's and does not change). The job appends to it as cases finish:

- `start` (once per task, again when `--reload` resumes it): the SoC by value (every field of the
  resolved `Soc`, its name and the sha256 of its .ini, so a user's file is never confused with a
  shipped one), the model spec (path or zoo name, input shapes, training, framework, compute dtype),
  the options that change pricing, the operators skipped, and for SGAT the whole graph's default-fusion
  and unfused times;
- `case` (OPAT, one per distinct operator case): its operators (graph index, name, type, CANN default,
  before and after time), the bank decision, the kinds that helped, where a hit came from (`provenance`:
  builtin / custom / this run) and the kernels (`aoe.opat.detail`: strategy, time, busy time per pipe,
  bound pipe, bytes, FLOPs and descriptor of the default and of the kernel in use after);
- `subgraph` (SGAT, one per distinct subgraph): its instances, before/after, decision, provenance, and
  the default-fusion and in-use plans with their kernel groups;
- `end`: status, seconds, the product's counters and the hit provenance counts.

Each line is one `write` on an O_APPEND descriptor (a kill leaves whole lines and at most one cut last
line, which readers skip). `aoe report`, `aoe explain` and `aoe verify` read it (`aoe.report.record`).

"This run": a hit on a custom-bank entry that an earlier case or task of the same result file added or
updated (a torch backward graph hitting what its forward graph added a moment earlier).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from ..durable import AppendLog
from ..errors import AoeError
from ..soc import Soc

RECORD_VERSION = 1
PROVENANCES = ("builtin", "custom", "this run")


def record_path(result_path: str | os.PathLike[str]) -> Path:
    """The record beside a result file: `<result stem>.records.jsonl`."""
    p = Path(result_path)
    return p.with_name(f"{p.stem}.records.jsonl")


def soc_value(soc: Soc) -> dict[str, Any]:
    """The SoC as the record keeps it: every field, and the fingerprint of its .ini (`ini_sha256`)."""
    return soc.to_dict()


class RecordWriter:
    """Appends one task's lines to the record of a result file (shared by the tasks of that file)."""

    def __init__(self, result_path: Path, added: set[str] | None = None) -> None:
        self.path = record_path(result_path)
        self._log = AppendLog(self.path, "the run's record")
        self.added: set[str] = set(added or ())   # case identities this run added or updated

    def append(self, entry: dict[str, Any]) -> None:
        """Append one line (one write on an O_APPEND descriptor)."""
        self._log.append(entry)

    def close(self) -> None:
        """Close the descriptor (the next append opens it again)."""
        self._log.close()

    def provenance(self, ident: str, outcome: str | None, source: str | None) -> str | None:
        """Where a hit's strategy came from (None: not a hit); remembers what this run writes."""
        prov = None
        if outcome in ("update", "reserved") and source is not None:
            prov = "this run" if source == "custom" and ident in self.added else source
        if outcome in ("add", "update"):
            self.added.add(ident)
        return prov


def opat_case_line(task: str, records: Sequence[Any], index: dict[str, int], prov: str | None) -> dict[str, Any]:
    """The `case` line of one distinct operator case (its records share the case)."""
    r0 = records[0]
    kinds = {k: [g.before_us, g.after_us] for k, g in r0.kinds.items()}
    return {"t": "case", "task": task, "case": r0.case or r0.op_name, "outcome": r0.outcome, "source": r0.source,
            "provenance": prov, "error": r0.error, "kinds": kinds,
            "ops": [[index.get(r.op_name, -1), r.op_name, r.op_type, r.default_us, r.before_us, r.after_us]
                    for r in records],
            "detail": r0.detail}


def sgat_subgraph_line(task: str, rec: Any, prov: str | None) -> dict[str, Any]:
    """The `subgraph` line of one distinct subgraph."""
    return {"t": "subgraph", "task": task, "repo_key": rec.repo_key, "outcome": rec.outcome.value,
            "source": rec.source, "provenance": prov, "baseline_us": rec.baseline_us, "before_us": rec.before_us,
            "after_us": rec.after_us, "method": rec.method, "plan": rec.plan, "instances": rec.instances,
            "detail": rec.detail}


class TaskRecord:
    """One task's lines in the run's record (`aoe.job.records`), and its hit provenance counts."""

    def __init__(self, rf: Any, key: str, kind: str, head: dict[str, Any]) -> None:
        writer = getattr(rf, "record_writer", None)
        if writer is None:   # one writer per result file: the tasks of one file are one run
            writer = RecordWriter(rf.path, added_before(rf.path))
            rf.record_writer = writer
        self.writer, self.key, self.kind = writer, key, kind
        self.head = dict(head, version=RECORD_VERSION, kind=kind)
        self.hits = {p: 0 for p in PROVENANCES}

    def start(self, report: Any) -> None:
        line = dict(self.head, t="start", task=self.key)
        if self.kind == "opat":
            line["skipped"] = [{"op": r.op_name, "op_type": r.op_type, "reason": str(r.skipped)}
                               for r in report.records if r.skipped]
            line["failed"] = [{"op": r.op_name, "op_type": r.op_type, "reason": str(r.error)}
                              for r in report.records if r.error and not r.case]
        else:
            line.update(skipped=list(report.skipped), baseline_us=report.model_baseline_us,
                        unfused_us=report.model_unfused_us, n_subgraphs=report.n_subgraphs, n_cases=report.n_cases)
        self.writer.append(line)

    def case(self, report: Any, records: Sequence[Any]) -> None:
        if not records:
            return
        r0 = records[0]
        if self.kind == "opat":
            prov = self.writer.provenance(r0.case or r0.op_name, r0.outcome, r0.source)
            line = opat_case_line(self.key, records, report.index, prov)
        else:
            prov = self.writer.provenance(r0.repo_key, r0.outcome.value, r0.source)
            line = sgat_subgraph_line(self.key, r0, prov)
        if prov is not None:
            self.hits[prov] += 1
        self.writer.append(line)

    def end(self, report: Any, status: str, seconds: float) -> None:
        line: dict[str, Any] = {"t": "end", "task": self.key, "status": status, "seconds": seconds,
                                "hits": dict(self.hits)}
        if report is not None:
            line["counters"] = report.counters.to_dict()
        self.writer.append(line)
        self.writer.close()      # a later task of the same result file opens it again


def added_before(result_path: Path) -> set[str]:
    """Cases an earlier part of this run (an interrupted job resumed with --reload) added or updated."""
    from ..report.record import added_cases  # lazily: only a resumed job reads its record back

    try:
        return added_cases(record_path(result_path))
    except AoeError:
        return set()


__all__ = ["TaskRecord", "added_before", "PROVENANCES", "RECORD_VERSION", "RecordWriter", "opat_case_line", "record_path", "sgat_subgraph_line",
           "soc_value"]
