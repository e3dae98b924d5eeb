"""Performance verification: compile the model twice — default strategies vs. the banks.

Operator side: every operator's case is priced on the simulated AI Core with CANN's default
strategy and with the strategy the banks give (custom, then built-in, then default). Subgraph side
(`mode=1`): `aoe.sgat.apply_bank` prices the graph as the compiler fuses it by default vs. with the
subgraph bank's plans (the fully unfused time is shown beside them, labelled).

There is no compile cache that could hide a new bank entry: the banks are opened afresh for every
verification and looked up case by case (the bank layer re-validates its index by `stat` on every
lookup). The only memo is a per-process table of kernel times keyed by the *strategy itself*
(SoC, operator case and the knowledge's content), so a changed bank entry is a different key.
`op_compiler_cache_mode` is accepted as in CANN: `enable` uses that memo, `disable` bypasses it,
`force` clears it first.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AoeError
from ..opat.apply import OpTime, apply_bank
from ..soc import load_soc
from ..tuning import improvement
from .progress import table

CACHE_MODES = ("enable", "disable", "force")
_MEMO: dict[tuple[Any, ...], float] = {}


@dataclass
class VerifyReport:
    """Simulated times of the model with default strategies and with the tuned banks."""

    model: str
    soc: str
    mode: int
    op_bank_dir: str | None = None
    subgraph_bank_dir: str | None = None
    ops: list[OpTime] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    sgat_baseline_ms: float | None = None
    sgat_tuned_ms: float | None = None
    sgat_unfused_ms: float | None = None
    cache_mode: str = "enable"

    @property
    def default_us(self) -> float:
        """Whole model (operators that could be priced), default strategies."""
        return sum(o.default_us for o in self.ops)

    @property
    def tuned_us(self) -> float:
        """Whole model with the banks' strategies."""
        return sum(o.tuned_us for o in self.ops)

    @property
    def improvement(self) -> str:
        """(before / after - 1) x 100 of the whole model."""
        if self.mode == 1 and self.sgat_baseline_ms is not None and self.sgat_tuned_ms is not None:
            return improvement(self.sgat_baseline_ms, self.sgat_tuned_ms)
        return improvement(self.default_us, self.tuned_us)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"model": self.model, "soc": self.soc, "job_type": self.mode,
                             "op_compiler_cache_mode": self.cache_mode}
        if self.mode == 2:
            d.update({"op_bank_dir": self.op_bank_dir, "model_default_us": round(self.default_us, 3),
                      "model_tuned_us": round(self.tuned_us, 3), "model_improvement": self.improvement,
                      "from_custom_bank": sum(o.source == "custom" for o in self.ops),
                      "from_builtin_bank": sum(o.source == "builtin" for o in self.ops),
                      "invalid_bank_records": sum(o.source.startswith("invalid") for o in self.ops),
                      "operators": [o.to_dict() for o in self.ops], "skipped": self.skipped})
        else:
            d.update({"subgraph_bank_dir": self.subgraph_bank_dir,
                      "model_default_ms": self.sgat_baseline_ms, "model_tuned_ms": self.sgat_tuned_ms,
                      "model_unfused_ms": self.sgat_unfused_ms,
                      "model_improvement": self.improvement})
        return d

    def lines(self, top: int = 20, all_ops: bool = False) -> list[str]:
        out = [f"verification of {self.model} on {self.soc} (op_compiler_cache_mode={self.cache_mode}; "
               f"the banks are read afresh, no cache can hide new entries)"]
        if self.mode == 1:
            out.append(f"subgraph bank: {self.subgraph_bank_dir}")
            out.append(f"model, default fusion: {self.sgat_baseline_ms:.6f} ms; with the subgraph bank: "
                       f"{self.sgat_tuned_ms:.6f} ms; improvement {self.improvement}")
            if self.sgat_unfused_ms is not None:
                out.append(f"model, unfused (every operator its own kernel): {self.sgat_unfused_ms:.6f} ms")
            return out
        out.append(f"operator bank: {self.op_bank_dir}")
        changed = [o for o in self.ops if o.tuned_us != o.default_us]
        shown = self.ops if all_ops else sorted(changed, key=lambda o: o.default_us - o.tuned_us, reverse=True)[:top]
        if shown:
            rows = [[(o.op_name if len(o.op_name) <= 60 else "…" + o.op_name[-59:]),
                     o.op_type if isinstance(o.op_type, str) else "+".join(o.op_type),
                     f"{o.default_us:.3f}", f"{o.tuned_us:.3f}", improvement(o.default_us, o.tuned_us), o.source]
                    for o in shown]
            out.append("" if all_ops else f"operators whose strategy differs from the default "
                                          f"({len(changed)}; top {len(shown)}):")
            out += table(rows, ["operator", "type", "default(us)", "tuned(us)", "improvement", "strategy"],
                         [False, False, True, True, True, False])
        n_custom = sum(o.source == "custom" for o in self.ops)
        n_builtin = sum(o.source == "builtin" for o in self.ops)
        out.append(f"operators priced: {len(self.ops)} ({n_custom} from the custom bank, {n_builtin} from the "
                   f"built-in bank, {len(self.ops) - n_custom - n_builtin} default); skipped: {len(self.skipped)}")
        invalid = sorted({o.op_name for o in self.ops if o.source.startswith("invalid")})
        if invalid:
            out.append(f"bank records whose strategy is invalid on {self.soc} (the default runs instead; a "
                       f"tuning run replaces them): {len(invalid)}: {', '.join(invalid[:5])}"
                       + (" ..." if len(invalid) > 5 else ""))
        out.append(f"model: default {self.default_us / 1000:.6f} ms -> with banks {self.tuned_us / 1000:.6f} ms; "
                   f"improvement {self.improvement}")
        return out


