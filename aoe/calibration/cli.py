"""`aoe simulate --calibration`: the simulator against every public figure of the calibration data."""
from __future__ import annotations

import argparse
import json

from . import format_table, run, summary_json


def main(argv: list[str]) -> int:
    """Print the error table (Markdown), then the report as one JSON line."""
    p = argparse.ArgumentParser(prog="aoe simulate --calibration",
                                description="Compare the simulator with public Ascend figures (aoe.calibration).")
    p.add_argument("--calibration_data", action="append", default=None, metavar="DIR",
                   help="a directory of <source>.json files to read instead of the shipped ones (repeatable)")
    p.add_argument("--summary", action="store_true", help="print the per-source table and ranking, not every row")
    args = p.parse_args(argv)
    report = run(args.calibration_data)
    print(format_table(report, rows=not args.summary))
    print(json.dumps(summary_json(report)))
    return 0
