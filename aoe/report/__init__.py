"""See the tuning: the HTML report of a job (`aoe report`) and one operator explained (`aoe explain`).

    from aoe.report import write_report
    path = write_report("aoe_result_opat_<ts>_pid<pid>.json", graph, "Ascend910B2", op_bank_dir=bank)

The report re-prices the model under the banks (the result file lists only the modified operators)
and draws with matplotlib, the optional extra `report` (`pip install 'aoe[report]'`).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..durable import atomic_replace
from ..errors import AoeError
from ..graph import Graph
from ..soc import Soc
from .data import ReportData, collect
from .explain import Explanation, explain_case, explain_graph_op, explain_single_op


def report_available() -> bool:
    """True when the report's plotting extra (matplotlib) is installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def build_report(data: ReportData, top: int = 8) -> str:
    """The HTML page of collected report data."""
    from .page import render

    return render(data, top=top)


def write_report(result_file: str | os.PathLike[str], graph: Graph, soc: Soc | str, *,
                 out: str | os.PathLike[str] | None = None, op_bank_dir: str | os.PathLike[str] | None = None,
                 subgraph_bank_dir: str | os.PathLike[str] | None = None, task: str | None = None,
                 model: str = "", settings: list[str] | None = None, top: int = 8) -> Path:
    """Write the HTML report of one task of `result_file`; returns its path.

    By default the report goes beside the result file, named like it with `.html` (a file holding
    several tasks, as `aoe.tune_models` writes, gets one report per task: `<name>.<task>.html`).
    """
    from .charts import require_matplotlib

    require_matplotlib()  # before any pricing: a missing extra fails at once
    data = collect(result_file, graph, soc, op_bank_dir=op_bank_dir, subgraph_bank_dir=subgraph_bank_dir,
                   task=task, model=model, settings=settings)
    rf = Path(result_file)
    if out is not None:
        path = Path(out)
    elif data.n_tasks > 1:
        path = rf.with_name(f"{rf.stem}.{data.task}.html")
    else:
        path = rf.with_suffix(".html")
    page = build_report(data, top).encode("utf-8")
    try:
        atomic_replace(path, page)
    except OSError as exc:
        raise AoeError(f"cannot write the report {path}: {exc.strerror or exc}") from None
    return path


__all__ = [
    "Explanation",
    "ReportData",
    "build_report",
    "collect",
    "explain_case",
    "explain_graph_op",
    "explain_single_op",
    "report_available",
    "write_report",
]