def check_cache_mode(value: str) -> str:
    if value not in CACHE_MODES:
        raise AoeError(f"op_compiler_cache_mode={value!r} is not valid; use enable, disable or force")
    return value


def op_times(graph: Any, soc: Any, op_bank_dir: str | os.PathLike[str] | None, *, builtin: bool = True,
             cache_mode: str = "enable") -> tuple[list[OpTime], list[dict[str, str]]]:
    """Price every operator with the default strategy and with the banks' strategy (`aoe.opat.apply_bank`)."""
    check_cache_mode(cache_mode)
    if cache_mode == "force":
        _MEMO.clear()
    return apply_bank(graph, soc, op_bank_dir, builtin=builtin, memo=None if cache_mode == "disable" else _MEMO)


def verify_graph(graph: Any, soc: Any, *, mode: int = 2, op_bank_dir: str | os.PathLike[str] | None = None,
                 subgraph_bank_dir: str | os.PathLike[str] | None = None, builtin: bool = True,
                 cache_mode: str = "enable", model: str | None = None) -> VerifyReport:
    """Compile `graph` with default strategies and with the banks; see the module docstring."""
    soc = load_soc(soc)
    check_cache_mode(cache_mode)
    rep = VerifyReport(model=model or graph.name, soc=soc.name, mode=mode, cache_mode=cache_mode,
                       op_bank_dir=str(op_bank_dir) if op_bank_dir is not None else None,
                       subgraph_bank_dir=str(subgraph_bank_dir) if subgraph_bank_dir is not None else None)
    if mode == 1:
        from .. import sgat  # lazily: an OPAT verification never needs the SGAT tuner

        if subgraph_bank_dir is None:
            raise AoeError("subgraph verification needs a subgraph bank directory")
        times = sgat.apply_bank(graph, soc, Path(subgraph_bank_dir), builtin=builtin)
        rep.sgat_baseline_ms, rep.sgat_tuned_ms, rep.sgat_unfused_ms = times
        return rep
    rep.ops, rep.skipped = op_times(graph, soc, op_bank_dir, builtin=builtin, cache_mode=cache_mode)
    return rep
