"""The report's charts: matplotlib figures rendered to inline SVG strings (no JavaScript, no fonts).

matplotlib is the optional extra `report`; it is imported on first use with a one-line error when
missing. Only the object-oriented API is used (`matplotlib.figure.Figure`, no pyplot), so rendering
never touches a process-wide backend (the rcParams a save needs are set under a lock); each SVG's ids are prefixed with the chart's name so several
charts can live in one HTML page without their clip paths and markers colliding.
"""
from __future__ import annotations

import io
import math
import re
import threading
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ..durable import atomic_replace, check_target
from ..errors import AoeError
from ..safetext import safe_text
from ..tuning import gain_pct
from .data import CaseView, ReportData, SubgraphView

EXTRA_HINT = "pip install 'aoe[report]' (matplotlib)"
PIPE_ORDER = ["MTE2", "MTE1", "Cube", "Vector", "FixPipe/MTE3", "Scalar", "Overhead"]
# one colour per pipe, shared by every chart and the operator table
PIPE_COLOURS = {"MTE2": "#1f77b4", "MTE1": "#17becf", "Cube": "#d62728", "Vector": "#2ca02c",
                "FixPipe/MTE3": "#9467bd", "Scalar": "#ff7f0e", "Overhead": "#7f7f7f", "invalid": "#000000"}
# rcParams are process-wide: the few a save needs are set around it, one save at a time
_RC_LOCK = threading.Lock()
_SVG_RC = {"svg.fonttype": "none", "font.size": 9, "font.family": "sans-serif", "axes.titlesize": 10,
           "svg.hashsalt": "aoe-report"}


def require_matplotlib() -> Any:
    """The matplotlib module, or an AoeError naming the extra to install."""
    try:
        import matplotlib
        from matplotlib.figure import Figure  # noqa: F401 - checks the install is usable
    except ImportError:
        raise AoeError(f"the HTML report and `aoe explain -o` draw with matplotlib: {EXTRA_HINT}") from None
    return matplotlib


def _figure(w: float, h: float, layout: str | None = None) -> Any:
    require_matplotlib()
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), layout=layout)


_ID = re.compile(r'\bid="([^"]+)"')


