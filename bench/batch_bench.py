"""Batch tuning as deployed: one `aoe batch` list of >= 20 zoo models (OPAT and SGAT) on 1 and 2 workers.

Prints one JSON object. The list (`BATCH`; `--small` takes 4 lines for a quick check) holds the four
zoo models at several batch sizes and sequence lengths: OPAT inference and training lines on Ascend910B2,
SGAT lines on Ascend910A, tuned into a fresh bank with the shipped built-in bank set aside (with it,
almost every zoo case is a hit and there is nothing to distribute).

Each configuration runs in processes as a team runs them, on 127.0.0.1:
- `serial`: the same lines and grouping as `aoe batch`, through `aoe.tune_models` without a cluster,
  in one child process (one simulator thread, no worker pool): the reference for equality and speed.
- `workers_N`: `dask scheduler` and N x `dask worker --nthreads 1` (Dask's own command line, plain
  tcp:// on 127.0.0.1, fresh per configuration: `_dask_cli.py`), then `aoe batch LIST --scheduler tcp://...` as a child
  process.
Every process runs with one simulator thread (TE_PARALLEL_COMPILER=1) and one Numba thread: one
process per core, as aoe/batch/README.md recommends.

Figures per configuration: `wall_s` of the client command; `cpu_s` of every process of the tree over
the batch (`client` = the `aoe batch` process, `scheduler`, `workers` = each worker and its nanny, from
/proc just before and after the batch; start-up of scheduler and workers excluded, reported apart as
`startup_s`); `tasks`, `task_cpu_s` (CPU the tasks themselves spent, as the workers report it: the
rest of `workers` is the Dask worker's own), `cases_sent`, `subgraphs_sent` (from the command's summary
line); `cases_per_s` = (cases + subgraphs sent) / wall; `scheduler_share` = scheduler CPU /
worker CPU (goal <= 5%); `worker_peak_rss_mb` (VmHWM of each worker process); `banks_equal`
(byte-identical operator and subgraph banks) and `figures_equal` (every result file's OPAT/SGAT
objects) against `serial`. `speedup_2_over_1` = wall of 1 worker / wall of 2 workers (goal >= 1.8 on a
quiet 2-core machine: the client and scheduler share those cores with the workers).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# (model, SoC, job type, training, input shape); consecutive lines with the same (job type, SoC,
# training) are one tune_models call, as `aoe batch` groups them
BATCH = [
    ("zoo:resnet50", "Ascend910B2", 2, False, "input:1,3,224,224"),
    ("zoo:resnet50", "Ascend910B2", 2, False, "input:8,3,224,224"),
    ("zoo:resnet50", "Ascend910B2", 2, False, "input:32,3,224,224"),
    ("zoo:mobilenet_v2", "Ascend910B2", 2, False, "input:1,3,224,224"),
    ("zoo:mobilenet_v2", "Ascend910B2", 2, False, "input:16,3,224,224"),
    ("zoo:bert_base", "Ascend910B2", 2, False, "input_ids:1,128;attention_mask:1,128"),
    ("zoo:bert_base", "Ascend910B2", 2, False, "input_ids:8,128;attention_mask:8,128"),
    ("zoo:bert_base", "Ascend910B2", 2, False, "input_ids:1,384;attention_mask:1,384"),
    ("zoo:gpt2", "Ascend910B2", 2, False, "input_ids:1,128"),
    ("zoo:gpt2", "Ascend910B2", 2, False, "input_ids:4,256"),
    ("zoo:gpt2", "Ascend910B2", 2, False, "input_ids:1,512"),
    ("zoo:resnet50", "Ascend910B2", 2, True, "input:32,3,224,224"),
    ("zoo:mobilenet_v2", "Ascend910B2", 2, True, "input:32,3,224,224"),
    ("zoo:bert_base", "Ascend910B2", 2, True, "input_ids:8,128;attention_mask:8,128"),
    ("zoo:gpt2", "Ascend910B2", 2, True, "input_ids:4,256"),
    ("zoo:resnet50", "Ascend910A", 1, False, "input:8,3,224,224"),
    ("zoo:mobilenet_v2", "Ascend910A", 1, False, "input:8,3,224,224"),
    ("zoo:bert_base", "Ascend910A", 1, False, "input_ids:8,128;attention_mask:8,128"),
    ("zoo:gpt2", "Ascend910A", 1, False, "input_ids:1,512"),
    ("zoo:resnet50", "Ascend910A", 1, True, "input:32,3,224,224"),
    ("zoo:mobilenet_v2", "Ascend910A", 1, True, "input:32,3,224,224"),
    ("zoo:bert_base", "Ascend910A", 1, True, "input_ids:8,128;attention_mask:8,128"),
]
SMALL = [BATCH[0], BATCH[5], BATCH[15], BATCH[17]]

SERIAL = r"""
import sys
from itertools import groupby
import aoe
from aoe.batch.listfile import load_list
if __name__ == "__main__":
    lines = load_list(sys.argv[1])
    opts = aoe.TuneOptions(budget=int(sys.argv[3]), lock=False, workers=1)
    for (mode, soc, training), run in groupby(lines, key=lambda x: (x.mode, x.soc, x.training)):
        run = list(run)
        rs = aoe.tune_models([x.model for x in run], mode, soc, work_path=sys.argv[2],
                             input_shape=[x.input_shape for x in run], training=training, options=opts)
        assert all(r.status == "tuning successful" for r in rs), [r.status for r in rs]
