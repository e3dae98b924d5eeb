"""Reading a run's record (`aoe.job.records`) back: untrusted input, bounded and checked field by field.

The record is a JSON-lines file beside the result file (`<result stem>.records.jsonl`). It is read as
any file from outside: a regular file only, at most MAX_RECORD_BYTES, each line parsed with bounds
(`aoe.safeio.parse_json`), a cut last line (a killed job) skipped, every field checked for its type
and size; anything else is an `AoeError` naming the file and what to do.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AoeError
from ..safeio import parse_json, read_regular
from ..soc import Soc, soc_from_dict

MAX_RECORD_BYTES = 256 << 20     # a 10,000-case run's record is a few tens of MB
MAX_NAME = 4096                  # operator names, labels, keys
MAX_LIST = 1_000_000             # operators of one case, instances of one subgraph


class BadRecord(AoeError):
    """A record line that is not what aoe writes."""


def record_path(result_path: str | os.PathLike[str]) -> Path:
    """The record beside a result file: `<result stem>.records.jsonl`."""
    p = Path(result_path)
    return p.with_name(f"{p.stem}.records.jsonl")


# --- field checks ---------------------------------------------------------------------------------

def num(v: Any, what: str) -> float:
    """A finite number."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadRecord(f"{what} must be a finite number")
    return float(v)


def opt_num(v: Any, what: str) -> float | None:
    """A finite number or null."""
    return None if v is None else num(v, what)


def text(v: Any, what: str, limit: int = MAX_NAME) -> str:
    """A string of bounded length."""
    if not isinstance(v, str) or len(v) > limit:
        raise BadRecord(f"{what} must be a string of at most {limit} characters")
    return v


def opt_text(v: Any, what: str) -> str | None:
    """A bounded string or null."""
    return None if v is None else text(v, what)


def integer(v: Any, what: str, lo: int = 0, hi: int = 1 << 40) -> int:
    """A bounded integer."""
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise BadRecord(f"{what} must be an integer in [{lo}, {hi}]")
    return v


def seq(v: Any, what: str, limit: int = MAX_LIST) -> list[Any]:
    """A list of bounded length."""
    if not isinstance(v, list) or len(v) > limit:
        raise BadRecord(f"{what} must be a list of at most {limit} items")
    return v


def obj(v: Any, what: str) -> dict[str, Any]:
    """A JSON object."""
    if not isinstance(v, dict):
        raise BadRecord(f"{what} must be an object")
    return v


def op_type(v: Any, what: str) -> str:
    """An operator type (a fused operator's list of types is joined with '+')."""
    if isinstance(v, list):
        return "+".join(text(t, what) for t in seq(v, what, 64))
    return text(v, what)


# --- the record -----------------------------------------------------------------------------------

@dataclass
class RunRecord:
    """One task of a run's record, as read back (plain values; lines checked)."""

    path: Path
    task: str
    kind: str
    tuning_name: str
    soc: Soc
    model: dict[str, Any]
    options: dict[str, Any]
    settings: list[str]
    skipped: list[dict[str, str]]
    failed: list[dict[str, str]]
    cases: dict[str, dict[str, Any]] = field(default_factory=dict)      # OPAT: case identity -> line
    subgraphs: dict[str, dict[str, Any]] = field(default_factory=dict)  # SGAT: repo_key -> line
    baseline_us: float = 0.0
    unfused_us: float = 0.0
    end: dict[str, Any] | None = None
    tasks: int = 1

    @property
    def hits(self) -> dict[str, int]:
        """Bank hits by provenance (builtin / custom / this run), counted from the case lines."""
        out = {"builtin": 0, "custom": 0, "this run": 0}
        for line in (self.cases if self.kind == "opat" else self.subgraphs).values():
            p = line.get("provenance")
            if p in out:
                out[p] += 1
        return out


def _lines(path: Path) -> list[dict[str, Any]]:
    try:
        raw = read_regular(path, MAX_RECORD_BYTES, "run record")
    except AoeError as exc:
        raise AoeError(f"cannot read the run's record: {exc}") from None
    parts = raw.split(b"\n")
    cut = parts[-1] != b""        # a killed job may leave a cut last line: skipped
    lines = parts[:-1]
    out = []
    for i, b in enumerate(lines, 1):
        if not b.strip():
            continue
        try:
            v = parse_json(b, f"line {i} of {path}")
        except AoeError as exc:
            raise AoeError(f"{exc}; the run's record is damaged: re-run the job, or pass -m MODEL to re-price") from None
        if not isinstance(v, dict) or v.get("t") not in ("start", "case", "subgraph", "end"):
            raise AoeError(f"line {i} of {path} is not a record line aoe writes; re-run the job, or pass -m MODEL")
        out.append(v)
    del cut
    return out


