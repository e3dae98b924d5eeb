"""`aoe batch LIST_FILE --scheduler ADDR`: tune a list of models with their operator cases and subgraph
searches on a Dask cluster.

The entrance of `aoe.batch` (it sits beside `aoe/cli.py` because it drives the job package, which in
turn uses `aoe.batch`). Lines run in file order; consecutive lines with the same job type, SoC and
training flag form one `aoe.tune_models` call (one result file, one report key per model). Before the
first line runs, every line's bank misses (OPAT cases, SGAT subgraphs) are sent to the cluster, so the
workers are busy with the whole batch while the client writes results in order.
"""
from __future__ import annotations

import argparse
import os
import sys
from itertools import groupby
from typing import Any

from .batch import CaseFarm, TlsFiles, open_batch
from .batch.listfile import load_list
from .safetext import safe_text
from .job.api import TuneOptions, tune_models
from .job.run import load_graph
from .job.settings import JobSpec, settings_from_env
from .tuning import SUCCESS

EPILOG = """list file: one model per line with its own options, e.g.
  zoo:resnet50 --training --input_shape input:32,3,224,224
  models/bert.onnx --soc_version Ascend910A --job_type 1
(--job_type 1|2, default 2; --soc_version, default Ascend910B2; --input_shape; --training; # comments)

banks: TUNE_BANK_PATH / ASCEND_CACHE_PATH / $HOME as for `aoe` (or --tune_bank_path); written by this
process only. Result files: in the work path, one per run of consecutive lines with the same job type,
SoC and training flag. Interrupted? Run the same command with --reload.
exit codes: 0 all successful, 1 some model failed or is incomplete, 2 usage/environment error,
130/143 interrupted."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aoe batch", description=__doc__.split("\n\n")[0], epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("list_file", help="the models, one per line")
    p.add_argument("--scheduler", default="local:2",
                   help="Dask scheduler address (tls://host:8786, tcp://host:8786) or local:N: a TLS cluster "
                        "on this machine (default local:2)")
    p.add_argument("--tls_ca_file", default=None, help="tls:// scheduler: the CA certificate (PEM); default "
                   "Dask's config distributed.comm.tls.ca-file")
    p.add_argument("--tls_cert", default=None, help="tls:// scheduler: this client's certificate (PEM); "
                   "default distributed.comm.tls.client.cert")
    p.add_argument("--tls_key", default=None, help="tls:// scheduler: this client's private key (PEM); "
                   "default distributed.comm.tls.client.key")
    p.add_argument("--work_path", default=None, help="where result files go (default as for aoe)")
    p.add_argument("--tune_bank_path", default=None, help="the bank root (overrides TUNE_BANK_PATH)")
    p.add_argument("--reload", action="store_true", help="continue an interrupted batch")
    p.add_argument("--search_budget", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--device", type=int, default=None, help="the simulated device locked for the batch")
    p.add_argument("--progress_bar", choices=("on", "off"), default="on")
    return p


def main(argv: list[str]) -> int:
    """Entry point of `aoe batch`; returns the exit code (AoeError is reported by aoe.cli)."""
    args = _parser().parse_args(argv)
    lines = load_list(args.list_file)
    env: dict[str, str] = dict(os.environ)
    if args.tune_bank_path is not None:
        env["TUNE_BANK_PATH"] = args.tune_bank_path
    opts = TuneOptions(budget=args.search_budget, device=args.device, reload=args.reload,
                       progress=args.progress_bar == "on", verbose=True)
    say = (lambda s: print(safe_text(s, keep_newlines=True), file=sys.stderr, flush=True))
    results: list[Any] = []
    tls = TlsFiles(args.tls_ca_file, args.tls_cert, args.tls_key)
    with CaseFarm(args.scheduler, progress=opts.progress, out=say, tls=tls) as farm:
        with open_batch(farm):  # prefetch every line before the first one runs
            for line in lines:
                settings = settings_from_env(env, soc=line.soc, mode=line.mode, work_path=args.work_path,
                                             budget=args.search_budget, progress=False, lock=False)
                spec = JobSpec(mode=line.mode, model=line.model, input_shape=line.input_shape,
                               training=line.training, soc=line.soc)
                farm.prefetch_specs([spec], settings, load_graph, keep=True)
            farm.flush()
            for (mode, soc, training), run in groupby(lines, key=lambda x: (x.mode, x.soc, x.training)):
                run = list(run)
                rs = tune_models([x.model for x in run], mode, soc, work_path=args.work_path,
                                 input_shape=[x.input_shape for x in run], training=training,
                                 options=opts, env=env, cluster=farm)
                results += rs
                for r in rs:   # one line per model as its run ends: which file holds its result
                    summary = (r.section or {}).get("repo_summary") or {}
                    counts = (f"; cases {summary.get('total_num', 0)}, added {summary.get('repo_add_num', 0)}, "
                              f"hits {summary.get('repo_hit_num', 0)}") if summary else ""
                    say(f"batch: {r.tuning_name} ({r.kind.upper()}, {soc}): {r.status}{counts}; "
                        f"result file {r.result_file}")
                if any(r.signal is not None for r in rs):
                    return 128 + next(r.signal for r in rs if r.signal is not None)
    n_ok = sum(r.status == SUCCESS for r in results)
    st = farm.stats
    say(f"batch: {n_ok} of {len(results)} models tuned successfully; {st['cases_distinct']} "
        f"distinct cases sent of {st['cases_total']} (bank hits {st['bank_hits']})"
        + (f"; {st['subgraphs_distinct']} distinct subgraphs sent of {st['subgraphs_total']} (bank hits "
           f"{st['subgraph_hits']})" if st["subgraphs_total"] else "")
        + (f"; {st['groups']} tasks, {st['worker_cpu_s']:.2f} CPU s in the workers' tasks" if st["groups"] else ""))
    return 0 if n_ok == len(results) == len(lines) else 1
