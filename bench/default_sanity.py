"""Sanity of the CANN-like default strategies (the "before" of every tuning report) over the zoo.

Cases: every distinct operator case of the zoo models ResNet-50, MobileNetV2, BERT-base and GPT-2,
inference and training graphs at the zoo's input shapes (`aoe.ops.describe`), on the four SoCs.
For each case and SoC it prices the default (`aoe.sim.default_strategy` on the case's default
variant, conversions included, as `tune_case` reports it) and tunes it (`tune_case`, Schedule +
Format + Impl, 20,000 evaluations by default). It prints one JSON line with

- (a) `outliers`: cases whose default is more than 3x slower than the tuned strategy, per SoC, and
  the tuned-over-default geomean per operator type (per SoC, and per family for the Cube types);
- (b) `bigger_chip_slower`: cases whose default runs slower on the bigger chip of a family than on
  the smaller one. Ascend910B2 (24 AIC / 48 AIV) and Ascend910B3 (20 / 40) are the same Atlas A2
  design with the same clock, buffers and HBM; B2 only has more cores, so its default should never be
  slower. Counted strictly and with a 2% tolerance (rounding of a different core split);
  Ascend910A vs Ascend310P3 (both coupled, 4x the cores and 6x the bandwidth) is listed for information;
- (c) `thin_splits`: defaults that give a core less than one unit of work: a convolution whose
  feature map is split over cores so that a core gets fewer than 16 pixels (one fractal) of it (the
  output map of Conv2D / Conv2DBackpropInput, the reduction of Conv2DBackpropFilter), more matmul cores
  than output blocks, a vector split of under one 32 B block (or one row of a row operator) per core.

    python bench/default_sanity.py                 # all four SoCs, budget 20000
    python bench/default_sanity.py --budget 5000 --socs Ascend910B2,Ascend910B3
"""
from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections import defaultdict

import aoe.graph
from aoe.opat import Budget
from aoe.opat.tune import tune_case
from aoe.ops import OpCase, Unsupported, describe
from aoe.sim import Conv2D, MatMul, VectorOp, default_strategy
from aoe.soc import load_soc

MODELS = ("zoo:resnet50", "zoo:mobilenet_v2", "zoo:bert_base", "zoo:gpt2")
SOCS = ("Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend310P3")
PAIRS = (("Ascend910B2", "Ascend910B3", True), ("Ascend910A", "Ascend310P3", False))  # (bigger, smaller, same family)
TOL = 0.02


def zoo_cases() -> list[OpCase]:
    """Distinct operator cases of the zoo models, inference and training, in first-seen order."""
    seen: dict[tuple[str, str], OpCase] = {}
    for model in MODELS:
        for training in (False, True):
            g = aoe.graph.load(model, training=training)
            for op in g.ops:
                try:
                    case = describe(g, op)
                except Unsupported:
                    continue
                seen.setdefault(case.case_id, case)
    return list(seen.values())


