"""Tune one operator case: Schedule, Format and Impl, with the gain attributed to each kind.

- **Schedule** searches the tiling space of the operator's default kernel and layouts, restricted
  to the implementation class of CANN's default strategy (so a different algorithm counts as Impl).
- **Format** searches the same kernel in other layouts; the TransData conversions a layout needs
  are priced and added (`Variant.extra_ops`), and so is the Cube side of a vector operator's Cube
  edges (`conversion_us`), for the default layout too.
- **Impl** searches the other implementation classes allowed under `op_select_implmode`: for
  matmul A or B resident in L1, split-K across cores, a vector GEMV for tiny M; for conv 1x1 as
  matmul and depthwise on the Vector unit; for vector operators the `impl` alternatives of the kernel.

The "before" is CANN's default strategy on the default variant. `TuneResult.kinds` says what each
stage found; `TuneResult.steps` describes the *final* strategy step by step: only kinds the final
strategy actually uses appear (a Format step only if the chosen layout is not the default one, an
Impl step only if the kernel or implementation class is not the default one, a Schedule step only if
the final strategy keeps a tuned tiling of the default class, found by the Schedule stage and kept or
re-searched on the chosen layout), and the steps chain from the
"before" to the "after", so the product of their before/after ratios is the total before/after.
When Impl wins, the Schedule and Format steps it replaced are dropped and Impl starts at "before".
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .. import _sim
from ..errors import AoeError
from ..bank.schema import schema_for
from ..graph.singleop import single_ops_graph
from ..ops import BOTH, HIGH_PERFORMANCE, IMPL_MODES, PERF_ONLY, OpCase, Variant, describe
from ..sim import Conv2D, MatMul, SimOp, VectorOp, default_strategy, simulate, strategy_fields
from ..sim.heuristics import MM_FIELDS, default_vector
from ..soc import Soc, require_soc
from .bounds import matmul_row_bound
from .inner import _F, matmul_class_outer, matmul_impl_class, matmul_shape
from .search import Budget, Measure, SearchResult, as_measure, search, simulator_measure
from .space import FactoredSpace, space_for

KINDS = ("Schedule", "Format", "Impl")


# --- implementation classes of a matmul tiling --------------------------------------------------

MATMUL_IMPLS = {0: "standard", 1: "a_resident_l1", 2: "b_resident_l1", 3: "split_k"}
# Split-K adds the fp32 partial sums of several cores atomically, in an order that changes the
# rounding: like the catalogue's atomic reductions it is a high_performance-only implementation.
MATMUL_IMPL_MODES = {0: BOTH, 1: BOTH, 2: BOTH, 3: PERF_ONLY}


def _restricted(space: FactoredSpace, keep: Callable[[np.ndarray], np.ndarray],
                select: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
                members: Any = None) -> FactoredSpace:
    """The same space with only the rows `keep` accepts.

    `select(outer)` gives the outer rows of the restricted space and which rows of `outer` they
    are; by default those `keep` accepts, as they are (a matmul implementation class first moves
    each outer row's default staging into the class where it can, e.g. a whole K panel in L1 for
    the resident classes, so the outer phase of a search prices a member).
    `members`: an expander that yields only the rows `keep` accepts (`space.expand_impl(cls)`), so
    no row is built only to be filtered out.
    """
    if select is None:
        mask = keep(space.outer)
        outer = space.outer[mask]
    else:
        outer, mask = select(space.outer)
    lb = space.lower_bound[mask] if space.lower_bound is not None else None
    seeds = space.seeds[keep(space.seeds)] if space.seeds is not None and len(space.seeds) else None

    def many(groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        rows, bounds = space.expand_groups(groups)
        if not len(rows):
            return rows, bounds
        ok = keep(rows)
        kept = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(ok, out=kept[1:])
        return rows[ok], kept[bounds]

    expand, expand_many = (members, members.many) if members is not None else \
        (lambda o: _filter(space.expand(o), keep), many)
    # the class's untiled stagings, and their L2 tilings as the full space gives them (a tiling is in
    # the class of its untiled staging: classes do not depend on L2 tiling)
    untiled = (lambda groups: members.many(groups, l2=False)) \
        if members is not None and space.expand_untiled is not None else None
    # a restricted space is at most as large as the full one (exact size would need filtering)
    return FactoredSpace(space.fields, outer, expand, lb, upper_size=space.upper_size,
                         seeds=seeds if seeds is not None and len(seeds) else None, parent=space,
                         expand_many=expand_many, row_bound=space.row_bound, expand_untiled=untiled,
                         tilings=space.tilings if untiled is not None else None)


def _rebound(soc: Soc, op: MatMul, space: FactoredSpace) -> FactoredSpace:
    """`space` (another layout of the same matmul) with `op`'s own bounds.

    The rows depend on the shapes only, the bounds also on the layouts (ND operands pay the ND2NZ
    conversion and short bursts): pruning a faster NZ variant with its ND twin's bounds would drop
    strategies that beat them. CANN's default outer choices keep the launch time as their bound.
    """
    lb = space.lower_bound
    if lb is not None:
        # the outer rows come in pairs, one per iterate order, which the bound does not depend on
        own = np.repeat(_sim.matmul_outer_bound(soc.native, matmul_shape(soc, op), space.outer[0::2]), 2)
        lb = np.where(lb <= soc.launch_us, lb, own)
    return replace(space, lower_bound=lb, row_bound=lambda rows: matmul_row_bound(soc, op, rows, _F))


def _filter(rows: np.ndarray, keep: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    return rows[keep(rows)] if len(rows) else rows


# --- results ------------------------------------------------------------------------------------

@dataclass
class KindGain:
    """Before/after of one tuning kind (µs)."""

    before_us: float
    after_us: float

    @property
    def helped(self) -> bool:
        """True if this kind made the operator faster."""
        return self.after_us < self.before_us


@dataclass
class TuneResult:
    """Outcome of tuning one operator case."""

    op_type: str
    before_us: float
    after_us: float
    variant: str                       # Format label of the chosen variant
    impl: str                          # implementation chosen
    strategy: dict[str, int]           # tiling of the chosen kernel model
    knowledge: dict[str, Any]          # what goes into the bank (tiling + format/impl choices)
    kinds: dict[str, KindGain]         # per tuning kind that was run: what its stage found
    evaluations: int
    seconds: float
    sim_op: SimOp | None = None
    steps: dict[str, KindGain] = field(default_factory=dict)  # the final strategy, kind by kind

    def __post_init__(self) -> None:
        if not self.steps:
            self.steps = {k: g for k, g in self.kinds.items() if g.helped}

    @property
    def improved(self) -> bool:
        """True if the tuned strategy beats the default."""
        return self.after_us < self.before_us

    def helped_kinds(self) -> dict[str, KindGain]:
        """The kinds the final strategy uses, chained from before to after (what the result file reports)."""
        return dict(self.steps)


def _price_default(soc: Soc, variant: Variant, measure: Measure) -> tuple[float, dict[str, int]]:
    strat = default_strategy(soc, variant.sim_op)
    fields = strategy_fields(variant.sim_op)
    row = np.array([[strat[f] for f in fields]], dtype=np.int64)
    return float(measure(variant.sim_op, row)[0]), strat


def conversion_us(soc: Soc, variant: Variant, cache: dict[Any, float]) -> float:
    """What a variant costs around its kernel: its TransData, and the Cube side of its Cube edges.

    A Cube edge (a tensor shared with matmuls, `aoe.ops.CubeEdge`) adds what the neighbours lose with
    that side in FRACTAL_NZ against their time as their own cases price it (never less than 0), whenever
    the Cube side is NZ: always when the variant puts the tensor in NZ, and on a coupled SoC (no FixPipe NZ->ND, no
    ND2NZ loads) also in ND, where the compiler inserts the edge's TransData as well.
    """
    def t(op: SimOp) -> float:
        if op not in cache:
            cache[op] = simulate(soc, op).time_us
        return cache[op]

    total = variant.extra_us + sum(t(op) for op in variant.extra_ops)
    for e in variant.cube_edges:
        if e.layout == "ND" and not soc.coupled:
            continue  # the Cube kernel converts on the fly
        # the neighbours are charged when NZ slows them, never credited when it speeds them up: that
        # gain is theirs, and crediting it here drove a case's time below zero (a SwiGLU Mul between
        # Llama's large matmuls)
        total += max(0.0, sum(t(nz) - t(nd) for nd, nz in zip(e.cube_nd, e.cube_nz)))
        if e.layout == "ND":
            total += t(e.transdata)
    return total


def tune_case(case: OpCase, soc: Soc, kinds: Sequence[str] = KINDS, budget: Budget | None = None,
              measure: Measure | None = None, implmode: str = HIGH_PERFORMANCE, seed: int = 0,
              threads: int = 1) -> TuneResult:
    """Tune one operator case on `soc` (the simulator unless `measure` is given)."""
    t0 = time.perf_counter()
    soc = require_soc(soc, "aoe.opat.tune.tune_case")
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise AoeError(f"tuning kinds must be a non-empty subset of {', '.join(KINDS)}; got {list(kinds)}")
    if implmode not in IMPL_MODES:
        raise AoeError(f"op_select_implmode must be one of {', '.join(IMPL_MODES)}, got {implmode!r}")
    budget = budget or Budget()
    measure = as_measure(measure) if measure is not None else simulator_measure(soc, threads)
    prune = measure.bound_is_exact  # the simulator's lower bound binds only the simulator
    evals = 0
    conv_cache: dict[Any, float] = {}
    base = case.default
    base_extra = conversion_us(soc, base, conv_cache)  # the default layout's own edges (Cube neighbours)
    before, default_strat = _price_default(soc, base, measure)
    if isinstance(base.sim_op, VectorOp):
        # CANN's default honours op_select_implmode too: never start from a disallowed implementation
        allowed = {int(v.knowledge.get("impl", 0)) for v in case.impls if implmode in v.modes}
        if default_strat["impl"] not in allowed and allowed:
            default_strat = default_vector(soc, base.sim_op, allowed)
            row = np.array([[default_strat[f] for f in strategy_fields(base.sim_op)]], dtype=np.int64)
            before = float(measure(base.sim_op, row)[0])
    before += base_extra
    evals += 1
    if not np.isfinite(before):
        raise AoeError(f"{case.op_type} {case.op_name!r}: the default strategy is not valid on {soc.name}")

    # best so far: time, variant, impl label, strategy row or dict, and the path of kinds that led to it
    best: dict[str, Any] = {"t": before, "variant": base, "impl": "default", "row": default_strat, "path": []}
    gains: dict[str, KindGain] = {}

    def run(variant: Variant, space: FactoredSpace, share: float) -> SearchResult:
        nonlocal evals
        sub = Budget(evaluations=None if budget.evaluations is None else max(1, int(budget.evaluations * share)),
                     seconds=None if budget.seconds is None else budget.seconds * share)
        res = search(space, variant.sim_op, measure, sub, seed=seed, prune=prune)
        evals += res.evaluations
        return res

    default_class = _default_impl_class(base.sim_op, default_strat)
    spaces: dict[int, FactoredSpace] = {}  # the tiling space depends on shapes only, not on layouts

    def class_space(op: SimOp, cls: int | None) -> FactoredSpace:
        full = spaces.get(id(op))
        if full is None and isinstance(op, MatMul) and isinstance(base.sim_op, MatMul):
            shared = spaces.get(id(base.sim_op))  # a layout variant of the default matmul: same rows
            if shared is not None:
                full = spaces[id(op)] = _rebound(soc, op, shared)
        if full is None:
            full = space_for(soc, op)
            spaces[id(op)] = full
        return _class_space(soc, op, cls, full)

    if "Schedule" in kinds:
        space = class_space(base.sim_op, default_class)
        res = run(base, space, 1.0)
        t_res = res.time_us + base_extra
        after = min(before, t_res)
        if res.found and t_res < before:
            best.update(t=t_res, row=res.row, impl=_class_name(base.sim_op, default_class),
                        path=[("Schedule", t_res)])
        gains["Schedule"] = KindGain(before, after)
    if "Format" in kinds and len(case.formats) > 1:
        start = best["t"]
        # Screen every layout with the best tiling so far (one evaluation each, conversions added),
        # then search the tiling of the two most promising layouts.
        screened = []
        for variant in case.formats[1:]:
            extra = conversion_us(soc, variant, conv_cache)
            if extra >= best["t"]:
                continue  # the conversions alone cost more than the best kernel so far
            row = best["row"]
            row = np.array([[row[f] for f in strategy_fields(variant.sim_op)]] if isinstance(row, dict) else [row],
                           dtype=np.int64)
            t_screen = float(measure(variant.sim_op, row)[0]) + extra
            evals += 1
            screened.append((t_screen, variant.label, variant, extra))
        for t_screen, _, variant, extra in sorted(screened, key=lambda x: (x[0], x[1]))[:2]:
            res = run(variant, class_space(variant.sim_op, default_class), 0.25)
            cand = min(t_screen, res.time_us + extra) if res.found else t_screen
            if cand < best["t"]:
                use_row = res.row if res.found and res.time_us + extra <= t_screen else best["row"]
                # the Schedule step stays on the path only while the tiling is still a tuned one
                kept = [p for p in best["path"] if p[0] == "Schedule" and not isinstance(use_row, dict)]
                best.update(t=cand, variant=variant, row=use_row, impl=_class_name(variant.sim_op, default_class),
                            path=kept + [("Format", cand)])
        gains["Format"] = KindGain(start, best["t"])
    if "Impl" in kinds:
        start = best["t"]
        for variant, cls in _impl_candidates(case, default_class, implmode):
            space = class_space(variant.sim_op, cls)
            res = run(variant, space, 0.25)
            extra = conversion_us(soc, variant, conv_cache)
            if res.found and res.time_us + extra < best["t"]:
                # another kernel or implementation class in the default layout: the Schedule and
                # Format steps it replaces are not part of the final strategy
                best.update(t=res.time_us + extra, variant=variant, row=res.row,
                            impl=variant.label if cls is None else _class_name(variant.sim_op, cls),
                            path=[("Impl", res.time_us + extra)])
        gains["Impl"] = KindGain(start, best["t"])

    variant: Variant = best["variant"]
    fields = strategy_fields(variant.sim_op)
    row = best["row"]
    strategy = dict(row) if isinstance(row, dict) else dict(zip(fields, (int(v) for v in row)))
    knowledge = _knowledge(case, variant, strategy, best["impl"])
    return TuneResult(case.op_type, before, best["t"], variant.label, best["impl"], strategy, knowledge, gains,
                      evals, time.perf_counter() - t0, variant.sim_op, steps=chain_steps(best["path"], before))


def chain_steps(path: Sequence[tuple[str, float]], before: float) -> dict[str, KindGain]:
    """Kind -> before/after along `path` (kind, time after it) starting at `before`.

    Steps that do not get below the running time (by at least what 3 decimals show) are folded into
    a neighbour, so the steps chain from `before` to the final time and the product of their ratios
    is before / after.
    """
    steps: dict[str, KindGain] = {}
    cur, last = before, None
    for kind, t in path:
        if t >= cur:
            continue
        if round(t, 3) >= round(cur, 3):   # too small for a result file's 3 decimals
            if last is not None:           # the previous step takes it; else the next one starts earlier
                steps[last] = KindGain(steps[last].before_us, t)
                cur = t
            continue
        steps[kind] = KindGain(cur, t)
        cur, last = t, kind
    return steps


def _default_impl_class(op: SimOp, strat: dict[str, int]) -> int | None:
    if isinstance(op, MatMul):
        row = np.array([[strat[f] for f in MM_FIELDS]], dtype=np.int64)
        return int(matmul_impl_class(op, row)[0])
    if isinstance(op, VectorOp):
        return int(strat["impl"])
    return None


def _class_name(op: SimOp, cls: int | None) -> str:
    if isinstance(op, MatMul) and cls is not None:
        return MATMUL_IMPLS[cls]
    if isinstance(op, VectorOp) and cls is not None:
        return f"impl{cls}"
    return "img2col_cube" if isinstance(op, Conv2D) else "default"


def _class_space(soc: Soc, op: SimOp, cls: int | None, space: FactoredSpace) -> FactoredSpace:
    if cls is None:
        return space
    if isinstance(op, MatMul):
        return _restricted(space, lambda rows: matmul_impl_class(op, rows) == cls,
                           lambda outer: matmul_class_outer(soc, op, cls, outer),
                           space.expand_impl(cls) if space.expand_impl is not None else None)
    if isinstance(op, VectorOp):
        return _restricted(space, lambda rows: rows[:, 3] == cls)
    return space


def _impl_candidates(case: OpCase, default_class: int | None,
                     implmode: str) -> Iterable[tuple[Variant, int | None]]:
    """(variant, implementation class) pairs Impl tuning explores, honouring op_select_implmode."""
    base = case.default
    if isinstance(base.sim_op, MatMul):
        for cls in MATMUL_IMPLS:
            if cls != default_class and implmode in MATMUL_IMPL_MODES[cls]:
                yield base, cls
    elif isinstance(base.sim_op, VectorOp):
        for v in case.impls:
            cls = int(v.knowledge.get("impl", 0))
            if cls != default_class and implmode in v.modes:
                yield v, cls
        return
    for v in case.impls[1:]:  # kernels other than the default (GEMV, 1x1-as-matmul, depthwise vector)
        if implmode in v.modes:
            yield v, None


def _knowledge(case: OpCase, variant: Variant, strategy: dict[str, int], impl: str) -> dict[str, Any]:
    """The bank knowledge of a tuned case: the tiling in the family's fields plus format/impl choices."""
    know: dict[str, Any] = {}
    op = variant.sim_op
    if case.family == "conv" and isinstance(op, Conv2D):
        know.update(strategy)
        n, c, h, w = op.x
        ho, wo = op.out_hw
        g = op.groups
        know.setdefault("singleCoreCi", -(-c // g))
        know.setdefault("singleCoreCo", -(-(op.weight[0] // g) // max(1, strategy["nDim"])))
        know.setdefault("singleCoreHo", -(-ho // max(1, strategy["hoDim"])))
        know.setdefault("singleCoreWo", wo)
    elif case.family == "matmul" and isinstance(op, MatMul):
        know.update(strategy)
    elif case.family == "vector" and isinstance(op, VectorOp):
        know.update(strategy)
    else:
        # a different kernel (e.g. GEMV for a matmul): keep the family's fields at their defaults so the
        # record stays CANN-valid, and the kernel's own tiling under "kernel"
        know.update(_family_placeholder(case))
        know["kernel"] = {"op": type(op).__name__, "strategy": strategy}
    if variant.knowledge.get("formats"):
        know["formats"] = list(variant.knowledge["formats"])
    if case.family != "vector":  # vector knowledge already has its integer `impl` field
        know["impl"] = impl
    return know


def _family_placeholder(case: OpCase) -> dict[str, int]:
    """Schema fields of the operator family at 0: the record says the family's kernel is not used."""
    return {f: 0 for f in schema_for(case.op_type).knowledge_fields}


def case_for(op: Any) -> OpCase:
    """The tuning case of a simulator descriptor, a single-operator description dict, or an OpCase."""
    if isinstance(op, OpCase):
        return op
    if isinstance(op, dict):
        g = single_ops_graph(op)
        return describe(g, g.ops[0])
    if isinstance(op, MatMul):
        a = [op.k, op.m] if op.trans_a else [op.m, op.k]
        b = [op.n, op.k] if op.trans_b else [op.k, op.n]
        batched = op.batch > 1 or (op.batch_b or 1) > 1
        if batched:
            a, b = [op.batch, *a], [op.batch_b or op.batch, *b]
        ins = [{"shape": a, "type": op.dtype, "format": "ND"}, {"shape": b, "type": op.dtype, "format": "ND"}]
        if op.bias:
            ins.append({"shape": [op.n], "type": op.dtype, "format": "ND"})
        out = [op.batch, op.m, op.n] if batched else [op.m, op.n]
        spec = {"op": "BatchMatMulV2" if batched else "MatMulV2", "input_desc": ins,
                "output_desc": [{"shape": out, "type": op.out_dtype, "format": "ND"}],
                "attr": {"transpose_x1": op.trans_a, "transpose_x2": op.trans_b, "has_bias": op.bias}}
        return case_for(spec)
    if isinstance(op, Conv2D):
        ho, wo = op.out_hw
        spec = {"op": "Conv2D", "input_desc": [{"shape": list(op.x), "type": op.dtype, "format": "NCHW"},
                                               {"shape": list(op.weight), "type": op.dtype, "format": "NCHW"}],
                "output_desc": [{"shape": [op.x[0], op.weight[0], ho, wo], "type": op.out_dtype, "format": "NCHW"}],
                "attr": {"strides": list(op.strides), "pads": list(op.pads), "dilations": list(op.dilations),
                         "groups": op.groups, "kernel": list(op.weight[2:]), "has_bias": op.bias}}
        if op.op_type != "Conv2D":
            raise AoeError("tune a convolution gradient through its graph operator (tune_graph) or an OpCase")
        return case_for(spec)
    if isinstance(op, VectorOp):
        attrs: dict[str, Any] = {}
        if op.axes:
            attrs["axes"] = list(op.axes)
        if op.perm:
            attrs["perm"] = list(op.perm)
        spec = {"op": op.op_type, "input_desc": [{"shape": list(op.shape), "type": op.dtype, "format": "ND"}],
                "output_desc": [{"shape": list(op.shape), "type": op.out_dtype, "format": "ND"}], "attr": attrs}
        return case_for(spec)
    raise AoeError(f"cannot tune {op!r}: give an aoe.sim descriptor, a single-operator dict or an OpCase")


def tune_op(op: Any, soc: Soc, kinds: Sequence[str] = KINDS, budget: Budget | None = None,
            measure: Measure | None = None, implmode: str = HIGH_PERFORMANCE, seed: int = 0,
            threads: int = 1) -> TuneResult:
    """Tune one operator: best strategy, before/after µs, the gain of each kind, evaluations spent."""
    return tune_case(case_for(op), soc, kinds=kinds, budget=budget, measure=measure, implmode=implmode,
                     seed=seed, threads=threads)
