"""Scaling benchmark: CPU seconds per phase on synthetic chains of 1k / 10k / 100k operators and a wide graph.

Run: python bench/scale_bench.py [--sizes 1000,10000,100000] [--wide 10000] [--budget 2000]
       [--phases load,describe,training,graph_cli,opat,sgat,opat_training] [--report on|off] [--write FILE]
       python bench/scale_bench.py --merge A.json B.json ...   (runs made side by side, one JSON)

Prints one JSON object: per graph size and phase the CPU seconds and the wall seconds, and the log-log
slope of CPU against operator count between consecutive sizes (1.0 = linear, 2.0 = quadratic), with the
CPU model, its vector flags and the date. Phases: `load` (the JSON graph file), `describe` (the catalogue
over every operator), `training` (deriving the training graph) run in this process after a warm-up
(`time.process_time`); `graph_cli` (`aoe graph FILE`), `opat` (`aoe -m FILE -j 2`), `sgat` (`-j 1` on
Ascend910A) and `opat_training` (`-j 2 --training`) are the real commands, each a separate process
(interpreter start, import, result files, the HTML report unless `--report off`, workers) in a fresh
empty bank with the built-in bank set aside (`--no_builtin`: every distinct case is searched) and
AOE_SEARCH_BUDGET=`--budget` evaluations per case; their CPU is the whole process tree's
(bench/job_bench.py's `run_timed`). Before the first size, an SGAT job on a 64-operator chain compiles the
Numba evaluator into the run's cache, so no size pays that once-per-installation cost.

The graphs come from `chain()` and `wide()` below: a chain repeats a block of Conv2D / Add / Relu / view /
MatMulV2 / Add / Gelu / view over two widths (a handful of distinct tuning cases: what grows with the size
is the per-operator handling, not the search); the wide graph fans one tensor out to many branches of 8
operators and sums them with a balanced tree of Adds. tests/test_linear_scaling.py uses the same graphs.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from aoe.graph import Graph, Op, Tensor

_WIDTHS = (32, 64)      # channels cycled by the chain's blocks: a few distinct cases, not one
_HW = 16                # spatial size of the 4-D activations; the matmul view is [C, H*W]


class _Gen:
    """Builds a graph operator by operator with unique tensor and operator names."""

    def __init__(self, name: str) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.name = name

    def tensor(self, shape: tuple[int, ...], kind: str = "activation", fmt: str = "ND") -> str:
        name = f"t{len(self.tensors)}"
        self.tensors[name] = Tensor(name, shape, "float16", fmt, kind)
        return name

    def op(self, type_: str, inputs: list[str], out_shape: tuple[int, ...], fmt: str = "ND", **attrs: Any) -> str:
        out = self.tensor(out_shape, fmt=fmt)
        self.ops.append(Op(f"op{len(self.ops)}_{type_}", type_, inputs, [out], attrs))
        return out

    def block(self, x: str, c_in: int, c_out: int, budget: int) -> tuple[str, int]:
        """Up to `budget` operators of the chain's block from 4-D `x` of `c_in` channels."""
        hw = _HW * _HW
        steps: list[Callable[[str], str]] = [
            lambda t: self.op("Conv2D", [t, self.tensor((c_out, c_in, 3, 3), "param", "NCHW")],
                              (1, c_out, _HW, _HW), "NCHW", strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1],
                              groups=1, kernel=[3, 3], has_bias=False, data_format="NCHW"),
            lambda t: self.op("Add", [t, self.tensor((1, c_out, 1, 1), "param", "NCHW")], (1, c_out, _HW, _HW), "NCHW"),
            lambda t: self.op("Relu", [t], (1, c_out, _HW, _HW), "NCHW"),
            lambda t: self.op("Reshape", [t], (c_out, hw), view=True, shape=[c_out, hw]),
            lambda t: self.op("MatMulV2", [t, self.tensor((hw, hw), "param")], (c_out, hw),
                              transpose_x1=False, transpose_x2=False, has_bias=False),
            lambda t: self.op("Add", [t, self.tensor((hw,), "param")], (c_out, hw)),
            lambda t: self.op("Gelu", [t], (c_out, hw)),
            lambda t: self.op("Reshape", [t], (1, c_out, _HW, _HW), "NCHW", view=True, shape=[1, c_out, _HW, _HW]),
        ]
        steps = steps[:budget]
        for step in steps:
            x = step(x)
        return x, len(steps)

    def graph(self, inputs: list[str], outputs: list[str]) -> Graph:
        g = Graph(self.name, self.tensors, self.ops, inputs, outputs)
        g.validate()
        return g


