"""Search quality on random shapes: the OPAT driver and its space against CMA-ES over the raw fields.

    python bench/search_raw.py [--cases 150] [--seed 0] [--cma_evals 2000] [--small 200]

Cases: random MatMul, BatchMatMul and Conv2D shapes (fp16; log-uniform sizes, 3x3/1x1/strided
convolutions, channel counts of real networks), spread evenly over Ascend910B2, Ascend910A and
Ascend310P3 (held-out: none of them is tuned for while the space was designed). For each case:

- `space_opt`: the brute-force optimum of the enumerated Schedule space (every strategy priced);
- `driver`: `aoe.opat.search` at its default budget (100,000 evaluations), and at `--small` (200);
- `cma`: CMA-ES (the `cmaes` package) over the raw strategy fields, each field a grid of every
  legal-looking value (aligned sizes up to the whole problem, all flags, all core counts, plus the
  values the space uses), started at CANN's default, `--cma_evals` evaluations (invalid rows cost
  10x the default's time);
- `default`: CANN's default strategy.

`best` is the fastest strategy any of them found. Reported: the fraction of cases each method ends
within 1% of `best`, and the cases where CMA-ES or CANN's default beat the space's optimum (the
space would be missing a faster strategy). Times are simulated; CPU seconds of the whole run are
reported beside its wall time. Needs `pip install cmaes` (extra `bench`). Prints one JSON line.

Long runs can be split: `--shard k/n --jsonl part_k.jsonl` runs every n-th case, and
`--summarize part_*.jsonl` prints the figures over all of them.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import numpy as np

from aoe import sim
from aoe.opat.search import Budget, search, simulator_measure
from aoe.opat.space import space_for
from aoe.sim.ops import DTYPE_BYTES
from aoe.soc import Soc, load_soc

SOCS = ("Ascend910B2", "Ascend910A", "Ascend310P3")
CHANNELS = (3, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048)


def _logu(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(lo), math.log(hi)))))


def random_case(rng: np.random.Generator, kind: int) -> sim.SimOp:
    """One random MatMul (kind 0), BatchMatMul (1) or Conv2D (2) problem."""
    if kind == 0:
        return sim.MatMul(m=_logu(rng, 16, 16384), n=_logu(rng, 16, 8192), k=_logu(rng, 16, 8192),
                          trans_b=bool(rng.integers(2)))
    if kind == 1:
        return sim.MatMul(m=_logu(rng, 16, 2048), n=_logu(rng, 16, 2048), k=_logu(rng, 16, 2048),
                          batch=_logu(rng, 2, 96), trans_b=bool(rng.integers(2)), op_type="BatchMatMulV2")
    k = int(rng.choice([1, 1, 3, 3, 3, 5, 7]))
    s = int(rng.choice([1, 1, 1, 2]))
    hw = int(rng.choice([7, 14, 28, 56, 112, 224]))
    c = int(rng.choice(CHANNELS[:-1] if hw > 56 else CHANNELS))
    co = int(rng.choice(CHANNELS[1:]))
    n = int(rng.choice([1, 2, 4, 8, 16, 32]))
    op_type = str(rng.choice(["Conv2D", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"]))
    return sim.Conv2D(x=(n, c, hw, hw), weight=(co, c, k, k), strides=(s, s), pads=(k // 2,) * 4,
                      op_type=op_type)


def _sizes(hi: int, align: int, cap: int = 96) -> list[int]:
    """Multiples of `align` up to `hi` (all of them when few, else a geometric selection)."""
    n = max(1, -(-hi // align))
    if n <= cap:
        return [align * i for i in range(1, n + 1)]
    return sorted({align * max(1, int(round(v))) for v in np.geomspace(1, n, cap)})


def field_grids(soc: Soc, op: sim.SimOp, space_rows: np.ndarray, seed_row: np.ndarray) -> list[np.ndarray]:
    """Every value each raw strategy field may take (a superset of what the space uses)."""
    fields = sim.strategy_fields(op)
    g: dict[str, list[int]] = {}
    cores = soc.cube_cores
    if isinstance(op, sim.MatMul):
        k0 = 32 // DTYPE_BYTES[op.dtype]
        m16, n16, kal = -(-op.m // 16) * 16, -(-op.n // 16) * 16, -(-op.k // k0) * k0
        g.update(usedCoreNum=list(range(1, cores + 1)), singleCoreM=_sizes(m16, 16), singleCoreN=_sizes(n16, 16),
                 singleCoreK=_sizes(kal, k0), baseM=_sizes(min(m16, 1024), 16), baseN=_sizes(min(n16, 1024), 16),
                 baseK=_sizes(min(kal, 1024), k0), stepM=list(range(1, 17)), stepN=list(range(1, 17)),
                 stepKa=list(range(1, 33)), stepKb=list(range(1, 33)), l2MTileBlock=list(range(1, 65)),
                 l2NTileBlock=list(range(1, 65)))
    else:
        n, c, h, w = op.x
        cout, _, kh, kw = op.weight
        c0 = 32 // DTYPE_BYTES[op.dtype]
        ho, wo = op.out_hw
        out_h, out_w = (h, w) if op.op_type.endswith("BackpropInput") else (ho, wo)
        win = kh * kw * c0
        kmax = -(-max(c, cout) // c0) * win
        g.update(batchDim=list(range(1, min(n, cores) + 1)), hoDim=list(range(1, min(out_h, cores) + 1)),
                 nDim=list(range(1, cores + 1)), groupDim=[1], hoL1=_sizes(out_h, 1), woL1=_sizes(out_w, 1),
                 kAL1=sorted(set(_sizes(kmax, win)) | set(_sizes(min(kmax, 512), 16))),
                 kBL1=sorted(set(_sizes(kmax, win)) | set(_sizes(min(kmax, 512), 16))),
                 hoL0=_sizes(out_h, 1), woL0=_sizes(out_w, 1), kL0=_sizes(512, c0), nL0=_sizes(512, 16),
                 pBufferFlag=list(range(32)))
    grids = []
    for j, f in enumerate(fields):
        vals = set(g.get(f, [0, 1])) | {int(v) for v in np.unique(space_rows[:, j])} | {int(seed_row[j])}
        grids.append(np.array(sorted(vals), np.int64))
    return grids


def cma_raw(soc: Soc, op: sim.SimOp, space, grids: list[np.ndarray], seed_row: np.ndarray, evals: int,
            seed: int, penalty: float) -> float:
    """CMA-ES over grid indices of the raw fields, from CANN's default; the best time found."""
    from cmaes import CMA

    dims = len(grids)
    hi = np.array([len(gr) - 1 for gr in grids], np.float64)
    x0 = np.array([float(np.searchsorted(gr, v)) for gr, v in zip(grids, seed_row)])
    bounds = np.stack([np.zeros(dims), np.maximum(hi, 1e-9)], axis=1)
    opt = CMA(mean=x0, sigma=max(1.0, float(np.median(hi)) / 4), bounds=bounds, seed=seed,
              population_size=max(8, 4 + int(3 * math.log(dims)) * 2))
    best, spent = math.inf, 0
    while spent < evals:
        xs = [opt.ask() for _ in range(opt.population_size)]
        idx = np.clip(np.rint(np.array(xs)), 0, hi).astype(np.int64)
        rows = np.stack([grids[j][idx[:, j]] for j in range(dims)], axis=1)
        if space.repair is not None:
            rows = space.repair(rows)  # dependent fields (L1 depths, L2 tile counts) follow the free ones
        t, _ = sim.simulate_times(soc, op, np.ascontiguousarray(rows))
        spent += len(rows)
        best = min(best, float(np.min(t)))
        opt.tell([(x, float(v) if math.isfinite(v) else penalty) for x, v in zip(xs, t)])
        if opt.should_stop():
            opt = CMA(mean=x0, sigma=max(1.0, float(np.median(hi)) / 2), bounds=bounds, seed=seed + spent,
                      population_size=opt.population_size * 2)
    return best


