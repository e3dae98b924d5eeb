"""Batch tuning on a Dask cluster: the distinct operator cases and subgraph searches of many models run by
remote workers, the banks and result files written by the one client. See README.md.

    import aoe
    rs = aoe.tune_models(["zoo:resnet50", "zoo:bert_base"], bank="/data/banks", cluster="local:2")
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..opat.graph_tune import case_executor
from .connect import EXTRA_HINT, ClusterWarning, TlsFiles
from .farm import CaseFarm, FarmExecutor, job_key, run_group, run_subgraph_group
from .listfile import BatchLine, parse_list

__all__ = ["CaseFarm", "FarmExecutor", "BatchLine", "parse_list", "open_batch", "EXTRA_HINT", "job_key",
           "run_group", "run_subgraph_group", "TlsFiles", "ClusterWarning"]


@contextmanager
def open_batch(cluster: Any, *, progress: bool = False,
               out: Callable[[str], None] | None = None) -> Iterator[CaseFarm]:
    """A farm on `cluster` (Client, address, "local:N" or an open CaseFarm) set as OPAT's case executor
    and SGAT's subgraph executor for this context; on exit the touched operator banks are compacted and
    what was opened is closed."""
    from ..sgat.tune import subgraph_executor  # the module only; Numba loads with the first plan priced

    own = not isinstance(cluster, CaseFarm)
    farm = CaseFarm(cluster, progress=progress, out=out) if own else cluster
    token = case_executor.set(farm.executor)
    sg_token = subgraph_executor.set(farm)
    try:
        yield farm
    finally:
        subgraph_executor.reset(sg_token)
        case_executor.reset(token)
        try:
            farm.compact_banks()
        finally:
            if own:
                farm.close()
