"""The simulator against every public Ascend figure of bench/calibration/data (prints a table, then JSON).

    python bench/calibration/run.py                  # this checkout's data files (every *.json)
    python bench/calibration/run.py --data DIR ...   # other data directories
    python bench/calibration/run.py --json-only      # one JSON line (what the README's table was printed from)

Each row: the public figure, aoe's figure for the same operator, shape, dtype, format and SoC, and the
relative error (aoe / public - 1); then per source and operator family the median and worst |error|, and
every pair of variants of one operator (`group`) with the order the source and aoe give them.
`aoe simulate --calibration` prints the same from the data shipped inside the package.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from aoe import calibration

DATA = Path(__file__).resolve().parent / "data"


def main(argv: list[str] | None = None) -> int:
    """Run the calibration and print it."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", action="append", default=None, help="a directory of <source>.json files")
    ap.add_argument("--json-only", action="store_true", help="print only the JSON line")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/: its shared helpers
    from job_bench import machine

    t0, c0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    report = calibration.run(args.data or [DATA])
    c1 = resource.getrusage(resource.RUSAGE_SELF)
    if not args.json_only:
        print(calibration.format_table(report))
    out = {"bench": "calibration", **machine(), "wall_s": round(time.perf_counter() - t0, 2),
           "cpu_s": round(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime, 2),
           **calibration.summary_json(report)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