"""


def _list_text(lines: list[tuple[str, str, int, bool, str]]) -> str:
    out = []
    for model, soc, mode, training, shape in lines:
        out.append(f"{model} --soc_version {soc} --job_type {mode} --input_shape {shape}"
                   + (" --training" if training else ""))
    return "\n".join(out) + "\n"


def _env(tmp: Path, builtin: bool) -> dict[str, str]:
    drop = ("ASCEND_", "TUNING_PARALLEL_NUM", "REPEAT_TUNE", "AOE_", "TE_PARALLEL_COMPILER", "TUNE_BANK_PATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.update(TUNE_BANK_PATH=str(tmp / "bank"), AOE_LOCK_DIR=str(tmp / "locks"), TE_PARALLEL_COMPILER="1",
               AOE_BUILTIN_BANK="on" if builtin else "off", NUMBA_NUM_THREADS="1")
    (tmp / "bank").mkdir(parents=True)
    (tmp / "work").mkdir()
    return env


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _tree(pid: int) -> list[int]:
    """pid and its live descendants (from /proc)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def _cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system, what each has waited for included) of live processes."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in pids:
        try:
            f = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in f[11:15]) / tck  # utime stime cutime cstime
    return total


def _peak_rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return 0.0


def _results(tmp: Path) -> list[Any]:
    """Every OPAT/SGAT object of every result file, in a stable order (file names hold pids and times)."""
    out = []
    for f in (tmp / "work").glob("aoe_result_*.json"):
        for task in json.loads(f.read_text()).values():
            for item in task if isinstance(task, list) else [task]:
                if isinstance(item, dict) and ("OPAT" in item or "SGAT" in item):  # not "basic": its times
                    out.append(json.dumps(item, sort_keys=True))
    return sorted(out)


def _banks(tmp: Path) -> dict[str, bytes]:
    root = tmp / "bank"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.json")) if p.is_file()}


def _warm() -> None:
    """A worker's one-time start: import the tuners, load the Numba evaluator from its cache (a search)."""
    import aoe.graph
    from aoe.opat.graph_tune import tune_job  # noqa: F401
    from aoe.sgat.search import search
    from aoe.sgat.tune import prepare
    from aoe.soc import load_soc

    prep = prepare(aoe.graph.load("zoo:gpt2", "input_ids:1,32"), load_soc("Ascend910A"))
    for case in prep.cases[:3]:
        search(case.rd)


def _serial(tmp: Path, list_file: Path, budget: int, env: dict[str, str]) -> dict[str, Any]:
    c0, t0 = _children_cpu(), time.perf_counter()
    r = subprocess.run([sys.executable, "-c", SERIAL, str(list_file), str(tmp / "work"), str(budget)], cwd=tmp,
                       env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if r.returncode != 0:
        raise SystemExit(f"the serial run failed:\n{r.stderr[-3000:]}")
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}


