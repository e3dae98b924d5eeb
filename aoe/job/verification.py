"""Performance verification: compile the model twice — default strategies vs. the banks.

Operator side: every operator's case is priced on the simulated AI Core with CANN's default
strategy and with the strategy the banks give (custom, then built-in, then default). Subgraph side
(`mode=1`): `aoe.sgat.apply_bank` prices the graph as the compiler fuses it by default vs. with the
subgraph bank's plans (the fully unfused time is shown beside them, labelled).

There is no compile cache that could hide a new bank entry: the banks are opened afresh for every
verification and looked up case by case (the bank layer re-validates its index by `stat` on every
lookup). The only memo is a per-process table of kernel times keyed by the *strategy itself*
(SoC, operator case and the knowledge's content), so a changed bank entry is a different key.
`op_compiler_cache_mode` is accepted as in CANN: `enable` uses that memo, `disable` bypasses it,
`force` clears it first.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AoeError
from .inputs import output_file_name
from .result import atomic_write_json
from ..opat.apply import OpTime, apply_bank
from ..soc import require_soc
from ..tuning import improvement
from .progress import table

CACHE_MODES = ("enable", "disable", "force")
_MEMO: dict[tuple[Any, ...], float] = {}


@dataclass
class VerifyReport:
    """Simulated times of the model with default strategies and with the tuned banks."""

    model: str
    soc: str
    mode: int
    op_bank_dir: str | None = None
    subgraph_bank_dir: str | None = None
    ops: list[OpTime] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    sgat_baseline_ms: float | None = None
    sgat_tuned_ms: float | None = None
    sgat_unfused_ms: float | None = None
    cache_mode: str = "enable"
    record_notes: list[str] | None = None   # where these figures differ from a run's record, and why

    @property
    def default_us(self) -> float:
        """Whole model (operators that could be priced), default strategies."""
        return sum(o.default_us for o in self.ops)

    @property
    def tuned_us(self) -> float:
        """Whole model with the banks' strategies."""
        return sum(o.tuned_us for o in self.ops)

    @property
    def improvement(self) -> str:
        """(before / after - 1) x 100 of the whole model."""
        if self.mode == 1 and self.sgat_baseline_ms is not None and self.sgat_tuned_ms is not None:
            return improvement(self.sgat_baseline_ms, self.sgat_tuned_ms)
        return improvement(self.default_us, self.tuned_us)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"model": self.model, "soc": self.soc, "job_type": self.mode,
                             "op_compiler_cache_mode": self.cache_mode}
        if self.mode == 2:
            d.update({"op_bank_dir": self.op_bank_dir, "model_default_us": round(self.default_us, 3),
                      "model_tuned_us": round(self.tuned_us, 3), "model_improvement": self.improvement,
                      "from_custom_bank": sum(o.source == "custom" for o in self.ops),
                      "from_builtin_bank": sum(o.source == "builtin" for o in self.ops),
                      "invalid_bank_records": sum(o.source.startswith("invalid") for o in self.ops),
                      "operators": [o.to_dict() for o in self.ops], "skipped": self.skipped})
        else:
            d.update({"subgraph_bank_dir": self.subgraph_bank_dir,
                      "model_default_ms": self.sgat_baseline_ms, "model_tuned_ms": self.sgat_tuned_ms,
                      "model_unfused_ms": self.sgat_unfused_ms,
                      "model_improvement": self.improvement})
        if self.record_notes is not None:
            d["against_the_record"] = self.record_notes
        return d

    def lines(self, top: int = 20, all_ops: bool = False) -> list[str]:
        return self._lines(top, all_ops) + (self.record_notes or [])

    def _lines(self, top: int, all_ops: bool) -> list[str]:
        out = [f"verification of {self.model} on {self.soc} (op_compiler_cache_mode={self.cache_mode}; "
               f"the banks are read afresh, no cache can hide new entries)"]
        if self.mode == 1:
            out.append(f"subgraph bank: {self.subgraph_bank_dir}")
            out.append(f"model, default fusion: {self.sgat_baseline_ms:.6f} ms; with the subgraph bank: "
                       f"{self.sgat_tuned_ms:.6f} ms; improvement {self.improvement}")
            if self.sgat_unfused_ms is not None:
                out.append(f"model, unfused (every operator its own kernel): {self.sgat_unfused_ms:.6f} ms")
            return out
        out.append(f"operator bank: {self.op_bank_dir}")
        changed = [o for o in self.ops if o.tuned_us != o.default_us]
        shown = self.ops if all_ops else sorted(changed, key=lambda o: o.default_us - o.tuned_us, reverse=True)[:top]
        if shown:
            rows = [[(o.op_name if len(o.op_name) <= 60 else "…" + o.op_name[-59:]),
                     o.op_type if isinstance(o.op_type, str) else "+".join(o.op_type),
                     f"{o.default_us:.3f}", f"{o.tuned_us:.3f}", improvement(o.default_us, o.tuned_us), o.source]
                    for o in shown]
            out.append("" if all_ops else f"operators whose strategy differs from the default "
                                          f"({len(changed)}; top {len(shown)}):")
            out += table(rows, ["operator", "type", "default(us)", "tuned(us)", "improvement", "strategy"],
                         [False, False, True, True, True, False])
        n_custom = sum(o.source == "custom" for o in self.ops)
        n_builtin = sum(o.source == "builtin" for o in self.ops)
        out.append(f"operators priced: {len(self.ops)} ({n_custom} from the custom bank, {n_builtin} from the "
                   f"built-in bank, {len(self.ops) - n_custom - n_builtin} default); skipped: {len(self.skipped)}")
        invalid = sorted({o.op_name for o in self.ops if o.source.startswith("invalid")})
        if invalid:
            out.append(f"bank records whose strategy is invalid on {self.soc} (the default runs instead; a "
                       f"tuning run replaces them): {len(invalid)}: {', '.join(invalid[:5])}"
                       + (" ..." if len(invalid) > 5 else ""))
        out.append(f"model: default {self.default_us / 1000:.6f} ms -> with banks {self.tuned_us / 1000:.6f} ms; "
                   f"improvement {self.improvement}")
        return out


