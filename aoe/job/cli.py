"""`aoe --model MODEL --job_type 1|2 ...` (the tuning job) and `aoe verify -m MODEL`."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from typing import Any

from ..errors import AoeError
from ..safetext import safe_text
from ..graph.loader import framework_name
from . import config as cfg

DEFAULT_SOC = "Ascend910B2"

DESCRIPTION = f"""Tune a model on the simulated Ascend AI Core, like Huawei's AOE.

  job type 2 = operator tuning (OPAT): Schedule (tiling), Format and Impl of every operator;
               strategies go to the custom operator bank, results to aoe_result_opat_*.json
  job type 1 = subgraph tuning (SGAT): fusion boundaries and tiling of fused kernels; results to
               aoe_result_sgat_*.json. Not supported on Ascend910B*/Ascend910_93 (Atlas A2/A3):
               use --soc_version Ascend910A or Ascend310P3.

The default SoC is {DEFAULT_SOC}. AOE recommends subgraph tuning first, then operator tuning."""

EPILOG = """examples:
  aoe -m zoo:resnet50 -j 2                                  # operator-tune ResNet-50 (batch 1)
  aoe -m zoo:bert_base -j 2 --training --input_shape "input_ids:8,128;attention_mask:8,128"
  aoe -m model.onnx -j 1 --soc_version Ascend910A --input_shape "input:8,3,224,224"
  aoe -m zoo:mobilenet_v2 -j 2 --tune_ops_file ops.json     # {"tune_ops_type": ["Conv2D"]}
  aoe --singleop ops.json -j 2                              # single operators (see aoe/graph/README.md)
  AOE_MODE=2 TUNE_BANK_PATH=$PWD/bank aoe -m zoo:gpt2       # driven by the environment
  aoe -m zoo:resnet50 -j 2 --reload                         # resume an interrupted job
  aoe verify -m zoo:resnet50                                # default strategies vs. the tuned banks

environment (a bad value is an error):
  AOE_MODE              1 or 2; required when --job_type is not given
  ASCEND_DEVICE_ID      simulated device id, 0..N-1 (default 0); one tuning job per device
  AOE_DEVICE_COUNT      N, the number of simulated devices (default 8)
  TUNE_BANK_PATH        custom bank root: operator bank in <it>/<soc>/, subgraph bank in <it>/;
                        must be an existing directory with rwx permission
  ASCEND_CACHE_PATH     used when TUNE_BANK_PATH is unset: <it>/aoe_data[/<soc>]
                        (neither set: $HOME/Ascend/latest/data/aoe/custom/{op,graph}/<soc>)
  ASCEND_WORK_PATH      where result files go (--work_path wins; default: the working directory)
  TE_PARALLEL_COMPILER  simulator threads, 1..32 (default 8), capped at CPU cores x 80% / N
  REPEAT_TUNE           True re-tunes cases already in a bank (default False: they are hits)
  AOE_SEARCH_BUDGET     strategy evaluations per operator case (default 100000; small for tests)
  AOE_LOCK_DIR          where device locks live (default $TMPDIR/aoe-devices)
  AOE_STOP_GRACE        seconds the current operator may take after Ctrl-C/SIGTERM (default 10)
  AOE_CONFIG            the aoe.ini to read when --config is not given

config file (--config FILE, else $AOE_CONFIG, else ./aoe.ini), INI syntax:
  [tuning]
  tuning_parallel_num = 8       # TUNING_PARALLEL_NUM, 1..64: operators tuned at once in worker
                                # processes (capped at the CPU count; results identical to 1)
  work_path = results           # like --work_path (below ASCEND_WORK_PATH in priority)
  aoe_config_file = ops.json    # like --tune_ops_file

