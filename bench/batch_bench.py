"""Batch tuning: the four zoo models x {Ascend910B2 OPAT, Ascend910A SGAT}, serial vs a Dask cluster.

Prints one JSON object. Each configuration runs `aoe.tune_models` on the four zoo models into a fresh
bank (the shipped built-in bank set aside, so there is work to distribute; `--builtin` consults it), once serially (one process, `workers=1`) and once with `cluster=` a `LocalCluster` of
--workers single-threaded worker processes on 127.0.0.1 (started once, its start-up reported apart).
Figures per configuration: `serial_s` / `cluster_s` wall time, `serial_cpu_s` (this process and its
children), `client_cpu_s` (this process during the cluster run), `worker_cpu_s` (CPU the workers
spent tuning, as they report it), `banks_equal` (byte-identical custom banks), `figures_equal` (the
result files' OPAT/SGAT objects), `cases_total` (per-model distinct cases summed over the models),
`cases_distinct` (sent after de-duplication across models and bank hits), `groups` (tasks).
`task_overhead_s` is the round trip of a no-op task on this cluster (an upper bound of the
scheduler's per-task cost); `overhead_share` = groups x task_overhead_s / worker_cpu_s (goal < 5%).
`estimate_100_workers` turns the measured per-case cost into cases per second for 100 workers.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import aoe
from aoe.batch import CaseFarm

MODELS = ["zoo:resnet50", "zoo:mobilenet_v2", "zoo:bert_base", "zoo:gpt2"]
CONFIGS = [("Ascend910B2", "op"), ("Ascend910A", "subgraph")]


def _cpu(children: bool = True) -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    t = r.ru_utime + r.ru_stime
    if children:
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        t += c.ru_utime + c.ru_stime
    return t


def _run(tmp: Path, soc: str, mode: str, budget: int, builtin: bool, cluster=None) -> tuple[list, float]:
    (tmp / "bank").mkdir(parents=True)
    (tmp / "work").mkdir()
    t0 = time.perf_counter()
    rs = aoe.tune_models(MODELS, mode, soc, bank=tmp / "bank", work_path=tmp / "work", env={},
                         options=aoe.TuneOptions(budget=budget, lock=False, workers=1, builtin=builtin),
                         cluster=cluster)
    return rs, time.perf_counter() - t0


def _banks(tmp: Path) -> dict[str, bytes]:
    root = tmp / "bank"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.json")) if p.is_file()}


def _noop() -> None:
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON object."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=2000, help="evaluations per case (AOE_SEARCH_BUDGET)")
    # the shipped built-in bank holds most zoo cases: with it on, almost nothing is left to distribute
    ap.add_argument("--builtin", action="store_true", help="consult the built-in bank (default: set aside)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    from job_bench import require_extra  # the bench folder's shared helper

    require_extra("dask", "distributed")
    import distributed

    out: dict = {"models": MODELS, "budget": args.budget, "workers": args.workers, "builtin": args.builtin}
    t0 = time.perf_counter()
    cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                                       host="127.0.0.1", dashboard_address=None)
    client = distributed.Client(cluster)
    out["cluster_start_s"] = round(time.perf_counter() - t0, 2)
    client.submit(_noop, pure=False).result()
    t0 = time.perf_counter()
    for _ in range(50):
        client.submit(_noop, pure=False).result()
    task_overhead = (time.perf_counter() - t0) / 50
    out["task_overhead_s"] = round(task_overhead, 5)
    try:
        for soc, mode in CONFIGS:
            with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
                c0 = _cpu()
                rs_serial, serial_s = _run(Path(a), soc, mode, args.budget, args.builtin)
                serial_cpu = _cpu() - c0
                farm = CaseFarm(client)
                c0 = _cpu(children=False)
                rs_cluster, cluster_s = _run(Path(b), soc, mode, args.budget, args.builtin, farm)
                client_cpu = _cpu(children=False) - c0
                st = farm.stats
                row = {"serial_s": round(serial_s, 2), "serial_cpu_s": round(serial_cpu, 2),
                       "cluster_s": round(cluster_s, 2), "client_cpu_s": round(client_cpu, 2),
                       "speedup": round(serial_s / cluster_s, 2),
                       "worker_cpu_s": round(st["worker_cpu_s"], 2),
                       "banks_equal": _banks(Path(a)) == _banks(Path(b)),
                       "figures_equal": [r.section for r in rs_serial] == [r.section for r in rs_cluster],
                       "cases_total": st["cases_total"], "cases_distinct": st["cases_distinct"],
                       "bank_hits": st["bank_hits"], "groups": st["groups"]}
                if st["sent"]:
                    row["dedup_gain"] = round(st["cases_total"] / max(1, st["cases_distinct"]), 2)
                    row["per_case_cpu_s"] = round(st["worker_cpu_s"] / st["sent"], 4)
                    row["overhead_share"] = round(st["groups"] * task_overhead / max(1e-9, st["worker_cpu_s"]), 4)
                    row["client_per_case_s"] = round(client_cpu / max(1, st["cases_total"]), 4)
                    g = st["sent"] / st["groups"]
                    per_case = row["per_case_cpu_s"] + task_overhead / g
                    row["estimate_100_workers"] = {
                        "group_size": round(g, 1),
                        "cluster_cases_per_s": round(100 / per_case, 1),
                        "client_cap_cases_per_s": round(1 / max(1e-9, row["client_per_case_s"]), 1)}
                out[f"{soc}_{mode}"] = row
    finally:
        client.close()
        cluster.close()
    out.update({"load_avg_1min": os.getloadavg()[0], "cpus": os.cpu_count(), "python": sys.version.split()[0],
                "date": time.strftime("%Y-%m-%d", time.gmtime())})
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