def check_cache_mode(value: str) -> str:
    if value not in CACHE_MODES:
        raise AoeError(f"op_compiler_cache_mode={value!r} is not valid; use enable, disable or force")
    return value


def op_times(graph: Any, soc: Any, op_bank_dir: str | os.PathLike[str] | None, *, builtin: bool = True,
             cache_mode: str = "enable") -> tuple[list[OpTime], list[dict[str, str]]]:
    """Price every operator with the default strategy and with the banks' strategy (`aoe.opat.apply_bank`)."""
    check_cache_mode(cache_mode)
    if cache_mode == "force":
        _MEMO.clear()
    return apply_bank(graph, soc, op_bank_dir, builtin=builtin, memo=None if cache_mode == "disable" else _MEMO)


def verify_graph(graph: Any, soc: Any, *, mode: int = 2, op_bank_dir: str | os.PathLike[str] | None = None,
                 subgraph_bank_dir: str | os.PathLike[str] | None = None, builtin: bool = True,
                 cache_mode: str = "enable", model: str | None = None) -> VerifyReport:
    """Compile `graph` with default strategies and with the banks; see the module docstring."""
    soc = require_soc(soc, "verify_graph")
    check_cache_mode(cache_mode)
    rep = VerifyReport(model=model or graph.name, soc=soc.name, mode=mode, cache_mode=cache_mode,
                       op_bank_dir=str(op_bank_dir) if op_bank_dir is not None else None,
                       subgraph_bank_dir=str(subgraph_bank_dir) if subgraph_bank_dir is not None else None)
    if mode == 1:
        from .. import sgat  # lazily: an OPAT verification never needs the SGAT tuner

        if subgraph_bank_dir is None:
            raise AoeError("subgraph verification needs a subgraph bank directory")
        times = sgat.apply_bank(graph, soc, Path(subgraph_bank_dir), builtin=builtin)
        rep.sgat_baseline_ms, rep.sgat_tuned_ms, rep.sgat_unfused_ms = times
        return rep
    rep.ops, rep.skipped = op_times(graph, soc, op_bank_dir, builtin=builtin, cache_mode=cache_mode)
    return rep


def write_tuned_model(path: Path, graph: Any, soc: Any, mode: int, settings: Any, name: str) -> Path:
    """`--output`: the graph with, per operator, the strategy in use after tuning and its simulated time."""
    text = os.fspath(path)
    path = Path(path)
    if path.is_dir() or text.endswith(("/", os.sep)):
        # a directory (or a name that says it is one): the file inside it, its name never from the model
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AoeError(f"cannot create the --output directory {path}: {exc.strerror or exc}") from None
        path = path / output_file_name(name)
    rep = verify_graph(graph, soc, mode=mode, op_bank_dir=settings.op_bank_dir,
                       subgraph_bank_dir=settings.subgraph_bank_dir, model=name)
    data = {"format": "aoe-tuned-model/1", "soc_version": soc.name, "job_type": mode,
            "performance": rep.to_dict(), "graph": graph.to_dict()}
    try:
        atomic_write_json(path, data, indent=None)
    except OSError as exc:
        raise AoeError(f"cannot write --output {path}: {exc.strerror or exc}") from None
    return path


# --- against a run's record ---------------------------------------------------------------------

def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def _soc_reason(run: Any, now: Any) -> str:
    if run.to_dict() == now.to_dict():
        return "same SoC: the simulator itself differs from the one that ran the job (another aoe version)"
    if run.ini_sha256 and run.ini_sha256 != now.ini_sha256:
        return (f"the SoC differs: the run used {run.name} from an .ini with sha256 {run.ini_sha256[:12]}…, "
                f"this verification {now.name} ({now.ini_sha256[:12] or 'no file'}…)")
    changed = [k for k, v in run.to_dict().items() if now.to_dict().get(k) != v and k != "source"]
    return f"the SoC differs from the run's in {', '.join(changed[:6]) or 'its source'}"