def chain(n_ops: int) -> Graph:
    """A chain of `n_ops` operators (conv, matmul, elementwise and views), each reading its predecessor."""
    gen = _Gen(f"chain{n_ops}")
    c = _WIDTHS[0]
    x = gen.tensor((1, c, _HW, _HW), "input", "NCHW")
    inp, k = x, 0
    while len(gen.ops) < n_ops:
        c_out = _WIDTHS[k % len(_WIDTHS)]
        x, _ = gen.block(x, c, c_out, n_ops - len(gen.ops))
        c, k = c_out, k + 1
    return gen.graph([inp], [x])


def wide(n_ops: int, depth: int = 8) -> Graph:
    """About `n_ops` operators: one tensor read by many branches of `depth` operators, summed pairwise."""
    gen = _Gen(f"wide{n_ops}")
    c = _WIDTHS[0]
    x = gen.tensor((1, c, _HW, _HW), "input", "NCHW")
    stem = gen.op("Relu", [x], (1, c, _HW, _HW), "NCHW")
    n_branches = max(2, (n_ops - 1) // (depth + 1))
    ends = []
    for b in range(n_branches):
        y, _ = gen.block(stem, c, c, depth)
        ends.append(y)
    while len(ends) > 1:  # a balanced tree of Adds: every branch end is read once
        nxt = [gen.op("Add", [ends[i], ends[i + 1]], (1, c, _HW, _HW), "NCHW") for i in range(0, len(ends) - 1, 2)]
        ends = nxt + ([ends[-1]] if len(ends) % 2 else [])
    return gen.graph([x], ends)


# ---- measuring ------------------------------------------------------------------------------------

PHASES = ("load", "describe", "training", "graph_cli", "opat", "sgat", "opat_training")


def _vector_flags() -> list[str]:
    """The x86 vector extensions the simulator's kernels may use on this CPU (from /proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl") if f in have]
    except OSError:
        pass
    return []


def _in_process(fn: Callable[[], Any]) -> tuple[dict[str, float], Any]:
    c, t = time.process_time(), time.perf_counter()
    out = fn()
    return {"cpu_s": round(time.process_time() - c, 3), "wall_s": round(time.perf_counter() - t, 3)}, out


def _describe_all(g: Graph) -> int:
    from aoe.errors import AoeError
    from aoe.ops import describe

    n = 0
    for op in g.ops:
        try:
            describe(g, op)
            n += 1
        except AoeError:
            pass
    return n


def measure(g: Graph, phases: tuple[str, ...], budget: int, workdir: Path, report: str = "on") -> dict[str, Any]:
    """CPU/wall seconds of each phase on graph `g` (jobs as separate `aoe` processes, whole process tree)."""
    import aoe.graph
    from aoe.graph.training import derive_training
    from job_bench import run_timed  # the same whole-tree timing as the job bench

    path = workdir / f"{g.name}.json"
    path.write_text(g.to_json())
    out: dict[str, Any] = {"ops": len(g.ops), "kernels": sum(not op.is_view for op in g.ops)}
    if "load" in phases:
        out["load"], _ = _in_process(lambda: aoe.graph.load(path))
    if "describe" in phases:
        loaded = aoe.graph.load(path)
        out["describe"], _ = _in_process(lambda: _describe_all(loaded))
    if "training" in phases:
        out["training"], tg = _in_process(lambda: derive_training(g))
        out["training"]["ops"] = len(tg.ops)
    env = {k: v for k, v in os.environ.items() if k not in ("AOE_MODE", "REPEAT_TUNE", "TUNE_BANK_PATH")}
    env.update(AOE_SEARCH_BUDGET=str(budget), AOE_LOCK_DIR=str(workdir / "locks"), ASCEND_WORK_PATH=str(workdir),
               HOME=str(workdir))
    aoe_cli = [sys.executable, "-m", "aoe.cli"]
    jobs = {"graph_cli": ["graph", str(path)],
            "opat": ["-m", str(path), "-j", "2"],
            "sgat": ["-m", str(path), "-j", "1", "--soc_version", "Ascend910A"],
            "opat_training": ["-m", str(path), "-j", "2", "--training"]}
    for phase, argv in jobs.items():
        if phase not in phases:
            continue
        bank = Path(tempfile.mkdtemp(prefix="bank", dir=workdir))  # a fresh, empty custom bank per job
        extra = [] if phase == "graph_cli" else ["--no_builtin", "--progress_bar", "off", "--report", report]
        out[phase] = run_timed(aoe_cli + argv + extra, workdir, dict(env, TUNE_BANK_PATH=str(bank)))
    return out


def slopes(sizes: list[int], results: dict[int, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """log(cpu(b)/cpu(a)) / log(ops(b)/ops(a)) per phase between consecutive sizes measured for that phase
    (1 = linear, 2 = quadratic)."""
    out: dict[str, dict[str, float]] = {}
    for phase in PHASES:
        have = [n for n in sizes if results[n].get(phase) and results[n][phase]["cpu_s"] > 0]
        for a, b in zip(have, have[1:]):
            ra, rb = results[a][phase]["cpu_s"], results[b][phase]["cpu_s"]
            n_a, n_b = results[a]["ops"], results[b]["ops"]
            out.setdefault(phase, {})[f"{a}->{b}"] = round(math.log(rb / ra) / math.log(n_b / n_a), 3)
    return out


def main() -> int:
    """Measure and print the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000", help="chain lengths (operators)")
    ap.add_argument("--wide", default="10000", help="wide-graph sizes (operators; empty: none)")
    ap.add_argument("--budget", type=int, default=2000, help="strategy evaluations per case (AOE_SEARCH_BUDGET)")
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--report", choices=("on", "off"), default="on",
                    help="the jobs' HTML report (on: the job's default with matplotlib installed)")
    ap.add_argument("--write", help="also write the JSON to this file")
    ap.add_argument("--merge", nargs="+", metavar="JSON",
                    help="measure nothing: combine files written by runs of this bench (e.g. one per phase, "
                         "run side by side) and print them as one JSON with the slopes")
    args = ap.parse_args()
    if args.merge:
        return merge(args.merge, args.write)
    from job_bench import _become_subreaper, machine

    phases = tuple(p for p in args.phases.split(",") if p)
    unknown = set(phases) - set(PHASES)
    if unknown:
        ap.error(f"unknown phases {sorted(unknown)}; choose from {', '.join(PHASES)}")
    report: dict[str, Any] = {"bench": "scale", **machine(), "vector_flags": _vector_flags(),
                              "python": platform.python_version(), "budget_evaluations_per_case": args.budget, "phases": list(phases),
                              "builtin_bank": "off (--no_builtin)", "report": args.report, "whole_tree_cpu": _become_subreaper(),
                              "note": "shared 2-core machine: CPU seconds are the figure, wall seconds beside"}
    with tempfile.TemporaryDirectory(prefix="aoe_scale") as tmp:
        measure(chain(64), ("load", "describe", "training"), args.budget, Path(tmp))  # imports and caches warm
        if "sgat" in phases:  # the SGAT evaluator compiled into the run's Numba cache: not in the first size
            measure(chain(64), ("sgat",), args.budget, Path(tmp), args.report)
        for shape, make, spec in (("chain", chain, args.sizes), ("wide", wide, args.wide)):
            sizes = [int(s) for s in spec.split(",") if s.strip()]
            results: dict[int, dict[str, Any]] = {}
            for n in sizes:
                results[n] = measure(make(n), phases, args.budget, Path(tmp), args.report)
                print(json.dumps({shape: {n: results[n]}}), file=sys.stderr, flush=True)  # progress
            if sizes:
                report[shape] = {str(n): r for n, r in results.items()}
                report[f"{shape}_slope"] = slopes(sizes, results)
    report["date_utc_end"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    text = json.dumps(report)
    print(text)
    if args.write:
        Path(args.write).write_text(text + "\n")
    return 0


def merge(paths: list[str], write: str | None) -> int:
    """Combine runs of this bench (their graphs and phases) into one JSON; slopes recomputed."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    per_run = ("chain", "wide", "chain_slope", "wide_slope", "phases", "date_utc", "date_utc_end", "load_1min")
    report: dict[str, Any] = {k: v for k, v in runs[0].items() if k not in per_run}
    report["runs"] = [{k: r.get(k) for k in ("date_utc", "date_utc_end", "load_1min", "phases")} for r in runs]
    for shape in ("chain", "wide"):
        results: dict[int, dict[str, Any]] = {}
        for r in runs:
            for n, res in r.get(shape, {}).items():
                results.setdefault(int(n), {}).update(res)
        if results:
            sizes = sorted(results)
            report[shape] = {str(n): results[n] for n in sizes}
            report[f"{shape}_slope"] = slopes(sizes, results)
    text = json.dumps(report)
    print(text)
    if write:
        Path(write).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
