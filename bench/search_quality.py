"""Search quality of the OPAT Schedule driver vs the exhaustive optimum, random search and Optuna TPE.

A thin caller of the harness `aoe.benchmark` (`aoe bench search` is the general tool): the cases are the
distinct (operator, shape, dtype) Schedule problems of the bundled models' training graphs (ResNet-50
and MobileNetV2 at batch 32, BERT-base and GPT-2 at batch 32 x 128 tokens) on Ascend910B2, Cube
operators first; the reference is the exhaustive optimum of each space. The driver (`aoe`) runs at
its default budget (100,000 evaluations) and at `--peer_budget` (default 200, because TPE's cost per
trial makes 100,000 trials impractical), where uniform random search and TPE run too.

Prints one JSON line. Requires the bench extra for TPE (`pip install 'aoe[bench]'`; `--no_tpe` without).
"""
from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict
from dataclasses import replace

import aoe.graph
from aoe import sim
from aoe.benchmark import Case, run_search_bench
from aoe.benchmark.strategies import BUILTIN
from aoe.ops import Unsupported, describe

MODELS = [("zoo:bert_base", "input_ids:32,128;attention_mask:32,128"), ("zoo:resnet50", "input:32,3,224,224"),
          ("zoo:mobilenet_v2", "input:32,3,224,224"), ("zoo:gpt2", "input_ids:32,128")]
DRIVER_BUDGET = 100_000


def collect_cases(limit: int) -> list[Case]:
    """Distinct simulator problems of the zoo's training graphs, Cube operators first."""
    seen, cube, vec = set(), [], []
    for model, shape in MODELS:
        try:
            g = aoe.graph.load(model, shape, training=True)
        except Exception:  # noqa: BLE001 - a zoo model whose input is named differently: default shapes
            g = aoe.graph.load(model, training=True)
        for op in g.ops:
            try:
                sop = describe(g, op).default.sim_op
            except Unsupported:
                continue
            if repr(sop) in seen:
                continue
            seen.add(repr(sop))
            (vec if isinstance(sop, sim.VectorOp) else cube).append(Case(f"{model}/{op.type}/{len(seen)}", sop))
    return (cube + vec)[:limit]


def main() -> None:
    """Run the comparison and print the JSON figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", type=int, default=110)
    ap.add_argument("--peer_budget", type=int, default=200)
    ap.add_argument("--no_tpe", action="store_true")
    ap.add_argument("--soc", default="Ascend910B2")
    args = ap.parse_args()
    cases = collect_cases(args.cases)
    peers = ["random"] + ([] if args.no_tpe else [replace(BUILTIN["tpe"], max_budget=args.peer_budget)])
    doc = run_search_bench(cases, ["aoe", *peers], [args.peer_budget, DRIVER_BUDGET], soc=args.soc).to_json()
    drv, pb = doc["summary"]["aoe"][str(DRIVER_BUDGET)], str(args.peer_budget)
    peers = [p if isinstance(p, str) else p.name for p in peers]
    per_type = defaultdict(list)
    for c in doc["cases"]:
        run = c["runs"].get("aoe", {}).get(str(DRIVER_BUDGET))
        if run and run["best_us"]:
            per_type[c["name"].split("/")[1]].append(c["default_us"] / run["best_us"])
    speedups = {t: round(math.exp(sum(math.log(x) for x in v) / len(v)), 4) for t, v in sorted(per_type.items())}
    print(json.dumps({
        "bench": "search_quality", "soc": doc["soc"], "cases": drv["cases"],
        "cube_cases": sum(1 for c in cases if not isinstance(c.op, sim.VectorOp)),
        "within_1pct": drv["within_1pct"], "median_gap": drv["median_gap"], "max_gap": drv["max_gap"],
        "median_ms_per_case": round(1e3 * drv["wall_s_median"], 2), "driver_budget": DRIVER_BUDGET,
        "peer_budget": args.peer_budget,
        "at_peer_budget": {n: {k: doc["summary"][n][pb][k] for k in ("within_1pct", "median_gap")}
                           for n in ["aoe", *peers]},
        "tuned_vs_default_geomean_speedup_per_op_type": speedups,
    }))


if __name__ == "__main__":
    main()
