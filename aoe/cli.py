"""The `aoe` command: dispatches to sub-commands; user errors print one line, never a traceback."""
from __future__ import annotations

import importlib
import os
import sys
from typing import Callable, Sequence

from .errors import AoeError
from .safetext import safe_text

# sub-command -> module with `main(argv: list[str]) -> int`
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("aoe.sim.cli", "price one operator strategy on the simulated AI Core"),
    "graph": ("aoe.ops.coverage:graph_main", "import a model and print its operator summary"),
    "bank": ("aoe.bank.cli", "inspect, export, import and verify knowledge banks"),
    "batch": ("aoe.batch_cli", "tune a list of models on a Dask cluster: `aoe batch LIST --scheduler tcp://host:8786`"),
    "verify": ("aoe.job.cli:verify_main", "compare a model's simulated time with default strategies vs. the banks"),
    "bench": ("aoe.benchmark.cli", "benchmark search strategies: `aoe bench search --suite zoo --budgets 200,2000`"),
    "report": ("aoe.report.cli:report_main", "write the HTML report of a tuning job's result file"),
    "explain": ("aoe.report.cli:explain_main", "one operator's default vs tuned strategy, pipe by pipe"),
}

USAGE = """usage: aoe --model/-m MODEL --job_type/-j 1|2 [options]     tune a model (the AOE job)
       aoe <command> [options]

tuning:
  aoe -m zoo:resnet50 -j 2                      operator tuning (OPAT) of a bundled model
  aoe -m model.onnx -j 1 --soc_version Ascend910A   subgraph tuning (SGAT)
  AOE_MODE=2 aoe -m model.onnx                  the job type from the environment

commands:
{commands}

Run `aoe <command> --help` for the options of one command.
"""

# options that start a tuning job (`aoe -m MODEL -j 2 ...`) rather than a sub-command
JOB_OPTIONS = ("-m", "--model", "-j", "--job_type", "--singleop", "-f", "--framework", "--soc_version",
               "--input_shape", "--training", "--output", "--tune_ops_file", "--device", "--reload",
               "--progress_bar", "--work_path", "--config", "--compute_dtype", "--summary_top",
               "--report")


def _usage() -> str:
    width = max(len(c) for c in SUBCOMMANDS)
    lines = [f"  {name:<{width}}  {desc}" for name, (_, desc) in SUBCOMMANDS.items()]
    return USAGE.format(commands="\n".join(lines))


def _resolve(argv: Sequence[str]) -> tuple[Callable[[list[str]], int] | None, list[str]]:
    if argv and argv[0] in SUBCOMMANDS:
        mod_name, _, func = SUBCOMMANDS[argv[0]][0].partition(":")
        module = importlib.import_module(mod_name)
        return getattr(module, func or "main"), list(argv[1:])
    if argv and any(a.split("=", 1)[0] in JOB_OPTIONS or (a.startswith("-m") and len(a) > 2)
                    or (a.startswith("-j") and len(a) > 2) for a in argv):
        from .job.cli import main as job_main

        return job_main, list(argv)
    return None, list(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `aoe` console script; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        handler, rest = _resolve(args)
        if handler is None:
            if not args or args[0] in ("-h", "--help"):
                print(_usage())
                if args:
                    from .job.cli import job_parser

                    print("the tuning job\n==============\n" + job_parser().format_help())
                return 0
            raise AoeError(f"unknown command {args[0]!r}; run `aoe --help` for the list of commands")
        return int(handler(rest) or 0)
    except AoeError as exc:
        print(f"aoe: error: {safe_text(exc, keep_newlines=True)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aoe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
