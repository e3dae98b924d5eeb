"""Operator tuning (OPAT): Schedule, Format and Impl search on the simulated AI Core.

- `tune_op(op, soc=...)`: one operator (a simulator descriptor, a single-operator dict or a case).
- `tune_graph(graph, soc, bank_dir, OpatConfig(...))`: a whole graph, with the knowledge banks,
  driven by the tuner contract of `aoe.tuning` (events in, a live `OpatReport` out).
- `apply_bank(graph, soc, bank_dir)`: every operator priced with CANN's default and with the banks.

| file | what lives there |
|---|---|
| `space.py` | factored Schedule spaces (outer choices x inner staging), pruned by hard constraints |
| `search.py` | the batched drivers (exhaustive, beam with exact pruning, local search), `Budget`, `Measure` |
| `tune.py` | one case: Schedule, then Format, then Impl, the gain attributed to each kind |
| `graph_tune.py` | a graph: de-duplicated cases, bank lookups, the add/update/reserved/unsatisfied rule, workers |
| `report.py` | `OpRecord` (with its resume state), the live `OpatReport`, the result section and its schema |
| `apply.py` | pricing under the banks (`price`, `apply_bank`, `priced_cases` in the run record's form), the `op_type` label, tune_ops selection |
| `detail.py` | a case's kernels in detail as plain values (what the run's record keeps), descriptors to and from JSON |

The face below resolves a SoC name once (`load_soc`); the modules take the `Soc` value.
"""
from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

from ..graph import Graph
from ..ops import HIGH_PERFORMANCE
from ..soc import Soc, load_soc
from . import apply as _apply
from . import graph_tune as _graph_tune
from . import tune as _tune
from .apply import OpTime
from .graph_tune import OpatConfig
from .report import OpatReport, OpRecord
from .search import Budget, Measure, simulator_measure

# The package's face is a door of the Python API: a SoC given by name is resolved here, once; the
# modules inside take the `Soc` value (aoe/soc/README.md lists the doors).


def tune_graph(graph: Graph, soc: Soc | str, bank_dir: str | os.PathLike[str] | None = None,
               config: OpatConfig | None = None, **kw: Any) -> OpatReport:
    """Operator-tune `graph` on `soc` (a `Soc`, a name or an .ini path); see `aoe.opat.graph_tune.tune_graph`."""
    return _graph_tune.tune_graph(graph, load_soc(soc), bank_dir, config, **kw)


def tune_op(op: Any, soc: Soc | str = "Ascend910B2", kinds: Sequence[str] = _tune.KINDS, budget: Budget | None = None,
            measure: Measure | None = None, implmode: str = HIGH_PERFORMANCE, seed: int = 0,
            threads: int = 1) -> _tune.TuneResult:
    """Tune one operator: best strategy, before/after µs, the gain of each kind, evaluations spent."""
    return _tune.tune_op(op, load_soc(soc), kinds=kinds, budget=budget, measure=measure, implmode=implmode,
                         seed=seed, threads=threads)


def apply_bank(graph: Graph, soc: Soc | str, bank_dir: str | os.PathLike[str] | None, *, builtin: bool = True,
               memo: Any = None) -> tuple[list[OpTime], list[Mapping[str, str]]]:
    """Every operator priced with CANN's default and with the banks; see `aoe.opat.apply.apply_bank`."""
    return _apply.apply_bank(graph, load_soc(soc), bank_dir, builtin=builtin, memo=memo)


__all__ = ["tune_op", "tune_graph", "OpatConfig", "OpatReport", "OpRecord", "Budget", "Measure",
           "simulator_measure", "apply_bank"]