def to_svg(fig: Any, name: str) -> str:
    """The figure as an SVG element for inline use (ids prefixed with `name`, width follows the page)."""
    import matplotlib

    buf = io.StringIO()
    with _RC_LOCK, matplotlib.rc_context(_SVG_RC):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    ids = set(_ID.findall(text))
    if ids:  # prefix every id and every reference to one
        pat = re.compile(r'(id="|#)(' + "|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)) + r')\b')
        text = pat.sub(lambda m: f"{m.group(1)}{name}-{m.group(2)}", text)
    text = re.sub(r'<svg([^>]*?) width="([\d.]+)pt" height="([\d.]+)pt"',
                  lambda m: f'<svg{m.group(1)} class="chart-svg" data-chart="{name}" '
                            f'style="max-width:{m.group(2)}pt;width:100%;height:auto"', text, count=1)
    return text


def save(fig: Any, path: str) -> None:
    """Write a figure to a file (format from the suffix: .svg or .png), by aoe's one writer rule
    (`aoe.durable.atomic_replace`: a regular file or nothing; never a link, device or FIFO)."""
    import matplotlib

    check_target(path)  # before drawing: a refused target costs nothing
    buf = io.BytesIO()
    with _RC_LOCK, matplotlib.rc_context(_SVG_RC):
        fig.savefig(buf, format=path.rsplit(".", 1)[-1].lower(), dpi=110)
    atomic_replace(path, buf.getvalue())


def plain(text: object) -> str:
    """A name as plain text for matplotlib: non-printable characters escaped (`safe_text`) and every `$`
    escaped, so mathtext never parses what a model file named."""
    return safe_text(text).replace("$", r"\$")


# --- roofline -------------------------------------------------------------------------------------

def _peaks(soc: Any) -> dict[str, float]:
    return {"cube": soc.peak_flops["float16"] / 1e12,
            "vector": soc.vec_bytes_per_cycle / 2 * soc.vector_cores * soc.vec_freq_mhz * 1e6 / 1e12,
            "hbm": soc.hbm_gbps * 1e9 / 1e12, "l2": (soc.l2_gbps or soc.hbm_gbps * 3) * 1e9 / 1e12}


def roofline(data: ReportData, arrows: int = 20) -> tuple[str, int]:
    """The SoC's roofline with every distinct case at its default (hollow) and tuned (filled) strategy.

    Returns the SVG and the number of cases left out (no FLOPs or no HBM traffic: no place on log axes).
    """
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    fig = _figure(9.5, 5.2)
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.08, right=0.98, top=0.93, bottom=0.1)
    pk = _peaks(data.soc)
    pts = [(c, c.default, c.tuned) for c in data.cases
           if c.default.flops > 0 and c.default.hbm_bytes > 0 and c.tuned.hbm_bytes > 0 and c.tuned.time_us > 0]
    left_out = len(data.cases) - len(pts)
    xs = [k.intensity for _, d, t in pts for k in (d, t)] or [1.0]
    lo, hi = max(min(xs) / 3, 1e-3), max(max(xs) * 3, 10 * pk["cube"] / pk["hbm"])
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(pk["cube"], x * pk["hbm"]) for x in grid], color="#333", lw=1.8,
            label=f"HBM {data.soc.hbm_gbps:.0f} GB/s + Cube peak {pk['cube']:.0f} TFLOP/s (fp16)")
    ax.plot(grid, [min(pk["cube"], x * pk["l2"]) for x in grid], color="#888", lw=1.2, ls="--",
            label=f"L2 {pk['l2'] * 1e3:.0f} GB/s roof")
    ax.axhline(pk["vector"], color=PIPE_COLOURS["Vector"], lw=1, ls=":",
               label=f"Vector peak {pk['vector']:.1f} TFLOP/s (fp16)")
    total = sum(c.count * d.time_us for c, d, _ in pts) or 1.0
    size = [max(12.0, 400 * math.sqrt(c.count * d.time_us / total)) for c, d, _ in pts]
    ax.scatter([d.intensity for _, d, _ in pts], [d.tflops for _, d, _ in pts], s=size, facecolors="none",
               edgecolors=[PIPE_COLOURS.get(d.bound, "#000") for _, d, _ in pts], linewidths=1.1, alpha=0.8)
    ax.scatter([t.intensity for _, _, t in pts], [t.tflops for _, _, t in pts], s=size,
               c=[PIPE_COLOURS.get(t.bound, "#000") for _, _, t in pts], alpha=0.75, linewidths=0)
    moved = [(c, d, t) for c, d, t in pts if (d.intensity, d.tflops) != (t.intensity, t.tflops)]
    ax.add_collection(LineCollection([[(d.intensity, d.tflops), (t.intensity, t.tflops)] for _, d, t in moved],
                                     colors="#555", linewidths=0.6, alpha=0.5))
    moved.sort(key=lambda p: -(p[0].count * (p[1].time_us - p[2].time_us)))
    for _, d, t in moved[:arrows]:  # arrow heads on the cases that saved the most time
        ax.annotate("", xy=(t.intensity, t.tflops), xytext=(d.intensity, d.tflops),
                    arrowprops={"arrowstyle": "->", "color": "#333", "lw": 0.8, "shrinkA": 0, "shrinkB": 2})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ys = [k.tflops for _, d, t in pts for k in (d, t) if k.tflops > 0] or [1.0]
    ax.set_xlim(lo, hi)
    ax.set_ylim(max(min(ys) / 3, 1e-4), pk["cube"] * 2)
    ax.set_xlabel("arithmetic intensity (FLOP per HBM byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.set_title(f"Roofline of {data.soc.name}: {len(pts)} distinct operator cases, default (hollow) -> tuned "
                 "(filled)", y=1.0)
    bounds = sorted({k.bound for _, d, t in pts for k in (d, t)}, key=lambda b: PIPE_ORDER.index(b)
                    if b in PIPE_ORDER else 99)
    handles = ax.get_legend_handles_labels()[0] + [
        Line2D([], [], ls="", marker="o", color=PIPE_COLOURS.get(b, "#000"), label=f"bound: {b}") for b in bounds]
    ax.legend(handles=handles, loc="lower right", fontsize=7.5, framealpha=0.9)
    ax.grid(True, which="major", alpha=0.3)
    from matplotlib.ticker import NullLocator

    ax.xaxis.set_minor_locator(NullLocator())  # minor ticks of log axes cost more than the rest together
    ax.yaxis.set_minor_locator(NullLocator())
    return to_svg(fig, "roofline"), left_out


