"""SGAT benchmark: evaluator throughput, search quality, whole-graph tuning of the zoo. Prints one JSON line.

    python bench/sgat_bench.py [--parts throughput,models,quality]

- `evaluator`: plan evaluations per second (and CPU seconds per million plans) over the whole plan
  space of BERT-base's largest distinct subgraph (tiled to 262,144 plans), best of 3 rounds, evaluator
  call only: the Numba evaluator on one thread, its prange version on 1 and on Numba's threads (2 on
  a 2-core machine), and the C++ evaluator it replaced when the build still has it;
  `evaluator_small_batches`: the same at 64..16,384 plans (where prange starts to pay: PARALLEL_MIN);
  `evaluator_plans_per_s` is the one-thread Numba figure; `search_plans_per_s` includes the Python
  around it (enumerating plans, picking the best).
- `search_quality`: the beam search (used above 65,536 plans) against the exhaustive optimum on
  every distinct subgraph of both graphs.
- `models`: every zoo model (bert_base, resnet50, mobilenet_v2, gpt2 at their default input shapes)
  on Ascend910A and Ascend310P3, inference and training graphs, tuned without a bank: the unfused time
  (every operator its own kernel), the compiler's default fusion (the SGAT baseline), the tuned time,
  the gain over the default fusion (what the result file reports) and over unfused, the counters, the
  operators that could not be priced, and wall / CPU seconds of `tune_graph` (graph load excluded).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np


def _rate(fn: object, plans: np.ndarray, rounds: int = 3) -> dict[str, float]:
    """Plans per second of fn(plans) (best of `rounds` by wall time) and its CPU seconds per M plans."""
    fn(plans[:4])  # the first call (compilation, thread start-up) outside the timing
    best, cpu = float("inf"), float("inf")
    for _ in range(rounds):
        t, c = time.perf_counter(), time.process_time()
        fn(plans)
        best, cpu = min(best, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return {"plans_per_s": round(len(plans) / best), "cpu_s_per_m_plans": round(cpu / len(plans) * 1e6, 3)}


def _throughput() -> dict[str, object]:
    import numba

    import aoe.graph
    from aoe import _sim
    from aoe.sgat import prepare
    from aoe.sgat.evaluator import evaluate_arrays
    from aoe.sgat.search import all_plans, exhaustive
    from aoe.soc import load_soc

    g = aoe.graph.load("zoo:bert_base", "input_ids:32,128;attention_mask:32,128", training=True)
    prep = prepare(g, load_soc("Ascend910A"))
    rd = max((c.rd for c in prep.cases), key=lambda r: (r.n_plans, r.n))
    space = all_plans(rd)
    plans = np.tile(space, (max(1, 262144 // len(space)), 1))  # a steady-state batch
    arrays = rd.arrays()
    rates: dict[str, object] = {}
    if hasattr(_sim, "sgat_evaluate"):  # the C++ evaluator, in builds before its deletion
        rates["cpp_1_thread"] = _rate(lambda p: _sim.sgat_evaluate(p, *arrays), plans)
    threads = numba.get_num_threads()
    rates["numba_1_thread"] = _rate(lambda p: evaluate_arrays(p, *arrays, parallel=False), plans)
    for k in sorted({1, min(2, threads), threads}):
        numba.set_num_threads(k)
        rates[f"numba_prange_{k}_threads"] = _rate(lambda p: evaluate_arrays(p, *arrays, parallel=True), plans)
    numba.set_num_threads(threads)
    # where prange starts to pay: small batches, one thread against Numba's threads
    small: dict[str, object] = {}
    for n in (64, 1024, 4096, 16384):
        one = _rate(lambda p: evaluate_arrays(p, *arrays, parallel=False), plans[:n], rounds=20)
        par = _rate(lambda p: evaluate_arrays(p, *arrays, parallel=True), plans[:n], rounds=20)
        small[str(n)] = {"numba_1_thread": one["plans_per_s"], f"numba_prange_{threads}_threads": par["plans_per_s"]}
    t = time.perf_counter()
    exhaustive(rd)
    search_s = time.perf_counter() - t
    return {"evaluator": rates, "evaluator_small_batches": small, "numba_threads": threads,
            "numba_threading_layer": numba.threading_layer(),
            "evaluator_plans_per_s": rates["numba_1_thread"]["plans_per_s"],
            "search_plans_per_s": round(len(space) / search_s),
            "throughput_batch": len(plans), "throughput_subgraph_plans": len(space),
            "throughput_subgraph_kernels": rd.n}


MODELS = ("bert_base", "resnet50", "mobilenet_v2", "gpt2")
SOCS = ("Ascend910A", "Ascend310P3")


def _model(name: str, soc: str, training: bool) -> dict[str, object]:
    """Unfused, default-fusion and tuned time of one zoo model (default input shapes), no bank."""
    import aoe.graph
    from aoe.sgat import tune_graph

    g = aoe.graph.load(f"zoo:{name}", training=training)
    wall, cpu = time.perf_counter(), time.process_time()
    rep = tune_graph(g, soc)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    sec = rep.to_result_section()
    unf, base, res = rep.model_unfused_us, rep.model_baseline_us, rep.model_result_us
    return {"unfused_ms": round(unf / 1e3, 4), "default_fusion_ms": round(base / 1e3, 4),
            "tuned_ms": round(res / 1e3, 4), "gain_over_default_fusion": sec["model_performance_improvement"],
            "gain_over_unfused": f"{(unf / res - 1) * 100:.2f}%" if res > 0 else "0.00%",
            "default_fusion_over_unfused": f"{(unf / base - 1) * 100:.2f}%" if base > 0 else "0.00%",
            "repo_summary": sec["repo_summary"], "skipped_ops": len(rep.skipped),
            "wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def _models() -> dict[str, object]:
    """Every zoo model on both SGAT SoCs, inference and training."""
    out: dict[str, object] = {}
    for name in MODELS:
        for soc in SOCS:
            for training in (False, True):
                out[f"{name}/{soc}/{'training' if training else 'inference'}"] = _model(name, soc, training)
    return out


def _beam_quality() -> dict[str, float]:
    """Worst and mean gap of the beam search to the exhaustive optimum over the bench graphs."""
    import aoe.graph
    from aoe.sgat import prepare
    from aoe.sgat.search import beam, exhaustive
    from aoe.soc import load_soc

    gaps = []
    for name, shape in (("zoo:bert_base", "input_ids:32,128;attention_mask:32,128"),
                        ("zoo:resnet50", "input:32,3,224,224")):
        for case in prepare(aoe.graph.load(name, shape, training=True), load_soc("Ascend910A")).cases:
            gaps.append(beam(case.rd).time_us / exhaustive(case.rd).time_us - 1.0)
    return {"beam_cases": len(gaps), "beam_worst_gap_pct": round(100 * max(gaps), 4),
            "beam_mean_gap_pct": round(100 * float(np.mean(gaps)), 4)}


def main() -> None:
    """Run the benchmark and print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="throughput,models,quality", help="comma-separated parts to run")
    parts = set(ap.parse_args().parts.split(","))
    t = time.perf_counter()
    from aoe.sgat import evaluator  # noqa: F401  (import cost counted in warm-up)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/ is not a package
    from job_bench import machine

    flags = next((ln.split(":", 1)[1].split() for ln in open("/proc/cpuinfo") if ln.startswith("flags")), [])
    out: dict[str, object] = {"soc": "Ascend910A", **machine(), "machine_shared": True,
                              "cpu_vector_flags": [f for f in ("avx2", "fma", "avx512f") if f in flags]}
    if "throughput" in parts:
        out.update(_throughput())
        out["warmup_s"] = round(time.perf_counter() - t, 3)
    if "models" in parts:
        wall, cpu = time.perf_counter(), time.process_time()
        out["models"] = _models()
        out["models_wall_s"] = round(time.perf_counter() - wall, 3)
        out["models_cpu_s"] = round(time.process_time() - cpu, 3)
    if "quality" in parts:
        out["search_quality"] = _beam_quality()
    out["goals"] = {"evaluator_plans_per_s": 1_000_000, "sgat_wall_s_max": 10.0,
                    "numba_prange_2_threads_vs_cpp_1_thread": ">= 1"}
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
