"""The figures a user decides on, per zoo model and SoC, as a first job on a fresh custom bank gives them.

    python bench/model_figures.py [--models resnet50 bert_base ...] [--budget N] [--inference]

For every zoo model (training graphs at the zoo's input shapes by default) and SoC, a job runs as a user
starts one: a fresh, empty custom bank, the shipped built-in bank on, REPEAT_TUNE off, the default search
budget (`--budget` to change it). One JSON line per (model, SoC, job type), then a summary line:

- OPAT (all four SoCs): `builtin_hit_rate` (cases found in the built-in bank / distinct cases: the custom
  bank is empty, so every hit is a built-in one), `model_default_ms` (every operator at CANN's default
  strategy), `model_before_ms` (the strategies the compiler would use before this job: the built-in
  bank's where it has one), `model_after_ms` (after the job), `gain_of_this_job` (before over after:
  what tuning added) and `gain_over_default` (default over after: what the banks give), each as the
  result file writes improvements; `skipped_operators` (not priced: no kernel model) with their types.
- SGAT (Ascend910A and Ascend310P3, the SoCs with subgraph tuning): `model_unfused_ms` (every operator
  its own kernel), `model_default_fusion_ms` (the compiler's default fusion: the baseline), `model_tuned_ms`,
  `gain_over_default_fusion` (what the result file reports), `gain_over_unfused` (for reference only),
  `builtin_hits` / `subgraphs`, and the skipped operators.

Every figure is priced by `aoe.verify` (the banks read afresh), so it is what `aoe verify` prints.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import aoe
from aoe.graph.zoo import zoo_names
from aoe.tuning import improvement

OPAT_SOCS = ("Ascend910B2", "Ascend910B3", "Ascend910A", "Ascend310P3")
SGAT_SOCS = ("Ascend910A", "Ascend310P3")


def _cpu() -> float:
    from job_bench import process_tree_cpu  # this process and its tuning workers (bench/ is on the path)

    return process_tree_cpu()


def _options(budget: int | None) -> aoe.TuneOptions:
    return aoe.TuneOptions(budget=budget, builtin=True, repeat_tune=False, lock=False)


def opat_row(model: str, soc: str, training: bool, budget: int | None, tmp: Path) -> dict:
    """One OPAT job of `model` on `soc` into a fresh custom bank, priced before and after."""
    bank = tmp / f"opat_{soc}"
    bank.mkdir()
    w0, c0 = time.perf_counter(), _cpu()
    before = aoe.verify(model, "op", soc, bank, training=training, env={})     # built-in bank only
    res = aoe.tune(model, "op", soc, bank, tmp / "work", training=training, options=_options(budget), env={})
    after = aoe.verify(model, "op", soc, bank, training=training, env={})
    s = res.section["repo_summary"]
    return {"bench": "model_figures", "kind": "opat", "model": model, "training": training, "soc": soc,
            "status": res.status, "cases": s["total_num"], "builtin_hits": s["repo_hit_num"],
            "builtin_hit_rate": round(s["repo_hit_num"] / s["total_num"], 3) if s["total_num"] else None,
            "counters": s, "model_default_ms": round(before.default_us / 1e3, 3),
            "model_before_ms": round(before.tuned_us / 1e3, 3), "model_after_ms": round(after.tuned_us / 1e3, 3),
            "gain_of_this_job": improvement(before.tuned_us, after.tuned_us),
            "gain_over_default": improvement(after.default_us, after.tuned_us),
            "skipped_operators": len(after.skipped),
            "skipped_types": dict(Counter(x["op_type"] for x in after.skipped).most_common()),
            "wall_s": round(time.perf_counter() - w0, 2), "cpu_s": round(_cpu() - c0, 2)}


def sgat_row(model: str, soc: str, training: bool, tmp: Path) -> dict:
    """One SGAT job of `model` on `soc` into a fresh subgraph bank, priced by verify."""
    bank = tmp / f"sgat_{soc}"
    bank.mkdir()
    w0, c0 = time.perf_counter(), _cpu()
    res = aoe.tune(model, "subgraph", soc, bank, tmp / "work", training=training, options=_options(None), env={})
    v = aoe.verify(model, "subgraph", soc, bank, training=training, env={})
    rep = res.report
    hits = sum(1 for r in rep.records if r.outcome.value == "reserved")   # the subgraph bank was empty
    skipped = res.skipped or []
    return {"bench": "model_figures", "kind": "sgat", "model": model, "training": training, "soc": soc,
            "status": res.status, "subgraphs": rep.n_cases, "builtin_hits": hits,
            "counters": res.section.get("repo_summary") if res.section else None,
            "model_unfused_ms": v.sgat_unfused_ms, "model_default_fusion_ms": v.sgat_baseline_ms,
            "model_tuned_ms": v.sgat_tuned_ms, "gain_over_default_fusion": v.improvement,
            "gain_over_unfused": improvement(v.sgat_unfused_ms, v.sgat_tuned_ms) if v.sgat_unfused_ms else None,
            "skipped_operators": len(skipped),
            "skipped_types": dict(Counter(x["op_type"] for x in skipped).most_common()),
            "wall_s": round(time.perf_counter() - w0, 2), "cpu_s": round(_cpu() - c0, 2)}


def main() -> None:
    """Print one JSON line per model, SoC and job type, then a summary line."""
    from job_bench import machine  # bench/ is the script's directory: the shared date/CPU stamp

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=None, help=f"zoo models (default all: {' '.join(zoo_names())})")
    ap.add_argument("--budget", type=int, default=None, help="evaluations per case (default: the job's, 100,000)")
    ap.add_argument("--inference", action="store_true", help="the inference graphs instead of training")
    args = ap.parse_args()
    training = not args.inference
    rows = []
    for name in args.models or zoo_names():
        for soc in OPAT_SOCS:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(opat_row(f"zoo:{name}", soc, training, args.budget, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
        for soc in SGAT_SOCS:
            with tempfile.TemporaryDirectory() as tmp:
                rows.append(sgat_row(f"zoo:{name}", soc, training, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    summary = {"bench": "model_figures_summary", **machine(), "training": training, "budget": args.budget or 100000,
               "opat_gain_of_this_job": {f"{r['model']}@{r['soc']}": r["gain_of_this_job"]
                                         for r in rows if r["kind"] == "opat"},
               "opat_gain_over_default": {f"{r['model']}@{r['soc']}": r["gain_over_default"]
                                          for r in rows if r["kind"] == "opat"},
               "builtin_hit_rate": {f"{r['model']}@{r['soc']}": r["builtin_hit_rate"]
                                    for r in rows if r["kind"] == "opat"},
               "sgat_gain_over_default_fusion": {f"{r['model']}@{r['soc']}": r["gain_over_default_fusion"]
                                                 for r in rows if r["kind"] == "sgat"},
               "skipped_operators_total": sum(r["skipped_operators"] for r in rows),
               "cpu_s": round(sum(r["cpu_s"] for r in rows), 1)}
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
