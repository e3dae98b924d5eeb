"""Simulator throughput against a pass over its own input (prints one JSON line).

    python bench/sim_throughput.py [--n 1000000] [--repeats 5] [--isa x86-64-v3]

For a BERT-sized MatMul and a ResNet-50 3x3 Conv2D on Ascend910B2, the batch is what a search
really sends: every strategy row the OPAT driver (`aoe.opat.search.search`, default budget) passes
to its measure is recorded, valid and invalid rows in the proportion the driver produced them, and
that recording is resampled to `--n` rows. `simulate_times` prices the batch on one thread; the
reference is a numpy row-sum (`rows.sum(axis=1)`) over the same int64 batch in the same process,
the cost of merely reading the input once. Both are CPU seconds of the calling thread
(`time.thread_time`, best of `--repeats`), so the ratio holds on a loaded, shared machine; wall
throughput with 2 threads is printed beside it. The goal is a ratio of at most 3. `kernels` names the
Cube kernel set the CPU got (x86-64-v4: 8 rows per AVX-512 step; x86-64-v3: 4 rows per AVX2 step;
base: one row at a time); `v3_ns_per_eval` and `v3_ratio_to_rowsum` are the x86-64-v3 set on the same
batch, where the CPU runs it (what an AVX2-only CPU would use).

`--isa NAME` prices the batch with that Cube kernel set instead of the one the CPU got (through the
native test hook `_sim._times_with`, one thread; no 2-thread figure then), so an AVX-512 machine
measures what an AVX2-only one runs. The vector model has no such switch: it is built for x86-64-v3
and the baseline and always runs its x86-64-v3 build on a CPU with AVX2 (AVX-512 ones included).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from aoe import _sim
from aoe.opat.search import search, simulator_measure
from aoe.opat.space import space_for
from aoe.sim import Conv2D, MatMul
from aoe.soc import load_soc

CASES = [("MatMul 4096x3072x768 fp16 (BERT-base FFN-in, 32x128 tokens)", MatMul(m=4096, n=3072, k=768)),
         ("Conv2D 32x64x56x56 3x3 fp16 (ResNet-50 stage 1)",
          Conv2D(x=(32, 64, 56, 56), weight=(64, 64, 3, 3), pads=(1, 1, 1, 1)))]


def searched_rows(soc, op) -> np.ndarray:
    """Every row the default search sends to its measure, in order."""
    sent: list[np.ndarray] = []
    sim_measure = simulator_measure(soc)

    class Recorder:
        bound_is_exact = True

        def __call__(self, o, rows):
            sent.append(rows.copy())
            return sim_measure(o, rows)

    search(space_for(soc, op), op, Recorder())
    return np.concatenate(sent)


def best_cpu(fn, repeats: int) -> float:
    """Least thread CPU seconds of `repeats` calls."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        best = min(best, time.thread_time() - t0)
    return best


def price_case(soc, label: str, op, n: int, repeats: int, isa: str | None = None) -> dict:
    """Figures of one operator: its searched rows resampled to `n`, priced against the row-sum."""
    sent = searched_rows(soc, op)
    rng = np.random.default_rng(0)
    batch = np.ascontiguousarray(sent[rng.integers(0, len(sent), size=n)])
    params = op.params()
    if isa is None:
        def price():
            return _sim.simulate_times(soc.native, op.kind, params, batch, 1)
    else:
        def price():
            return _sim._times_with(isa, soc.native, op.kind, params, batch)
    _sim.simulate_times(soc.native, op.kind, params, batch[:1000], 1)  # warm up
    sim_s = best_cpu(price, repeats)
    sum_s = best_cpu(lambda: batch.sum(axis=1), repeats)
    _, reasons = price()
    try:
        v3_s = best_cpu(lambda: _sim._times_with("x86-64-v3", soc.native, op.kind, params, batch), repeats)
    except ValueError:  # not an x86-64-v3 CPU (or build)
        v3_s = None
    two = None
    if isa is None:
        t0 = time.perf_counter()
        _sim.simulate_times(soc.native, op.kind, params, batch, 2)
        two = round(n / (time.perf_counter() - t0))
    return {
        "op": label, "rows_sent_by_search": len(sent),
        "valid_fraction": round(float(np.mean(reasons == 0)), 4),
        "cpu_s": round(sim_s, 4), "ns_per_eval": round(sim_s / n * 1e9, 1),
        "evals_per_cpu_s": round(n / sim_s), "rowsum_ns_per_row": round(sum_s / n * 1e9, 1),
        "ratio_to_rowsum": round(sim_s / sum_s, 2), "wall_evals_per_s_2_threads": two,
        "v3_ns_per_eval": None if v3_s is None else round(v3_s / n * 1e9, 1),
        "v3_ratio_to_rowsum": None if v3_s is None else round(v3_s / sum_s, 2),
    }


def cpu_flags() -> str:
    """The CPU's vector extensions that matter to the kernels (Linux /proc/cpuinfo; "" elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return ""
    return " ".join(x for x in ("avx2", "fma", "bmi2", "avx512f", "avx512dq", "avx512vl") if x in flags)


def main() -> None:
    """Price each recorded batch and print the figures with the same-run row-sum reference."""
    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--isa", default=None, help="price with this Cube kernel set (base, x86-64-v3, x86-64-v4)")
    args = ap.parse_args()
    soc = load_soc(args.soc)
    kernels = f"{_sim.CUBE_KERNELS} ({_sim.CUBE_LANES} rows per step)"
    if args.isa is not None:
        try:
            _sim._times_with(args.isa, soc.native, _sim.K_MATMUL, CASES[0][1].params(),
                             np.ones((1, len(_sim.strategy_fields(_sim.K_MATMUL))), np.int64))
        except ValueError as exc:
            ap.error(str(exc))
        kernels = f"{args.isa} (chosen with --isa; the CPU got {kernels})"
    out: dict = {"bench": "sim_throughput", **machine(), "cpu_flags": cpu_flags(), "soc": args.soc, "n": args.n,
                 "threads": 1, "kernels": kernels,
                 "cases": [price_case(soc, label, op, args.n, args.repeats, args.isa) for label, op in CASES]}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
