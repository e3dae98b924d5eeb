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

import functools
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from ..sim import Conv2D, MatMul, SimOp, VectorOp, default_strategy, simulate_times
from ..sim.heuristics import CONV_FIELDS, MM_FIELDS, VEC_FIELDS
from ..sim.ops import DTYPE_BYTES
from ..soc import Soc
from .bounds import (
    conv_bound,
    conv_dims,
    conv_row_bound,
    matmul_bound,
    matmul_row_bound,
)
from .inner import _C, _F, MM_OUTER, ConvExpander, MatmulExpander, _align, _cdiv


def _pow2(limit: int, start: int) -> list[int]:
    out, v = [], start
    while v <= limit:
        out.append(v)
        v *= 2
    return out or [start]


def vector_space(soc: Soc, op: VectorOp) -> np.ndarray:
    """The vector tiling space: core counts, UB tile sizes, double buffering, implementations."""
    ea = DTYPE_BYTES[op.dtype]
    align = 32 // ea
    cap = (soc.ub - soc.ub_reserved) // ea
    cores = sorted({c for c in (1, 2, 4, 8, 16, 24, 32, 40, 48, 64, soc.vector_cores) if c <= soc.vector_cores})
    tiles = sorted({max(align, (cap >> s) // align * align) for s in range(1, 14)})
    rows = [list(r) for r in itertools.product(cores, tiles, (0, 1), range(op.impls))]
    return np.array(rows, dtype=np.int64).reshape(-1, len(VEC_FIELDS))


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
    """The Schedule space of one kernel model, seeded with CANN's default strategy."""
    if isinstance(op, MatMul):
        space = matmul_space(soc, op)
        space.repair = lambda rows: _mm_repair(op, rows)
        space.fallback = _mm_lean
        space.row_bound = lambda rows: matmul_row_bound(soc, op, rows, _F)
    elif isinstance(op, Conv2D):
        space = conv_space(soc, op)
        space.fallback = _conv_lean
        space.row_bound = lambda rows: conv_row_bound(soc, op, rows, _C)
    elif isinstance(op, VectorOp):
        rows = vector_space(soc, op)
        space = FactoredSpace(list(VEC_FIELDS), rows, lambda r: r, count=lambda r, limit=None: len(r))
    else:
        raise TypeError(f"no space for {op!r}")
    d = default_strategy(soc, op)
    space.seeds = np.array([[d[f] for f in space.fields]], dtype=np.int64)
    space.valid = lambda rows: _sim_valid(soc, op, rows)
    if isinstance(op, MatMul):
        space.outer_cols = list(MM_OUTER)
        _add_seed_outer(soc, space, _F["iterateOrder"])
    elif isinstance(op, Conv2D):
        space.outer_cols = [_C[f] for f in ("batchDim", "hoDim", "nDim", "groupDim", "hoL0", "woL0", "kL0", "nL0")]
        _add_seed_outer(soc, space, _C["iterateMNOrder"])
    return space


def _add_seed_outer(soc: Soc, space: FactoredSpace, order_col: int) -> None:
    """Make CANN's default outer choice (core split, per-core and base blocks) a member of the space.

    Its core split or blocks may be ones the enumeration does not produce (CANN derives them from
    its own L2 tiling, for one); with it, the space's optimum is never slower than CANN's default
    and every staging of that outer choice is searched too. Its bound is the launch time alone (a
    true but weak bound), so the beam prices it first.
    """
    seeds = space.seeds
    cols = space.outer_cols
    known = space.outer[:, cols]
    new = [r for r in seeds if not (known == r[cols]).all(axis=1).any()]
    if not new:
        return
    add = np.repeat(np.array(new, np.int64), 2, axis=0)
    add[1::2, order_col] = 1 - add[1::2, order_col]
    space.outer = np.concatenate([space.outer, add])
    if space.lower_bound is not None:
        space.lower_bound = np.concatenate([space.lower_bound, np.full(len(add), float(soc.launch_us))])
    space.upper_size = None


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

def matmul_space(soc: Soc, op: MatMul) -> FactoredSpace:
    """Outer: base block x per-core block (core split, split-K); inner: steps, order, L1 ping-pong, L2."""
    ea = DTYPE_BYTES[op.dtype]
    k0 = 32 // ea
    m16, n16, kal = _align(op.m, 16), _align(op.n, 16), _align(op.k, k0)
    batch = max(op.batch, op.batch_b or op.batch)
    cores = soc.cube_cores
    rows: list[np.ndarray] = []
    bms = _block_sizes(m16, 512, 16)
    bns = _block_sizes(n16, 512, 16)
    bks = _block_sizes(kal, 32 * k0, k0)
    for bm, bn in itertools.product(bms, bns):
        if bm * bn * 4 > soc.l0c:
            continue
        m_blk, n_blk = _cdiv(op.m, bm), _cdiv(op.n, bn)
        md = np.arange(1, min(cores, m_blk) + 1)
        nd = np.arange(1, min(cores, n_blk) + 1)
        mm_, nn_ = np.meshgrid(md, nd, indexing="ij")
        ok = mm_ * nn_ <= cores
        s_m = np.minimum(_cdiv(m_blk, mm_[ok]) * bm, m16)
        s_n = np.minimum(_cdiv(n_blk, nn_[ok]) * bn, n16)
        pairs = np.unique(np.stack([s_m, s_n], axis=1), axis=0)
        tasks = batch * _cdiv(op.m, pairs[:, 0]) * _cdiv(op.n, pairs[:, 1])
        used = np.minimum(tasks, cores)
        pairs = pairs[used * 2 >= used.max()]  # splits that leave more than half the usable cores idle are dominated
        for bk in bks:
            if bm * bk * ea > soc.l0a or bn * bk * ea > soc.l0b:
                continue
            k_opts = [op.k]
            for parts in (2, 4, 8):
                if _cdiv(op.k, parts) >= bk:
                    k_opts.append(_align(_cdiv(op.k, parts), bk))
            for s_k in sorted(set(k_opts)):
                tasks = batch * _cdiv(op.m, pairs[:, 0]) * _cdiv(op.n, pairs[:, 1]) * _cdiv(op.k, s_k)
                if s_k != op.k:  # split-K only when the output alone cannot fill the cores
                    sel = batch * _cdiv(op.m, pairs[:, 0]) * _cdiv(op.n, pairs[:, 1]) < cores
                else:
                    sel = np.ones(len(pairs), bool)
                if not sel.any():
                    continue
                p = pairs[sel]
                r = np.zeros((len(p), len(MM_FIELDS)), np.int64)
                r[:, _F["usedCoreNum"]] = np.minimum(tasks[sel], cores)
                r[:, _F["singleCoreM"]], r[:, _F["singleCoreN"]], r[:, _F["singleCoreK"]] = p[:, 0], p[:, 1], s_k
                r[:, _F["baseM"]], r[:, _F["baseN"]], r[:, _F["baseK"]] = bm, bn, bk
                rows.append(r)
    outer = np.concatenate(rows) if rows else np.zeros((0, len(MM_FIELDS)), np.int64)
    outer = _mm_default_inner(soc, op, outer)
    expand = MatmulExpander(soc, op)
    lb = np.repeat(matmul_bound(soc, op, outer[0::2], _F), 2)  # one bound per pair of iterate orders
    return FactoredSpace(list(MM_FIELDS), outer, expand, lb, expand.count, expand_many=expand.many,
                         expand_impl=expand.only,
                         expand_untiled=(lambda groups: expand.many(groups, l2=False)) if expand.l2 else None,
                         tilings=expand.tilings if expand.l2 else None)


def _block_sizes(dim: int, cap: int, align: int) -> list[int]:
    """Base-block sizes of one dimension: powers of two, and the whole (aligned) dimension or an even
    split of it into 2-4 blocks when that fits (a 112-row M is one 112 block, not 128 with padding
    or 64 + 48)."""
    out = {b for b in _pow2(cap, align) if b <= dim}
    out.update(b for b in (_align(-(-dim // j), align) for j in (1, 2, 3, 4)) if b <= cap)
    return sorted(out)


def _mm_l2_default(soc: Soc, op: MatMul, r: np.ndarray) -> None:
    """L2 tiling for operands beyond L2: 2x2 tiles as the starting point (set in place)."""
    mb = _cdiv(op.m, r[:, _F["singleCoreM"]])
    nb = _cdiv(op.n, r[:, _F["singleCoreN"]])
    r[:, _F["l2MTileBlock"]], r[:, _F["l2NTileBlock"]] = mb, nb
    r[:, _F["l2MTileCnt"]] = r[:, _F["l2NTileCnt"]] = 1
    ea = DTYPE_BYTES[op.dtype]
    if (op.m * op.k + op.k * op.n) * ea > 0.5 * soc.l2:
        bm_, bn_ = _cdiv(mb, 2), _cdiv(nb, 2)
        r[:, _F["l2MTileBlock"]], r[:, _F["l2NTileBlock"]] = bm_, bn_
        r[:, _F["l2MTileCnt"]], r[:, _F["l2NTileCnt"]] = _cdiv(mb, bm_), _cdiv(nb, bn_)
        r[:, _F["tilingEnable"]] = 1


def _mm_default_inner(soc: Soc, op: MatMul, outer: np.ndarray) -> np.ndarray:
    """Give each outer row CANN's staging: K in 256-element chunks, ping-pong where it fits; both orders."""
    ea = DTYPE_BYTES[op.dtype]
    r = outer.copy()
    bm, bn, bk = r[:, _F["baseM"]], r[:, _F["baseN"]], r[:, _F["baseK"]]
    k_iter = _cdiv(np.minimum(r[:, _F["singleCoreK"]], op.k), bk)
    step = np.maximum(1, np.minimum(k_iter, np.maximum(1, 256 // bk)))
    # the whole K panel in L1 when it fits double-buffered (no re-reads): a block whose K does not
    # divide into 256-element chunks is judged by its real potential, not by a ragged staging
    whole = (2 * k_iter * (bm + bn) * bk * ea + (r[:, _F["baseN"]] * 4 if op.bias else 0)) <= soc.l1
    step = np.where(whole, k_iter, step)
    l1_db = (2 * step * (bm + bn) * bk * ea + (r[:, _F["baseN"]] * 4 if op.bias else 0)) <= soc.l1
    r[:, _F["stepKa"]] = r[:, _F["stepKb"]] = step
    r[:, _F["stepM"]] = r[:, _F["stepN"]] = 1
    r[:, _F["depthA1"]] = r[:, _F["depthB1"]] = step * np.where(l1_db, 2, 1)
    r[:, _F["dbL0A"]] = (2 * bm * bk * ea <= soc.l0a)
    r[:, _F["dbL0B"]] = (2 * bn * bk * ea <= soc.l0b)
    r[:, _F["dbL0C"]] = (2 * bm * bn * 4 <= soc.l0c)
    _mm_l2_default(soc, op, r)
    r0, r1 = r.copy(), r.copy()
    r0[:, _F["iterateOrder"]], r1[:, _F["iterateOrder"]] = 0, 1
    both = np.empty((2 * len(r), r.shape[1]), np.int64)
    both[0::2], both[1::2] = r0, r1
    return both


# --- conv ---------------------------------------------------------------------------------------

_CONV_PIXELS = (64, 128, 256, 512)   # L0 pixel-block targets
_CONV_ROW_SPLITS = (1, 2, 4)         # the core's rows whole or cut evenly


def conv_space(soc: Soc, op: Conv2D) -> FactoredSpace:
    """Outer: core split x L0 block; inner: L1 staging (rows, K chunks), L1 ping-pong, iterate order."""
    d = conv_dims(op)
    n, h, w, kh, kw, ea, c0, g = d.n, d.h, d.w, d.kh, d.kw, d.ea, d.c0, d.g
    cin_g, co_g, ho, wo = d.cin_g, d.co_g, d.ho, d.wo
    filt = op.op_type.endswith("BackpropFilter")
    if op.op_type.endswith("BackpropInput"):
        out_h, out_w, out_c, k_al = h, w, cin_g, _align(co_g, c0) * kh * kw
    else:
        out_h, out_w, out_c, k_al = ho, wo, co_g, _align(cin_g, c0) * kh * kw
    if filt:
        out_h, out_w = ho, wo
    win = kh * kw * c0
    n_units = _cdiv(cin_g, c0) if filt else _cdiv(out_c, 16)
    splits = _conv_splits(soc.cube_cores, g, n, out_h, n_units)
    gd, bd, hd, nd = splits.T
    # L0 pixel blocks: up to four widths dividing the output row, with rows for about 64 to 512
    # pixels, and the core's rows whole or cut evenly in 2 or 4 (no ragged last block)
    wo_l0s = np.array(sorted((d for d in range(1, min(out_w, 256) + 1) if out_w % d == 0), reverse=True)[:4],
                      np.int64)
    ho_core = _cdiv(out_h, hd)
    s_i, w_i, m0 = np.meshgrid(np.arange(len(splits)), np.arange(len(wo_l0s)), np.array(_CONV_PIXELS),
                               indexing="ij")
    s_i, wo_l0, m0 = s_i.ravel(), wo_l0s[w_i.ravel()], m0.ravel()
    ho_l0 = np.maximum(1, np.minimum(ho_core[s_i], m0 // wo_l0))
    s_e, w_e, j_e = np.meshgrid(np.arange(len(splits)), np.arange(len(wo_l0s)), np.array(_CONV_ROW_SPLITS),
                                indexing="ij")
    s_i = np.concatenate([s_i, s_e.ravel()])
    wo_l0 = np.concatenate([wo_l0, wo_l0s[w_e.ravel()]])
    ho_l0 = np.concatenate([ho_l0, _cdiv(ho_core[s_e.ravel()], j_e.ravel())])
    # the L0 buffers (ping-pong on, as every staging of the space has it) bound the pixels of a block
    if filt:  # dW: the pixels are the K of both L0 operands (16 rows of each at least)
        pix_al = _cdiv(ho_l0 * wo_l0, c0) * c0
        keep = pix_al * 16 * ea * 2 <= min(soc.l0a, soc.l0b)
    else:     # the M of L0A (K at least C0) and of L0C (16 channels at least, fp32)
        pix_al = _cdiv(ho_l0 * wo_l0, 16) * 16
        keep = (pix_al * c0 * ea * 2 <= soc.l0a) & (pix_al * 16 * 4 * 2 <= soc.l0c)
    # distinct (split, hoL0, woL0): several targets collapse onto the same block when hoL0 is clipped
    key = np.unique((s_i[keep] * 4096 + ho_l0[keep]) * 4096 + wo_l0[keep])
    s_i, ho_l0, wo_l0 = key // (4096 * 4096), key // 4096 % 4096, key % 4096
    # kL0 / nL0: powers of two and the whole per-core extent or an even split of it (`_block_sizes`)
    if filt:
        k_l0s = np.array(_block_sizes(_align(co_g, 16), 128, 16), np.int64)
        n_cap = -(-_cdiv(_align(cin_g, c0) * kh * kw, nd[s_i]) // 16) * 16
        n_max = 128
    else:
        k_l0s = np.array([v for v in _pow2(8 * c0, c0) if v <= k_al], np.int64)
        n_cap = -(-_cdiv(out_c, nd[s_i]) // 16) * 16
        n_max = 256
    parts = []
    for cap in np.unique(n_cap).tolist():
        n_l0s = np.array(_block_sizes(cap, n_max, 16), np.int64)
        bi, ki, ni = np.nonzero(np.broadcast_to(n_cap[:, None, None] == cap, (len(s_i), len(k_l0s), len(n_l0s))))
        parts.append(np.stack([bi, k_l0s[ki], n_l0s[ni]], axis=1))
    bi, kl, nl = np.concatenate(parts).T if parts else (np.zeros(0, np.int64),) * 3
    pix = ho_l0[bi] * wo_l0[bi]
    if filt:  # dW: M = Cout (kL0), N = channels x window (nL0), K = pixels
        pk = _cdiv(pix, c0) * c0
        fit = (kl * pk * ea * 2 <= soc.l0a) & (nl * pk * ea * 2 <= soc.l0b) & (kl * nl * 4 * 2 <= soc.l0c)
    else:     # M = pixels, N = output channels (nL0), K = kL0
        pm = _cdiv(pix, 16) * 16
        fit = (pm * kl * ea * 2 <= soc.l0a) & (nl * kl * ea * 2 <= soc.l0b) & (pm * nl * 4 * 2 <= soc.l0c)
    bi, kl, nl = bi[fit], kl[fit], nl[fit]
    si = s_i[bi]
    rows = np.zeros((len(bi), len(CONV_FIELDS)), np.int64)
    rows[:, _C["batchDim"]], rows[:, _C["hoDim"]], rows[:, _C["nDim"]], rows[:, _C["groupDim"]] = \
        bd[si], hd[si], nd[si], gd[si]
    rows[:, _C["hoL1"]] = rows[:, _C["hoL0"]] = ho_l0[bi]
    rows[:, _C["woL1"]] = out_w
    rows[:, _C["woL0"]] = wo_l0[bi]
    rows[:, _C["kL0"]], rows[:, _C["nL0"]] = kl, nl
    # lexicographic order (ties of the bound break the same way); a column equal in every row orders nothing
    varying = [j for j in range(rows.shape[1]) if len(rows) and rows[:, j].min() != rows[:, j].max()]
    outer = rows[np.lexsort(rows[:, varying[::-1]].T)] if varying else rows
    # default inner: smallest L1 staging that is legal, full ping-pong
    outer = _conv_default_inner(soc, op, outer, filt, win, c0, k_al)
    # no staging of an outer row can go below it (rows come in pairs, one per iterate order: one bound)
    lb = np.repeat(conv_bound(soc, op, outer[0::2], _C), 2)
    expand = ConvExpander(soc, op, filt, win, c0, k_al)
    return FactoredSpace(list(CONV_FIELDS), outer, expand, lb, expand.count, expand_many=expand.many)


@functools.lru_cache(maxsize=16)
def _split_tuples(cores: int) -> np.ndarray:
    """Every (groupDim, batchDim, hoDim, nDim) whose product is at most `cores` (cached per core count)."""
    out = [(gd, bd, hd, nd) for gd in range(1, cores + 1) for bd in range(1, cores // gd + 1)
           for hd in range(1, cores // (gd * bd) + 1) for nd in range(1, cores // (gd * bd * hd) + 1)]
    arr = np.array(out, np.int64)
    arr.setflags(write=False)
    return arr


def _conv_splits(cores: int, g: int, n: int, out_h: int, n_units: int) -> np.ndarray:
    """Distinct effective core splits (g, batch, rows, channel units) within 2x the least work per core.

    A split is effective when no dimension asks for more parts than it can be cut into evenly: d parts
    of x become ceil(x / ceil(x / d)) parts, so splits that give each core the same work collapse.
    """
    t = _split_tuples(cores)
    lim = np.array([g, n, out_h, n_units])
    t = t[(t <= lim).all(axis=1)]
    eff = _cdiv(lim, _cdiv(lim, t))
    key = np.unique(((eff[:, 0] * 256 + eff[:, 1]) * 256 + eff[:, 2]) * 256 + eff[:, 3])
    splits = np.stack([key >> 24, (key >> 16) & 255, (key >> 8) & 255, key & 255], axis=1)
    loads = np.prod(_cdiv(lim, splits), axis=1)
    return splits[loads <= 2 * loads.min()]


def _conv_default_inner(soc: Soc, op: Conv2D, outer: np.ndarray, filt: bool, win: int, c0: int,
                        k_al: int) -> np.ndarray:
    """One legal L1 staging per outer conv row, in both iterate orders: what a search's outer phase prices.

    The smallest hoL1 multiple, the largest K chunk in whole windows (dW: the smallest), full ping-pong;
    a row with no legal staging is dropped. `ConvExpander` gives every staging.
    """
    if not len(outer):
        return outer.reshape(-1, len(CONV_FIELDS))
    _, c, h, _ = op.x
    ho, _ = op.out_hw
    cin_g, co_g = c // op.groups, op.weight[0] // op.groups
    c1_total = _cdiv(cin_g, c0)
    out_h = h if op.op_type.endswith("BackpropInput") else ho
    ho_core = _cdiv(out_h, outer[:, _C["hoDim"]])
    ho_l0, k_l0 = outer[:, _C["hoL0"]], outer[:, _C["kL0"]]
    mults = np.array([1, 2, 4, 8])
    hm_ok = ho_l0[:, None] * mults[None, :] <= np.maximum(ho_core, ho_l0)[:, None]
    if filt:
        ka = k_l0[:, None] * mults[None, :3]
        ka_ok = ka <= _align(co_g, 16)
        kb = win * mults[None, :3]
        kb_ok = mults[None, :3] <= _cdiv(c1_total, outer[:, _C["nDim"]])[:, None]
    else:
        ka = win * mults[None, :]
        ka_ok = (ka <= _cdiv(k_al, win) * win) & (ka % k_l0[:, None] == 0)
    ka = np.broadcast_to(ka, (len(outer), ka.shape[1]))
    ka_ok = np.broadcast_to(ka_ok, ka.shape)
    ok_row = hm_ok.any(axis=1) & ka_ok.any(axis=1) & (kb_ok.any(axis=1) if filt else True)
    i_h = np.argmax(hm_ok, axis=1)
    i_a = np.argmax(ka_ok, axis=1) if filt else ka_ok.shape[1] - 1 - np.argmax(ka_ok[:, ::-1], axis=1)
    staged = outer[ok_row].copy()
    idx = np.flatnonzero(ok_row)
    staged[:, _C["hoL1"]] = ho_l0[ok_row] * mults[i_h[ok_row]]
    staged[:, _C["kAL1"]] = ka[idx, i_a[ok_row]]
    staged[:, _C["kBL1"]] = kb[0, np.argmax(kb_ok, axis=1)[ok_row]] if filt else staged[:, _C["kAL1"]]
    out = np.repeat(staged, 2, axis=0)
    out[:, _C["pBufferFlag"]] = 31
    out[:, _C["iterateMNOrder"]] = np.tile(np.array([0, 1]), len(staged))
    return out
