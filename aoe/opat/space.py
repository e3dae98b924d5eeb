"""Schedule spaces as *factored* spaces: outer choices (block shapes, core split) x inner choices.

A tiling space is the product of a few "outer" decisions that fix the shape of the work (base block,
per-core block, L0 block) and many "inner" decisions that only decide how that work is staged
(L1 steps, ping-pong, iterate order, L2 tiling). Keeping them apart lets a search price every outer
choice once with a good inner default, then spend the rest of its budget on the inner choices of
the promising ones, while `chunks()` still enumerates the whole space for brute force.

Hard constraints (buffer capacity, fractal alignment, whole kernel windows in L1) prune the space
before anything is evaluated; whatever slips through is rejected by the simulator with a reason.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from .. import _sim
from ..sim import Conv2D, MatMul, SimOp, VectorOp, default_strategy, simulate_times
from ..sim.heuristics import CONV_FIELDS, MM_FIELDS, VEC_FIELDS
from ..sim.ops import DTYPE_BYTES
from ..soc import Soc
from .bounds import _cdiv, conv_row_bound, matmul_row_bound
from .inner import _C, _F, MM_OUTER, ConvExpander, MatmulExpander, conv_shape, matmul_shape


def vector_space(soc: Soc, op: VectorOp) -> np.ndarray:
    """The vector tiling space: core counts, UB tile sizes, double buffering, implementations."""
    ea = DTYPE_BYTES[op.dtype]
    align = 32 // ea
    cap = (soc.ub - soc.ub_reserved) // ea
    cores = sorted({c for c in (1, 2, 4, 8, 16, 24, 32, 40, 48, 64, soc.vector_cores) if c <= soc.vector_cores})
    tiles = sorted({max(align, (cap >> s) // align * align) for s in range(1, 14)})
    # every combination, the first field varying slowest (itertools.product's order)
    grid = np.meshgrid(np.array(cores, np.int64), np.array(tiles, np.int64), np.array([0, 1], np.int64),
                       np.arange(op.impls, dtype=np.int64), indexing="ij")
    return np.stack([g.ravel() for g in grid], axis=1)


@dataclass
class FactoredSpace:
    """Outer rows (with a default inner configuration) and a function expanding them to all inner ones."""

    fields: list[str]
    outer: np.ndarray                                  # one row per outer choice, inner fields at a default
    expand: Callable[[np.ndarray], np.ndarray]          # outer rows -> every inner variant of each
    lower_bound: np.ndarray | None = None              # a cheap lower bound on each outer row's time (µs)
    # size of expand(rows) without building it; with a limit, counting may stop at any total above it
    count: Callable[..., int] | None = None
    upper_size: int | None = None                      # known bound on the size (a restricted space: its parent's)
    seeds: np.ndarray | None = None                    # known good starting points (CANN's default strategy)
    repair: Callable[[np.ndarray], np.ndarray] | None = None  # re-derive dependent fields after a change
    valid: Callable[[np.ndarray], np.ndarray] | None = None   # hard-constraint check (no measurement)
    outer_cols: list[int] | None = None                # fields that identify an outer choice
    fallback: Callable[[np.ndarray], np.ndarray] | None = None  # outer rows -> their leanest staging
    parent: FactoredSpace | None = None                # a restricted space: its size is at most the parent's
    at_least: int = 0                                  # a lower bound on the size (a count that stopped early)
    # expand of several groups of outer rows in one pass: (rows, start of each group + the end)
    expand_many: Callable[[list[np.ndarray]], tuple[np.ndarray, np.ndarray]] | None = None
    # an expander of only one implementation class's rows (matmul: `matmul_impl_class`)
    expand_impl: Callable[[int], Any] | None = None
    # a lower bound on each whole strategy's time (µs), at least its outer choice's (`bounds.py`)
    row_bound: Callable[[np.ndarray], np.ndarray] | None = None
    # spaces whose stagings come with L2-tiling variants: `expand_many` without them, and the variants
    # of untiled rows with the index of the row each comes from (no variant's `row_bound` is below
    # its untiled staging's: tiling only adds waves)
    expand_untiled: Callable[[list[np.ndarray]], tuple[np.ndarray, np.ndarray]] | None = None
    tilings: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None

    def member(self, rows: np.ndarray) -> np.ndarray:
        """True for rows whose outer choice is one of the space's (inner fields are not checked)."""
        if self.outer_cols is None or not len(rows):
            return np.ones(len(rows), bool)
        if getattr(self, "_outer_keys", None) is None:
            self._outer_keys = {r.tobytes() for r in np.ascontiguousarray(self.outer[:, self.outer_cols])}
        keys = np.ascontiguousarray(rows[:, self.outer_cols])
        return np.array([k.tobytes() in self._outer_keys for k in keys], bool)

    def expand_groups(self, groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """`expand` of each group of outer rows, concatenated, and where each group's rows start (+ the end)."""
        if self.expand_many is not None and groups:
            return self.expand_many(groups)
        parts = [self.expand(g) for g in groups]
        bounds = np.zeros(len(parts) + 1, np.int64)
        np.cumsum([len(p) for p in parts], out=bounds[1:])
        return (np.concatenate(parts) if parts else np.zeros((0, len(self.fields)), np.int64)), bounds

    def size_at_most(self, limit: int) -> bool:
        """True if the whole space has at most `limit` strategies (cheap when `count` is known)."""
        if len(self.outer) > limit:
            return False
        if self.upper_size is None and self.parent is not None:
            # at most its parent's size, counted only as far as a search needs it: most spaces are far
            # larger than the budget, and counting stops once the count passes the limit asked about
            p = self.parent
            if p.upper_size is None and p.count is not None:
                if p.at_least > limit:
                    return False
                n = int(p.count(p.outer, limit))
                if n > limit:
                    p.at_least = max(p.at_least, n)
                    return False
                p.upper_size = n
            self.upper_size = p.upper_size
        if self.upper_size is not None:
            return self.upper_size <= limit
        if self.count is not None:
            self.upper_size = int(self.count(self.outer)) + (len(self.seeds) if self.seeds is not None else 0)
            return self.upper_size <= limit
        total = 0
        for chunk in self.chunks(256):
            total += len(chunk)
            if total > limit:
                return False
        return True

    def chunks(self, chunk_outer: int = 64) -> Iterator[np.ndarray]:
        """The whole space, in chunks (brute force): the seeds (CANN's default) first, as members."""
        if self.seeds is not None and len(self.seeds):
            yield self.seeds
        for i in range(0, len(self.outer), chunk_outer):
            yield self.expand(self.outer[i:i + chunk_outer])

    def all_rows(self) -> np.ndarray:
        """The whole space as one array (small spaces only; use `chunks` for big ones)."""
        chunks = list(self.chunks())
        return np.concatenate(chunks) if chunks else np.zeros((0, len(self.fields)), np.int64)


def space_for(soc: Soc, op: SimOp) -> FactoredSpace:
    """The Schedule space of one kernel model, seeded with CANN's default strategy.

    CANN's default outer choice (core split, per-core and base blocks) is made a member of a Cube
    space: its split or blocks may be ones the enumeration does not produce (CANN derives them from
    its own L2 tiling, for one). With it, the space's optimum is never slower than CANN's default and
    every staging of that outer choice is searched too. Its bound is the launch time alone (a true
    but weak bound), so the beam prices it first.
    """
    fields = MM_FIELDS if isinstance(op, MatMul) else CONV_FIELDS if isinstance(op, Conv2D) else \
        VEC_FIELDS if isinstance(op, VectorOp) else None
    if fields is None:
        raise TypeError(f"no space for {op!r}")
    d = default_strategy(soc, op)
    seeds = np.array([[d[f] for f in fields]], dtype=np.int64)
    if isinstance(op, MatMul):
        space = matmul_space(soc, op, seeds[0])
        space.repair = lambda rows: _mm_repair(op, rows)
        space.fallback = _mm_lean
        space.row_bound = lambda rows: matmul_row_bound(soc, op, rows, _F)
        space.outer_cols = list(MM_OUTER)
    elif isinstance(op, Conv2D):
        space = conv_space(soc, op, seeds[0])
        space.fallback = _conv_lean
        space.row_bound = lambda rows: conv_row_bound(soc, op, rows, _C)
        space.outer_cols = [_C[f] for f in ("batchDim", "hoDim", "nDim", "groupDim", "hoL0", "woL0", "kL0", "nL0")]
    else:
        rows = vector_space(soc, op)
        space = FactoredSpace(list(VEC_FIELDS), rows, lambda r: r, count=lambda r, limit=None: len(r))
    space.seeds = seeds
    space.valid = lambda rows: _sim_valid(soc, op, rows)
    return space


def _mm_lean(outer: np.ndarray) -> np.ndarray:
    """The smallest L1 staging of each matmul outer row: one K step, one block, no L1 ping-pong."""
    r = outer.copy()
    for f in ("stepKa", "stepKb", "stepM", "stepN", "depthA1", "depthB1"):
        r[:, _F[f]] = 1
    return r


def _conv_lean(outer: np.ndarray) -> np.ndarray:
    """The smallest L1 staging of each conv outer row: one L0 block of rows, one K chunk, no L1 ping-pong."""
    r = outer.copy()
    r[:, _C["hoL1"]] = r[:, _C["hoL0"]]
    r[:, _C["woL1"]] = r[:, _C["woL0"]]
    r[:, _C["pBufferFlag"]] = 28
    return r


def _sim_valid(soc: Soc, op: SimOp, rows: np.ndarray) -> np.ndarray:
    """The kernel model's capacity/alignment/consistency rules: the reason code is 0."""
    if not len(rows):
        return np.zeros(0, bool)
    return simulate_times(soc, op, rows)[1] == 0


def _mm_repair(op: MatMul, rows: np.ndarray) -> np.ndarray:
    """Keep a changed matmul row self-consistent: L1 depths follow the steps, L2 counts the blocks."""
    r = rows.copy()
    for depth, step, step_k in (("depthA1", "stepM", "stepKa"), ("depthB1", "stepN", "stepKb")):
        unit = r[:, _F[step]] * r[:, _F[step_k]]
        r[:, _F[depth]] = np.where(r[:, _F[depth]] >= 2 * unit, 2 * unit, unit)
    used = np.minimum(r[:, _F["usedCoreNum"]], max(op.batch, op.batch_b or op.batch)
                      * _cdiv(op.m, r[:, _F["singleCoreM"]]) * _cdiv(op.n, r[:, _F["singleCoreN"]])
                      * _cdiv(op.k, r[:, _F["singleCoreK"]]))
    r[:, _F["usedCoreNum"]] = np.maximum(1, used)
    mb, nb = _cdiv(op.m, r[:, _F["singleCoreM"]]), _cdiv(op.n, r[:, _F["singleCoreN"]])
    r[:, _F["l2MTileBlock"]] = np.clip(r[:, _F["l2MTileBlock"]], 1, mb)
    r[:, _F["l2NTileBlock"]] = np.clip(r[:, _F["l2NTileBlock"]], 1, nb)
    r[:, _F["l2MTileCnt"]] = _cdiv(mb, r[:, _F["l2MTileBlock"]])
    r[:, _F["l2NTileCnt"]] = _cdiv(nb, r[:, _F["l2NTileBlock"]])
    return r


# --- matmul -------------------------------------------------------------------------------------

def matmul_space(soc: Soc, op: MatMul, seed: np.ndarray | None = None) -> FactoredSpace:
    """Outer: base block x per-core block (core split, split-K); inner: steps, order, L1 ping-pong, L2.

    The outer rows come from `aoe._sim.matmul_space` (csrc/space_matmul.cpp), in this order: base
    blocks M x N (powers of two, or the whole aligned dimension or an even split of it into 2-4
    blocks, up to 512; the L0C block fits), the distinct per-core blocks of every core split
    sorted (splits leaving more than half the usable cores idle dropped), base K blocks (up to 32
    fractals, fitting L0A and L0B), then the per-core K: all of K, or K cut in 2, 4 or 8 (split-K,
    only where the output alone cannot fill the cores). Each has CANN's staging (K in 256-element
    chunks, or the whole K panel when it fits L1 double-buffered; L1 and L0 ping-pong where they
    fit; 2 x 2 L2 tiles for operands beyond half of L2) in both iterate orders, and one lower bound
    for the pair (`bounds.py`). `seed`: a strategy whose outer choice is added at the end (with the
    launch time as its bound) when it is not one of them.
    """
    seed = np.zeros(0, np.int64) if seed is None else np.asarray(seed, np.int64)
    outer, lb = _sim.matmul_space(soc.native, matmul_shape(soc, op), seed)
    expand = MatmulExpander(soc, op)
    return FactoredSpace(list(MM_FIELDS), outer, expand, lb, expand.count, expand_many=expand.many,
                         expand_impl=expand.only,
                         expand_untiled=(lambda groups: expand.many(groups, l2=False)) if expand.l2 else None,
                         tilings=expand.tilings if expand.l2 else None)


# --- conv ---------------------------------------------------------------------------------------

def conv_space(soc: Soc, op: Conv2D, seed: np.ndarray | None = None) -> FactoredSpace:
    """Outer: core split x L0 block; inner: L1 staging (rows, K chunks), L1 ping-pong, iterate order.

    The outer rows come from `aoe._sim.conv_space` (csrc/space_conv.cpp), in lexicographic order of
    the strategy fields:
    - core splits: the distinct effective splits of groups, batch, output rows and channel units
      within 2x the least work per core (`_conv_splits`);
    - L0 pixel blocks: up to four widths dividing the output row, with rows for about 64 to 512
      pixels, and the core's rows whole or cut evenly in 2 or 4 (no ragged last block); the L0
      buffers with ping-pong bound their pixels;
    - kL0 / nL0: powers of two and the whole per-core extent or an even split of it (dW: Cout and
      channels x window), fitting L0A, L0B and L0C with ping-pong.
    Each row has one legal default staging (the smallest hoL1, the largest K chunk in whole windows,
    dW the smallest; full ping-pong; rows without one are dropped) in both iterate orders, and one
    lower bound for the pair (`bounds.py`). `ConvExpander` gives every staging. `seed`: a strategy
    whose outer choice is added at the end (with the launch time as its bound) when it is not one
    of them.
    """
    seed = np.zeros(0, np.int64) if seed is None else np.asarray(seed, np.int64)
    outer, lb = _sim.conv_space(soc.native, conv_shape(op), seed)
    expand = ConvExpander(soc, op)
    return FactoredSpace(list(CONV_FIELDS), outer, expand, lb, expand.count, expand_many=expand.many)


def _conv_splits(cores: int, g: int, n: int, out_h: int, n_units: int) -> np.ndarray:
    """Distinct effective core splits (g, batch, rows, channel units) within 2x the least work per core.

    A split is effective when no dimension asks for more parts than it can be cut into evenly: d parts
    of x become ceil(x / ceil(x / d)) parts, so splits that give each core the same work collapse.
    """
    return _sim.conv_splits(cores, g, n, out_h, n_units)
