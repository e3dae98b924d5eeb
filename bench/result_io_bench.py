"""Share of a cold OPAT job's CPU spent on the result file, the resume state and the journal.

    python bench/result_io_bench.py [--model zoo:resnet50] [--budget N]

Runs one cold job in-process (training graph, one worker so every case runs in this process, a fresh
bank and work path in a temp dir, the built-in bank set aside so every case is tuned) and prints JSON:
the job's CPU seconds (every thread), the CPU seconds of the calling thread inside the result-file code
(the job's `write` step: result section, result file, resume state, journal; timed with
`time.thread_time`, so an fsync waiting on the disk is not counted) and their share. No profiler: it would inflate the pure-Python JSON encoding several
times. The goal is a share under 3% whatever the number of cases.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="zoo:resnet50")
    ap.add_argument("--budget", type=int, default=None, help="evaluations per case (default: the job's)")
    args = ap.parse_args()
    import aoe
    from aoe.job import result as res
    from aoe.opat.report import OpatReport

    spent = {"section": 0.0, "write": 0.0, "write_state": 0.0, "append_journal": 0.0}
    calls = dict.fromkeys(spent, 0)

    def timed(cls, name, key):
        inner = getattr(cls, name)

        def wrapper(*a, **kw):
            t = time.thread_time()
            try:
                return inner(*a, **kw)
            finally:
                spent[key] += time.thread_time() - t
                calls[key] += 1
        setattr(cls, name, wrapper)

    for name in ("write", "write_state", "append_journal"):
        timed(res.ResultFile, name, name)
    timed(OpatReport, "to_result_section", "section")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "bank").mkdir()
        # the built-in bank set aside: cold means every case is tuned, as the goal is stated
        opts = aoe.TuneOptions(workers=1, budget=args.budget, lock_dir=Path(tmp) / "locks", builtin=False)
        c0, w0 = time.process_time(), time.perf_counter()
        r = aoe.tune(args.model, bank=Path(tmp) / "bank", work_path=Path(tmp) / "work", training=True,
                     options=opts, env={})
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    io = sum(spent.values())
    from job_bench import machine  # bench/ is the script's directory: the shared date/CPU stamp

    print(json.dumps({"bench": "result_io", **machine(), "model": args.model, "training": True, "cases": r.report.cases_tuned, "status": r.status,
                      "job_cpu_s": round(cpu, 3), "job_wall_s": round(wall, 3), "result_io_cpu_s": round(io, 4),
                      "result_io_share": round(io / cpu, 4) if cpu else None,
                      "by_step_cpu_s": {k: round(v, 4) for k, v in spent.items()}, "calls": calls}))


if __name__ == "__main__":
    main()
