"""`aoe explain`: one operator's default and tuned strategy side by side, and why the tuned one is faster.

The tuned strategy is the banks' (custom, then built-in) when they hold the case, else it is tuned
now within a budget. Each side is simulated in detail (`aoe.sim`): busy time per pipe, the bound
pipe, bytes per memory level. Every changed field gets one sentence whose numbers are simulated:
the tuned strategy with that field put back to its default value is priced, and the per-pipe
difference is that field's share of the gain ("leave one out"). When putting a field back alone
breaks a hardware rule, the field is tried alone on the default strategy instead; when that breaks
a rule too, the sentence says the field only works together with the others.

The timeline (Gantt) is derived, not traced: the simulator gives each pipe's total busy time, the
kernel's wall time and the non-overlappable part (launch, pipeline fill and drain: the Overhead
pipe). The Overhead is drawn first; every other pipe's busy time is cut into equal slices spread
evenly over the rest of the wall time (one slice per period), each pipe offset within the period in
dataflow order (MTE2 → MTE1 → Cube/Vector → FixPipe/MTE3), as the double-buffered pipeline runs
them. So each row's filled length is exactly its busy time, the bound pipe is the fullest row and
the wall time is exact; the slices' positions are a rendering of the overlap model, not a trace.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import sim
from ..bank import BankChain, BuiltinBank, OpBank
from ..errors import AoeError
from ..graph import Graph
from ..opat.apply import price, variant_for
from ..opat.search import Budget, simulator_measure
from ..opat.tune import case_for, tune_case
from ..ops import OpCase, Unsupported, describe
from ..soc import Soc, require_soc
from .data import Kernel, kernel, variant_label

SLICES = 16
STAGE = {"MTE2": 0, "MTE1": 1, "Cube": 2, "Vector": 2, "FixPipe/MTE3": 3, "Scalar": 0}
TIMELINE_PIPES = ["Overhead", "MTE2", "MTE1", "Cube", "Vector", "FixPipe/MTE3", "Scalar"]


@dataclass
class Side:
    """One strategy of the operator: where it came from, its kernel simulated, its total with conversions."""

    source: str
    kernel: Kernel
    total_us: float
    sim_op: Any

    def timeline(self) -> dict[str, list[tuple[float, float]]]:
        """(start, duration) µs per pipe (see the module docstring for how it is derived)."""
        k = self.kernel
        busy = k.busy_us
        out: dict[str, list[tuple[float, float]]] = {p: [] for p in TIMELINE_PIPES}
        ovh = min(busy.get("Overhead", 0.0), k.time_us)
        if ovh > 0:
            out["Overhead"].append((0.0, ovh))
        window = max(k.time_us - ovh, 0.0)
        period = window / SLICES if window > 0 else 0.0
        for p in TIMELINE_PIPES[1:]:
            b = min(busy.get(p, 0.0), window)
            if b <= 0 or period <= 0:
                continue
            piece = b / SLICES
            offset = STAGE.get(p, 0) / 3 * (period - piece)
            out[p] = [(ovh + i * period + offset, piece) for i in range(SLICES)]
        return out


@dataclass
class Explanation:
    """The default and the tuned strategy of one operator, and one reason per changed field."""

    op_name: str
    op_type: str
    soc: str
    default: Side
    tuned: Side
    fields: list[tuple[str, int | None, int | None]]      # (field, default value, tuned value)
    reasons: list[str] = field(default_factory=list)

    def gantt_lines(self, width: int = 64) -> list[str]:
        """Both timelines as text bars on one time scale (█ busy; the bound pipe marked)."""
        span = max(self.default.kernel.time_us, self.tuned.kernel.time_us) or 1.0
        lines = [(f"timeline (one column = {span / width:.2f} µs; bars: busy time spread over the kernel, "
                  "see `aoe explain --help`)")]
        for name, side in (("default", self.default), ("tuned", self.tuned)):
            k = side.kernel
            lines.append(f"{name}: {k.time_us:.2f} µs, bound by {k.bound}")
            for pipe, segs in side.timeline().items():
                cells = [0.0] * width
                for start, dur in segs:
                    a, b = start / span * width, (start + dur) / span * width
                    for c in range(int(a), min(width, int(b) + 1)):
                        cells[c] += max(0.0, min(b, c + 1) - max(a, c))
                bar = "".join(_shade(v) for v in cells)
                busy = k.busy_us.get(pipe, 0.0)
                mark = "  ◀ bound" if pipe == k.bound else ""
                lines.append(f"  {pipe:<12} |{bar}| {busy:9.2f} µs {busy / k.time_us * 100 if k.time_us else 0:5.1f}%{mark}")
        return lines

    def lines(self) -> list[str]:
        """The terminal view: fields side by side, pipes, bytes, reasons, timelines."""
        d, t = self.default.kernel, self.tuned.kernel
        out = [f"{self.op_type} {self.op_name} on {self.soc}",
               f"  default: {self.default.source} ({d.label}), tuned: {self.tuned.source} ({t.label})",
               "", f"  {'field':<16} {'default':>10} {'tuned':>10}"]
        for f, a, b in self.fields:
            out.append(f"  {f:<16} {'—' if a is None else a:>10} {'—' if b is None else b:>10}"
                       + ("   *" if a != b else ""))
        out += ["", f"  {'':<21} {'default':>12} {'tuned':>12} {'delta':>10}"]
        for p in sim.PIPES:
            a, b = d.busy_us.get(p, 0.0), t.busy_us.get(p, 0.0)
            out.append(f"  {p + ' busy µs':<21} {a:12.2f} {b:12.2f} {b - a:+10.2f}")
        out.append(f"  {'kernel µs':<21} {d.time_us:12.2f} {t.time_us:12.2f} {t.time_us - d.time_us:+10.2f}")
        out.append(f"  {'with conversions':<21} {self.default.total_us:12.2f} {self.tuned.total_us:12.2f} "
                   f"{self.tuned.total_us - self.default.total_us:+10.2f}")
        out.append(f"  {'bound':<21} {d.bound:>12} {t.bound:>12}")
        out.append(f"  {'HBM MB':<21} {d.hbm_bytes / 1e6:12.2f} {t.hbm_bytes / 1e6:12.2f} "
                   f"{(t.hbm_bytes - d.hbm_bytes) / 1e6:+10.2f}")
        out.append(f"  {'L2 MB':<21} {d.l2_bytes / 1e6:12.2f} {t.l2_bytes / 1e6:12.2f} "
                   f"{(t.l2_bytes - d.l2_bytes) / 1e6:+10.2f}")
        out.append(f"  {'TFLOP/s':<21} {d.tflops:12.2f} {t.tflops:12.2f}")
        out += ["", "why:"] + [f"  - {r}" for r in self.reasons] + [""] + self.gantt_lines()
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        def side(s: Side) -> dict[str, Any]:
            k = s.kernel
            return {"source": s.source, "kernel": k.label, "time_us": k.time_us, "total_us": s.total_us,
                    "bound": k.bound, "busy_us": k.busy_us, "hbm_bytes": k.hbm_bytes, "l2_bytes": k.l2_bytes,
                    "flops": k.flops, "strategy": k.strategy,
                    "timeline": {p: [[round(a, 4), round(b, 4)] for a, b in v] for p, v in s.timeline().items()}}
        return {"op_name": self.op_name, "op_type": self.op_type, "soc": self.soc, "default": side(self.default),
                "tuned": side(self.tuned), "fields": [list(f) for f in self.fields], "reasons": self.reasons}

    def save_figure(self, path: str | os.PathLike[str]) -> None:
        """Both timelines as a Gantt chart (.svg or .png, from the suffix)."""
        from .charts import PIPE_COLOURS, _figure, plain, save

        suffix = os.fspath(path).rsplit(".", 1)[-1].lower()
        if suffix not in ("svg", "png"):
            raise AoeError(f"-o {path}: the timeline is written as .svg or .png")
        fig = _figure(9, 4.6, layout="constrained")
        axes = fig.subplots(2, 1, sharex=True)
        span = max(self.default.kernel.time_us, self.tuned.kernel.time_us)
        for ax, (name, side) in zip(axes, (("default", self.default), ("tuned", self.tuned))):
            tl = side.timeline()
            for y, pipe in enumerate(TIMELINE_PIPES):
                ax.broken_barh(tl[pipe], (y - 0.35, 0.7), facecolors=PIPE_COLOURS.get(pipe, "#444"),
                               edgecolor="#222" if pipe == side.kernel.bound else "none", linewidth=1.2)
            labels = [p + (" ◀ bound" if p == side.kernel.bound else "") for p in TIMELINE_PIPES]
            ax.set_yticks(range(len(TIMELINE_PIPES)), labels, fontsize=8)
            ax.invert_yaxis()
            ax.axvline(side.kernel.time_us, color="#000", lw=1, ls="--")
            ax.set_xlim(0, span * 1.02)
            ax.set_title(plain(f"{name} ({side.source}, {side.kernel.label}): {side.kernel.time_us:.2f} µs, "
                               f"bound by {side.kernel.bound}"), fontsize=9, loc="left")
        axes[-1].set_xlabel("µs (busy time of each pipe spread over the kernel; derived from the overlap model)")
        fig.suptitle(plain(f"{self.op_type} {self.op_name[-60:]} on {self.soc}"), fontsize=10)
        try:
            save(fig, os.fspath(path))
        except OSError as exc:
            raise AoeError(f"cannot write {path}: {exc.strerror or exc}") from None


def _shade(v: float) -> str:
    """A text cell by how much of it a pipe is busy."""
    return "█" if v >= 0.875 else "▓" if v >= 0.625 else "▒" if v >= 0.375 else "░" if v > 0.05 else " "


# --- reasons --------------------------------------------------------------------------------------

def _times(r: float) -> str:
    named = {0.25: "quarters", 0.5: "halves", 2.0: "doubles", 4.0: "quadruples"}
    for k, v in named.items():
        if abs(r - k) < 1e-9:
            return v
    if r > 1 and abs(r - round(r)) < 1e-9:
        return f"multiplies by {round(r)}"
    if 0 < r < 1 and abs(1 / r - round(1 / r)) < 1e-9:
        return f"divides by {round(1 / r)}"
    return f"scales by {r:.3g}×"


def _mechanism(f: str, a: int, b: int) -> str:
    """What changing one strategy field does, in words (the numbers come from the simulator)."""
    if f in ("baseM", "baseN", "baseK") and a > 0 and b > 0:
        return f"{f} {a}→{b} {_times(a / b)} the number of mmad issues along {f[-1]}"
    if f in ("usedCoreNum", "blockDim"):
        return f"{f} {a}→{b} runs the work on {b} cores instead of {a}"
    if f in ("batchDim", "hoDim", "nDim", "groupDim"):
        axis = {"batchDim": "the batch", "hoDim": "the output rows", "nDim": "Cout", "groupDim": "the groups"}[f]
        return f"{f} {a}→{b} splits {axis} over {b} cores instead of {a}"
    if f in ("singleCoreM", "singleCoreN", "singleCoreK"):
        return f"{f} {a}→{b} gives each core a {b} instead of {a} slice of {f[-1]}"
    if f in ("stepKa", "stepKb") and a > 0 and b > 0:
        return f"{f} {a}→{b} {_times(a / b)} the number of {f[-1].upper()} transfers from GM (MTE2)"
    if f in ("depthA1", "depthB1"):
        return f"{f} {a}→{b} keeps {b} instead of {a} {f[5]} tiles in L1 (ping-pong when twice the step)"
    if f in ("stepM", "stepN"):
        return f"{f} {a}→{b} stages {b} instead of {a} base blocks along {f[-1]} per L1 load"
    if f in ("dbL0A", "dbL0B", "dbL0C"):
        what = {"dbL0A": "MTE1 loads of A overlap Cube", "dbL0B": "MTE1 loads of B overlap Cube",
                "dbL0C": "FixPipe overlaps Cube"}[f]
        return f"{f} {a}→{b} turns {f[-3:]} ping-pong {'on' if b else 'off'} (with it, {what})"
    if f in ("iterateOrder", "iterateMNOrder"):
        return f"{f} {a}→{b} swaps the loop order (which operand is re-read)"
    if f.startswith("l2") or f == "tilingEnable":
        return f"{f} {a}→{b} changes the L2 tiling (how much of A and B is re-read from L2 instead of HBM)"
    if f == "tileLen" and a > 0 and b > 0:
        return f"tileLen {a}→{b} {_times(a / b)} the number of UB tiles (per-tile DMA and scalar cost)"
    if f == "doubleBuffer":
        return f"doubleBuffer {a}→{b} turns UB ping-pong {'on' if b else 'off'} (MTE2 overlaps Vector)"
    if f == "pBufferFlag":
        return f"pBufferFlag {a}→{b} changes which buffers ping-pong (bits: AL1, BL1, AL0, BL0, CL0)"
    if f in ("hoL1", "woL1", "kAL1", "kBL1"):
        return f"{f} {a}→{b} changes the block staged in L1 (how often the feature map / weight is loaded)"
    if f in ("hoL0", "woL0", "kL0", "nL0"):
        return f"{f} {a}→{b} changes the L0 block (work per mmad issue)"
    if f == "impl":
        return f"impl {a}→{b} switches the kernel's algorithm"
    return f"{f} {a}→{b}"


def _deltas(before: Kernel, after: Kernel) -> str:
    diffs = [(p, after.busy_us.get(p, 0.0) - before.busy_us.get(p, 0.0)) for p in sim.PIPES]
    diffs = [d for d in diffs if abs(d[1]) >= 0.005]
    diffs.sort(key=lambda d: -abs(d[1]))
    parts = [f"{p} {v:+.2f} µs" for p, v in diffs[:3]]
    dt = after.time_us - before.time_us
    wall = f"wall {dt:+.2f} µs"
    if parts:
        return f"{', '.join(parts)}; {wall}"
    if abs(dt) < 0.005:
        return "no effect on its own here (a tie the search kept)"
    return f"no pipe's busy time changes, only how the pipes overlap: {wall}"


def reasons(soc: Soc, default: Side, tuned: Side) -> list[str]:
    """One sentence per changed field (and one for a changed kernel), with simulated per-pipe deltas.

    When tuning picked another kernel with the same strategy fields (a matmul with an operand in
    FRACTAL_NZ), the kernel change is priced first with the default tiling, then every changed field
    on the new kernel; a kernel with other fields (conv as a matmul) gets the one kernel sentence.
    """
    d, t = default.kernel, tuned.kernel
    out: list[str] = []
    base = d
    if default.sim_op != tuned.sim_op:
        conv = tuned.total_us - t.time_us
        extra = f"; its conversions add {conv:.2f} µs" if conv > 0.005 else ""
        if set(d.strategy) != set(t.strategy):
            return [(f"kernel {d.label}→{t.label} (another implementation of the operator): {_deltas(d, t)}"
                    f"{extra}; bound {d.bound}→{t.bound}")]
        base = kernel(soc, tuned.sim_op, d.strategy, "")
        how = "with the default tiling"
        if base.bound == "invalid":
            base = kernel(soc, tuned.sim_op, None, "")
            how = "with its own default tiling"
        out.append(f"kernel {d.label}→{t.label} (another format of the operands), {how}: {_deltas(d, base)}{extra}")
    changed = [f for f in t.strategy if base.strategy.get(f) != t.strategy[f]]
    for f in changed:
        mech = _mechanism(f, base.strategy[f], t.strategy[f])
        back = kernel(soc, tuned.sim_op, dict(t.strategy, **{f: base.strategy[f]}), "")
        if back.bound != "invalid":
            text = _deltas(back, t)
            out.append(f"{mech}: {text}" + ("" if text.startswith("no effect") else
                                            f" (against the tuned strategy with {f} at its default)"))
            continue
        alone = kernel(soc, tuned.sim_op, dict(base.strategy, **{f: t.strategy[f]}), "")
        if alone.bound != "invalid":
            text = _deltas(base, alone)
            out.append(f"{mech}: {text}" + ("" if text.startswith("no effect") else " (alone on the default strategy)"))
        else:
            rest = [g for g in changed if g != f]
            others = ", ".join(rest[:4]) + (f" and {len(rest) - 4} more" if len(rest) > 4 else "")
            out.append(f"{mech}: only valid together with {others or 'the other changes'} "
                       "(alone it breaks a hardware rule either way)")
    if not out:
        out.append("the tuned strategy is the default one: nothing to explain")
    return out


# --- building an explanation ----------------------------------------------------------------------

def _fields(d: Kernel, t: Kernel) -> list[tuple[str, int | None, int | None]]:
    names = list(d.strategy) + [f for f in t.strategy if f not in d.strategy]
    return [(f, d.strategy.get(f), t.strategy.get(f)) for f in names]


def explain_case(case: OpCase, soc: Soc | str, op_bank_dir: str | os.PathLike[str] | None = None, *,
                 builtin: bool = True, budget: int = 20000, retune: bool = False) -> Explanation:
    """Explain one operator case: default vs the banks' strategy (tuned now within `budget` if none)."""
    soc = require_soc(soc, "explain_case")
    measure = simulator_measure(soc)
    extra: dict[Any, float] = {}
    dk = kernel(soc, case.default.sim_op, None, "default")
    default = Side("CANN default", dk, price(case, soc, None, measure, extra), case.default.sim_op)
    custom = OpBank(op_bank_dir, soc.name, soc.cube_cores) if op_bank_dir is not None else None
    entry = None if retune else BankChain(custom, BuiltinBank(soc.name, soc.cube_cores) if builtin else None
                                          ).lookup(case.op_type, case.key)
    tuned: Side | None = None
    if entry is not None:
        try:
            variant, strat = variant_for(case, entry.knowledge)
            total = price(case, soc, entry.knowledge, measure, extra)
            tk = kernel(soc, variant.sim_op, strat, variant_label(case, variant))
            if tk.bound != "invalid":
                tuned = Side(f"{entry.source} bank", tk, total, variant.sim_op)
        except (AoeError, KeyError, ValueError, TypeError):
            tuned = None  # a damaged entry: tune instead
    if tuned is None:
        res = tune_case(case, soc, budget=Budget(evaluations=budget))
        op = res.sim_op if res.sim_op is not None else case.default.sim_op
        parts = [res.variant] if res.variant and res.variant != case.default.label else []
        parts += [res.impl] if res.impl not in ("default", "standard", "") else []
        label = " + ".join(parts) or "default"
        tuned = Side(f"tuned now ({res.evaluations} evaluations)", kernel(soc, op, res.strategy, label),
                     res.after_us, op)
    return Explanation(case.op_name, case.op_type, soc.name, default, tuned, _fields(dk, tuned.kernel),
                       reasons(soc, default, tuned))