def brute(soc: Soc, op: sim.SimOp, space) -> tuple[float, int]:
    """The space's optimum by pricing every strategy (and its size)."""
    best, size = math.inf, 0
    for chunk in space.chunks(256):
        t, _ = sim.simulate_times(soc, op, chunk, threads=2)
        size += len(chunk)
        if len(t):
            best = min(best, float(t.min()))
    return best, size


def main() -> None:
    """Run every case and print the JSON figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cma_evals", type=int, default=2000)
    ap.add_argument("--small", type=int, default=200)
    ap.add_argument("--shard", default="0/1", help="k/n: run only cases i with i %% n == k (parallel runs)")
    ap.add_argument("--jsonl", default=None, help="append one line per case to this file")
    ap.add_argument("--summarize", nargs="*", default=None, help="only summarize these --jsonl files")
    args = ap.parse_args()
    from job_bench import machine, require_extra  # noqa: E402 - the bench folder's shared helpers

    require_extra("bench", "cmaes")

    if args.summarize is not None:
        rows = [json.loads(line) for f in args.summarize for line in open(f) if line.strip()]
        print(json.dumps(summarize(rows, args, machine(), None, None)))
        return
    k, n_sh = (int(x) for x in args.shard.split("/"))
    c0, w0 = time.process_time(), time.perf_counter()
    rng = np.random.default_rng(args.seed)
    rows_out = []
    for i in range(args.cases):
        soc = load_soc(SOCS[i % 3])
        op = random_case(rng, (i // 3) % 3)
        if i % n_sh != k:
            continue
        measure = simulator_measure(soc)
        space = space_for(soc, op)
        seed_row = space.seeds[0]
        default = float(sim.simulate_times(soc, op, space.seeds)[0][0])
        opt, size = brute(soc, op, space)
        drv = search(space, op, measure).time_us
        small = search(space, op, measure, Budget(evaluations=args.small)).time_us
        sample = np.concatenate([space.outer, space.expand(space.outer[:64])])
        grids = field_grids(soc, op, sample, seed_row)
        cma = cma_raw(soc, op, space, grids, seed_row, args.cma_evals, args.seed + i, 10 * default)
        best = min(opt, drv, small, cma, default)
        rows_out.append({"case": i, "soc": soc.name, "op": repr(op), "size": size, "default": default,
                         "space_opt": opt, "driver": drv, "driver_small": small, "cma": cma, "best": best,
                         "cpu_s": round(time.process_time() - c0, 2)})
        if args.jsonl:
            with open(args.jsonl, "a") as f:
                f.write(json.dumps(rows_out[-1]) + "\n")
    print(json.dumps(summarize(rows_out, args, machine(), time.process_time() - c0, time.perf_counter() - w0)))


def summarize(rows_out: list[dict], args: argparse.Namespace, where: dict, cpu: float | None,
              wall: float | None) -> dict:
    """The figures over every case."""
    n = len(rows_out)

    def within(key: str) -> float:
        return round(sum(r[key] <= 1.01 * r["best"] for r in rows_out) / max(1, n), 4)

    def beats(key: str) -> list[dict]:
        return [{"op": r["op"], "soc": r["soc"], "by": round(r["space_opt"] / r[key] - 1, 4)}
                for r in rows_out if r[key] < r["space_opt"] * (1 - 1e-9)]

    gaps = [r["driver"] / r["best"] - 1 for r in rows_out]
    cma_b, def_b = beats("cma"), beats("default")
    return {
        "bench": "search_raw", **where, "cases": n, "seed": args.seed, "socs": list(SOCS),
        "within_1pct_of_best": {"space_opt": within("space_opt"), "driver": within("driver"),
                                f"driver_at_{args.small}": within("driver_small"), "cma_raw": within("cma"),
                                "cann_default": within("default")},
        "driver_median_gap": round(statistics.median(gaps), 5), "driver_max_gap": round(max(gaps), 5),
        "cma_evals": args.cma_evals, "cma_beats_space_opt": len(cma_b), "default_beats_space_opt": len(def_b),
        "cma_beats_examples": sorted(cma_b, key=lambda x: -x["by"])[:8],
        "default_beats_examples": sorted(def_b, key=lambda x: -x["by"])[:8],
        "cpu_s": round(cpu, 1) if cpu is not None else None, "wall_s": round(wall, 1) if wall is not None else None,
    }


if __name__ == "__main__":
    main()
