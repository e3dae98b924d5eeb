"""Tuning-job benchmark: CPU and wall seconds of real `aoe` jobs, cold and warm. Prints one JSON object.

    python bench/job_bench.py [--soc Ascend910B2] [--workers N] [--budget EVALS] [--runs a,b,...] [--repeat N]

Every job is the real command (`python -m aoe.cli ...`, a separate process: interpreter start-up,
graph import, result files, locks and the worker processes are all included) in a fresh temporary
TUNE_BANK_PATH. `cpu_s` is the user+system CPU time of the whole process tree (the job and its
workers, from `resource.getrusage(RUSAGE_CHILDREN)` around the run; the bench makes itself a child
subreaper so that workers under a fork server are waited for and counted: `whole_tree_cpu` says
whether that worked), `wall_s` the stopwatch time
beside it: on a shared machine wall time grows with the load, CPU time much less.

Runs (`--runs`, default all):
- `resnet50`: OPAT, ResNet-50 training graph at batch 32 (`--soc`): `cold`, the truly cold job (an
  empty custom bank and the built-in bank set aside, `--no_builtin`: every case is tuned, `hits` says
  0) with aoe's worker settings (`--workers`), against the goal of 1.5 s CPU for the whole process
  tree; `cold_serial`, the same with `tuning_parallel_num = 1` (no worker process may start); with
  `--repeat N` each of the two N times, alternating, each in a fresh bank (median CPU and wall, every
  run's CPU in `cpu_s_runs`); then
  `warm`, the cold job again (every case is now a hit in the custom bank); and
  `repeat_tune_builtin_on`, a fresh empty custom bank with the built-in bank on and REPEAT_TUNE=True
  (every case tuned, also those the built-in bank holds, which still count as hits);
- `bert_base`: OPAT, BERT-base training graph at 32 x 128 tokens, cold (`--no_builtin`) only;
- `sgat`: SGAT's fixed overhead: subgraph tuning of MobileNetV2 inference at batch 1 on Ascend910A:
  `first_run_empty_numba_cache` (a fresh NUMBA_CACHE_DIR: Numba compiles the plan evaluator; it also
  fills the OS file cache), then `cold` (empty subgraph bank) and `warm` with the evaluator cached,
  next to `python_import_s`, the CPU time of a process that only imports `aoe.cli` (the floor of any job);
- `worker_start`: the start-up CPU of the OPAT worker pool (the fork server and 1 or 2 workers, each
  importing the tuner), whole tree, the minimum of 5 runs against a process that starts none: what a
  job's decision to start workers weighs (`aoe.opat.graph_tune.WORKER_START_CPU_S`).

The jobs run with `--report off`: the tuning job itself. With matplotlib installed a job also writes
its HTML report by default; `warm_with_report` (ResNet-50 and SGAT) is the warm job again with it, so
the report's share is the difference (`bench/report_bench.py` times the report alone).

The result also says when and where it was measured (UTC date, CPU model and vector flags, CPU count,
the 1-minute load: the machine may be shared).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPAT_RUNS = {
    "resnet50": ("zoo:resnet50", "input:32,3,224,224", True),
    "bert_base": ("zoo:bert_base", "input_ids:32,128;attention_mask:32,128", False),
}


def cpu_model() -> str:
    """The CPU model name (from /proc/cpuinfo; the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def require_extra(extra: str, *modules: str) -> None:
    """Stop with what to install when a module of an optional extra is missing (not a bare traceback)."""
    import importlib.util

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise SystemExit(f"{Path(sys.argv[0]).name} needs the {extra} extra ({', '.join(missing)} not installed): "
                         f"pip install '.[{extra}]' from the checkout (or 'aoe[{extra}]')")


def machine() -> dict[str, object]:
    """Date and machine of a measurement, for every bench JSON."""
    return {"date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "cpu_model": cpu_model(), "cpus": os.cpu_count(), "load_1min": round(os.getloadavg()[0], 2)}


def vector_flags() -> list[str]:
    """The CPU's vector extensions that aoe's kernels use (AVX2, FMA, AVX-512F), from /proc/cpuinfo."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in ("avx2", "fma", "avx512f") if f in have]
    except OSError:
        pass
    return []


def process_tree_cpu() -> float:
    """CPU seconds of this process, its waited-for children, and every live descendant with what it waited
    for in turn (Linux /proc): an in-process job's worker pool lives under a fork server that this process
    never waits for, so its workers' CPU is only found in the fork server's children times."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    kids: dict[int, list[tuple[int, list[str]]]] = {}
    try:
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat", "rb") as f:
                        fields = f.read().rsplit(b")", 1)[1].decode().split()
                except OSError:
                    continue
                kids.setdefault(int(fields[1]), []).append((int(d), fields))
    except OSError:
        return total
    todo = [os.getpid()]
    while todo:
        for pid, fields in kids.get(todo.pop(), []):
            # utime, stime, cutime, cstime: fields 14-17 of /proc/PID/stat (index 11-14 after the name)
            total += sum(int(x) for x in fields[11:15]) / tick
            todo.append(pid)
    return total


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def _become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux): a job's worker pool lives under a fork server that the job
    never waits for, so its CPU time would be lost to init; adopted, it is waited for and counted."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _reap_orphans(limit_s: float = 60.0) -> None:
    """Wait for every adopted descendant still running after the job (its fork server, workers)."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.02)


def run_timed(argv: list[str], cwd: Path, env: dict[str, str]) -> dict[str, float]:
    """Run a command to completion; wall and whole-tree CPU seconds (fails loudly on a non-zero exit)."""
    c0, t0 = _children_cpu(), time.perf_counter()
    p = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    _reap_orphans()
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({p.returncode}):\n{p.stderr}")
    return {"cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}


def _aoe(*argv: str) -> list[str]:
    return [sys.executable, "-m", "aoe.cli", *argv]


def _latest(d: Path, kind: str) -> dict:
    f = sorted(d.glob(f"aoe_result_{kind}_*.json"))[-1]
    (task,) = json.loads(f.read_text()).values()
    sec = task[1][kind.upper()]
    out = {"tuning_time_s": task[0]["basic"].get("tuning_time(s)")}
    if kind == "opat":
        out.update(status=sec["opat_tuning_result"], summary=sec["repo_summary"])
    return out


def _env(work: Path, root: Path, budget: int | None) -> dict[str, str]:
    bank = work / "bank"
    bank.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, TUNE_BANK_PATH=str(bank), AOE_LOCK_DIR=str(root / "locks"))
    for k in ("REPEAT_TUNE", "ASCEND_WORK_PATH", "AOE_MODE", "AOE_CONFIG", "ASCEND_DEVICE_ID"):
        env.pop(k, None)
    if budget:
        env["AOE_SEARCH_BUDGET"] = str(budget)
    return env


COLD_CPU_GOAL_S = 1.5   # issue 24: the truly cold ResNet-50 b32 training job, whole process tree


def _job(work: Path, argv: list[str], env: dict[str, str]) -> dict:
    """One job's figures: CPU and wall, then its result file's status, summary and bank hits."""
    out = {**run_timed(argv, work, env), **_latest(work, "opat")}
    out["hits"] = out["summary"]["repo_hit_num"]
    return out


def _repeated(jobs: list[dict]) -> dict:
    """Several runs of one job: the last run's figures with CPU and wall as the medians, every run's CPU
    beside them (on a shared machine one run's CPU seconds stretch with the load)."""
    cpus = sorted(j["cpu_s"] for j in jobs)
    walls = sorted(j["wall_s"] for j in jobs)
    return {**jobs[-1], "cpu_s": cpus[len(cpus) // 2], "wall_s": walls[len(walls) // 2], "cpu_s_min": cpus[0],
            "cpu_s_runs": [j["cpu_s"] for j in jobs]}


def opat_run(name: str, root: Path, soc: str, budget: int | None, workers: int | None, repeat: int = 1) -> dict:
    """The truly cold OPAT job of one model (for ResNet-50 also serial, warm, and REPEAT_TUNE with the
    built-in bank on), each in its own work path and bank."""
    model, shape, warm_too = OPAT_RUNS[name]
    argv = _aoe("-m", model, "-j", "2", "--training", "--soc_version", soc, "--input_shape", shape,
                "--progress_bar", "off", "--report", "off")
    cold_argv = argv[:-4] + ["--no_builtin"] + argv[-4:]

    def place(tag: str, parallel: int | None) -> tuple[Path, dict[str, str]]:
        work = root / f"{name}_{tag}"
        env = _env(work, root, budget)
        if parallel:
            (work / "aoe.ini").write_text(f"[tuning]\ntuning_parallel_num = {parallel}\n")
        return work, env

    out: dict = {"model": model, "input_shape": shape, "training": True, "soc": soc}
    # cold: an empty custom bank and the built-in bank set aside (--no_builtin): every case is tuned;
    # `repeat` times, each in a fresh work path and bank, alternating with the serial job
    colds, serials = [], []
    for i in range(repeat):
        work, env = place(f"cold{i}", workers)
        colds.append(_job(work, cold_argv, env))
        if warm_too:
            serial_work, serial_env = place(f"serial{i}", 1)
            serials.append(_job(serial_work, cold_argv, serial_env))
    out["cold"] = _repeated(colds) if repeat > 1 else colds[0]
    if warm_too:
        out["cold_serial"] = _repeated(serials) if repeat > 1 else serials[0]
        time.sleep(0.01)
        out["warm"] = _job(work, cold_argv, env)       # the same job again: every case a custom-bank hit
        out["warm_with_report"] = run_timed(cold_argv[:-2] + ["--report", "on"], work, env)
        # the old "cold": built-in bank on, REPEAT_TUNE=True (every case tuned; built-in hits still counted)
        rt_work, rt_env = place("repeat_tune", workers)
        out["repeat_tune_builtin_on"] = _job(rt_work, argv, dict(rt_env, REPEAT_TUNE="True"))
        cpu = out["cold"]["cpu_s"]
        out["goal"] = {"cold_whole_tree_cpu_s_max": COLD_CPU_GOAL_S, "cold_whole_tree_cpu_s": cpu,
                       "met": cpu <= COLD_CPU_GOAL_S}
    return out


def sgat_run(root: Path) -> dict:
    """SGAT on a small graph: what every SGAT job pays whatever the model."""
    work = root / "sgat"
    # the SGAT evaluator's Numba cache: empty before the first run, warm for the others
    numba_cache = str(root / "numba_cache")
    env = dict(_env(work, root, None), NUMBA_CACHE_DIR=numba_cache)
    argv = _aoe("-m", "zoo:mobilenet_v2", "-j", "1", "--soc_version", "Ascend910A", "--input_shape",
                "input:1,3,224,224", "--progress_bar", "off", "--report", "off")
    warmup = root / "sgat_warmup"
    out: dict = {"model": "zoo:mobilenet_v2", "input_shape": "input:1,3,224,224", "soc": "Ascend910A"}
    # the first run compiles the evaluator into the empty cache (and fills the OS file cache)
    out["first_run_empty_numba_cache"] = run_timed(argv, warmup, dict(_env(warmup, root, None),
                                                                      NUMBA_CACHE_DIR=numba_cache))
    out["cold"] = run_timed(argv, work, env)
    out["warm"] = run_timed(argv, work, env)
    out["warm_with_report"] = run_timed(argv[:-2] + ["--report", "on"], work, env)
    out["python_import_s"] = run_timed([sys.executable, "-c", "import aoe.cli"], work, env)
    out["goals"] = {"warm_cpu_s_max": 1.0, "first_run_empty_numba_cache_cpu_s_max": 10.0}
    return out


_POOL_PROBE = """
import sys
import aoe.opat.graph_tune as gt
n = int(sys.argv[1])
if n:
    with gt.worker_pool(n) as pool:   # each worker imports the tuner to run the probe (as for a case)
        assert len(list(pool.map(gt.workers_worth, [1] * 2 * n, [0.0] * 2 * n, [2] * 2 * n))) == 2 * n
"""


def worker_start_run(root: Path, repeat: int = 5) -> dict:
    """The start-up CPU of the worker pool (whole tree): a process that imports the tuner and starts 0, 1
    or 2 workers that import it too; the minimum of `repeat` runs (what `WORKER_START_CPU_S` stands for)."""
    work = root / "worker_start"
    env = _env(work, root, None)
    cpu: dict[int, float] = {}
    for n in (0, 1, 2):
        cpu[n] = min(run_timed([sys.executable, "-c", _POOL_PROBE, str(n)], work, env)["cpu_s"] for _ in range(repeat))
    return {"import_only_cpu_s": cpu[0], "one_worker_cpu_s": round(cpu[1] - cpu[0], 3),
            "two_workers_cpu_s": round(cpu[2] - cpu[0], 3),
            "per_extra_worker_cpu_s": round(cpu[2] - cpu[1], 3), "min_of": repeat}


def main() -> None:
    """Run the selected jobs and print the JSON figures."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--workers", type=int, default=None, help="TUNING_PARALLEL_NUM (default: aoe's, 8 -> CPUs)")
    ap.add_argument("--budget", type=int, default=None, help="AOE_SEARCH_BUDGET (default: aoe's, 100000)")
    ap.add_argument("--runs", default="resnet50,bert_base,sgat,worker_start")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each cold job (medians printed; default 1)")
    args = ap.parse_args()
    out: dict = {"bench": "job_bench", **machine(), "vector_flags": vector_flags(), "budget": args.budget or 100000,
                 "workers_asked": args.workers or 8, "whole_tree_cpu": _become_subreaper()}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in args.runs.split(","):
            if name == "sgat":
                out[name] = sgat_run(root)
            elif name == "worker_start":
                out[name] = worker_start_run(root)
            else:
                out[name] = opat_run(name, root, args.soc, args.budget, args.workers, max(1, args.repeat))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
