"""SGAT evaluator parity: the Numba evaluator against the C++ one it replaced, bit for bit. Prints one JSON line.

    python bench/sgat_parity.py [--sample N] [--golden tests/golden/sgat_evaluator.npz]

Needs a build of aoe whose extension still holds the C++ evaluator (`aoe._sim.sgat_evaluate`, deleted
after this comparison: commit "sgat: C++ evaluator deleted"); without it the script says so and exits 2.

Every distinct subgraph (region) of every zoo model (resnet50, bert_base, mobilenet_v2, gpt2 at their
default input shapes), inference and training graphs, on Ascend910A, Ascend310P3 and Ascend910B2:
- plans: the whole plan space when it has at most `--space` plans (every zoo region has at most
  65,536), else `--sample` random plans (random edge bits, split, tile and L2 flag, values out of
  range included); priced by the C++, by Numba on one thread and by Numba's prange version;
- completions: `--sample` random partial plans per region completed by both (C++ `sgat_complete` vs
  Numba), then the completed (consistent) plans priced by both as above;
- kernels: `kernel_costs` of every op subset (up to 4096 random ones) at every (split, tile, L2).
A mismatch is any float64 whose bits differ (NaN included); `mismatches` must be all zero.
With `--golden`, a sample of the C++ outputs (inputs and outputs, a few hundred kB compressed) is saved
for tests/test_sgat_golden.py.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from job_bench import cpu_model  # noqa: E402  (bench/ is not a package)

MODELS = ("resnet50", "bert_base", "mobilenet_v2", "gpt2")
SOCS = ("Ascend910A", "Ascend310P3", "Ascend910B2")


def regions() -> list[tuple[str, object]]:
    """(label, RegionData) of every distinct region of the zoo on the three SoCs."""
    import aoe.graph
    from aoe.sgat import prepare
    from aoe.soc import load_soc

    seen: set[bytes] = set()
    out = []
    for name in MODELS:
        for training in (False, True):
            g = aoe.graph.load(f"zoo:{name}", training=training)
            for soc in SOCS:
                for case in prepare(g, load_soc(soc)).cases:
                    rd = case.rd
                    key = hashlib.sha1(b"".join(np.ascontiguousarray(a).tobytes() + str(a.shape).encode()
                                                for a in rd.arrays())).digest()
                    if key not in seen:
                        seen.add(key)
                        out.append((f"{name}/{'training' if training else 'inference'}/{soc}", rd))
    return out


def _bits_differ(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.count_nonzero(a.view(np.int64) != b.view(np.int64))) if a.shape == b.shape else max(len(a), 1)


def _random_plans(rd: object, rng: np.random.Generator, count: int) -> np.ndarray:
    """Random rows: edge bits mostly 0/1, split/tile/L2 mostly in range (a few out of range)."""
    e = rd.n_edges
    p = np.empty((count, e + 3), dtype=np.int64)
    p[:, :e] = rng.integers(0, 2, (count, e))
    p[:, e] = rng.integers(0, 2, count)
    p[:, e + 1] = rng.integers(0, 8, count)
    p[:, e + 2] = rng.integers(0, 2, count)
    bad = rng.random(count) < 0.01
    p[bad, rng.integers(0, e + 3, int(bad.sum()))] = rng.integers(-1, 9, int(bad.sum()))
    return p


def compare(rd: object, rng: np.random.Generator, space: int, sample: int) -> dict[str, int]:
    """Counts of what was compared on one region and of the mismatches."""
    from aoe import _sim
    from aoe.sgat import evaluator
    from aoe.sgat.search import all_plans

    c = {"plans": 0, "plan_mismatches": 0, "completions": 0, "completion_mismatches": 0, "kernels": 0,
         "kernel_mismatches": 0}
    arrays = rd.arrays()
    batches = [all_plans(rd)] if rd.n_plans <= space else [_random_plans(rd, rng, sample)]
    # completions of random partial plans (every region), then priced like the plans
    part = _random_plans(rd, rng, sample)
    part[:, rd.n_edges:] = np.clip(part[:, rd.n_edges:], 0, [1, 7, 1])
    ks = rng.integers(0, rd.n_edges + 1, sample)
    for k in np.unique(ks):
        rows = part[ks == k]
        a, b = rows.copy(), rows.copy()
        _sim.sgat_complete(a, int(k), rd.edges, rd.n)
        evaluator.complete(b, int(k), rd.edges, rd.n)
        c["completions"] += len(rows)
        c["completion_mismatches"] += int(np.count_nonzero((a != b).any(axis=1)))
        batches.append(a)
    for plans in batches:
        for s in range(0, len(plans), 262144):
            chunk = plans[s:s + 262144]
            want = _sim.sgat_evaluate(chunk, *arrays)
            got = evaluator.evaluate_arrays(chunk, *arrays, parallel=False)
            got_par = evaluator.evaluate_arrays(chunk, *arrays, parallel=True)
            c["plans"] += len(chunk)
            c["plan_mismatches"] += _bits_differ(want, got) + _bits_differ(want, got_par)
    full = (1 << rd.n) - 1
    masks = np.arange(1, full + 1, dtype=np.int64) if full <= 4096 else rng.integers(1, full + 1, 4096)
    for l2 in (0, 1):
        for tile in range(8):
            for split in (0, 1):
                want = _sim.sgat_kernel_costs(masks, split, tile, l2, rd.edges, rd.opf, rd.edgef, rd.tens,
                                              rd.tensf, rd.socp)
                got = evaluator.kernel_costs(rd, masks, split, tile, l2)
                c["kernels"] += len(masks)
                c["kernel_mismatches"] += _bits_differ(want, got)
    return c


def golden(regs: list[tuple[str, object]], path: Path, per_region: int = 400) -> dict[str, object]:
    """Save the C++ outputs of a sample of plans, completions and kernels of every 12th region (npz)."""
    from aoe import _sim

    regs = regs[::12]
    rng = np.random.default_rng(20261206)
    items: dict[str, np.ndarray] = {}
    for j, (_, rd) in enumerate(regs):
        for name, a in zip(("edges", "opf", "edgef", "tens", "tensf", "reach", "anc", "socp"), rd.arrays()):
            items[f"r{j}_{name}"] = a
        e = rd.n_edges
        part = _random_plans(rd, rng, per_region)
        k = int(rng.integers(0, e + 1))
        start = part.copy()
        start[:, e:] = np.clip(start[:, e:], 0, [1, 7, 1])
        done = start.copy()
        _sim.sgat_complete(done, k, rd.edges, rd.n)
        plans = np.concatenate([part[: per_region // 4], done])
        items[f"r{j}_plans"] = plans.astype(np.int8)
        items[f"r{j}_times"] = _sim.sgat_evaluate(plans, *rd.arrays())
        items[f"r{j}_complete_k"] = np.array([k])
        items[f"r{j}_complete_in"] = start.astype(np.int8)
        items[f"r{j}_complete_out"] = done.astype(np.int8)
        full = (1 << rd.n) - 1
        masks = rng.integers(1, full + 1, 64)
        split, tile, l2 = int(rng.integers(0, 2)), int(rng.integers(0, 8)), int(rng.integers(0, 2))
        items[f"r{j}_masks"] = masks
        items[f"r{j}_kernel_args"] = np.array([split, tile, l2])
        items[f"r{j}_kernel_times"] = _sim.sgat_kernel_costs(masks, split, tile, l2, rd.edges, rd.opf, rd.edgef,
                                                             rd.tens, rd.tensf, rd.socp)
    items["labels"] = np.array([lab for lab, _ in regs])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **items)
    return {"golden": str(path), "golden_regions": len(regs), "golden_bytes": path.stat().st_size}


def main() -> None:
    """Compare both evaluators on every zoo region; print one JSON line; exit 1 on any mismatch."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", type=int, default=1 << 16, help="whole plan space up to this many plans")
    ap.add_argument("--sample", type=int, default=5000,
                    help="random completions per region (and random plans per larger region)")
    ap.add_argument("--golden", type=Path, help="save a sample of the C++ outputs here (npz)")
    args = ap.parse_args()
    from aoe import _sim

    if not hasattr(_sim, "sgat_evaluate"):
        print("this build of aoe has no C++ SGAT evaluator to compare with (deleted after the comparison); "
              "build the commit before 'sgat: C++ evaluator deleted'", file=sys.stderr)
        sys.exit(2)
    t0, c0 = time.perf_counter(), time.process_time()
    regs = regions()
    rng = np.random.default_rng(1)
    total: dict[str, int] = {}
    per_soc: dict[str, int] = {}
    for label, rd in regs:
        c = compare(rd, rng, args.space, args.sample)
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
        soc = label.rsplit("/", 1)[1]
        per_soc[soc] = per_soc.get(soc, 0) + 1
    out: dict[str, object] = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "cpu": cpu_model(), "regions": len(regs), "regions_per_soc": per_soc, **total,
                              "mismatches": total["plan_mismatches"] + total["completion_mismatches"]
                              + total["kernel_mismatches"]}
    if args.golden:
        out.update(golden(regs, args.golden))
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    out["cpu_s"] = round(time.process_time() - c0, 1)
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    sys.exit(1 if out["mismatches"] else 0)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
