"""Benchmarks of Schedule-search strategies: strategies x a suite of cases x evaluation budgets.

`run_search_bench(suite, strategies, budgets, ...) -> Results`; `Results.to_json()` / `.table()`;
`plot_results(results, out_dir)` (matplotlib, extra `bench`). The CLI is `aoe bench search`.
See README.md for the file table.
"""
from .harness import Results, run_search_bench
from .plots import plot_results
from .strategies import ENTRY_POINT_GROUP, Strategy
from .suites import Case, load_suite

__all__ = ["ENTRY_POINT_GROUP", "Case", "Results", "Strategy", "load_suite", "plot_results", "run_search_bench"]
