"""aoe's figure for one public figure: the same operator, shapes, dtype, format and SoC, priced the way
the source measured it (a kernel's time, a pipe's peak rate, one API call's Vector cycles, a head cost)."""
from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..errors import AoeError
from ..soc import load_soc
from .. import sim

CUBE_OPS = {"MatMul", "MatMulV2", "MatMulV3", "BatchMatMul", "BatchMatMulV2", "Conv2D", "Conv2DBackpropInput",
            "Conv2DBackpropFilter"}
# CANN's pipe / op head costs beside the aoe SoC constant that plays the same part (README: the mapping)
HEAD_TERMS = {"op_head": "scalar_task_cycles", "vec_pipe_head": "vec_instr_overhead_cycles",
              "mte2_pipe_head": "dma_latency_cycles", "mte3_pipe_head": "dma_latency_cycles"}


def family_of(f: Any) -> str:
    """The operator family a figure is summarised under."""
    if f.what == "peak":
        return "peak"
    if f.what == "head_cost":
        return "pipe_head"
    if f.what == "fitted_cost":
        return "dma" if f.attrs.get("term") in ("load", "store") else "vector_api"
    if f.what == "model_time":
        return "graph"
    if f.op in CUBE_OPS:
        return "cube_kernel"
    return "vector_kernel"


def _op(f: Any) -> sim.SimOp:
    attrs = {k: v for k, v in f.attrs.items() if k in ("axes", "trans_a", "trans_b", "bias", "broadcast", "perm",
                                                      "src_format", "dst_format", "ksize", "strides", "pads",
                                                      "dilations", "groups", "out_dtype", "a_format", "b_format",
                                                      "c_format")}
    op = sim.make_op(f.op, [list(s) for s in f.shapes], dtype=f.dtype, **attrs)
    if isinstance(op, sim.VectorOp) and f.format != "ND":
        from dataclasses import replace
        op = replace(op, in_format=f.format, out_format=f.format)
    return op


def _strategy(soc: Any, op: sim.SimOp, f: Any, cache: dict[Any, Any]) -> dict[str, int] | None:
    """None (CANN's default) unless the figure says `"strategy": "tuned"`: then the best strategy a beam
    Schedule search of `budget` evaluations finds (the source's 'after' of a tuning, or a peak)."""
    if f.attrs.get("strategy", "default") == "default":
        return None
    if f.attrs["strategy"] != "tuned":
        raise AoeError(f"calibration figure {f.id}: attrs.strategy must be 'default' or 'tuned'")
    key = ("tuned", f.soc, op, int(f.attrs.get("budget", 2000)))
    if key not in cache:
        from ..opat.search import Budget, beam, simulator_measure  # the tuners sit above the simulator
        from ..opat.space import space_for
        res = beam(space_for(soc, op), op, simulator_measure(soc), Budget(evaluations=key[3]))
        row = res.row if res.found and res.time_us < sim.simulate(soc, op).time_us else None
        cache[key] = None if row is None else dict(zip(sim.strategy_fields(op), (int(v) for v in row)))
    return cache[key]


def _single_tile(soc: Any, f: Any, n_cores: int, per_core: int, op_type: str | None = None) -> sim.SimResult:
    """One tile of `per_core` elements on each of `n_cores` cores, single-buffered (one API call per pipe)."""
    out_dtype = f.attrs.get("out_dtype")
    op = sim.VectorOp(op_type or f.op, (per_core * n_cores,), dtype=f.dtype, out_dtype=out_dtype)
    r = sim.simulate(soc, op, {"blockDim": n_cores, "tileLen": per_core, "doubleBuffer": 0, "impl": 0})
    if not r.valid:
        raise AoeError(f"calibration figure {f.id}: the single-tile strategy is invalid ({r.reason})")
    return r


def aoe_value(f: Any, cache: dict[Any, Any]) -> tuple[float | None, str]:
    """aoe's figure in the figure's unit, and how it was obtained (None when nothing in aoe matches)."""
    soc = load_soc(f.soc)
    if f.what == "head_cost":
        term = HEAD_TERMS.get(str(f.attrs.get("term")))
        if term is None:
            return None, "no aoe term"
        return float(getattr(soc, term)), f"SoC constant {term}"
    if f.what == "fitted_cost":
        term = f.attrs.get("term")
        if term in ("load", "store"):
            bd, nbytes = int(f.attrs["block_dim"]), int(f.attrs["bytes"])
            r = _single_tile(soc, f, bd, nbytes // 2, "Relu")
            pipe = "MTE2" if term == "load" else "FixPipe/MTE3"
            return r.busy_us[pipe] * soc.vec_freq_mhz, f"{pipe} busy cycles of one {nbytes} B tile per core, {bd} cores"
        n = int(f.attrs.get("elements", f.shapes[0][0]))
        r = _single_tile(soc, f, 1, n)
        return r.busy_us["Vector"] * soc.vec_freq_mhz, f"Vector busy cycles of one {n}-element tile"
    if f.what == "peak":
        op = _op(f)
        r = sim.simulate(soc, op, _strategy(soc, op, f, cache))
        if isinstance(op, sim.MatMul):
            flops = 2.0 * op.m * op.n * op.k * op.batch
            rate = flops / (r.busy_us["Cube"] * 1e-6)   # the Cube pipe's own rate while it is busy
            how = f"Cube FLOP over Cube busy time, {f.attrs.get('strategy', 'default')} strategy"
        else:
            # one op per element, at the rate of every Vector core: a core's elements over its busy time,
            # times the SoC's cores (the default may leave cores idle on an HBM-bound op: a peak is the unit's)
            n_el = float(np.prod(op.shape))
            used = r.strategy["blockDim"]
            rate = n_el / used * soc.vector_cores / (r.busy_us["Vector"] * 1e-6)
            how = "a core's elements over its Vector busy time x the SoC's Vector cores, default strategy"
        scale = {"TFLOPS": 1e12, "GFLOPS": 1e9}[f.unit]
        return rate / scale, how
    if f.what in ("kernel_time", "host_wall_with_launch"):
        op = _op(f)
        r = sim.simulate(soc, op, _strategy(soc, op, f, cache))
        t, how = r.time_us, f"{f.attrs.get('strategy', 'default')} strategy"
        if f.unit in ("TFLOPS", "GFLOPS"):  # a rate the source derived from its time: the same from aoe's
            return r.tflops * (1000.0 if f.unit == "GFLOPS" else 1.0), how + ", FLOP over the kernel's time"
        if f.attrs.get("transdata_in_graph"):
            # the source's figure includes the layout conversions the graph puts on the kernel's edges
            for src, dst in f.attrs["transdata_in_graph"]:
                td = sim.VectorOp("TransData", f.shapes[0], dtype=f.dtype, src_format=src, dst_format=dst)
                t += sim.simulate(soc, td).time_us
            how += " + TransData on its edges"
        return (t / 1000.0 if f.unit == "ms" else t), how
    if f.what == "model_time" and f.attrs.get("model"):
        # a whole graph under the compiler's default fusion: SGAT's baseline (its own Prepared graph)
        from ..graph import load as load_graph  # the graph layer sits above the simulator
        from ..sgat.tune import prepare
        key = ("graph", f.soc, json.dumps(f.attrs, sort_keys=True))
        if key not in cache:
            g = load_graph(str(f.attrs["model"]), f.attrs.get("inputs"), training=bool(f.attrs.get("training")))
            cache[key] = prepare(g, soc).baseline_us
        t = cache[key]
        return (t / 1000.0 if f.unit == "ms" else t), "SGAT baseline (default fusion, default strategies)"
    return None, f"no aoe model for {f.what}"
