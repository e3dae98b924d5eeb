"""Pricing a graph under the operator banks: what the compiler would run, operator by operator.

The twin of `aoe.sgat.apply_bank`. For every operator its case is priced with CANN's default strategy
and with the strategy the banks give (custom, then built-in); `aoe verify` and `--output` read these
figures, and the tuner uses `price` for the "before" of a case.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, MutableMapping

import numpy as np

from ..bank import BankChain, BuiltinBank, OpBank
from ..errors import AoeError
from ..graph import Graph
from ..ops import OpCase, Unsupported, Variant, describe
from ..sim import default_strategy, strategy_fields
from ..soc import Soc, require_soc
from ..tuning import improvement
from .search import Measure, simulator_measure
from .tune import conversion_us


def op_type_label(op: Any) -> str | list[str]:
    """The `op_type` a result file shows: the type, or the list of types of a fused operator."""
    fused = op.attrs.get("fused_ops") if isinstance(op.attrs, Mapping) else None
    if isinstance(fused, list) and len(fused) > 1 and all(isinstance(t, str) for t in fused):
        return list(fused)
    return op.type


def fused_names(op: Any) -> tuple[str, ...]:
    """The original operator names of a fused operator (`attrs["fused_names"]`, two or more), else ()."""
    names = op.attrs.get("fused_names") if isinstance(op.attrs, Mapping) else None
    if isinstance(names, (list, tuple)) and len(names) > 1 and all(isinstance(n, str) and n for n in names):
        return tuple(names)
    return ()


def select_ops(graph: Graph, names: Iterable[str] = (), types: Iterable[str] = ()) -> set[str] | None:
    """Operators chosen by a tune_ops file (names and types are a union; a fused op counts when one of its
    original operators' names or types is listed)."""
    names, types = set(names), set(types)
    if not names and not types:
        return None
    chosen = set()
    for op in graph.ops:
        label = op_type_label(op)
        op_types = set(label) if isinstance(label, list) else {label}
        if op.name in names or names.intersection(fused_names(op)) or op_types & types:
            chosen.add(op.name)
    return chosen


def variant_for(case: OpCase, knowledge: Mapping[str, Any]) -> tuple[Variant, dict[str, int] | None]:
    """The kernel and tiling a bank knowledge describes (None tiling: use the kernel's default)."""
    impl = knowledge.get("impl")
    if isinstance(impl, str):  # a named kernel other than the default one (GEMV, 1x1 as matmul, ...)
        for v in case.impls[1:]:
            if v.knowledge.get("impl") == impl:
                kernel = knowledge.get("kernel")
                strat = kernel.get("strategy") if isinstance(kernel, Mapping) else None
                return v, dict(strat) if isinstance(strat, Mapping) else None
    variant = case.default
    formats = knowledge.get("formats")
    if formats:
        for v in case.formats:
            if v.knowledge.get("formats") == list(formats):
                variant = v
                break
    fields = strategy_fields(variant.sim_op)
    if all(f in knowledge for f in fields):
        return variant, {f: int(knowledge[f]) for f in fields}
    kernel = knowledge.get("kernel")
    strat = kernel.get("strategy") if isinstance(kernel, Mapping) else None
    if (isinstance(strat, Mapping) and kernel.get("op") == type(variant.sim_op).__name__
            and all(f in strat for f in fields)):
        # the case's own kernel is of another family than its key (a recurrent operator's time loop)
        return variant, {f: int(strat[f]) for f in fields}
    return variant, None


def price(case: OpCase, soc: Soc, knowledge: Mapping[str, Any] | None, measure: Measure,
          extra_cache: dict[Any, float] | None = None, default: Mapping[str, int] | None = None) -> float:
    """Time (µs) of an operator case under a stored strategy (None = CANN's default), conversions included.

    `default`: CANN's default strategy of the case when the caller has it already (a worker derived it)."""
    if knowledge is None:
        variant, strat = case.default, (dict(default) if default is not None else None)
    else:
        variant, strat = variant_for(case, knowledge)
    if strat is None:
        strat = default_strategy(soc, variant.sim_op)
    fields = strategy_fields(variant.sim_op)
    row = np.array([[strat[f] for f in fields]], dtype=np.int64)
    t = float(measure(variant.sim_op, row)[0])
    return t + conversion_us(soc, variant, extra_cache if extra_cache is not None else {})


def operator_cases(graph: Graph) -> tuple[list[tuple[Any, OpCase]], list[dict[str, str]]]:
    """Every operator that runs as a kernel with its case, and the ones that cannot be priced (with why)."""
    out: list[tuple[Any, OpCase]] = []
    skipped: list[dict[str, str]] = []
    for op in graph.ops:
        if getattr(op, "is_view", False) or op.attrs.get("view"):
            continue  # views are not kernels at run time
        try:
            out.append((op, describe(graph, op)))
        except (Unsupported, AoeError) as exc:
            skipped.append({"op": op.name, "op_type": op.type, "reason": str(exc)})
    return out, skipped


@dataclass
class OpTime:
    """One operator priced both ways."""

    op_name: str
    op_type: str | list[str]
    default_us: float
    tuned_us: float
    source: str            # where the strategy in use came from: custom / builtin / default, or
                           # "invalid custom record" (the bank's strategy is invalid here: default used)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (µs rounded to 3 decimals)."""
        return {"op_name": self.op_name, "op_type": self.op_type, "default_us": round(self.default_us, 3),
                "tuned_us": round(self.tuned_us, 3), "source": self.source,
                "improvement": improvement(self.default_us, self.tuned_us)}


def apply_bank(graph: Graph, soc: Soc, bank_dir: str | os.PathLike[str] | None, *, builtin: bool = True,
               memo: MutableMapping[Any, float] | None = None) -> tuple[list[OpTime], list[dict[str, str]]]:
    """Every operator of `graph` priced with CANN's default and with the banks' strategy; the banks are only read.

    Returns the priced operators and the skipped ones (`{"op", "op_type", "reason"}`). `memo` (optional)
    caches kernel times keyed by the strategy itself (SoC, case and the knowledge's content), so a
    changed bank entry is a different key and can never be hidden.
    """
    soc = require_soc(soc, "aoe.opat.apply.apply_bank")
    measure = simulator_measure(soc)
    custom = OpBank(bank_dir, soc.name, soc.cube_cores) if bank_dir is not None else None
    chain = BankChain(custom, BuiltinBank(soc.name, soc.cube_cores) if builtin else None)
    extra: dict[Any, float] = {}

    def timed(case: OpCase, knowledge: Mapping[str, Any] | None) -> float:
        if memo is None:
            return price(case, soc, knowledge, measure, extra)
        kn = None if knowledge is None else json.dumps(knowledge, sort_keys=True, default=str)
        k = (soc.name, case.case_id, kn)
        t = memo.get(k)
        if t is None:
            t = memo[k] = price(case, soc, knowledge, measure, extra)
        return t

    ops: list[OpTime] = []
    priced, skipped = operator_cases(graph)
    for op, case in priced:
        default = timed(case, None)
        entry = chain.lookup(case.op_type, case.key)
        tuned, source = default, "default"
        if entry is not None:
            try:
                t = timed(case, entry.knowledge)
            except (AoeError, KeyError, ValueError, TypeError):
                t = float("nan")
            if np.isfinite(t):
                tuned, source = t, entry.source
            else:  # the compiler rejects the stored tiling and runs its default: say which record
                source = f"invalid {entry.source} record"
        ops.append(OpTime(op.name, op_type_label(op), default, tuned, source))
    return ops, skipped


def priced_cases(graph: Graph, soc: Soc, bank_dir: str | os.PathLike[str] | None, *, builtin: bool = True
                 ) -> tuple[dict[str, dict[str, Any]], list[dict[str, str]]]:
    """Every distinct case of `graph` priced under the banks, in the form of a run record's case lines
    (`aoe.job.records`; the banks are only read): what `aoe verify` and a report of an old result
    file without a record (`aoe report -m`) show. Returns the lines by case identity and the skipped operators."""
    from .detail import case_detail  # the kernels in detail: only these readers need them

    measure = simulator_measure(soc)
    custom = OpBank(bank_dir, soc.name, soc.cube_cores) if bank_dir is not None else None
    chain = BankChain(custom, BuiltinBank(soc.name, soc.cube_cores) if builtin else None)
    extra: dict[Any, float] = {}
    lines: dict[str, dict[str, Any]] = {}
    priced, skipped = operator_cases(graph)
    for i, (op, case) in enumerate(priced):
        ident = repr(case.case_id)
        line = lines.get(ident)
        if line is None:
            default_t = price(case, soc, None, measure, extra)
            entry = chain.lookup(case.op_type, case.key)
            tuned_t, source, knowledge = default_t, None, None
            if entry is not None:
                try:
                    t = price(case, soc, entry.knowledge, measure, extra)
                except (AoeError, KeyError, ValueError, TypeError):
                    t = float("nan")
                if np.isfinite(t):
                    tuned_t, source, knowledge = t, entry.source, entry.knowledge
            line = lines[ident] = {"outcome": None, "source": source, "provenance": source, "error": None,
                                   "ops": [], "detail": case_detail(soc, case, knowledge),
                                   "times": (default_t, tuned_t)}
        label = op_type_label(op)
        d, t = line["times"]
        line["ops"].append([i, op.name, "+".join(label) if isinstance(label, list) else label, d, d, t])
    for line in lines.values():
        del line["times"]
    return lines, skipped
