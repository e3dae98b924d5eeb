"""Operator tuning (OPAT): Schedule, Format and Impl search on the simulated AI Core.

- `tune_op(op, soc=...)`: one operator (a graph operator case or a simulator descriptor).
- `tune_graph(graph, soc, bank_dir)`: a whole graph, with the knowledge banks (SPEC §3).
"""
from .graph_tune import FAILED, INCOMPLETE, SUCCESS, OpatReport, OpRecord, improvement, price, select_ops, tune_graph
from .search import Budget, Measure, SearchResult, beam, exhaustive, random_search, search, simulator_measure
from .space import FactoredSpace, space_for
from .tune import KINDS, KindGain, TuneResult, case_for, tune_case, tune_op

__all__ = ["tune_graph", "tune_case", "tune_op", "case_for", "OpatReport", "OpRecord", "TuneResult", "KindGain", "KINDS", "Budget",
           "Measure", "SearchResult", "search", "beam", "exhaustive", "random_search", "simulator_measure",
           "FactoredSpace", "space_for", "price", "select_ops", "improvement", "SUCCESS", "FAILED", "INCOMPLETE"]
