"""Before/after figures of the Cython-compiled modules: a cold ResNet-50 job and the 1M-entry bank's first lookup.

    python bench/cython_bench.py [--repeat 5] [--entries 1000000] [--runs job,cases,defaults,bank]

- `job`: `aoe -m zoo:resnet50 -j 2 --training --input_shape input:32,3,224,224 --no_builtin` (the
  built-in bank set aside, a fresh empty TUNE_BANK_PATH and AOE_LOCK_DIR for every run, `--report off`)
  run `--repeat` times as a separate process; `cpu_s` is the whole process tree's CPU (the job, its
  fork server and workers: `job_bench.run_timed`), listed per run with its median and spread (max - min):
  the machine is shared, so one run says little.
- `bank`: `bank_bench`'s bank of --entries records over ten operator files, then each family's first
  lookups (`lookup_first_cpu_us`: thread CPU µs per lookup, best of three passes, and the worst family).
- `cases`: the same job's 186 distinct cases tuned in this one process (`tune_case`, default budget), with
  `aoe.opat.search` and `aoe.sim.heuristics` as imported (`compiled` says how) and then run from their
  .py files (interpreted), alternated `--repeat` times: process CPU seconds of each, and whether both
  gave the same results;
- `defaults`: `default_strategy` of every kernel of the ResNet-50 (batch 8) and BERT-base training graphs,
  20 times each (the cache bypassed), as imported and interpreted: CPU ms per call.

`compiled` lists which of aoe's Cython modules this interpreter imports compiled (an extension module)
and which as plain Python: run it against a build without them for the "before" figures (e.g. copies
of the installed aoe/ with and without the extension modules, each put first on PYTHONPATH, their .pyc
files rebuilt by `python -m compileall`). It also lists modules measured compiled and left interpreted
(no measurable gain: ARCHITECTURE.md, "Compiled Python"): to repeat such a trial, compile one in such
a copy (`cython -3 -X annotation_typing=False -X binding=True --module-name aoe.bank.store store.py`,
then a C compiler) and run this bench against it.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import json
import importlib.util
import statistics
import sys
import tempfile
import time
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import ModuleType

from job_bench import _aoe, _become_subreaper, _env, _latest, machine, run_timed

CYTHON_MODULES = ("aoe.sim.heuristics",)
# measured compiled (no gain: ARCHITECTURE.md, "Compiled Python"), left interpreted
TRIED_MODULES = ("aoe.opat.search", "aoe.bank.store", "aoe.bank.opfile")


def compiled_modules() -> dict[str, bool]:
    """Each Cython-compiled module of aoe: True when it is imported as an extension module."""
    out = {}
    for name in CYTHON_MODULES + TRIED_MODULES:
        f = getattr(importlib.import_module(name), "__file__", "") or ""
        out[name] = f.endswith(tuple(EXTENSION_SUFFIXES))
    return out


def interpreted(name: str) -> ModuleType:
    """Module `name` run from its .py file by the interpreter, whatever aoe imports (registered under an
    alias only while it executes: its dataclasses look their module up)."""
    path = Path(importlib.import_module(name).__file__).with_name(name.rsplit(".", 1)[1] + ".py")
    alias = name + "_interpreted"
    spec = importlib.util.spec_from_file_location(alias, path)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = name.rsplit(".", 1)[0]
    sys.modules[alias] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[alias]
    return mod


def _cases(model: str, shape: str) -> list:
    from aoe.graph import load
    from aoe.ops.catalogue import describe

    g = load(model, shape, training=True)
    out: dict = {}
    for op in g.ops:
        try:
            c = describe(g, op)
        except Exception:  # noqa: BLE001 - operators a job skips
            continue
        out.setdefault(c.case_id, c)
    return list(out.values())


def case_runs(repeat: int) -> dict:
    """Every distinct case of the cold job tuned in-process, with the modules as imported vs interpreted."""
    import aoe.opat.tune as tune
    from aoe.soc import load_soc

    soc = load_soc("Ascend910B2")
    cases = _cases("zoo:resnet50", "input:32,3,224,224")
    sets = {"as_imported": (importlib.import_module("aoe.opat.search"), importlib.import_module("aoe.sim.heuristics")),
            "interpreted": (interpreted("aoe.opat.search"), interpreted("aoe.sim.heuristics"))}
    cpu: dict[str, list[float]] = {k: [] for k in sets}
    outcome = {}
    for _ in range(repeat):
        for name, (s, h) in sets.items():
            for n in ("Budget", "as_measure", "search", "simulator_measure"):  # what tune.py takes from search
                setattr(tune, n, getattr(s, n))
            tune.default_strategy, tune.default_vector = h.default_strategy, h.default_vector
            h._default_strategy.cache_clear()
            c0 = time.process_time()
            got = [tune.tune_case(c, soc, budget=s.Budget()) for c in cases]
            cpu[name].append(round(time.process_time() - c0, 3))
            outcome[name] = [(r.after_us, r.evaluations) for r in got]
    return {"cases": len(cases), **{f"{k}_cpu_s": v for k, v in cpu.items()},
            **{f"{k}_median_s": round(statistics.median(v), 3) for k, v in cpu.items()},
            "same_results": outcome["as_imported"] == outcome["interpreted"]}


def default_runs(repeat: int) -> dict:
    """CPU ms per default strategy of the graphs' kernels, as imported vs interpreted."""
    from aoe.soc import load_soc

    soc = load_soc("Ascend910B2")
    ops: dict = {}
    for c in _cases("zoo:resnet50", "input:8,3,224,224") + _cases("zoo:bert_base", "input_ids:2,128;attention_mask:2,128"):
        for v in (c.default, *c.formats, *c.impls):
            ops[v.sim_op] = None
    mods = {"as_imported": importlib.import_module("aoe.sim.heuristics"), "interpreted": interpreted("aoe.sim.heuristics")}
    ms: dict[str, list[float]] = {k: [] for k in mods}
    for _ in range(repeat):
        for name, h in mods.items():
            c0 = time.process_time()
            for _ in range(20):
                for op in ops:
                    h._default_strategy.__wrapped__(soc, op)
            ms[name].append(round((time.process_time() - c0) / (20 * len(ops)) * 1e3, 4))
    return {"ops": len(ops), **{f"{k}_ms": v for k, v in ms.items()},
            **{f"{k}_median_ms": round(statistics.median(v), 4) for k, v in ms.items()}}


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
    ap.add_argument("--runs", default="job,cases,defaults,bank")
    args = ap.parse_args()
    out: dict = {"bench": "cython_bench", **machine(), "whole_tree_cpu": _become_subreaper(),
                 "compiled": compiled_modules()}
    runs = args.runs.split(",")
    if "job" in runs:
        out["resnet50_cold"] = job_runs(args.repeat)
    if "cases" in runs:
        out["resnet50_cases_in_process"] = case_runs(args.repeat)
    if "defaults" in runs:
        out["default_strategies"] = default_runs(args.repeat)
    if "bank" in runs:
        out["bank"] = bank_run(args.entries)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
