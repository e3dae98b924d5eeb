"""Graph-level OPAT per zoo model: the model's OPAT gain and the wall/CPU time of a cold and a warm run.

For every model (default: the whole zoo, training graphs at the zoo's input shapes, on Ascend910B2)
operator tuning runs twice into one empty custom bank: cold (everything tuned) and warm (everything
a hit). The gain is the model's operator time under CANN's defaults against its time under the
banks after the cold run, priced by `apply_bank` over every operator (what `aoe verify` compares);
tuned operators' own before/after sums and the skipped operators are printed beside it. One JSON
line per model, then one summary line.

    python bench/opat_bench.py                                   # all zoo models, training, 910B2
    python bench/opat_bench.py --models resnet50 --budget 20000 --soc Ascend910A
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter

import aoe.graph
from aoe.graph.zoo import zoo_names
from aoe.opat import Budget, OpatConfig, apply_bank, tune_graph
from aoe.tuning import improvement


def _cpu() -> float:
    from job_bench import process_tree_cpu  # this process and its tuning workers (bench/ is on the path)

    return process_tree_cpu()


def _timed(fn, *args, **kwargs):
    w0, c0 = time.perf_counter(), _cpu()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - w0, _cpu() - c0


def bench_model(name: str, soc: str, budget: int, workers: int, training: bool) -> dict:
    """Cold and warm OPAT of one zoo model; its gain under the tuned bank."""
    graph, load_s, _ = _timed(aoe.graph.load, f"zoo:{name}", None, training=training)
    config = OpatConfig(budget=Budget(evaluations=budget), workers=workers, builtin=False)  # cold means tuned
    with tempfile.TemporaryDirectory() as bank:
        cold, cold_s, cold_cpu = _timed(tune_graph, graph, soc, bank, config)
        warm, warm_s, warm_cpu = _timed(tune_graph, graph, soc, bank, config)
        (ops, skipped), verify_s, _ = _timed(apply_bank, graph, soc, bank)
    default_us = sum(o.default_us for o in ops)
    tuned_us = sum(o.tuned_us for o in ops)
    recs = [r for r in cold.records if r.before_us is not None and r.after_us is not None]
    kinds = Counter(k for r in cold.records if r.modified for k in r.kinds)
    return {
        "bench": "opat_model", "model": f"zoo:{name}", "training": training, "soc": soc, "budget": budget,
        "workers": workers, "operators": len(graph.ops), "priced_operators": len(ops), "cases": cold.cases_tuned,
        "skipped_operators": len(skipped),
        "skipped_types": dict(Counter(s["op_type"] for s in skipped).most_common()),
        "model_default_ms": round(default_us / 1e3, 3), "model_tuned_ms": round(tuned_us / 1e3, 3),
        "opat_model_gain": improvement(default_us, tuned_us),
        "tuned_ops_before_ms": round(sum(r.before_us for r in recs) / 1e3, 3),
        "tuned_ops_after_ms": round(sum(r.after_us for r in recs) / 1e3, 3),
        "modified_by_kind": dict(sorted(kinds.items())),
        "cold_counters": cold.counters.to_dict(), "warm_counters": warm.counters.to_dict(),
        "status": cold.status, "evaluations": cold.evaluations,
        "graph_load_s": round(load_s, 2), "cold_wall_s": round(cold_s, 2), "cold_cpu_s": round(cold_cpu, 2),
        "warm_wall_s": round(warm_s, 2), "warm_cpu_s": round(warm_cpu, 2), "verify_wall_s": round(verify_s, 2),
    }


def main() -> None:
    """Print one JSON line per model and a summary line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=None, help=f"zoo models (default all: {' '.join(zoo_names())})")
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--budget", type=int, default=2000, help="strategy evaluations per search (default 2000)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--inference", action="store_true", help="the inference graphs instead of training")
    args = ap.parse_args()
    rows = []
    for name in args.models or zoo_names():
        row = bench_model(name, args.soc, args.budget, args.workers, not args.inference)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps({"bench": "opat_summary", "soc": args.soc, "training": not args.inference,
                      "gain_per_model": {r["model"]: r["opat_model_gain"] for r in rows},
                      "skipped_per_model": {r["model"]: r["skipped_operators"] for r in rows}}))


if __name__ == "__main__":
    main()