# --- pipe breakdown ---------------------------------------------------------------------------------

def top_cases(data: ReportData, n: int) -> list[tuple[int, CaseView]]:
    """The `n` distinct cases taking the most default time in the model."""
    order = sorted(range(len(data.cases)), key=lambda i: -data.cases[i].count * data.cases[i].default.time_us)
    return [(i, data.cases[i]) for i in order[:n]]


def pipes(data: ReportData, n: int = 8) -> str:
    """Busy time per pipe against wall time for the top-`n` cases, default vs tuned.

    One band per case and strategy; inside it one thin bar per pipe. Lengths are in % of the case's
    default wall time, so cases of very different sizes share one axis (the labels give the µs).
    """
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    top = top_cases(data, n)
    first: dict[int, str] = {}
    for r in data.ops:
        first.setdefault(r.case, r.name)
    shown = list(PIPE_ORDER)
    rows = 3 * max(1, len(top))
    fig = _figure(10, 0.3 * rows + 1.0)
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.2, right=0.98, top=1 - 0.45 / fig.get_figheight(), bottom=0.5 / fig.get_figheight())
    h = 0.84 / len(shown)
    ys, labels, widths, colours = [], [], [], []
    walls: list[tuple[float, float]] = []
    for k, (i, c) in enumerate(top):
        scale = 100.0 / c.default.time_us if c.default.time_us > 0 else 0.0
        name = first.get(i, c.op_type)
        short = name if len(name) <= 90 else "…" + name[-89:]
        ax.text(0.004, 3 * k + 0.15, plain(f"{short}  ({c.op_type}{', ×' + str(c.count) if c.count > 1 else ''})"),
                fontsize=7.5, fontweight="bold", va="center", transform=ax.get_yaxis_transform())
        labels.append("")
        for j, (which, kern) in enumerate((("default", c.default), ("tuned", c.tuned))):
            y = 3 * k + 1 + j
            labels.append(f"{which}: {kern.time_us:.1f} µs, {kern.bound}")
            for q, p in enumerate(shown):
                ys.append(y - 0.42 + h * (q + 0.5))
                widths.append(kern.busy_us.get(p, 0.0) * scale)
                colours.append(PIPE_COLOURS[p])
            walls.append((y, kern.time_us * scale))
    # one collection rather than a Rectangle artist per bar: an eighth of the drawing time
    hh = h * 0.45
    ax.add_collection(PolyCollection([[(0, y - hh), (w, y - hh), (w, y + hh), (0, y + hh)] for y, w in zip(ys, widths)],
                                     facecolors=colours, linewidths=0))
    ax.set_xlim(0, max(widths + [w for _, w in walls] + [100.0]) * 1.04)
    ax.vlines([w for _, w in walls], [y - 0.45 for y, _ in walls], [y + 0.45 for y, _ in walls], colors="#000",
              linewidths=1.6)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.tick_params(axis="y", length=0)
    for k in range(1, len(top)):
        ax.axhline(3 * k - 0.5, color="#bbb", lw=0.6)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlabel("% of the case's default wall time (black tick: wall time)")
    ax.legend(handles=[Patch(color=PIPE_COLOURS[p], label=p) for p in shown]
              + [Patch(color="#000", label="wall time")], fontsize=7, ncols=8, loc="lower center",
              bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return to_svg(fig, "pipes")


# --- waterfall ---------------------------------------------------------------------------------------

def _by_type(data: ReportData) -> list[tuple[str, float, float]]:
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    if data.kind == "sgat":
        for s in data.subgraphs:
            label = "+".join(dict.fromkeys(s.op_types))
            a = acc[label if len(label) <= 40 else label[:39] + "…"]
            a[0] += s.default_us * s.instances
            a[1] += s.tuned_us * s.instances
        rest = data.model_default_us - sum(v[0] for v in acc.values())
        if rest > 0:  # kernels outside tunable subgraphs run unchanged
            acc["outside subgraphs"] = [rest, rest]
    else:
        for r in data.ops:
            a = acc[r.op_type]
            a[0] += r.default_us
            a[1] += r.tuned_us
    return [(k, v[0], v[1]) for k, v in acc.items()]


def waterfall(data: ReportData, top: int = 12) -> str:
    """Where the model's time went (by operator type, or subgraph kind for SGAT) and what tuning saved."""
    groups = _by_type(data)
    fig = _figure(10, 4.6)
    ax1, ax2 = fig.subplots(1, 2, width_ratios=[1, 1.3])
    fig.subplots_adjust(left=0.17, right=0.98, top=0.92, bottom=0.27, wspace=0.25)
    by_time = sorted(groups, key=lambda g: -g[1])
    shown = by_time[:top]
    if len(by_time) > top:
        shown.append(("other", sum(g[1] for g in by_time[top:]), sum(g[2] for g in by_time[top:])))
    y = list(range(len(shown)))
    unit, div = ("ms", 1000.0)
    ax1.barh([v + 0.2 for v in y], [g[1] / div for g in shown], height=0.38, color="#9ab", label="default")
    ax1.barh([v - 0.2 for v in y], [g[2] / div for g in shown], height=0.38, color="#246", label="tuned")
    ax1.set_yticks(y, [plain(g[0]) for g in shown], fontsize=7)
    ax1.invert_yaxis()
    ax1.set_xlabel(unit)
    ax1.set_title("where the time went" + (" (by subgraph kind)" if data.kind == "sgat" else " (by operator type)"),
                  y=1.0)
    ax1.legend(fontsize=7)
    by_gain = sorted(groups, key=lambda g: -abs(g[1] - g[2]))
    steps = [(g[0], g[1] - g[2]) for g in by_gain[:top] if abs(g[1] - g[2]) > 1e-9]
    rest = sum(g[1] - g[2] for g in by_gain[top:])
    if abs(rest) > 1e-9:
        steps.append(("other", rest))
    labels = ["default" if data.kind == "opat" else "default fusion"] + [plain(s[0]) for s in steps] + ["tuned"]
    level = data.model_default_us
    bottoms, heights, colours = [0.0], [level], ["#9ab"]
    for _, saved in steps:
        level -= saved
        bottoms.append(min(level, level + saved))
        heights.append(abs(saved))
        colours.append("#2a2" if saved > 0 else "#c33")
    bottoms.append(0.0)
    heights.append(data.model_tuned_us)
    colours.append("#246")
    x = list(range(len(labels)))
    ax2.bar(x, [h / div for h in heights], bottom=[b / div for b in bottoms], color=colours)
    for xi, (b, h) in enumerate(zip(bottoms, heights)):
        if 0 < xi < len(labels) - 1:
            ax2.text(xi, (b + h) / div, f"−{h / div:.3g}" if colours[xi] == "#2a2" else f"+{h / div:.3g}",
                     ha="center", va="bottom", fontsize=6.5)
    ax2.set_xticks(x, labels, rotation=55, ha="right", fontsize=7)
    ax2.set_ylabel(unit)
    lo = min(min(b for b in bottoms[1:-1]) if steps else data.model_tuned_us, data.model_tuned_us)
    ax2.set_ylim(max(0.0, lo * 0.9) / div, data.model_default_us * 1.04 / div)
    ax2.set_title(f"what tuning saved: {data.model_default_us / div:.3f} → {data.model_tuned_us / div:.3f} {unit}", y=1.0)
    return to_svg(fig, "waterfall")


# --- SGAT fusion map ---------------------------------------------------------------------------------

_GROUP_COLOURS = ["#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3", "#b3de69", "#fccde5", "#ffffb3"]


def _lane(ax: Any, s: SubgraphView, groups: Sequence[Sequence[int]], y: float) -> None:
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    gid = {i: k for k, g in enumerate(groups) for i in g}
    for k, g in enumerate(groups):
        if len(g) > 1:
            ax.add_patch(FancyBboxPatch((min(g) - 0.45, y - 0.32), max(g) - min(g) + 0.9, 0.64,
                                        boxstyle="round,pad=0.02,rounding_size=0.15",
                                        fc=_GROUP_COLOURS[k % len(_GROUP_COLOURS)], ec="#555", lw=0.8, alpha=0.55))
    for a, b in s.edges:
        fused = gid[a] == gid[b]
        ax.add_patch(FancyArrowPatch((a, y), (b, y), connectionstyle=f"arc3,rad={-0.35 if b - a > 1 else 0}",
                                     arrowstyle="-|>", mutation_scale=7, lw=1.4 if fused else 0.8,
                                     color="#222" if fused else "#999", ls="-" if fused else "--",
                                     shrinkA=9, shrinkB=9))
    for i, t in enumerate(s.op_types):
        ax.add_patch(FancyBboxPatch((i - 0.36, y - 0.18), 0.72, 0.36, boxstyle="round,pad=0.01,rounding_size=0.08",
                                    fc="white", ec=PIPE_COLOURS["Cube"] if t.startswith(("Conv", "MatMul", "BatchMat"))
                                    else PIPE_COLOURS["Vector"], lw=1.1))
        ax.text(i, y, plain(t if len(t) <= 12 else t[:11] + "…"), ha="center", va="center", fontsize=6)


def _kernels(n: int) -> str:
    return f"{n} kernel" + ("" if n == 1 else "s")


def fusion_map(data: ReportData, top: int = 10) -> str:
    """The distinct subgraphs that gained most: kernels as boxes, default fusion above, tuned below.

    One axes holds every subgraph (three rows each: title, default lane, tuned lane): an axes per
    subgraph would spend most of the drawing time on tick machinery nobody reads here.
    """
    subs = sorted(data.subgraphs, key=lambda s: (-s.gain_us, -s.default_us * s.instances))[:top]
    width = max([len(s.op_types) for s in subs] + [3])
    fig = _figure(10.5, 0.42 * 3 * max(1, len(subs)) + 0.2)
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.01, right=0.99, top=0.99, bottom=0.01)
    for k, s in enumerate(subs):
        y0 = -3.0 * k
        ax.text(-1.5, y0 + 0.05, plain(f"subgraph {s.key}" + (" (bank)" if s.in_bank else
                                                             " (no bank entry: default fusion)")),
                fontsize=7, fontweight="bold", va="center")
        for y, name, groups in ((y0 - 1.0, "default", s.default_groups), (y0 - 2.0, "tuned", s.tuned_groups)):
            ax.text(-0.75, y, name, fontsize=7, va="center", ha="right")
            _lane(ax, s, groups, y)
        gain = gain_pct(s.default_us, s.tuned_us)
        df, tf = s.default_flags, s.tuned_flags
        ax.text(width + 0.1, y0 - 1.0, f"{_kernels(len(s.default_groups))}, {s.default_us:.1f} µs\n"
                f"{df['split']} split, tile {df['tile']}{', L2' if df['l2'] else ''}", va="center", fontsize=6.5)
        ax.text(width + 0.1, y0 - 2.0, f"{_kernels(len(s.tuned_groups))}, {s.tuned_us:.1f} µs ({gain:+.1f}% faster)\n"
                f"{tf['split']} split, tile {tf['tile']}{', L2' if tf['l2'] else ''}; ×{s.instances}: "
                f"−{s.gain_us:.1f} µs", va="center", fontsize=6.5)
        if k:
            ax.axhline(y0 + 0.5, color="#ddd", lw=0.6)
    ax.set_xlim(-1.6, width + 2.4)
    ax.set_ylim(-3.0 * max(1, len(subs)) + 0.45, 0.45)
    ax.set_axis_off()
    return to_svg(fig, "fusion")


