"""Subgraph tuning (SGAT, AOE_MODE=1): which operators fuse into one kernel, how the fused kernels
tile, and what stays on chip — searched per subgraph against a Numba-compiled fusion evaluator.

    from aoe.sgat import SgatConfig, apply_bank, tune_graph
    report = tune_graph(graph, "Ascend910A", path, SgatConfig(repeat_tune=False))
    report.to_result_section()          # the result file's "SGAT" object (baseline: default fusion)
    default_ms, with_bank_ms, unfused_ms = apply_bank(graph, "Ascend910A", path)

Layers: `partition` (fusion regions) -> `model` (per-op costs from the C++ simulator, once) ->
`evaluator` (plans -> times, batched, Numba: loaded on the first plan priced) -> `default_fusion`
(the compiler's own fusion: the baseline plan) -> `search` (dp / exhaustive / beam) -> `keys`
(repo_key, stored plan) -> `tune` (bank decision via aoe.bank.decision; the tuner contract of
`aoe.tuning`) -> `report`.
"""
from __future__ import annotations

from .report import SGAT_SECTION_SCHEMA, SgatReport, SubgraphRecord
from .tune import BankTimes, SgatConfig, apply_bank, check_soc, prepare, priced_subgraphs, tune_graph

__all__ = ["tune_graph", "SgatConfig", "apply_bank", "priced_subgraphs", "BankTimes", "check_soc", "prepare", "SgatReport",
           "SubgraphRecord", "SGAT_SECTION_SCHEMA"]
