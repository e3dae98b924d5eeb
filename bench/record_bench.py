"""What the run's record costs a job, and what reading it back costs a report. Prints one JSON line.

A job of `--model` (default BERT-base's training graph, operator tuning on Ascend910B2, the built-in
bank on, so most cases are hits and the record's share is largest) runs --rounds times with the record's
detail (the kernels of every case, `Events.detail`) and --rounds times without it (the job's events
class told not to ask; the lines are still written, without kernels); the best round of each is kept
(the machine may be shared). Figures: the job's wall and CPU seconds (the whole process tree; one
tuning worker), the record's size, and `collect_s` (reading the result file and the record back
into the report's data). The custom bank is fresh for every round.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def _job(model: str, training: bool, budget: int, detail: bool) -> tuple[float, float, Path]:
    from aoe.job import run as run_mod
    from aoe.job.run import JobSpec, run_job
    from aoe.job.settings import settings_from_env

    work = Path(tempfile.mkdtemp(prefix="aoe-record-bench-"))
    settings = settings_from_env({"TUNE_BANK_PATH": str(work)}, work_path=work, budget=budget, progress=False,
                                 lock=False, cwd=work, tuning_parallel=1)
    from job_bench import process_tree_cpu  # the bench folder's shared helper

    old = run_mod._JobEvents.detail
    run_mod._JobEvents.detail = detail
    try:
        w, c = time.perf_counter(), process_tree_cpu()
        res = run_job(JobSpec(mode=2, model=model, training=training), settings, out=None, install_signals=False)
        return time.perf_counter() - w, process_tree_cpu() - c, res.result_file
    finally:
        run_mod._JobEvents.detail = old


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="zoo:bert_base")
    p.add_argument("--no-training", dest="training", action="store_false")
    p.add_argument("--budget", type=int, default=300)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).parent))
    from aoe.report.data import collect
    from aoe.report.record import record_path

    _job(args.model, args.training, args.budget, True)      # warm-up: imports, caches, Numba
    best: dict[bool, tuple[float, float, Path]] = {}
    for _ in range(args.rounds):
        for detail in (True, False):
            r = _job(args.model, args.training, args.budget, detail)
            if detail not in best or r[1] < best[detail][1]:
                best[detail] = r
    rf = best[True][2]
    w, c = time.perf_counter(), time.process_time()
    data = collect(rf)
    collect_s, collect_cpu = time.perf_counter() - w, time.process_time() - c
    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    out = {"bench": "record", **machine(), "model": args.model, "training": args.training, "budget": args.budget,
           "cases": len(data.cases), "operators_priced": len(data.ops),
           "job_s": round(best[True][0], 3), "job_cpu_s": round(best[True][1], 3),
           "job_without_detail_s": round(best[False][0], 3), "job_without_detail_cpu_s": round(best[False][1], 3),
           "record_bytes": record_path(rf).stat().st_size,
           "record_without_detail_bytes": record_path(best[False][2]).stat().st_size,
           "collect_s": round(collect_s, 3), "collect_cpu_s": round(collect_cpu, 3)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
