"""The `aoe` command: dispatches to sub-commands; user errors print one line, never a traceback."""
from __future__ import annotations

import importlib
import os
import sys
import warnings
from typing import Callable, Sequence

from .errors import AoeError
from .safetext import safe_text

# sub-command -> module with `main(argv: list[str]) -> int`
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "run": ("aoe.launch.cli", "run a training script unchanged, tuned on its first step: `AOE_MODE=2 aoe run -- python train.py`"),
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


# no option value of aoe's is near this: the largest --input_shape of a many-input model is a few KiB
MAX_ARG_BYTES = 64 * 1024


def check_arg_sizes(argv: Sequence[str]) -> None:
    """Refuse any argument over MAX_ARG_BYTES at once, naming its option (parsing one would take long)."""
    for i, a in enumerate(argv):
        n = len(a.encode("utf-8", "surrogateescape"))
        if n > MAX_ARG_BYTES:
            if a.startswith("--") and "=" in a:
                name = a.split("=", 1)[0]
            elif i > 0 and argv[i - 1].startswith("-"):
                name = argv[i - 1]
            else:
                name = f"argument {i + 1}"
            raise AoeError(f"{safe_text(name[:64])} is too long ({n} bytes; the limit is {MAX_ARG_BYTES}): "
                           f"give a shorter value (a file for long lists)")


def _usage() -> str:
    width = max(len(c) for c in SUBCOMMANDS)
    lines = [f"  {name:<{width}}  {desc}" for name, (_, desc) in SUBCOMMANDS.items()]
    return USAGE.format(commands="\n".join(lines))


def _is_job(argv: Sequence[str]) -> bool:
    """True when `argv` starts a tuning job rather than a sub-command."""
    return bool(argv) and argv[0] not in SUBCOMMANDS and any(
        a.split("=", 1)[0] in JOB_OPTIONS or (a.startswith("-m") and len(a) > 2)
        or (a.startswith("-j") and len(a) > 2) for a in argv)


class EarlySignals:
    """SIGINT/SIGTERM arriving before the job has its own handlers (while its modules are imported and
    the model is loaded): remembered, not fatal. The job's `StopFlag.install` takes the signal over
    (`aoe_early_signal`), so a job stopped in its first instants still writes "tuning incomplete"."""

    def __init__(self) -> None:
        self.aoe_early_signal: int | None = None
        self._prev: dict[int, object] = {}

    def __call__(self, signum: int, frame: object) -> None:
        if self.aoe_early_signal is not None:  # a second signal: stop at once
            raise KeyboardInterrupt
        self.aoe_early_signal = signum

    def install(self) -> None:
        """Take SIGINT/SIGTERM (main thread only: elsewhere the caller's handlers stay)."""
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for s in (signal.SIGINT, signal.SIGTERM):
                self._prev[s] = signal.signal(s, self)

    def restore(self) -> None:
        """Give SIGINT/SIGTERM back to the handlers they had (main() leaves no handler of its own behind)."""
        import signal

        for s, h in self._prev.items():
            signal.signal(s, h)  # type: ignore[arg-type]
        self._prev.clear()


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: object = None, line: str | None = None, *, _default: Callable[..., None] = warnings.showwarning
                  ) -> None:
    """aoe's own warnings (BankWarning, ...) as one line, `aoe: warning: ...`, without the Python source
    line the default format prints under it (it looks like a traceback); other warnings as usual."""
    if getattr(category, "__module__", "").startswith("aoe."):
        try:
            print(f"aoe: warning: {safe_text(message, keep_newlines=True)}", file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        return
    _default(message, category, filename, lineno, file, line)


def stdout_closed() -> bool:
    """Whether the reader of this process's stdout is gone (`aoe ... | head` after head exited).

    A pipe or socket whose reading end is closed polls as POLLERR (Linux, macOS); a terminal or file
    never does. Only then is a BrokenPipeError a quiet exit: any other broken pipe is an error.
    """
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, OSError, ValueError):
        return False


def _resolve(argv: Sequence[str]) -> tuple[Callable[[list[str]], int] | None, list[str]]:
    if argv and argv[0] == "simulate" and "--calibration" in argv[1:]:
        # the simulator's error table sits above the tuners (it prices tuned figures), not in aoe.sim
        from .calibration.cli import main as calibration_main

        return calibration_main, [a for a in argv[1:] if a != "--calibration"]
    if argv and argv[0] in SUBCOMMANDS:
        mod_name, _, func = SUBCOMMANDS[argv[0]][0].partition(":")
        module = importlib.import_module(mod_name)
        return getattr(module, func or "main"), list(argv[1:])
    if _is_job(argv):
        from .job.cli import main as job_main

        return job_main, list(argv)
    return None, list(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `aoe` console script; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    early = EarlySignals()
    if _is_job(args):
        early.install()  # before the job's modules are even imported
    try:
        check_arg_sizes(args)
        handler, rest = _resolve(args)
        if handler is None:
            if not args or args[0] in ("-h", "--help"):
                print(_usage())
                if args:
                    from .job.cli import job_parser

                    print("the tuning job\n==============\n" + job_parser().format_help())
                return 0
            raise AoeError(f"unknown command {args[0]!r}; run `aoe --help` for the list of commands")
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return int(handler(rest) or 0)
    except AoeError as exc:
        print(f"aoe: error: {safe_text(exc, keep_newlines=True)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("aoe: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        if not stdout_closed():  # another pipe (a worker's, a subprocess's): an error like any other
            raise
        # output piped into `head` and the like: not an error of ours
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        except OSError:
            pass
        return 0
    finally:
        early.restore()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
