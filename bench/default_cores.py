"""More cores never make the CANN-like default slower: a seeded sample of random operators.

Draws `--n` random operators (seeded): elementwise vector operators (ApplyAdamD-like optimizer
updates over a weight, activations, binary ops), reductions, Softmax / LayerNorm rows, matmuls and
2-D convolutions (forward and both gradients). Each is priced with its default strategy
(`aoe.sim.default_strategy`) on a SoC and on the same SoC with 1.5x the cores (`Soc.replace`:
AI cores and vector cores, everything else equal: clocks, buffers, chip HBM), and on the pair
Ascend910B3 (20 AIC / 40 AIV) -> Ascend910B2 (24 / 48). It prints one JSON line: how many operators
run slower on the bigger chip, strictly and by more than 2%, by family, with the worst ones.

    python bench/default_cores.py                      # 303 operators, seed 22
    python bench/default_cores.py --n 1000 --seed 7
"""
from __future__ import annotations

import argparse
import json
import os
import random
import time

from aoe import sim
from aoe.soc import Soc, load_soc

TOL = 0.02
ELEMENTWISE = ("ApplyAdamD", "Add", "Mul", "Gelu", "Relu", "Cast", "Sigmoid", "GeluGrad")
REDUCE = ("ReduceSumD", "ReduceMeanD", "ReduceMaxD")
ROWS = ("SoftmaxV2", "LayerNorm")


def _log_int(rng: random.Random, lo: int, hi: int) -> int:
    """An integer drawn log-uniformly from [lo, hi]."""
    return max(lo, min(hi, int(round(lo * (hi / lo) ** rng.random()))))


def random_op(rng: random.Random) -> sim.SimOp:
    """One random operator: about half vector, a quarter matmul, a quarter convolution."""
    fam = rng.random()
    dtype = rng.choice(("float16", "float32", "float16", "bfloat16"))
    if fam < 0.5:
        kind = rng.random()
        vdt = "float32" if dtype == "bfloat16" else dtype
        if kind < 0.5:  # elementwise: a weight-shaped tensor (optimizer updates) or an activation
            op_type = rng.choice(ELEMENTWISE)
            if op_type == "ApplyAdamD" or rng.random() < 0.5:
                shape = (_log_int(rng, 1, 50000), rng.choice((64, 768, 1024, 3072, 4096, 5120, 11008)))
            else:
                shape = tuple(_log_int(rng, 1, 512) for _ in range(rng.randint(1, 4)))
            return sim.VectorOp(op_type, shape, dtype=vdt)
        shape = tuple(_log_int(rng, 1, 4096) for _ in range(rng.randint(2, 3)))
        if kind < 0.75:
            op_type = rng.choice(REDUCE)
            axes = (len(shape) - 1,) if rng.random() < 0.6 else (0,)
        else:
            op_type = rng.choice(ROWS)
            axes = (len(shape) - 1,)
        return sim.VectorOp(op_type, shape, dtype=vdt, axes=axes)
    if fam < 0.75:
        return sim.MatMul(m=_log_int(rng, 1, 16384), n=_log_int(rng, 1, 16384), k=_log_int(rng, 1, 16384),
                          batch=rng.choice((1, 1, 1, 4, 12, 32)), dtype=rng.choice(("float16", "bfloat16", "float32")),
                          trans_a=rng.random() < 0.3, trans_b=rng.random() < 0.5)
    k = rng.choice((1, 3, 3, 5, 7))
    s = rng.choice((1, 1, 2))
    hw = _log_int(rng, max(k, 4), 224)
    c = rng.choice((3, 16, 32, 64, 128, 256, 512, 1024))
    cout = rng.choice((16, 64, 128, 256, 512, 1024))
    return sim.Conv2D(x=(rng.choice((1, 2, 8, 16, 32, 64)), c, hw, hw), weight=(cout, c, k, k),
                      strides=(s, s), pads=(k // 2,) * 4, dtype="float16",
                      op_type=rng.choice(("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")))


def sample(n: int, seed: int) -> list[sim.SimOp]:
    """`n` random operators from `seed` (the same list on every run)."""
    rng = random.Random(seed)
    return [random_op(rng) for _ in range(n)]


def scaled(soc: Soc, factor: float = 1.5) -> Soc:
    """`soc` with `factor` times the AI and vector cores, everything else equal."""
    return soc.replace(name=f"{soc.name}x{factor:g}cores", cube_cores=int(soc.cube_cores * factor),
                       vector_cores=int(soc.vector_cores * factor))


def family(op: sim.SimOp) -> str:
    """matmul, conv, elementwise or reduce (vector operators with axes)."""
    if isinstance(op, sim.MatMul):
        return "matmul"
    if isinstance(op, sim.Conv2D):
        return "conv"
    return "reduce" if op.axes else "elementwise"


def compare(ops: list[sim.SimOp], small: Soc, big: Soc, worst: int = 8) -> dict:
    """Operators whose default is slower on `big` than on `small` (strict and over TOL)."""
    slow, slow_tol = [], []
    for op in ops:
        ts, tb = sim.simulate(small, op).time_us, sim.simulate(big, op).time_us
        if tb > ts:
            slow.append((tb / ts, op))
            if tb > ts * (1 + TOL):
                slow_tol.append((tb / ts, op))
    slow_tol.sort(key=lambda x: -x[0])
    fams = ("elementwise", "reduce", "matmul", "conv")
    return {"small": small.name, "big": big.name, "cores": [small.cube_cores, small.vector_cores, big.cube_cores,
                                                            big.vector_cores],
            "strict": len(slow), f"over_{int(TOL * 100)}pct": len(slow_tol),
            "strict_by_family": {f: sum(family(o) == f for _, o in slow) for f in fams},
            "over_tol_by_family": {f: sum(family(o) == f for _, o in slow_tol) for f in fams},
            "max_ratio": round(max((r for r, _ in slow), default=1.0), 4),
            "worst": [{"ratio": round(r, 4), "op": repr(o)[:200]} for r, o in slow_tol[:worst]]}


def main() -> None:
    """Count bigger-chip-slower defaults and print them as one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=303)
    ap.add_argument("--seed", type=int, default=22)
    ap.add_argument("--socs", default="Ascend910B3,Ascend910B2,Ascend910A,Ascend310P3",
                    help="SoCs compared with their 1.5x-cores copy")
    args = ap.parse_args()
    w0, c0 = time.perf_counter(), time.process_time()
    ops = sample(args.n, args.seed)
    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    out: dict = {"bench": "default_cores", **machine(), "n": len(ops), "seed": args.seed,
                 "ops_by_family": {f: sum(family(o) == f for o in ops) for f in ("elementwise", "reduce", "matmul",
                                                                                  "conv")}}
    pairs = [(load_soc("Ascend910B3"), load_soc("Ascend910B2"))]
    pairs += [(load_soc(s), scaled(load_soc(s))) for s in args.socs.split(",")]
    out["pairs"] = [compare(ops, a, b) for a, b in pairs]
    out["wall_s"] = round(time.perf_counter() - w0, 1)
    out["cpu_s"] = round(time.process_time() - c0, 1)
    out["pid"] = os.getpid()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