exit codes: 0 tuning successful, 1 tuning failed (some operators) or incomplete, 2 usage or
environment error, 130 / 143 interrupted by SIGINT / SIGTERM (the result file says
"tuning incomplete"; --reload continues it)."""



class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise AoeError(f"{message}; run `{self.prog} --help` for usage")


def job_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="aoe", description=DESCRIPTION, epilog=EPILOG,
                formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("-m", "--model", metavar="MODEL",
                   help="the model: an .onnx file, a .json graph (`aoe graph --json --full`), or a bundled "
                        "model zoo:resnet50 | zoo:bert_base | zoo:mobilenet_v2 | zoo:gpt2")
    p.add_argument("-j", "--job_type", metavar="{1,2}",
                   help="1 = subgraph tuning (SGAT), 2 = operator tuning (OPAT); default: $AOE_MODE")
    p.add_argument("-f", "--framework", metavar="FW",
                   help="5 = ONNX (also zoo models), 3 = TensorFlow (a SavedModel directory or a frozen .pb; "
                        "needs the tensorflow extra), json = the project's JSON graph (default: from the file)")
    p.add_argument("--soc_version", default=DEFAULT_SOC,
                   help=f"simulated SoC, or a path to a CANN platform .ini (default {DEFAULT_SOC})")
    p.add_argument("--input_shape", metavar="SHAPES", help='static input shapes: "name1:d0,d1;name2:d0,d1"')
    p.add_argument("--training", action="store_true",
                   help="tune the training graph (forward, backward, Adam updates)")
    p.add_argument("--compute_dtype", choices=["float16", "float32"], default="float16",
                   help="dtype fp32 tensors compute in (default float16)")
    p.add_argument("--output", metavar="PATH",
                   help="also write the tuned model: the graph with each operator's strategy source and "
                        "simulated time (JSON; a directory gets <name>_tuned.json)")
    p.add_argument("--tune_ops_file", metavar="FILE",
                   help='tune only these operators: {"tune_ops_name": [...], "tune_ops_type": [...]} (a union; '
                        "fused operators containing a listed type count; with -j 1, the subgraphs holding them)")
    p.add_argument("--op_select_implmode", metavar="MODE", default=None,
                   help="high_performance (default): Impl tuning may choose any implementation; high_precision: "
                        "none that changes the rounding (split-K, atomic multi-core reductions, fp16 GEMV)")
    p.add_argument("--device", metavar="ID", help="simulated device id (default $ASCEND_DEVICE_ID or 0)")
    p.add_argument("--reload", action="store_true",
                   help="resume the latest interrupted job of this model in the work path")
    p.add_argument("--progress_bar", choices=["on", "off"], default="on",
                   help="progress bar on stderr when it is a terminal (default on)")
    p.add_argument("--singleop", metavar="FILE", help="tune the single operators described in FILE (job type 2)")
    p.add_argument("--work_path", metavar="DIR", help="where result files go (default $ASCEND_WORK_PATH or .)")
    p.add_argument("--config", metavar="FILE", help="the aoe.ini file (default $AOE_CONFIG or ./aoe.ini)")
    p.add_argument("--report", choices=["on", "off"], default=None,
                   help="write the HTML report beside the result file (default: on when the report extra, "
                        "matplotlib, is installed)")
    p.add_argument("--summary_top", type=int, default=10, metavar="N",
                   help="operators shown in the final summary (default 10)")
    p.add_argument("--no_builtin", action="store_true",
                   help="consult only the custom bank, not the shipped built-in banks (also AOE_BUILTIN_BANK=off)")
    p.add_argument("--search_budget", type=int, default=None, help=argparse.SUPPRESS)
    return p


def _print(line: str) -> None:
    print(safe_text(line, keep_newlines=True), flush=True)


def main(argv: list[str]) -> int:
    """`aoe -m MODEL -j 1|2 ...`: run one tuning job; returns the exit code."""
    from .run import JobSpec, run_job, settings_from_env  # lazily: `aoe --help` must not load the tuners

    args = job_parser().parse_args(argv)
    env = os.environ
    if args.job_type is not None:
        mode = cfg.parse_mode(args.job_type, "--job_type")
        if str(args.job_type).strip() not in ("1", "2"):
            raise AoeError(f"--job_type {args.job_type!r} is not valid; use 1 (subgraph) or 2 (operator)")
    else:
        mode = cfg.env_mode(env)
    if not args.model and not args.singleop:
        raise AoeError("no model given: pass --model/-m MODEL (an .onnx file, a .json graph or zoo:NAME) or "
                       "--singleop FILE; run `aoe --help` for examples")
    if args.model and args.singleop:
        raise AoeError("pass either --model or --singleop, not both")
    framework = framework_name(args.framework)  # a bad value fails before anything is loaded
    if args.summary_top < 0:
        raise AoeError("--summary_top must be 0 or more")
    tune_ops = cfg.load_tune_ops(args.tune_ops_file) if args.tune_ops_file else None
    settings = settings_from_env(env, soc=args.soc_version, mode=mode, device=args.device,
                                 work_path=args.work_path, config=args.config, budget=args.search_budget,
                                 builtin=False if args.no_builtin else None,
                                 progress=args.progress_bar == "on", reload=args.reload,
                                 implmode=args.op_select_implmode)
    if tune_ops is None and settings.tune_ops_file:
        p = settings.tune_ops_file
        if not os.path.isabs(p) and settings.config_path is not None:
            p = os.path.join(os.path.dirname(settings.config_path), p)
        tune_ops = cfg.load_tune_ops(p)
    if args.singleop:
        model, framework = args.singleop, "singleop"
    else:
        model = args.model
    spec = JobSpec(mode=mode, model=model, framework=framework, input_shape=args.input_shape,
                   training=args.training, soc=args.soc_version, tune_ops=tune_ops,
                   compute_dtype=args.compute_dtype, output=args.output)
    if args.report == "on":
        from ..report.charts import require_matplotlib  # the extra is missing: fail before tuning

        require_matplotlib()
    result = run_job(spec, settings, out=_print, report_html={"on": True, "off": False}.get(args.report))
    _print("")
    for line in result.summary_lines(args.summary_top):
        _print(line)
    if result.signal is not None:
        name = signal.Signals(result.signal).name
        print(f"aoe: tuning interrupted by {name}; {result.result_file.name} says \"tuning incomplete\"; "
              f"run the same command with --reload to continue", file=sys.stderr, flush=True)
    return result.exit_code


# --- aoe verify --------------------------------------------------------------------------------

VERIFY_EPILOG = """The model is compiled twice on the simulated AI Core: with CANN's default strategies and
with the knowledge banks (custom bank, then built-in bank, then default; -j 1: the subgraph bank's
fusion plans). The banks are read afresh every time, so a newly tuned entry is always used: unlike
real CANN there is no compile cache to refresh, and --op_compiler_cache_mode (enable | disable |
force) is accepted for compatibility (force also clears the in-process kernel-time memo, which is
keyed by the strategy itself and so can never return a stale time).