def thin_split(soc_name: str, case: OpCase) -> str | None:
    """Why the default of `case` gives a core less than one unit of work, or None."""
    op = case.default.sim_op
    st = default_strategy(soc_name, op)
    if isinstance(op, Conv2D):
        ho, wo = op.out_hw
        filt = op.op_type.endswith("BackpropFilter")
        out_h, out_w = (op.x[2], op.x[3]) if op.op_type.endswith("BackpropInput") else (ho, wo)
        hd = st["hoDim"]
        rows = -(-out_h // hd)
        if hd > 1 and rows * out_w < 16:  # dW: the pixels are its reduction, split with atomic adds
            what = "dW reduction" if filt else "output map"
            return f"{what} {out_h}x{out_w} split {hd} ways: {rows * out_w} pixels per core (< one fractal)"
        return None
    if isinstance(op, MatMul):
        sm, sn = min(st["singleCoreM"], op.m), min(st["singleCoreN"], op.n)
        tasks = max(op.batch, op.batch_b or 1) * -(-op.m // sm) * -(-op.n // sn)
        if st["usedCoreNum"] > tasks:
            return f"{st['usedCoreNum']} cores for {tasks} blocks"
        return None
    if isinstance(op, VectorOp):
        block = st["blockDim"]
        align = 32 // {"float32": 4, "int32": 4, "int8": 1}.get(op.dtype, 2)
        if op.axes and op.op_type not in ("Transpose", "TransData"):
            row_len = math.prod(op.shape[a] for a in op.axes) * math.prod(op.shape[max(op.axes) + 1:])
            rows = op.elements // max(1, row_len)
            if st["impl"] == 1 and op.op_type.startswith("Reduce"):  # a row split over cores
                return f"{block} cores for a row of {row_len}" if -(-row_len // block) < align else None
            return f"{block} cores for {rows} rows" if block > rows else None
        return f"{block} cores for {op.elements} elements" if block > -(-op.elements // align) else None
    return None


def geomean(xs: list[float]) -> float:
    """Geometric mean (1.0 for an empty list)."""
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 1.0


def main() -> None:
    """Measure (a), (b), (c) and print them as one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=20000)
    ap.add_argument("--socs", default=",".join(SOCS))
    ap.add_argument("--list", type=int, default=12, help="worst cases listed per SoC")
    args = ap.parse_args()
    socs = [load_soc(s).name for s in args.socs.split(",")]
    w0, c0 = time.perf_counter(), time.process_time()
    cases = zoo_cases()
    before: dict[str, list[float]] = {}
    after: dict[str, list[float]] = {}
    impls: dict[str, list[str]] = {}
    kinds: dict[str, list[list[str]]] = {}
    for soc in socs:
        before[soc], after[soc], impls[soc], kinds[soc] = [], [], [], []
        for case in cases:
            r = tune_case(case, load_soc(soc), budget=Budget(evaluations=args.budget))
            before[soc].append(r.before_us)
            after[soc].append(r.after_us)
            impls[soc].append(r.impl)
            kinds[soc].append(sorted(r.steps))

    def label(c: OpCase) -> str:
        return f"{c.op_type} {c.default.sim_op!r}"[:260]

    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    out: dict = {"bench": "default_sanity", **machine(), "budget": args.budget, "cases": len(cases),
                 "cases_by_family": {f: sum(c.family == f for c in cases) for f in ("matmul", "conv", "vector")}}
    outliers, per_type = {}, {}
    for soc in socs:
        ratios = [b / a for b, a in zip(before[soc], after[soc])]
        bad = sorted((i for i, x in enumerate(ratios) if x > 3), key=lambda i: -ratios[i])
        outliers[soc] = {"count": len(bad), "schedule_or_impl": sum("Format" not in kinds[soc][i] for i in bad),
                         "worst": [
            {"case": label(cases[i]), "ratio": round(ratios[i], 2), "tuned_impl": impls[soc][i],
             "kinds": kinds[soc][i]}
            for i in bad[:args.list]]}
        by_type = defaultdict(list)
        for c, x in zip(cases, ratios):
            by_type[c.op_type].append(x)
        per_type[soc] = {t: {"n": len(v), "geomean": round(geomean(v), 3), "max": round(max(v), 2)}
                         for t, v in sorted(by_type.items()) if any(c.op_type == t and c.family != "vector"
                                                                     for c in cases) or len(v) >= 5}
        fam = defaultdict(list)
        for c, x in zip(cases, ratios):
            fam[c.family].append(x)
        per_type[soc]["_families"] = {f: round(geomean(v), 3) for f, v in sorted(fam.items())}
    out["a_outliers_over_3x"] = outliers
    out["a_geomean_tuned_over_default"] = per_type
    pairs = {}
    for big, small, same in PAIRS:
        if big not in before or small not in before:
            continue
        slow = [i for i in range(len(cases)) if before[big][i] > before[small][i]]
        slow_tol = [i for i in slow if before[big][i] > before[small][i] * (1 + TOL)]
        worst = sorted(slow_tol, key=lambda i: -before[big][i] / before[small][i])[:args.list]
        pairs[f"{big}>{small}"] = {
            "same_family": same, "strict": len(slow), f"over_{int(TOL * 100)}pct": len(slow_tol),
            "by_family": {f: sum(cases[i].family == f for i in slow_tol) for f in ("matmul", "conv", "vector")},
            "tuned_slower_over_tol": sum(after[big][i] > after[small][i] * (1 + TOL) for i in range(len(cases))),
            "worst": [{"case": label(cases[i]), "big_us": round(before[big][i], 3),
                       "small_us": round(before[small][i], 3)} for i in worst]}
    out["b_bigger_chip_slower"] = pairs
    thin = {}
    for soc in socs:
        found = [(c, why) for c in cases if (why := thin_split(soc, c))]
        thin[soc] = {"count": len(found), "examples": [f"{label(c)[:120]}: {w}" for c, w in found[:args.list]]}
    out["c_thin_splits"] = thin
    out["wall_s"] = round(time.perf_counter() - w0, 1)
    out["cpu_s"] = round(time.process_time() - c0, 1)
    out["pid"] = os.getpid()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
