"""Graph-level OPAT wall time: a cold run (empty custom bank) and a warm run (all hits), one JSON line.

Default: the ResNet-50 training graph at batch 32 on Ascend910B2 with 2 worker processes (this
machine has 2 cores), then the same again with the bank populated. `--model zoo:bert_base
--input_shape "input_ids:32,128;attention_mask:32,128"` for BERT-base.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time

import aoe.graph
from aoe.opat import tune_graph


def main() -> None:
    """Time a cold and a warm OPAT run of one model."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="zoo:resnet50")
    ap.add_argument("--input_shape", default="input:32,3,224,224")
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    t0 = time.perf_counter()
    graph = aoe.graph.load(args.model, args.input_shape, training=True)
    load_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as bank:
        t0 = time.perf_counter()
        cold = tune_graph(graph, args.soc, bank, workers=args.workers)
        cold_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        warm = tune_graph(graph, args.soc, bank, workers=args.workers)
        warm_s = time.perf_counter() - t0
    before = sum(r.before_us or 0 for r in cold.records)
    after = sum(r.after_us or 0 for r in cold.records)
    print(json.dumps({
        "bench": "opat_graph", "model": args.model, "input_shape": args.input_shape, "training": True,
        "soc": args.soc, "workers": args.workers, "operators": len(graph.ops), "cases": cold.cases_tuned,
        "graph_load_s": round(load_s, 3), "cold_s": round(cold_s, 2), "warm_s": round(warm_s, 3),
        "cold_counters": cold.counters.to_dict(), "warm_counters": warm.counters.to_dict(),
        "evaluations": cold.evaluations, "status": cold.status,
        "model_op_time_before_ms": round(before / 1e3, 3), "model_op_time_after_ms": round(after / 1e3, 3),
        "model_speedup": round(before / after, 4) if after else None,
    }))


if __name__ == "__main__":
    main()