examples:
  aoe verify -m zoo:resnet50
  TUNE_BANK_PATH=$PWD/bank aoe verify -m zoo:bert_base --training --all
  aoe verify -m zoo:mobilenet_v2 -j 1 --soc_version Ascend910A --json"""


def verify_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="aoe verify", description="Check the speed-up of a tuned model: default strategies vs. the banks.",
                epilog=VERIFY_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    p.add_argument("-m", "--model", metavar="MODEL", help="an .onnx file, a .json graph, or zoo:NAME")
    p.add_argument("--singleop", metavar="FILE", help="verify the single operators described in FILE")
    p.add_argument("-j", "--job_type", default="2", metavar="{1,2}",
                   help="2 = the operator bank (default), 1 = the subgraph bank")
    p.add_argument("--soc_version", default=DEFAULT_SOC, help=f"simulated SoC (default {DEFAULT_SOC})")
    p.add_argument("--input_shape", metavar="SHAPES", help='static input shapes: "name1:d0,d1;name2:d0,d1"')
    p.add_argument("--training", action="store_true", help="the training graph")
    p.add_argument("--compute_dtype", choices=["float16", "float32"], default="float16")
    p.add_argument("--tune_bank_path", metavar="DIR", help="use DIR as TUNE_BANK_PATH")
    p.add_argument("--op_compiler_cache_mode", default="enable", metavar="MODE",
                   help="enable | disable | force (accepted; no cache can hide new bank entries)")
    p.add_argument("--no_builtin", action="store_true", help="ignore the built-in bank (custom bank only)")
    p.add_argument("--top", type=int, default=20, metavar="N", help="operators listed (default 20)")
    p.add_argument("--all", action="store_true", help="list every operator")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--result", metavar="RESULT_FILE",
                   help="also say where these figures differ from that job's run record, and why")
    return p


def verify_main(argv: list[str]) -> int:
    """`aoe verify`: print per-operator and whole-model simulated times, default vs. banks."""
    from .api import verify  # lazily: `aoe --help` must not load the tuners

    args = verify_parser().parse_args(argv)
    mode = cfg.parse_mode(args.job_type, "--job_type")
    if not args.model and not args.singleop:
        raise AoeError("no model given: pass --model/-m MODEL or --singleop FILE")
    if args.model and args.singleop:
        raise AoeError("pass either --model or --singleop, not both")
    if args.top < 0:
        raise AoeError("--top must be 0 or more")
    rep = verify(args.singleop or args.model, mode=mode, soc=args.soc_version, bank=args.tune_bank_path,
                 input_shape=args.input_shape, training=args.training,
                 framework="singleop" if args.singleop else None,
                 cache_mode=args.op_compiler_cache_mode, builtin=not args.no_builtin,
                 compute_dtype=args.compute_dtype, result=args.result)
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        for line in rep.lines(top=args.top, all_ops=args.all):
            print(safe_text(line))
    return 0
