"""The `aoe` command: dispatches to sub-commands; user errors print one line, never a traceback."""
from __future__ import annotations

import importlib
import os
import sys
from typing import Callable, Sequence

from .errors import AoeError

# sub-command -> module with `main(argv: list[str]) -> int`
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("aoe.sim.cli", "price one operator strategy on the simulated AI Core"),
    "graph": ("aoe.graph.cli", "import a model and print its operator summary"),
    "bank": ("aoe.bank.cli", "inspect, export, import and verify knowledge banks"),
}

USAGE = """usage: aoe <command> [options]

commands:
{commands}

Run `aoe <command> --help` for the options of one command.
"""


def _usage() -> str:
    width = max(len(c) for c in SUBCOMMANDS)
    lines = [f"  {name:<{width}}  {desc}" for name, (_, desc) in SUBCOMMANDS.items()]
    return USAGE.format(commands="\n".join(lines))


def _resolve(argv: Sequence[str]) -> tuple[Callable[[list[str]], int] | None, list[str]]:
    if argv and argv[0] in SUBCOMMANDS:
        module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
        return module.main, list(argv[1:])
    return None, list(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `aoe` console script; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        handler, rest = _resolve(args)
        if handler is None:
            if not args or args[0] in ("-h", "--help"):
                print(_usage())
                return 0
            raise AoeError(f"unknown command {args[0]!r}; run `aoe --help` for the list of commands")
        return int(handler(rest) or 0)
    except AoeError as exc:
        print(f"aoe: error: {exc}", file=sys.stderr)
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
