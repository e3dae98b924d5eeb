"""See the tuning: the HTML report of a job (`aoe report`) and one operator explained (`aoe explain`).

    from aoe.report import write_report
    path = write_report("aoe_result_opat_<ts>_pid<pid>.json")

The report reads every figure from the run's record beside the result file (nothing is re-priced)
and draws with matplotlib, the optional extra `report` (`pip install 'aoe[report]'`).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..durable import atomic_replace
from ..errors import AoeError
from .data import ReportData, collect
from .record import RunRecord, read_record, repriced_record
from .explain import Explanation, explain_case, explain_graph_op, explain_recorded, explain_single_op


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


def write_report(result_file: str | os.PathLike[str], *, out: str | os.PathLike[str] | None = None,
                 task: str | None = None, record: RunRecord | None = None, settings: list[str] | None = None,
                 top: int = 8) -> Path:
    """Write the HTML report of one task of `result_file` from its run's record; returns its path.

    The record beside the result file (`<stem>.records.jsonl`) gives every figure; `record` replaces it
    (`repriced_record` for an old result file that has none). By default the report goes beside the
    result file, named like it with `.html` (a file holding several tasks, as `aoe.tune_models` writes,
    gets one report per task: `<name>.<task>.html`).
    """
    from .charts import require_matplotlib

    require_matplotlib()  # before reading anything: a missing extra fails at once
    data = collect(result_file, task=task, record=record, settings=settings)
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
    "explain_recorded",
    "explain_single_op",
    "read_record",
    "repriced_record",
    "report_available",
    "write_report",
]
