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
| `apply.py` | pricing under the banks (`price`, `apply_bank`), the `op_type` label, tune_ops selection |
"""
from .apply import apply_bank
from .graph_tune import OpatConfig, tune_graph
from .report import OpatReport, OpRecord
from .search import Budget, Measure, simulator_measure
from .tune import tune_op

__all__ = ["tune_op", "tune_graph", "OpatConfig", "OpatReport", "OpRecord", "Budget", "Measure",
           "simulator_measure", "apply_bank"]
