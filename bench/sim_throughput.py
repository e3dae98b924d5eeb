"""Simulator throughput: matmul strategy evaluations per second on one thread (prints one JSON line).

The batch is drawn from the real tiling space of a BERT-sized matmul (valid and invalid rows mixed as
a tuner would send them), so the figure includes the early-rejection path as well as full pricing.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from aoe import _sim
from aoe.sim import MatMul
from aoe.opat.space import space_for
from aoe.soc import load_soc


def main() -> None:
    """Time `simulate_times` on >= 1,000,000 strategies, single-threaded, best of several repeats."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--soc", default="Ascend910B2")
    args = ap.parse_args()
    soc = load_soc(args.soc)
    op = MatMul(m=4096, n=3072, k=768)  # BERT-base FFN-in at batch 32 x seq 128
    space = space_for(soc, op).all_rows()
    rng = np.random.default_rng(0)
    batch = np.ascontiguousarray(space[rng.integers(0, len(space), size=args.n)])
    params = op.params()
    _sim.simulate_times(soc.native, op.kind, params, batch[:1000], 1)  # warm up
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        times, reasons = _sim.simulate_times(soc.native, op.kind, params, batch, 1)
        best = min(best, time.perf_counter() - t0)
    t0 = time.perf_counter()
    _sim.simulate_times(soc.native, op.kind, params, batch, 2)
    two = time.perf_counter() - t0
    print(json.dumps({
        "bench": "sim_throughput", "soc": args.soc, "op": "MatMul 4096x3072x768 fp16", "n": args.n,
        "space_size": int(len(space)), "valid_fraction": round(float(np.mean(reasons == 0)), 4),
        "threads": 1, "seconds": round(best, 4), "evals_per_s": round(args.n / best),
        "ns_per_eval": round(best / args.n * 1e9, 1), "evals_per_s_2_threads": round(args.n / two),
    }))


if __name__ == "__main__":
    main()