def _start(line: dict[str, Any], path: Path) -> RunRecord:
    kind = line.get("kind")
    if kind not in ("opat", "sgat") or line.get("version") != 1:
        raise BadRecord("the start line names no known kind/version")
    skipped = [{"op": text(s.get("op"), "skipped op"), "op_type": op_type(s.get("op_type"), "skipped type"),
                "reason": text(s.get("reason"), "skipped reason", 1 << 16)}
               for s in (obj(x, "skipped entry") for x in seq(line.get("skipped", []), "skipped"))]
    failed = [{"op": text(s.get("op"), "failed op"), "op_type": op_type(s.get("op_type"), "failed type"),
               "reason": text(s.get("reason"), "failed reason", 1 << 16)}
              for s in (obj(x, "failed entry") for x in seq(line.get("failed", []), "failed"))]
    rec = RunRecord(path, text(line.get("task"), "task"), kind, text(line.get("tuning_name"), "tuning_name"),
                    soc_from_dict(line.get("soc"), f"the SoC in {path}"), obj(line.get("model"), "model"),
                    obj(line.get("options"), "options"),
                    [text(s, "settings line") for s in seq(line.get("settings", []), "settings", 64)], skipped, failed)
    if kind == "sgat":
        rec.baseline_us = num(line.get("baseline_us"), "baseline_us")
        rec.unfused_us = num(line.get("unfused_us"), "unfused_us")
    return rec


def read_record(path: str | os.PathLike[str], task: str | None = None) -> RunRecord:
    """One task of a run's record (the last unless `task`)."""
    p = Path(path)
    lines = _lines(p)
    tasks = list(dict.fromkeys(str(x.get("task")) for x in lines if x.get("t") == "start"))
    if not tasks:
        raise AoeError(f"{p} holds no task; re-run the job, or pass -m MODEL to re-price")
    if task is not None and task not in tasks:
        raise AoeError(f"{p} has no task {task!r}; its tasks: {', '.join(tasks)}")
    key = task if task is not None else tasks[-1]
    rec: RunRecord | None = None
    try:
        for x in lines:
            if x.get("task") != key:
                continue
            t = x["t"]
            if t == "start":
                fresh = _start(x, p)
                if rec is None:
                    rec = fresh
                else:   # a resumed task: a new start line, the earlier cases stay
                    fresh.cases, fresh.subgraphs = rec.cases, rec.subgraphs
                    rec = fresh
            elif rec is None:
                raise BadRecord("a case line before its task's start line")
            elif t == "case" and rec.kind == "opat":
                rec.cases[text(x.get("case"), "case")] = _case(x)
            elif t == "subgraph" and rec.kind == "sgat":
                rec.subgraphs[text(x.get("repo_key"), "repo_key")] = _subgraph(x)
            elif t == "end":
                rec.end = {"status": text(x.get("status"), "status"), "seconds": num(x.get("seconds"), "seconds")}
            else:
                raise BadRecord(f"a {t} line in a {rec.kind} task")
    except BadRecord as exc:
        raise AoeError(f"{p} is damaged: {exc}; re-run the job, or pass -m MODEL to re-price") from None
    assert rec is not None
    rec.tasks = len(tasks)
    return rec


def kernel_fields(d: Any, what: str) -> dict[str, Any]:
    """A kernel's detail (`aoe.opat.detail.kernel_detail`), checked."""
    d = obj(d, what)
    busy = obj(d.get("busy_us"), f"{what} busy_us")
    strat = obj(d.get("strategy"), f"{what} strategy")
    if len(busy) > 16 or len(strat) > 64:
        raise BadRecord(f"{what} has too many pipes or strategy fields")
    return {"label": text(d.get("label"), f"{what} label"), "time_us": num(d.get("time_us"), f"{what} time"),
            "bound": text(d.get("bound"), f"{what} bound", 32),
            "busy_us": {text(k, "pipe", 32): num(v, f"{what} busy") for k, v in busy.items()},
            "hbm_bytes": num(d.get("hbm_bytes"), f"{what} hbm"), "l2_bytes": num(d.get("l2_bytes"), f"{what} l2"),
            "flops": num(d.get("flops"), f"{what} flops"),
            "strategy": {text(k, "field", 64): integer(v, f"{what} strategy", -(1 << 40)) for k, v in strat.items()}}


def _case(x: dict[str, Any]) -> dict[str, Any]:
    ops = []
    for o in seq(x.get("ops"), "ops"):
        o = seq(o, "op", 6)
        if len(o) != 6:
            raise BadRecord("an op entry has six fields")
        ops.append([integer(o[0], "op index", -1), text(o[1], "op name"), op_type(o[2], "op type"),
                    opt_num(o[3], "default_us"), opt_num(o[4], "before_us"), opt_num(o[5], "after_us")])
    detail = x.get("detail")
    if detail is not None:
        d = obj(detail, "detail")
        key = d.get("key")
        if key is not None and (not isinstance(key, dict) or len(key) > 256):
            raise BadRecord("a case key must be a small object")
        detail = {"op_type": text(d.get("op_type"), "detail op_type"), "family": text(d.get("family"), "family"),
                  "key": key,
                  "default": kernel_fields(d.get("default"), "default kernel"),
                  "tuned": kernel_fields(d.get("tuned"), "tuned kernel"),
                  "default_op": obj(d.get("default_op"), "default_op"), "tuned_op": obj(d.get("tuned_op"), "tuned_op")}
    outcome = x.get("outcome")
    if outcome not in (None, "add", "update", "reserved", "unsatisfied"):
        raise BadRecord("an unknown bank decision")
    prov = x.get("provenance")
    if prov not in (None, "builtin", "custom", "this run"):
        raise BadRecord("an unknown provenance")
    return {"outcome": outcome, "source": opt_text(x.get("source"), "source"), "provenance": prov,
            "error": opt_text(x.get("error"), "error"), "ops": ops, "detail": detail}


