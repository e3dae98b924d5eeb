"""`aoe bench search`: run the search benchmark, print the table, write JSON and plots."""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import AoeError


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="aoe bench search", description="Search strategies x cases x budgets: "
                                 "gap to the optimum, fraction within 1%, time per case.")
    ap.add_argument("--suite", default="zoo", help="zoo | random[:N[:SEED]] | a JSON list of operators")
    ap.add_argument("--budgets", default="200,2000,20000", help="evaluation budgets, comma separated")
    ap.add_argument("--strategies", default=None,
                    help="comma separated: aoe, aoe-beam, aoe-local, random, tpe, cmaes, gp, or entry-point names "
                         "(default: aoe,aoe-beam,aoe-local,random,tpe,cmaes)")
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--output", default="bench_search", help="directory for results.json and the plots")
    ap.add_argument("--no-plots", action="store_true", help="JSON and table only (no matplotlib needed)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no per-case progress on stderr")
    return ap


def main(argv: list[str]) -> int:
    """`aoe bench <what> ...`; only `search` exists."""
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: aoe bench search [options]   (run `aoe bench search --help`)")
        return 0
    if argv[0] != "search":
        raise AoeError(f"unknown benchmark {argv[0]!r}; the only one is `aoe bench search`")
    args = _parser().parse_args(argv[1:])
    try:
        budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    except ValueError as exc:
        raise AoeError(f"--budgets takes comma-separated integers, got {args.budgets!r}") from exc
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()] if args.strategies else None
    from .harness import run_search_bench

    say = None if args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    res = run_search_bench(args.suite, strategies, budgets, soc=args.soc, seed=args.seed, progress=say)
    os.makedirs(args.output, exist_ok=True)
    path = os.path.join(args.output, "results.json")
    res.save(path)
    print(res.table())
    print(f"wrote {path}")
    if not args.no_plots:
        from .plots import plot_results

        for p in plot_results(res, args.output):
            print(f"wrote {p}")
    return 0
