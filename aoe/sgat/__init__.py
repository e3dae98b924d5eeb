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
import os
from typing import Any

from ..graph.ir import Graph
from ..soc import Soc, load_soc
from . import tune as _tune
from .tune import BankTimes, SgatConfig, check_soc, prepare, priced_subgraphs

# The package's face is a door of the Python API: a SoC given by name is resolved here, once; the
# modules inside take the `Soc` value (aoe/soc/README.md lists the doors).


def tune_graph(graph: Graph, soc: Soc | str, bank_dir: str | os.PathLike[str] | None = None,
               config: SgatConfig | None = None, **kw: Any) -> SgatReport:
    """Subgraph-tune `graph` on `soc` (a `Soc`, a name or an .ini path); see `aoe.sgat.tune.tune_graph`."""
    return _tune.tune_graph(graph, load_soc(soc), bank_dir, config, **kw)


def apply_bank(graph: Graph, soc: Soc | str, bank_dir: str | os.PathLike[str], *, builtin: bool = True) -> BankTimes:
    """The graph's times with the default fusion and with the subgraph bank; see `aoe.sgat.tune.apply_bank`."""
    return _tune.apply_bank(graph, load_soc(soc), bank_dir, builtin=builtin)


__all__ = ["tune_graph", "SgatConfig", "apply_bank", "priced_subgraphs", "BankTimes", "check_soc", "prepare", "SgatReport",
           "SubgraphRecord", "SGAT_SECTION_SCHEMA"]
