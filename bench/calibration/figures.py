"""Calibration figures of the simulator against the published Ascend numbers (prints one JSON line).

    python bench/calibration/figures.py      (the public-figure error table: bench/calibration/run.py)

- 8192^3 fp16 matmul on Ascend910B2: the best strategy of the whole tiling space by brute force,
  as a fraction of peak (goal 80-92%), and the CANN-like default's fraction;
- a 256 MiB fp16 Add (two 256 MiB inputs, one output): fraction of HBM bandwidth (goal 80-95%);
- a 128x128x128 matmul: the share of overheads vs the Cube (goal: overheads dominate).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from aoe import sim
from aoe.opat import simulator_measure
from aoe.opat.search import exhaustive
from aoe.opat.space import space_for
from aoe.soc import load_soc


def main() -> None:
    """Run the three calibration cases and print their figures."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared helpers
    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    soc = load_soc("Ascend910B2")
    peak = soc.peak_flops["float16"]
    big = sim.MatMul(m=8192, n=8192, k=8192)
    t0 = time.perf_counter()
    res = exhaustive(space_for(soc, big), big, simulator_measure(soc, threads=2))
    row, best_us, n_evals = res.row, res.time_us, res.evaluations
    brute_s = time.perf_counter() - t0
    best = sim.simulate(soc, big, row)
    default = sim.simulate(soc, big)
    add = sim.simulate(soc, sim.VectorOp("Add", (128 * 1024 * 1024,)))
    small = sim.simulate(soc, sim.MatMul(m=128, n=128, k=128))
    print(json.dumps({
        "bench": "calibration", **machine(), "soc": soc.name,
        "matmul_8192_best_frac_of_peak": round(best.tflops * 1e12 / peak, 4),
        "matmul_8192_best_us": round(best_us, 1), "matmul_8192_best_bound": best.bound,
        "matmul_8192_default_frac_of_peak": round(default.tflops * 1e12 / peak, 4),
        "matmul_8192_space_evaluated": n_evals, "matmul_8192_brute_force_s": round(brute_s, 1),
        "matmul_8192_best_strategy": best.strategy,
        "add_256MiB_frac_of_hbm": round(add.gbps * 1e9 / soc.hbm_bytes_per_s, 4),
        "add_256MiB_us": round(add.time_us, 1),
        "matmul_128_us": round(small.time_us, 3), "matmul_128_bound": small.bound,
        "matmul_128_busy_us": {k: round(v, 3) for k, v in small.busy_us.items()},
    }))


if __name__ == "__main__":
    main()