def explain_graph_op(graph: Graph, name: str, soc: Soc | str, op_bank_dir: str | os.PathLike[str] | None = None,
                     **kw: Any) -> Explanation:
    """Explain the operator called `name` in `graph` (an exact name, or a unique part of one)."""
    ops = [op for op in graph.ops if op.name == name]
    if not ops:
        ops = [op for op in graph.ops if name in op.name]
        if len(ops) > 1:
            shown = ", ".join(op.name for op in ops[:5])
            raise AoeError(f"{name!r} matches {len(ops)} operators of {graph.name or 'the graph'} ({shown}"
                           f"{' ...' if len(ops) > 5 else ''}); give the full name")
    if not ops:
        raise AoeError(f"no operator {name!r} in {graph.name or 'the graph'}; `aoe graph MODEL --per_op` lists them")
    try:
        case = describe(graph, ops[0])
    except Unsupported as exc:
        raise AoeError(f"{ops[0].name} ({ops[0].type}) cannot be priced: {exc}") from None
    return explain_case(case, soc, op_bank_dir, **kw)


def explain_recorded(record: Any, name: str) -> Explanation:
    """Explain operator `name` (exact, or a unique part) of an OPAT run from its record (`read_record`):
    the kernels, strategies and times the job measured; only the per-field sentences are simulated."""
    from ..opat.detail import op_from_dict
    from .data import _kernel, _row_source

    if record.kind != "opat":
        raise AoeError("aoe explain explains an operator of an operator-tuning (OPAT) run; this record is SGAT's")
    found = [(line, o) for line in record.cases.values() if line["detail"] is not None for o in line["ops"]
             if o[3] is not None and o[5] is not None]
    hits = [x for x in found if x[1][1] == name] or [x for x in found if name in x[1][1]]
    if len(hits) > 1 and len({x[1][1] for x in hits}) > 1:
        shown = ", ".join(x[1][1] for x in hits[:5])
        raise AoeError(f"{name!r} matches {len(hits)} operators of the run ({shown}{' ...' if len(hits) > 5 else ''}); "
                       "give the full name")
    if not hits:
        raise AoeError(f"no priced operator {name!r} in the run's record {record.path}")
    line, o = hits[0]
    det = line["detail"]
    dk, tk = _kernel(det["default"]), _kernel(det["tuned"])
    src = _row_source(line)
    label = {"this run": "tuned by this run", "default": "CANN default"}.get(src, f"{src} bank")
    default = Side("CANN default", dk, o[3], op_from_dict(det["default_op"]))
    tuned = Side(label, tk, o[5], op_from_dict(det["tuned_op"]))
    return Explanation(o[1], det["op_type"], record.soc.name, default, tuned, _fields(dk, tk),
                       reasons(record.soc, default, tuned))


def explain_single_op(op_type: str, shapes: list[list[int]], soc: Soc | str, op_bank_dir: Any = None, *,
                      dtype: str = "float16", attrs: Mapping[str, Any] | None = None, **kw: Any) -> Explanation:
    """Explain a single operator described like `aoe simulate` (CANN type, input shapes, attributes)."""
    op = sim.make_op(op_type, shapes, dtype=dtype, **dict(attrs or {}))
    return explain_case(case_for(op), soc, op_bank_dir, **kw)


__all__ = ["Explanation", "Side", "explain_case", "explain_graph_op", "explain_recorded", "explain_single_op",
           "reasons"]
