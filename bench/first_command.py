"""The cost of the README's first command: a cold OPAT job of the bundled ResNet-50 training graph.

    python bench/first_command.py

Runs `aoe -m zoo:resnet50 -j 2 --training --no_builtin` (the zoo's batch 1, default budget, a fresh
empty custom bank, its HTML report written as the job writes it by default) as a separate process
and prints one JSON line with the CPU seconds of the whole process tree (the job, its fork server and
workers) beside wall time, as `job_bench.py` measures them.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from job_bench import _aoe, _become_subreaper, _env, _latest, machine, run_timed


def main() -> None:
    """Run the command once in a temporary bank and work path and print the figures."""
    whole_tree = _become_subreaper()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        work = root / "first"
        env = _env(work, root, None)
        out = run_timed(_aoe("-m", "zoo:resnet50", "-j", "2", "--training", "--no_builtin", "--progress_bar", "off"),
                        work, env)
        report = sorted(work.glob("aoe_result_opat_*.html"))
        print(json.dumps({"bench": "first_command", **machine(), "whole_tree_cpu": whole_tree,
                          "command": "aoe -m zoo:resnet50 -j 2 --training --no_builtin", **out,
                          **_latest(work, "opat"), "html_report": bool(report)}))


if __name__ == "__main__":
    sys.exit(main())
