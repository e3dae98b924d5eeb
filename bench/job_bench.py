"""Tuning-job benchmark: cold and warm `aoe` jobs on the ResNet-50 and BERT-base training graphs.

    python bench/job_bench.py [--soc Ascend910B2] [--workers N] [--budget EVALS] [--batch B]

Each model is run as the real command (`python -m aoe.cli -m zoo:... -j 2 --training`, a separate
process, so start-up, graph import, result files and locks are included), twice, in a fresh
temporary TUNE_BANK_PATH:

- `cold_s`: empty custom bank: every case is tuned (the built-in bank still counts as hits);
- `warm_s`: the same job again: every case tuned in the cold run is now a bank hit (REPEAT_TUNE=False).

Also reported per model: operators, distinct cases, counters of both runs, the sum of the tuned
operators' simulated times before/after (from `aoe verify`), and `tuning_time(s)` from the result
file. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODELS = {
    "resnet50": ("zoo:resnet50", "input:{b},3,224,224"),
    "bert_base": ("zoo:bert_base", "input_ids:{b},128;attention_mask:{b},128"),
}


def _run(cwd: Path, env: dict[str, str], *argv: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "aoe.cli", *argv], cwd=cwd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"aoe {' '.join(argv)} failed ({p.returncode}):\n{p.stderr}")
    return dt, p


def _latest(d: Path) -> dict:
    f = sorted(d.glob("aoe_result_opat_*.json"))[-1]
    (task,) = json.loads(f.read_text()).values()
    return {"tuning_time_s": task[0]["basic"].get("tuning_time(s)"),
            "status": task[1]["OPAT"]["opat_tuning_result"], "summary": task[1]["OPAT"]["repo_summary"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--workers", type=int, default=None, help="TUNING_PARALLEL_NUM (default: aoe's, 8 -> CPUs)")
    ap.add_argument("--budget", type=int, default=None, help="AOE_SEARCH_BUDGET (default: aoe's, 100000)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()

    from aoe.job.config import cpu_count

    out: dict = {"soc": args.soc, "cpus": cpu_count(), "batch": args.batch, "budget": args.budget or 100000,
                 "workers_asked": args.workers or 8}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in args.models.split(","):
            model, shape = MODELS[name]
            work = root / name
            bank = work / "bank"
            bank.mkdir(parents=True)
            env = dict(os.environ, TUNE_BANK_PATH=str(bank), AOE_LOCK_DIR=str(root / "locks"))
            for k in ("REPEAT_TUNE", "ASCEND_WORK_PATH", "AOE_MODE", "AOE_CONFIG", "ASCEND_DEVICE_ID"):
                env.pop(k, None)
            if args.budget:
                env["AOE_SEARCH_BUDGET"] = str(args.budget)
            if args.workers:
                (work / "aoe.ini").write_text(f"[tuning]\ntuning_parallel_num = {args.workers}\n")
            argv = ("-m", model, "-j", "2", "--training", "--soc_version", args.soc,
                    "--input_shape", shape.format(b=args.batch), "--progress_bar", "off")
            cold_s, _ = _run(work, env, *argv)
            cold = _latest(work)
            time.sleep(0.01)
            warm_s, _ = _run(work, env, *argv)
            warm = _latest(work)
            _, v = _run(work, env, "verify", "-m", model, "--training", "--soc_version", args.soc,
                        "--input_shape", shape.format(b=args.batch), "--json")
            ver = json.loads(v.stdout)
            out[name] = {
                "operators": len(ver["operators"]) + len(ver["skipped"]),
                "cold_s": round(cold_s, 2), "warm_s": round(warm_s, 2),
                "cold": cold, "warm": warm,
                "model_default_ms": round(ver["model_default_us"] / 1000, 4),
                "model_tuned_ms": round(ver["model_tuned_us"] / 1000, 4),
                "model_improvement": ver["model_improvement"],
            }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