def _tuned_reason(line: Any, source: str, builtin_run: Any, builtin_now: bool) -> str:
    run_src = "this run" if line["outcome"] in ("add", "update") else (line["provenance"] or "default")
    if builtin_run is not None and bool(builtin_run) != builtin_now and "builtin" in (run_src, source):
        return f"the run had the built-in bank {'on' if builtin_run else 'off'}, this verification has it " \
               f"{'on' if builtin_now else 'off'}"
    if run_src == "this run" and source != "custom":
        return "the strategy this run wrote is not in this bank (another TUNE_BANK_PATH, or the entry was removed)"
    if run_src in ("builtin", "default") and source == "custom":
        return "the custom bank now holds a strategy for this case (tuned after the run)"
    if line["error"]:
        return "the case failed in the run"
    return f"the bank's entry changed since the run (run: {run_src}, now: {source}; a later job updated it)"


def compare_with_record(rep: VerifyReport, record: Any, graph: Any, soc: Any, *, builtin: bool = True,
                        limit: int = 10) -> list[str]:
    """Lines saying where `rep`'s re-priced figures differ from a run's record (`aoe.report.read_record`),
    and why: a different SoC or simulator, a bank changed since the run, the built-in switch."""
    out = [f"against the run's record {record.path.name} ({record.kind.upper()}, task {record.task}):"]
    if record.soc.name != soc.name or record.soc.to_dict() != soc.to_dict():
        out.append(f"  note: {_soc_reason(record.soc, soc)}")
    if record.kind == "opat":
        if rep.mode != 2:
            return out + ["  the record is an operator-tuning run: verify with -j 2 to compare"]
        run = {o[1]: (o, line) for line in record.cases.values() for o in line["ops"]}
        diffs = []
        for o in rep.ops:
            got = run.get(o.op_name)
            if got is None or got[0][3] is None or got[0][5] is None:
                continue
            (_, _, _, d_run, _, t_run), line = got
            if not _close(d_run, o.default_us):
                diffs.append((o.op_name, "default", d_run, o.default_us, _soc_reason(record.soc, soc)))
            elif not _close(t_run, o.tuned_us):
                diffs.append((o.op_name, "tuned", t_run, o.tuned_us,
                              _tuned_reason(line, o.source, record.options.get("builtin"), builtin)))
        missing = len(run) - sum(1 for o in rep.ops if o.op_name in run)
        run_total = sum(v[0][5] for v in run.values() if v[0][5] is not None and v[0][3] is not None)
        out.append(f"  model with the banks: the run measured {run_total / 1000:.6f} ms, now {rep.tuned_us / 1000:.6f} ms")
        if missing:
            out.append(f"  {missing} of the run's operators are not in this model (another model or input shape?)")
        if not diffs:
            out.append(f"  every operator's figures equal the record's ({len(rep.ops)} operators)")
        else:
            out.append(f"  {len(diffs)} operators differ (first {min(limit, len(diffs))}):")
            for name, which, a, b, why in diffs[:limit]:
                out.append(f"    {name}: {which} {a:.3f} us in the run, {b:.3f} us now: {why}")
        return out
    if rep.mode != 1:
        return out + ["  the record is a subgraph-tuning run: verify with -j 1 to compare"]
    from ..sgat import priced_subgraphs  # lazily: only SGAT comparisons need it

    now, prep = priced_subgraphs(graph, soc, Path(rep.subgraph_bank_dir) if rep.subgraph_bank_dir else None,
                                 builtin=builtin)
    diffs = []
    for key, line in record.subgraphs.items():
        cur = now.get(key)
        if cur is None:
            diffs.append((key, line["after_us"], float("nan"), "not in this model (another model or SoC?)"))
        elif not _close(line["baseline_us"], cur["baseline_us"]):
            diffs.append((key, line["baseline_us"], cur["baseline_us"], _soc_reason(record.soc, soc)))
        elif not _close(line["after_us"], cur["after_us"]):
            diffs.append((key, line["after_us"], cur["after_us"],
                          _tuned_reason(dict(line, error=None), cur["provenance"] or "default",
                                        record.options.get("builtin"), builtin)))
    out.append(f"  model: the run measured default fusion {record.baseline_us / 1000:.6f} ms; now "
               f"{rep.sgat_baseline_ms:.6f} ms default, {rep.sgat_tuned_ms:.6f} ms with the bank")
    if not diffs:
        out.append(f"  every subgraph's figures equal the record's ({len(record.subgraphs)} distinct subgraphs)")
    else:
        out.append(f"  {len(diffs)} subgraphs differ (first {min(limit, len(diffs))}):")
        for key, a, b, why in diffs[:limit]:
            out.append(f"    {key}: {a:.3f} us in the run, {b:.3f} us now: {why}")
    return out
