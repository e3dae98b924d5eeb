"""Python API of the simulated AI Core.

>>> from aoe import sim
>>> op = sim.MatMul(m=4096, n=4096, k=4096)
>>> r = sim.simulate("Ascend910B2", op)          # default (CANN-like) strategy
>>> r.time_us, r.bound, r.tflops
>>> times, reasons = sim.simulate_times("Ascend910B2", op, strategies)   # N x F int64 array

`simulate_times` is the tuning hot path: one native call for a whole batch, GIL released.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from .. import _sim
from ..errors import AoeError
from ..soc import Soc, load_soc
from .heuristics import default_strategy as _default_strategy
from .ops import DTYPES, FORMATS, Conv2D, MatMul, RecurrentMatMul, SimOp, VectorOp, make_op

PIPES: list[str] = list(_sim.PIPES)
REASONS: list[str] = list(_sim.REASONS)
SocLike = str | os.PathLike[str] | Soc


def default_strategy(soc: SocLike, op: SimOp) -> dict[str, int]:
    """The heuristic strategy CANN would use for `op` on `soc` (a `Soc`, a SoC name or an .ini path)."""
    return _default_strategy(load_soc(soc), op)


def strategy_fields(op: SimOp) -> list[str]:
    """Names of the strategy vector of `op`'s kernel model, in order."""
    return list(_sim.strategy_fields(op.kind))


@dataclass(frozen=True)
class SimResult:
    """Simulated execution of one strategy."""

    time_us: float
    valid: bool
    reason: str
    busy_us: dict[str, float]
    hbm_bytes: float
    l2_bytes: float
    bound: str
    tflops: float
    gbps: float
    strategy: dict[str, int]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "time_us": self.time_us if self.valid else None, "valid": self.valid, "reason": self.reason,
            "bound": self.bound, "tflops": self.tflops, "gbps": self.gbps, "hbm_bytes": self.hbm_bytes,
            "l2_bytes": self.l2_bytes, "busy_us": self.busy_us, "strategy": self.strategy,
        }


def _strategy_rows(op: SimOp, strategies: Any) -> np.ndarray:
    fields = strategy_fields(op)
    if isinstance(strategies, Mapping):
        strategies = [strategies]
    if isinstance(strategies, np.ndarray):
        arr = strategies
    else:
        strategies = list(strategies)
        if strategies and isinstance(strategies[0], Mapping):
            rows = []
            for s in strategies:
                unknown = set(s) - set(fields)
                missing = [f for f in fields if f not in s]
                if unknown or missing:
                    raise AoeError(f"strategy for {type(op).__name__} must have exactly the fields "
                                   f"{', '.join(fields)}" + (f"; missing {', '.join(missing)}" if missing else "")
                                   + (f"; unknown {', '.join(sorted(unknown))}" if unknown else ""))
                rows.append([s[f] for f in fields])
            strategies = rows
        try:
            arr = np.asarray(strategies, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise AoeError("strategy values must be integers") from None
    if arr.ndim == 1 and arr.size == len(fields):
        arr = arr.reshape(1, -1)
    if arr.ndim != 2 or arr.shape[1] != len(fields):
        raise AoeError(f"strategies must be rows of {len(fields)} integers ({', '.join(fields)}); "
                       f"got an array of shape {arr.shape}")
    if arr.dtype != np.int64:
        if not np.issubdtype(arr.dtype, np.integer):
            raise AoeError("strategy values must be integers")
        arr = arr.astype(np.int64)
    return np.ascontiguousarray(arr)


def simulate_times(soc: SocLike, op: SimOp, strategies: Any, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Times in µs (inf when invalid) and reason codes of a batch of strategies (N x F ints)."""
    s = load_soc(soc)
    rows = _strategy_rows(op, strategies)
    times, reasons = _sim.simulate_times(s.native, op.kind, op.params(), rows, int(max(1, threads)))
    if isinstance(op, RecurrentMatMul):
        times = _recurrent_times(s, op, times)
    return times, reasons


def _recurrent_times(s: Soc, op: RecurrentMatMul, step_mm: np.ndarray) -> np.ndarray:
    """The whole time loop from the times of one step's gate matmul (see ``RecurrentMatMul``)."""
    launch = float(s.launch_us)
    gate = op.gate_cache.get(s)   # a search prices the same operator batch after batch
    if gate is None:
        # the gate math is vector code inside the recurrent kernel: each operator's time without a launch
        gate = 0.0
        for v in op.step_ops:
            row = np.array([[default_strategy(s, v)[f] for f in strategy_fields(v)]], dtype=np.int64)
            gate += float(_sim.simulate_times(s.native, v.kind, v.params(), row, 1)[0][0]) - launch
        op.gate_cache[s] = gate   # (same value from any thread: a race only computes it twice)
    return launch + op.steps * (np.asarray(step_mm, dtype=np.float64) - launch + gate)


@dataclass(frozen=True)
class BatchResult:
    """Full results of a batch: arrays with one entry (row) per strategy."""

    time_us: np.ndarray
    reason: np.ndarray
    busy_us: np.ndarray
    hbm_bytes: np.ndarray
    l2_bytes: np.ndarray
    bound: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray

    @property
    def valid(self) -> np.ndarray:
        """Boolean mask of valid strategies."""
        return self.reason == 0

    def __len__(self) -> int:
        return len(self.time_us)


def simulate_batch(soc: SocLike, op: SimOp, strategies: Any, threads: int = 1) -> BatchResult:
    """Evaluate a batch of strategies with the full per-pipe breakdown."""
    s = load_soc(soc)
    rows = _strategy_rows(op, strategies)
    out = _sim.simulate_batch(s.native, op.kind, op.params(), rows, int(max(1, threads)))
    if isinstance(op, RecurrentMatMul):
        # the whole time loop; the per-pipe figures stay those of one step's gate matmul
        out = dict(out, time_us=_recurrent_times(s, op, out["time_us"]))
    return BatchResult(**out)


def simulate(soc: SocLike, op: SimOp, strategy: Mapping[str, int] | Sequence[int] | None = None) -> SimResult:
    """Evaluate one strategy (the CANN-like default when `strategy` is None)."""
    s = load_soc(soc)
    if strategy is None:
        strategy = default_strategy(s, op)
    rows = _strategy_rows(op, strategy)
    out = simulate_batch(s, op, rows)
    fields = strategy_fields(op)
    strat = dict(zip(fields, (int(v) for v in rows[0])))
    valid = bool(out.reason[0] == 0)
    t = float(out.time_us[0])
    busy = {p: float(v) for p, v in zip(PIPES, out.busy_us[0])}
    flops, nbytes = float(out.flops[0]), float(out.bytes[0])
    return SimResult(
        time_us=t, valid=valid, reason=REASONS[int(out.reason[0])], busy_us=busy,
        hbm_bytes=float(out.hbm_bytes[0]), l2_bytes=float(out.l2_bytes[0]),
        bound=PIPES[int(out.bound[0])] if valid else "invalid",
        tflops=flops / (t * 1e-6) / 1e12 if valid else 0.0,
        gbps=nbytes / (t * 1e-6) / 1e9 if valid else 0.0, strategy=strat)


__all__ = [
    "MatMul", "RecurrentMatMul", "VectorOp", "Conv2D", "SimOp", "make_op", "simulate", "simulate_batch", "simulate_times",
    "SimResult", "BatchResult", "default_strategy", "strategy_fields", "PIPES", "REASONS",
    "DTYPES", "FORMATS",
]
