"""What the frontend benches share: CPU time of this process and its children, and one timed tuning job."""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cpu() -> float:
    """CPU seconds of this process and of its tuning workers (under their fork server, see job_bench)."""
    from job_bench import process_tree_cpu  # bench/ is the script's directory

    return process_tree_cpu()


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """fn's result, wall seconds and CPU seconds."""
    w, c = time.perf_counter(), cpu()
    out = fn()
    return out, round(time.perf_counter() - w, 2), round(cpu() - c, 2)


def tune(graph_or_model: Any, bank: Path, work: Path, budget: int, **kw: Any) -> dict[str, Any]:
    """One operator-tuning job into `bank`, the shipped built-in bank set aside (cold means tuned)."""
    import aoe
    from aoe.job.api import TuneOptions

    r, wall, secs = timed(lambda: aoe.tune(graph_or_model, mode="op", bank=bank, work_path=work,
                                           options=TuneOptions(budget=budget, lock=False, builtin=False), env={},
                                           **kw))
    return {"wall_s": wall, "cpu_s": secs, "status": r.status, "repo_summary": r.section["repo_summary"]}


def onnx_route(zoo: str, shape: str, tmp: Path, budget: int) -> dict[str, Any]:
    """The same model through the ONNX importer: import time, size, MACs, cold and warm tuning."""
    import aoe.graph

    og, wall, secs = timed(lambda: aoe.graph.load(zoo, shape, training=True))
    return {"import": {"wall_s": wall, "cpu_s": secs}, "ops": len(og.ops),
            "gmacs": round(og.summary()["total_macs"] / 1e9, 2),
            "cold": tune(zoo, tmp / "bank_onnx", tmp / "work", budget, input_shape=shape, training=True),
            "warm": tune(zoo, tmp / "bank_onnx", tmp / "work", budget, input_shape=shape, training=True)}
