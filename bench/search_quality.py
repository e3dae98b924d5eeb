"""Search quality of the OPAT Schedule driver vs the exhaustive optimum, random search and Optuna TPE.

Cases: distinct (operator, shape, dtype) Schedule problems of the bundled models' training graphs
(ResNet-50 and MobileNetV2 at batch 32, BERT-base and GPT-2 at batch 32 x 128 tokens) on Ascend910B2.
For each case the whole Schedule space of the operator's kernel is enumerated and priced (brute force):
that optimum is the reference. Then:

- `driver`: `aoe.opat.search` at its default budget (100,000 evaluations);
- at an equal *small* budget (`--peer_budget`, default 200 evaluations, because TPE's cost per
  trial makes 100,000 trials impractical): the driver, uniform random search over the enumerated
  space, and Optuna's TPE sampler over the strategy fields (invalid combinations cost a penalty).

Prints one JSON line. Requires `pip install optuna` (a benchmark-only dependency, extra `bench`).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections import defaultdict

import numpy as np

import aoe.graph
from aoe import sim
from aoe.ops import Unsupported, describe
from aoe.opat import Budget, random_search, search, simulator_measure, space_for
from aoe.soc import load_soc

MODELS = [("zoo:bert_base", "input_ids:32,128;attention_mask:32,128"), ("zoo:resnet50", "input:32,3,224,224"),
          ("zoo:mobilenet_v2", "input:32,3,224,224"), ("zoo:gpt2", "input_ids:32,128")]


def collect_cases(limit: int) -> list[tuple[str, sim.SimOp]]:
    """Distinct simulator problems of the zoo's training graphs, Cube operators first."""
    seen, cube, vec = set(), [], []
    for model, shape in MODELS:
        try:
            g = aoe.graph.load(model, shape, training=True)
        except Exception:  # noqa: BLE001 - a zoo model whose input is named differently: default shapes
            g = aoe.graph.load(model, training=True)
        for op in g.ops:
            try:
                case = describe(g, op)
            except Unsupported:
                continue
            sop = case.default.sim_op
            key = repr(sop)
            if key in seen:
                continue
            seen.add(key)
            (vec if isinstance(sop, sim.VectorOp) else cube).append((op.type, sop))
    # every Cube case (the hard ones), then vector cases up to the limit
    return (cube + vec)[:limit]


def tpe(op: sim.SimOp, rows: np.ndarray, fields: list[str], budget: int, seed: int, soc) -> float:
    """Optuna TPE over the strategy fields (values seen in the space); invalid rows cost a penalty."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    choices = [sorted({int(v) for v in np.unique(rows[:, j])}) for j in range(rows.shape[1])]
    best = [math.inf]

    def objective(trial: "optuna.Trial") -> float:
        row = np.array([[trial.suggest_categorical(f, c) for f, c in zip(fields, choices)]], dtype=np.int64)
        t = float(sim.simulate_times(soc, op, row)[0][0])
        best[0] = min(best[0], t)
        return t if math.isfinite(t) else 1e12

    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(objective, n_trials=budget)
    return best[0]


def main() -> None:
    """Run the comparison and print the JSON figures."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cases", type=int, default=110)
    ap.add_argument("--peer_budget", type=int, default=200)
    ap.add_argument("--no_tpe", action="store_true")
    ap.add_argument("--soc", default="Ascend910B2")
    args = ap.parse_args()
    soc = load_soc(args.soc)
    measure = simulator_measure(soc)
    cases = collect_cases(args.cases)
    gaps, small, rnd, tpe_gaps, ms = [], [], [], [], []
    per_type = defaultdict(list)
    brute_s = 0.0
    for op_type, op in cases:
        space = space_for(soc, op)
        t0 = time.perf_counter()
        rows = space.all_rows()
        times, _ = sim.simulate_times(soc, op, rows, threads=2)
        brute_s += time.perf_counter() - t0
        opt = float(np.min(times))
        if not math.isfinite(opt):
            continue
        t0 = time.perf_counter()
        res = search(space, op, measure)
        ms.append((time.perf_counter() - t0) * 1e3)
        gaps.append(res.time_us / opt - 1)
        default_us = sim.simulate(soc, op).time_us
        per_type[op_type].append(default_us / res.time_us)
        b = Budget(evaluations=args.peer_budget)
        small.append(search(space, op, measure, b).time_us / opt - 1)
        rnd.append(random_search(rows, op, measure, b, seed=0).time_us / opt - 1)
        if not args.no_tpe:
            tpe_gaps.append(tpe(op, rows, sim.strategy_fields(op), args.peer_budget, 0, soc) / opt - 1)
    n = len(gaps)

    def frac_within(xs: list[float]) -> float:
        return round(sum(g <= 0.01 for g in xs) / max(1, len(xs)), 4)

    def med(xs: list[float]) -> float | None:
        return round(statistics.median(xs), 5) if xs else None

    speedups = {t: round(math.exp(sum(math.log(x) for x in v) / len(v)), 4) for t, v in sorted(per_type.items())}
    print(json.dumps({
        "bench": "search_quality", "soc": soc.name, "cases": n,
        "cube_cases": sum(1 for t, op in cases if not isinstance(op, sim.VectorOp)),
        "within_1pct": frac_within(gaps), "median_gap": med(gaps), "max_gap": round(max(gaps), 5) if gaps else None,
        "median_ms_per_case": round(statistics.median(ms), 2), "mean_ms_per_case": round(statistics.mean(ms), 2),
        "driver_budget": 100_000, "brute_force_s_total": round(brute_s, 1),
        "peer_budget": args.peer_budget,
        "at_peer_budget": {
            "driver": {"within_1pct": frac_within(small), "median_gap": med(small)},
            "random": {"within_1pct": frac_within(rnd), "median_gap": med(rnd)},
            "optuna_tpe": {"within_1pct": frac_within(tpe_gaps), "median_gap": med(tpe_gaps)} if tpe_gaps else None,
        },
        "tuned_vs_default_geomean_speedup_per_op_type": speedups,
    }))


if __name__ == "__main__":
    main()