def _cluster(tmp: Path, list_file: Path, budget: int, env: dict[str, str], n: int) -> dict[str, Any]:
    import distributed
    from _dask_cli import dask_cli  # the bench folder's helper (tests/test_batch_dask.py runs the same)

    t0 = time.perf_counter()
    with dask_cli(tmp / "dask", n, env=env, lifetime="2 hours", start_timeout_s=300) as cluster:
        address = cluster.address
        with distributed.Client(address, timeout="120s") as c:
            c.wait_for_workers(n, timeout=300)
            c.run(_warm)  # the workers' imports and Numba's cache loading are start-up, not batch work
        startup = time.perf_counter() - t0
        sched = _tree(cluster.scheduler.pid)
        workers = [_tree(p.pid) for p in cluster.workers]
        s0, w0 = _cpu_of(sched), [_cpu_of(w) for w in workers]
        c0, t1 = _children_cpu(), time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "aoe.cli", "batch", str(list_file), "--scheduler", address,
                            "--work_path", str(tmp / "work"), "--progress_bar", "off", "--search_budget",
                            str(budget)], cwd=tmp, env=env, capture_output=True, text=True)
        wall, client = time.perf_counter() - t1, _children_cpu() - c0
        s1, w1 = _cpu_of(sched), [_cpu_of(w) for w in workers]
        rss = [max(_peak_rss_mb(p) for p in w[1:] or w) for w in workers]  # the worker, under its nanny
        if r.returncode != 0:
            raise SystemExit(f"aoe batch failed ({r.returncode}):\n{r.stderr[-3000:]}")
    m = re.search(r"(\d+) distinct cases sent of (\d+) \(bank hits (\d+)\)"
                  r"(?:; (\d+) distinct subgraphs sent of (\d+))?", r.stderr)
    cases, subgraphs = (int(m.group(1)), int(m.group(4) or 0)) if m else (0, 0)
    t = re.search(r"(\d+) tasks, ([\d.]+) CPU s in the workers' tasks", r.stderr)
    tasks, task_cpu = (int(t.group(1)), float(t.group(2))) if t else (0, 0.0)
    worker_cpu = sum(b - a for a, b in zip(w0, w1))
    sched_cpu = s1 - s0
    return {"wall_s": round(wall, 2), "startup_s": round(startup, 2),
            "cpu_s": {"client": round(client, 2), "scheduler": round(sched_cpu, 2),
                      "workers": [round(b - a, 2) for a, b in zip(w0, w1)],
                      "total": round(client + sched_cpu + worker_cpu, 2)},
            "tasks": tasks, "task_cpu_s": round(task_cpu, 2),
            "cases_sent": cases, "subgraphs_sent": subgraphs,
            "cases_per_s": round((cases + subgraphs) / wall, 1),
            "scheduler_share": round(sched_cpu / max(1e-9, worker_cpu), 4),
            "worker_peak_rss_mb": rss}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON object."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=20000, help="evaluations per operator case (AOE_SEARCH_BUDGET)")
    ap.add_argument("--builtin", action="store_true", help="consult the built-in bank (default: set aside)")
    ap.add_argument("--workers", default="1,2", help="worker counts to run, comma-separated")
    ap.add_argument("--small", action="store_true", help="4 lines instead of the full list (a quick check)")
    ap.add_argument("--no_serial", action="store_true", help="skip the serial reference run")
    args = ap.parse_args(argv)
    from job_bench import cpu_model, machine, require_extra, vector_flags  # the bench folder's shared helpers

    require_extra("dask", "distributed")
    lines = SMALL if args.small else BATCH
    out: dict[str, Any] = {"lines": len(lines), "opat_lines": sum(x[2] == 2 for x in lines),
                           "sgat_lines": sum(x[2] == 1 for x in lines), "budget": args.budget,
                           "builtin": args.builtin, "cpu_model": cpu_model(), "vector_flags": vector_flags(),
                           "load_1min_before": round(os.getloadavg()[0], 2)}
    # Numba's evaluator compiled into its usual cache first (~/.cache/aoe/numba): no configuration pays for it
    with tempfile.TemporaryDirectory() as warm:
        (Path(warm) / "l.txt").write_text(_list_text([SMALL[2]]))
        _serial(Path(warm), Path(warm) / "l.txt", 100, _env(Path(warm), args.builtin))
    runs: dict[str, Path] = {}
    with tempfile.TemporaryDirectory() as root:
        names = ([] if args.no_serial else ["serial"]) + [f"workers_{n}" for n in args.workers.split(",")]
        for name in names:
            tmp = Path(root) / name
            env = _env(tmp, args.builtin)
            (tmp / "models.txt").write_text(_list_text(lines))
            if name == "serial":
                row = _serial(tmp, tmp / "models.txt", args.budget, env)
            else:
                row = _cluster(tmp, tmp / "models.txt", args.budget, env, int(name.split("_")[1]))
            if "serial" in runs:
                row["banks_equal"] = _banks(tmp) == _banks(runs["serial"])
                row["figures_equal"] = _results(tmp) == _results(runs["serial"])
                row["speedup_over_serial"] = round(out["serial"]["wall_s"] / row["wall_s"], 2)
            runs[name] = tmp
            out[name] = row
            print(f"{name}: {json.dumps(row)}", file=sys.stderr, flush=True)
        if "workers_1" in out and "workers_2" in out:
            out["speedup_2_over_1"] = round(out["workers_1"]["wall_s"] / out["workers_2"]["wall_s"], 2)
            out["cpu_2_over_1"] = round(out["workers_2"]["cpu_s"]["total"] / out["workers_1"]["cpu_s"]["total"], 2)
    out.update(machine())
    out["load_1min_after"] = out.pop("load_1min")
    out["python"] = sys.version.split()[0]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