def subgraph_gains(data: ReportData, top: int = 30) -> str:
    """Gain of every distinct subgraph (all instances), largest first."""
    subs = sorted(data.subgraphs, key=lambda s: -s.gain_us)[:top]
    fig = _figure(10, 3.4)
    ax = fig.add_subplot()
    fig.subplots_adjust(left=0.08, right=0.99, top=0.9, bottom=0.42)
    ax.bar(range(len(subs)), [s.gain_us for s in subs], color=["#2a2" if s.gain_us > 0 else "#bbb" for s in subs])
    ax.set_xticks(range(len(subs)), [plain("+".join(dict.fromkeys(s.op_types))[:22]) for s in subs], rotation=60,
                  ha="right", fontsize=6.5)
    ax.set_ylabel("µs saved (all instances)")
    ax.set_title(f"per-subgraph gain: {len(data.subgraphs)} distinct subgraphs, "
                 f"{sum(1 for s in data.subgraphs if s.gain_us > 0)} faster than the default fusion", y=1.0)
    return to_svg(fig, "subgraph-gains")


__all__ = [
    "EXTRA_HINT",
    "PIPE_COLOURS",
    "PIPE_ORDER",
    "fusion_map",
    "pipes",
    "require_matplotlib",
    "roofline",
    "save",
    "subgraph_gains",
    "to_svg",
    "top_cases",
    "waterfall",
]
