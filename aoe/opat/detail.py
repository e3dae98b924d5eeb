"""What a run's record keeps of one operator case: its kernels simulated in detail, as plain values.

The job's record (`aoe.job.records`) and the re-pricing of `aoe verify` describe a case alike: the
default kernel and the kernel in use after tuning, each with its strategy, wall time, busy time per
pipe, bound pipe, HBM/L2 bytes and FLOPs (`aoe.sim.simulate_batch`), and the simulator descriptor of
each kernel (`op_to_dict`), so a reader can explain it without the model.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from .. import sim
from ..errors import AoeError
from ..ops import OpCase, Variant
from ..soc import Soc

_OP_TYPES = {"MatMul": sim.MatMul, "VectorOp": sim.VectorOp, "Conv2D": sim.Conv2D,
             "RecurrentMatMul": sim.RecurrentMatMul}
_MAX_STEP_OPS = 64  # a recurrent kernel's gate math: a handful of vector operators per step


def kernel_detail(soc: Soc, op: Any, strat: Mapping[str, int] | None, label: str) -> dict[str, Any]:
    """One strategy (None: CANN's default) of a simulator descriptor simulated in detail, as plain values."""
    s = dict(strat) if strat is not None else sim.default_strategy(soc, op)
    fields = sim.strategy_fields(op)
    out = sim.simulate_batch(soc, op, np.array([[int(s[f]) for f in fields]], dtype=np.int64))
    valid = int(out.reason[0]) == 0
    return {"label": label, "time_us": float(out.time_us[0]),
            "bound": sim.PIPES[int(out.bound[0])] if valid else "invalid",
            "busy_us": {p: float(v) for p, v in zip(sim.PIPES, out.busy_us[0])},
            "hbm_bytes": float(out.hbm_bytes[0]), "l2_bytes": float(out.l2_bytes[0]),
            "flops": float(out.flops[0]), "strategy": {f: int(s[f]) for f in fields}}


_INIT_FIELDS: dict[type, tuple[str, ...]] = {}  # descriptor class -> its init fields (a record asks per case)


def op_to_dict(op: Any) -> dict[str, Any]:
    """A simulator descriptor (MatMul, VectorOp, Conv2D, RecurrentMatMul) as plain values (`op_from_dict`
    reads it back); a recurrent kernel's per-step vector operators nest as descriptors of their own."""
    names = _INIT_FIELDS.get(type(op))
    if names is None:
        names = _INIT_FIELDS[type(op)] = tuple(f.name for f in dataclasses.fields(op) if f.init)
    out: dict[str, Any] = {"type": type(op).__name__}
    for k in names:
        v = getattr(op, k)
        if k == "step_ops":
            out[k] = [op_to_dict(x) for x in v]
        else:
            out[k] = list(v) if isinstance(v, tuple) else v
    return out


def op_from_dict(d: Any) -> Any:
    """A simulator descriptor from `op_to_dict`'s form (untrusted: AoeError when it is not one)."""
    if not isinstance(d, Mapping) or d.get("type") not in _OP_TYPES:
        raise AoeError("a kernel descriptor must name one of " + ", ".join(_OP_TYPES))
    cls = _OP_TYPES[d["type"]]
    names = {f.name: f for f in dataclasses.fields(cls) if f.init}
    args: dict[str, Any] = {}
    for k, v in d.items():
        if k == "type":
            continue
        if k not in names:
            raise AoeError(f"a {d['type']} descriptor has no field {k!r}")
        if k == "step_ops":
            if not isinstance(v, list) or len(v) > _MAX_STEP_OPS:
                raise AoeError(f"{d['type']}.step_ops must be a list of at most {_MAX_STEP_OPS} descriptors")
            steps = tuple(op_from_dict(x) for x in v)
            if not all(isinstance(x, sim.VectorOp) for x in steps):
                raise AoeError(f"{d['type']}.step_ops must hold VectorOp descriptors only")
            args[k] = steps
            continue
        if isinstance(v, list):
            if len(v) > 16 or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                raise AoeError(f"{d['type']}.{k} must be a short list of integers")
            v = tuple(v)
        elif not (v is None or isinstance(v, (int, float, str, bool))):
            raise AoeError(f"{d['type']}.{k} must be a plain value")
        args[k] = v
    try:
        return cls(**args)
    except (TypeError, ValueError) as exc:
        raise AoeError(f"a damaged {d['type']} descriptor: {exc}") from None


_SCALARS = frozenset((str, int, float, bool))


def _plain(v: Any) -> Any:
    """A bank key as JSON values (tuples as lists), so the record can name the case to a bank."""
    if v is None or type(v) in _SCALARS:   # most of a key: no isinstance against the Mapping ABC
        return v
    if isinstance(v, (dict, Mapping)):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def variant_label(case: OpCase, variant: Variant) -> str:
    """A short name of a kernel variant: "default" for CANN's own, else its format / implementation."""
    return "default" if variant is case.default else variant.label


def case_detail(soc: Soc, case: OpCase, knowledge: Mapping[str, Any] | None,
                default_strategy: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The default kernel and the kernel `knowledge` selects (None: the default) of one case, with descriptors
    (`default_strategy`: CANN's default strategy of the case when the caller has it, e.g. from a worker)."""
    from .apply import variant_for  # apply imports the tuner; this module is imported by it

    default = kernel_detail(soc, case.default.sim_op, default_strategy, "default")
    tuned, tuned_op = default, case.default.sim_op
    if knowledge is not None:
        try:
            variant, strat = variant_for(case, knowledge)
            tuned = kernel_detail(soc, variant.sim_op, strat, variant_label(case, variant))
            tuned_op = variant.sim_op
        except (AoeError, KeyError, ValueError, TypeError):
            tuned, tuned_op = default, case.default.sim_op  # a strategy aoe cannot read: the default runs
    return {"op_type": case.op_type, "family": case.family, "key": _plain(case.key), "default": default, "tuned": tuned,
            "default_op": op_to_dict(case.default.sim_op), "tuned_op": op_to_dict(tuned_op)}


__all__ = ["case_detail", "kernel_detail", "op_from_dict", "op_to_dict", "variant_label"]
