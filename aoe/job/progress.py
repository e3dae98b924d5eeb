"""What the user sees while a job runs: a progress bar on stderr, log lines and the final summary."""
from __future__ import annotations

import os
import sys
from typing import Any, Sequence, TextIO

from ..tuning import improvement
from ..safetext import safe_text


class Progress:
    """A tqdm bar (cases done/total, operators done, bank hits, last operator, ETA) — or nothing.

    Shown only when `enabled` and the stream is a terminal (`force` shows it anyway, for tests).
    """

    def __init__(self, enabled: bool, unit: str = "case", stream: TextIO | None = None, force: bool = False) -> None:
        self.stream = stream if stream is not None else sys.stderr
        is_tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = enabled and (is_tty or force)
        self.unit = unit
        self.bar: Any = None
        self.hits = 0
        self.done = 0
        self.ops = 0

    def start(self, total: int, initial: int = 0) -> None:
        self.done = initial
        if not self.enabled:
            return
        from tqdm import tqdm

        try:
            cols, rows = os.get_terminal_size(self.stream.fileno())
        except (AttributeError, OSError, ValueError):
            cols, rows = 0, 0
        self.bar = tqdm(total=total + initial, initial=initial, unit=self.unit, file=self.stream,
                        dynamic_ncols=cols > 0, ncols=None if cols > 0 else 100,
                        nrows=None if rows > 0 else 24, leave=True, desc="tuning",
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit}s "
                                   "[{elapsed}<{remaining}{postfix}]")

    def set_total(self, total: int) -> None:
        if self.bar is not None and self.bar.total != total:
            self.bar.total = total
            self.bar.refresh()

    def step(self, hit: bool, current: str, n_ops: int = 1) -> None:
        """One case (or subgraph) done; `n_ops` operators share it; `current` names the last one."""
        self.done += 1
        self.hits += int(hit)
        self.ops += n_ops
        if self.bar is None:
            return
        current = safe_text(current)
        name = current if len(current) <= 40 else "…" + current[-39:]
        self.bar.set_postfix_str(f"{self.ops} ops, hits {self.hits}, {name}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _fmt_us(us: float | None) -> str:
    if us is None:
        return "-"
    if us >= 1000:
        return f"{us / 1000:.3f} ms"
    return f"{us:.3f} us"


def table(rows: Sequence[Sequence[str]], header: Sequence[str], right: Sequence[bool]) -> list[str]:
    """A plain text table (first column left-aligned unless `right` says otherwise)."""
    rows = [[safe_text(c) for c in row] for row in rows]
    cols = list(zip(header, *rows)) if rows else [(h,) for h in header]
    widths = [max(len(str(c)) for c in col) for col in cols]
    out = []
    for row in [header, *rows]:
        cells = [(str(c).rjust(w) if r else str(c).ljust(w)) for c, w, r in zip(row, widths, right)]
        out.append("  ".join(cells).rstrip())
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


def skipped_entries(report: Any, graph: Any = None) -> list[dict[str, Any]]:
    """Every operator the tuner skipped as {"op", "op_type", "reason"} (OPAT records or SGAT dicts).

    With the `graph`, an Opaque operator is named by its source type (`Opaque(Atan)`).
    """
    source = {op.name: op.attrs.get("onnx_type") for op in graph.ops if op.type == "Opaque"} if graph else {}
    out = []
    for s in getattr(report, "skipped", None) or []:
        if isinstance(s, dict):
            e = {"op": str(s.get("op", "")), "op_type": s.get("op_type", "?"), "reason": str(s.get("reason", ""))}
        else:
            e = {"op": s.op_name, "op_type": s.op_type, "reason": str(s.skipped)}
        if e["op_type"] == "Opaque" and source.get(e["op"]):
            e["op_type"] = f"Opaque({source[e['op']]})"
        out.append(e)
    return out


def _cases_line(c: Any, hits: dict[str, int] | None, repeat_tune: bool) -> str:
    """The counters in words: with REPEAT_TUNE every case was tuned again, and the hits say so."""
    split = (f"built-in {hits.get('builtin', 0)}, custom {hits.get('custom', 0)}, this run {hits.get('this run', 0)}"
             if hits and c.repo_hit_num else "")
    origin = f" ({split})" if split else ""
    if repeat_tune:
        return (f"cases: total {c.total_num}, every one tuned again (REPEAT_TUNE): {c.repo_hit_num} were in a "
                f"bank{origin}, of which {c.repo_update_num} beat the bank's strategy and replaced it (update) and "
                f"{c.repo_reserved_num} did not (reserved); {c.repo_add_num} new ones added, "
                f"{c.repo_unsatisfied_num} unsatisfied")
    return (f"cases: total {c.total_num}, added {c.repo_add_num}, hits {c.repo_hit_num} ({split + '; ' if split else ''}"
            f"updated {c.repo_update_num}, reserved {c.repo_reserved_num}), unsatisfied {c.repo_unsatisfied_num}")


def opat_summary(report: Any, top: int = 10, hits: dict[str, int] | None = None, repeat_tune: bool = False) -> list[str]:
    """Top operators by time saved, then totals (OPAT)."""
    recs = [r for r in report.records if r.before_us is not None and r.after_us is not None]
    saved = sorted((r for r in recs if r.after_us < r.before_us), key=lambda r: r.before_us - r.after_us,
                   reverse=True)
    lines = []
    if saved:
        rows = []
        for r in saved[:top]:
            kinds = ",".join(k for k, g in r.kinds.items() if g.helped) or "-"
            t = r.op_type if isinstance(r.op_type, str) else "+".join(r.op_type)
            name = r.op_name if len(r.op_name) <= 60 else "…" + r.op_name[-59:]
            rows.append([name, t, _fmt_us(r.before_us), _fmt_us(r.after_us),
                         f"{r.before_us - r.after_us:.3f}", improvement(r.before_us, r.after_us),
                         kinds, r.outcome or "-"])
        lines.append(f"top {min(top, len(saved))} of {len(saved)} operators by time saved:")
        lines += table(rows, ["operator", "type", "before", "after", "saved(us)", "improvement", "kinds", "bank"],
                       [False, False, True, True, True, True, False, False])
        lines.append("")
    before = sum(r.before_us for r in recs)
    after = sum(r.after_us for r in recs)
    c = report.counters
    lines.append(f"operators: {len(report.records)} ({len(recs)} priced, {len(report.skipped)} skipped, "
                 f"{len(report.failed)} failed); {_cases_line(c, hits, repeat_tune)}")
    if recs and after > 0:
        dflt = [r for r in recs if r.default_us is not None]
        default, tuned = sum(r.default_us for r in dflt), sum(r.after_us for r in dflt)
        if round(before, 3) == round(after, 3) and dflt and round(default, 3) != round(tuned, 3):
            # nothing this run tuned beat the strategy in use: every gain is a bank hit's (issue 26 item 6)
            lines.append(f"this run's tuning gained nothing over the strategies in use ({_fmt_us(after)}); "
                         f"the bank hits' strategies give {_fmt_us(default)} -> {_fmt_us(tuned)} over CANN's "
                         f"defaults ({improvement(default, tuned)} faster)")
        else:
            lines.append(f"tuned operators, sum of times: {_fmt_us(before)} -> {_fmt_us(after)} "
                         f"({improvement(before, after)} faster)")
        # a bank hit's "before" is the bank's own strategy: where hits made the two differ, also the gain
        # over what the compiler runs without any bank (what `aoe verify` reports)
        if dflt and round(default, 3) != round(before, 3) and round(before, 3) != round(after, 3):
            lines.append(f"  over CANN's default strategies (bank hits included): {_fmt_us(default)} -> "
                         f"{_fmt_us(tuned)} ({improvement(default, tuned)} faster)")
    failed = [r for r in report.records if r.error]
    if failed:  # never only a count: which operator, of which type, and why
        lines.append(f"failed operators ({len(failed)}):")
        for r in failed[:top]:
            t = r.op_type if isinstance(r.op_type, str) else "+".join(r.op_type)
            reason = str(r.error).splitlines()[0] if str(r.error) else "?"
            lines.append(f"  {r.op_name} ({t}): {reason[:300]}")
        if len(failed) > top:
            lines.append(f"  ... and {len(failed) - top} more (tuning_failed_operators in the result file)")
    return lines


def hit_lines(report: Any, hits: dict[str, int] | None, kind: str) -> list[str]:
    """What the counters line cannot say: hits on entries this run added, and gains that are all the banks'."""
    if not hits:
        return []
    c = report.counters
    out = []
    if hits.get("this run"):
        out.append(f"{hits['this run']} hits are on entries an earlier graph of this run added (e.g. its forward "
                   "graph), not on a bank from before the run")
    if kind == "sgat" and c.repo_add_num == 0 and c.repo_update_num == 0 and report.model_result_us < report.model_baseline_us:
        out.append("every gain above comes from bank hits (" + ", ".join(
            f"{k} {v}" for k, v in (("built-in", hits.get("builtin", 0)), ("custom", hits.get("custom", 0)),
                                   ("this run", hits.get("this run", 0))) if v) + "): this run's tuning added none")
    return out


def sgat_summary(report: Any, top: int = 10, hits: dict[str, int] | None = None, repeat_tune: bool = False) -> list[str]:
    """Top subgraphs by time saved, then totals (SGAT)."""
    lines = []
    recs = sorted((r for r in report.records if r.after_us < r.before_us),
                  key=lambda r: (r.before_us - r.after_us) * r.count, reverse=True)
    if recs:
        rows = []
        for r in recs[:top]:
            ops = "+".join(r.op_types)
            ops = ops if len(ops) <= 50 else ops[:49] + "…"
            rows.append([r.repo_key, ops, str(r.count), _fmt_us(r.before_us), _fmt_us(r.after_us),
                         improvement(r.before_us, r.after_us), r.outcome.value])
        lines.append(f"top {min(top, len(recs))} of {len(recs)} subgraphs by time saved:")
        lines += table(rows, ["repo_key", "kernels", "count", "before", "after", "improvement", "bank"],
                       [False, False, True, True, True, True, False])
        lines.append("")
    c = report.counters
    lines.append(f"subgraphs: {report.n_subgraphs} ({report.n_cases} distinct tunable); "
                 f"{_cases_line(c, hits, repeat_tune)}")
    b, a = report.model_baseline_us, report.model_result_us
    if a > 0:
        lines.append(f"model: default fusion {_fmt_us(b)} -> tuned {_fmt_us(a)} ({improvement(b, a)} faster)")
        u = getattr(report, "model_unfused_us", 0.0)
        if u > 0:
            lines.append(f"       (unfused, every operator its own kernel: {_fmt_us(u)})")
    return lines