def _pairs(v: Any, what: str) -> list[tuple[int, int]]:
    return [(integer(e[0], what), integer(e[1], what)) for e in (seq(p, what, 2) for p in seq(v, what, 100_000))
            if len(e) == 2] if isinstance(v, list) else []


def _subgraph(x: dict[str, Any]) -> dict[str, Any]:
    outcome = x.get("outcome")
    if outcome not in ("add", "update", "reserved", "unsatisfied"):
        raise BadRecord("an unknown bank decision")
    prov = x.get("provenance")
    if prov not in (None, "builtin", "custom", "this run"):
        raise BadRecord("an unknown provenance")
    n_inst = len(seq(x.get("instances"), "instances"))
    if x.get("detail") is None:   # a driver that did not ask for the plans: the times still count
        x = dict(x, detail={"op_types": [], "edges": [], "default_groups": [], "tuned_groups": [],
                            "default_flags": {"split": "rows", "tile": 0, "l2": False},
                            "tuned_flags": {"split": "rows", "tile": 0, "l2": False},
                            "default_us": x.get("baseline_us"), "tuned_us": x.get("after_us"), "unfused_us": 0.0,
                            "in_bank": x.get("outcome") != "unsatisfied"})
    d = obj(x.get("detail"), "subgraph detail")

    def groups(v: Any, what: str) -> list[list[int]]:
        return [[integer(i, what) for i in seq(g, what, 100_000)] for g in seq(v, what, 100_000)]

    def flags(v: Any, what: str) -> dict[str, Any]:
        f = obj(v, what)
        return {"split": text(f.get("split"), what, 16), "tile": integer(f.get("tile"), what),
                "l2": bool(f.get("l2"))}

    edges = _pairs(d.get("edges"), "edges")
    return {"repo_key": text(x.get("repo_key"), "repo_key"), "outcome": outcome, "provenance": prov,
            "source": opt_text(x.get("source"), "source"),
            "baseline_us": num(x.get("baseline_us"), "baseline_us"), "before_us": num(x.get("before_us"), "before_us"),
            "after_us": num(x.get("after_us"), "after_us"), "instances": n_inst,
            "op_types": [text(t, "kernel type") for t in seq(d.get("op_types"), "op_types", 100_000)],
            "edges": edges, "default_groups": groups(d.get("default_groups"), "groups"),
            "tuned_groups": groups(d.get("tuned_groups"), "groups"),
            "default_flags": flags(d.get("default_flags"), "flags"), "tuned_flags": flags(d.get("tuned_flags"), "flags"),
            "default_us": num(d.get("default_us"), "default_us"), "tuned_us": num(d.get("tuned_us"), "tuned_us"),
            "unfused_us": num(d.get("unfused_us"), "unfused_us"), "in_bank": bool(d.get("in_bank"))}


def repriced_record(graph: Any, soc: Soc, kind: str, *, op_bank_dir: Any = None, subgraph_bank_dir: Any = None,
                    builtin: bool = True, task: str = "", model: str = "") -> RunRecord:
    """A record made by pricing `graph` under the banks now (`aoe.opat.apply.priced_cases`,
    `aoe.sgat.priced_subgraphs`): for a result file without a record (`aoe report -m`) and `aoe verify`."""
    rec = RunRecord(Path(""), task, kind, graph.name or "", soc, {"model": model or graph.name or ""},
                    {"builtin": builtin}, [], [], [])
    if kind == "opat":
        from ..opat.apply import priced_cases  # lazily: the tuner's apply room

        rec.cases, rec.skipped = priced_cases(graph, soc, op_bank_dir, builtin=builtin)
    else:
        from ..sgat import priced_subgraphs  # lazily: only SGAT needs the subgraph tuner

        rec.subgraphs, prep = priced_subgraphs(graph, soc, subgraph_bank_dir, builtin=builtin)
        rec.baseline_us, rec.unfused_us, rec.skipped = prep.baseline_us, prep.unfused_us, list(prep.skipped)
    return rec


def added_cases(path: str | os.PathLike[str]) -> set[str]:
    """Case identities (OPAT) and repo_keys (SGAT) the run's record says were added or updated."""
    p = Path(path)
    if not p.exists():
        return set()
    out: set[str] = set()
    for x in _lines(p):
        if x.get("outcome") in ("add", "update"):
            k = x.get("case") if x.get("t") == "case" else x.get("repo_key")
            if isinstance(k, str):
                out.add(k)
    return out


__all__ = ["MAX_RECORD_BYTES", "RunRecord", "added_cases", "read_record", "record_path", "repriced_record"]
