"""Subgraph tuning (SGAT, AOE_MODE=1): which operators fuse into one kernel, how the fused kernels
tile, and what stays on chip — searched per subgraph against a Numba fusion evaluator.

    from aoe.sgat import tune_graph, apply_bank
    report = tune_graph(graph, "Ascend910A", bank_dir=path, repeat_tune=False, on_subgraph=print)
    report.to_result_section()          # the SPEC §4 "SGAT" object
    baseline_ms, with_bank_ms = apply_bank(graph, "Ascend910A", path)

Layers: `partition` (fusion regions) -> `model` (per-op costs from the C++ simulator, once) ->
`evaluator` (plans -> times, batched, nopython) -> `search` (dp / exhaustive / beam) -> `keys`
(repo_key, stored plan) -> `tune` (bank decision via aoe.bank.decision) -> `report`.
"""
from __future__ import annotations

from .evaluator import evaluate, unfused_plan
from .model import RegionData, region_data
from .partition import Subgraph, partition
from .report import SGAT_SECTION_SCHEMA, SgatReport, SubgraphRecord, improvement
from .search import SearchResult, search
from .tune import apply_bank, check_soc, prepare, tune_graph

__all__ = ["tune_graph", "apply_bank", "check_soc", "prepare", "SgatReport", "SubgraphRecord",
           "SGAT_SECTION_SCHEMA", "improvement", "partition", "Subgraph", "region_data", "RegionData",
           "evaluate", "unfused_plan", "search", "SearchResult"]
