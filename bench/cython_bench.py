"""Before/after figures of the Cython-compiled modules: a cold ResNet-50 job and the 1M-entry bank's first lookup.

    python bench/cython_bench.py [--repeat 5] [--entries 1000000] [--runs job,bank]

- `job`: `aoe -m zoo:resnet50 -j 2 --training --input_shape input:32,3,224,224 --no_builtin` (the
  built-in bank set aside, a fresh empty TUNE_BANK_PATH and AOE_LOCK_DIR for every run, `--report off`)
  run `--repeat` times as a separate process; `cpu_s` is the whole process tree's CPU (the job, its
  fork server and workers: `job_bench.run_timed`), listed per run with its median and spread (max - min):
  the machine is shared, so one run says little.
- `bank`: `bank_bench`'s bank of --entries records over ten operator files, then each family's first
  lookups (`lookup_first_cpu_us`: thread CPU µs per lookup, best of three passes, and the worst family).
`compiled` lists which of aoe's Cython modules this interpreter imports compiled (an extension module)
and which as plain Python: run it against a build without them for the "before" figures.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import statistics
import sys
import tempfile
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

from job_bench import _aoe, _become_subreaper, _env, _latest, machine, run_timed

CYTHON_MODULES = ("aoe.opat.search", "aoe.sim.heuristics")


def compiled_modules() -> dict[str, bool]:
    """Each Cython-compiled module of aoe: True when it is imported as an extension module."""
    out = {}
    for name in CYTHON_MODULES:
        f = getattr(importlib.import_module(name), "__file__", "") or ""
        out[name] = f.endswith(tuple(EXTENSION_SUFFIXES))
    return out


def job_runs(repeat: int) -> dict:
    """The cold ResNet-50 b32 training job, `repeat` times, each in a fresh bank."""
    argv = _aoe("-m", "zoo:resnet50", "-j", "2", "--training", "--input_shape", "input:32,3,224,224",
                "--no_builtin", "--progress_bar", "off", "--report", "off")
    runs = []
    for i in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            work = root / f"run{i}"
            runs.append({**run_timed(argv, work, _env(work, root, None)), **_latest(work, "opat")})
    cpu = [r["cpu_s"] for r in runs]
    wall = [r["wall_s"] for r in runs]
    return {"command": "aoe -m zoo:resnet50 -j 2 --training --input_shape input:32,3,224,224 --no_builtin "
                       "--report off", "cpu_s": cpu, "cpu_median_s": round(statistics.median(cpu), 3),
            "cpu_spread_s": round(max(cpu) - min(cpu), 3), "wall_s": wall,
            "wall_median_s": round(statistics.median(wall), 3), "summary": runs[-1]["summary"]}


def bank_run(entries: int) -> dict:
    """The first lookups of a bank of `entries` records (bank_bench's set-up and figures)."""
    import bank_bench as bb

    per_file = entries // len(bb.OPS)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        keys = bb.write_bank(root, per_file, 0)
        gc.freeze()
        got = bb.measure_load_lookup(root, keys, 0)
        gc.unfreeze()
    return {"entries": per_file * len(bb.OPS),
            **{k: got[k] for k in ("load_cpu_s", "lookup_first_cpu_us", "lookup_first_cpu_max_us",
                                   "lookup_again_cpu_max_us")}}


def main() -> None:
    """Run the selected measurements and print one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--runs", default="job,bank")
    args = ap.parse_args()
    out: dict = {"bench": "cython_bench", **machine(), "whole_tree_cpu": _become_subreaper(),
                 "compiled": compiled_modules()}
    runs = args.runs.split(",")
    if "job" in runs:
        out["resnet50_cold"] = job_runs(args.repeat)
    if "bank" in runs:
        out["bank"] = bank_run(args.entries)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
