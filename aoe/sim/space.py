"""Strategy spaces: every candidate a tuner may try, pruned by the hard constraints up front.

The spaces are numpy int64 arrays in the native strategy layout, so a whole space (or any slice of
it) goes to `simulate_times` in one call.
"""
from __future__ import annotations

import itertools
from typing import Iterator

import numpy as np

from ..soc import Soc
from .heuristics import MM_FIELDS, VEC_FIELDS
from .ops import DTYPE_BYTES, MatMul, VectorOp

_F = {name: i for i, name in enumerate(MM_FIELDS)}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _align(a: int, b: int) -> int:
    return _cdiv(a, b) * b


def _pow2_upto(limit: int, start: int) -> list[int]:
    out, v = [], start
    while v <= limit:
        out.append(v)
        v *= 2
    return out or [start]


def _small_dims_template() -> np.ndarray:
    """Combinations of the small fields: step K (A, B), step M/N, iterate order, L1 ping-pong (A, B).

    L0 ping-pong is not enumerated: in the model (as on the hardware) it never slows a kernel down,
    so it is on whenever the base block leaves room for it (a dominance prune, not a heuristic).
    """
    steps = [1, 2, 4, 8, 16]
    rows = [r for r in itertools.product(steps, steps, [1, 2], [1, 2], [0, 1], [0, 1], [0, 1])
            if r[0] % r[1] == 0 or r[1] % r[0] == 0]
    return np.array(rows, dtype=np.int64)


_TEMPLATE = _small_dims_template()


def matmul_space(soc: Soc, op: MatMul, split_k: bool = True, l2: bool = True) -> np.ndarray:
    """The whole matmul tiling space of `op` as one array (use `iter_matmul_space` for big ones)."""
    chunks = list(iter_matmul_space(soc, op, split_k=split_k, l2=l2))
    if not chunks:
        return np.zeros((0, len(MM_FIELDS)), dtype=np.int64)
    return np.concatenate(chunks)


def iter_matmul_space(soc: Soc, op: MatMul, split_k: bool = True, l2: bool = True) -> Iterator[np.ndarray]:
    """The matmul tiling space in chunks (one per base block and core split).

    Fields: base blocks (powers of two, fractal-aligned, fitting L0), core splits of M and N in base
    blocks (keeping those that use at least half the cores the shape can use), split-K when the
    output alone cannot fill the cores, L1 steps and ping-pong, iterate order, and L2 tiling when the
    operands exceed half of L2. Capacity rules are applied here, before any evaluation.
    """
    ea = DTYPE_BYTES[op.dtype]
    k0 = 32 // ea
    m16, n16, kal = _align(op.m, 16), _align(op.n, 16), _align(op.k, k0)
    batch = max(op.batch, op.batch_b or op.batch)
    cores = soc.cube_cores
    bms = [b for b in _pow2_upto(512, 16) if b <= m16]
    bns = [b for b in _pow2_upto(512, 16) if b <= n16]
    bks = [b for b in _pow2_upto(32 * k0, k0) if b <= kal]
    t = _TEMPLATE
    for bm, bn, bk in itertools.product(bms, bns, bks):
        if bm * bk * ea > soc.l0a or bn * bk * ea > soc.l0b or bm * bn * 4 > soc.l0c:
            continue
        m_blk, n_blk = _cdiv(op.m, bm), _cdiv(op.n, bn)
        splits = set()
        for m_dim in range(1, min(cores, m_blk) + 1):
            for n_dim in range(1, min(cores // m_dim, n_blk) + 1):
                splits.add((min(_cdiv(m_blk, m_dim) * bm, m16), min(_cdiv(n_blk, n_dim) * bn, n16)))
        usable = max(min(cores, batch * _cdiv(op.m, s_m) * _cdiv(op.n, s_n)) for s_m, s_n in splits)
        for s_m, s_n in sorted(splits):
            if min(cores, batch * _cdiv(op.m, s_m) * _cdiv(op.n, s_n)) * 2 < usable:
                continue
            mb, nb = _cdiv(op.m, s_m), _cdiv(op.n, s_n)
            k_opts = [op.k]
            if split_k and batch * mb * nb < cores:
                k_opts += [_align(_cdiv(op.k, parts), bk) for parts in (2, 4, 8) if _cdiv(op.k, parts) >= bk]
            for s_k in sorted(set(k_opts)):
                tasks = batch * mb * nb * _cdiv(op.k, s_k)
                m_iter, n_iter = _cdiv(min(s_m, op.m), bm), _cdiv(min(s_n, op.n), bn)
                k_iter = _cdiv(min(s_k, op.k), bk)
                ok = (t[:, 0] <= k_iter) & (t[:, 1] <= k_iter) & (t[:, 2] <= m_iter) & (t[:, 3] <= n_iter)
                sub = t[ok]
                if not len(sub):
                    continue
                depth_a = sub[:, 2] * sub[:, 0] * (1 + sub[:, 5])
                depth_b = sub[:, 3] * sub[:, 1] * (1 + sub[:, 6])
                l1 = (depth_a * bm + depth_b * bn) * bk * ea + (sub[:, 3] * bn * 4 if op.bias else 0)
                sub, depth_a, depth_b = sub[l1 <= soc.l1], depth_a[l1 <= soc.l1], depth_b[l1 <= soc.l1]
                if not len(sub):
                    continue
                l2_opts = [(0, 1, 1, mb, nb, 0)]
                if l2 and (op.m * op.k + op.k * op.n) * ea > 0.5 * soc.l2:
                    for cm, cn in itertools.product((1, 2, 4), repeat=2):
                        if (cm, cn) == (1, 1) or cm > mb or cn > nb:
                            continue
                        bl_m, bl_n = _cdiv(mb, cm), _cdiv(nb, cn)
                        for order in (0, 1):
                            l2_opts.append((1, _cdiv(mb, bl_m), _cdiv(nb, bl_n), bl_m, bl_n, order))
                rows = np.zeros((len(sub) * len(l2_opts), len(MM_FIELDS)), dtype=np.int64)
                for j, (en, mc, nc, bl_m, bl_n, order) in enumerate(l2_opts):
                    r = rows[j * len(sub):(j + 1) * len(sub)]
                    r[:, _F["usedCoreNum"]] = min(cores, tasks)
                    r[:, _F["singleCoreM"]] = s_m
                    r[:, _F["singleCoreN"]] = s_n
                    r[:, _F["singleCoreK"]] = s_k
                    r[:, _F["baseM"]], r[:, _F["baseN"]], r[:, _F["baseK"]] = bm, bn, bk
                    r[:, _F["depthA1"]] = depth_a
                    r[:, _F["depthB1"]] = depth_b
                    r[:, _F["stepKa"]], r[:, _F["stepKb"]] = sub[:, 0], sub[:, 1]
                    r[:, _F["stepM"]], r[:, _F["stepN"]] = sub[:, 2], sub[:, 3]
                    r[:, _F["iterateOrder"]] = sub[:, 4]
                    r[:, _F["dbL0A"]] = int(2 * bm * bk * ea <= soc.l0a)
                    r[:, _F["dbL0B"]] = int(2 * bn * bk * ea <= soc.l0b)
                    r[:, _F["dbL0C"]] = int(2 * bm * bn * 4 <= soc.l0c)
                    r[:, _F["tilingEnable"]] = en
                    r[:, _F["l2MTileCnt"]], r[:, _F["l2NTileCnt"]] = mc, nc
                    r[:, _F["l2MTileBlock"]], r[:, _F["l2NTileBlock"]] = bl_m, bl_n
                    r[:, _F["l2IterateOrder"]] = order
                yield rows


def vector_space(soc: Soc, op: VectorOp) -> np.ndarray:
    """The vector tiling space: core counts, UB tile sizes, double buffering, implementations."""
    ea = DTYPE_BYTES[op.dtype]
    align = 32 // ea
    cap = (soc.ub - soc.ub_reserved) // ea
    cores = sorted({c for c in (1, 2, 4, 8, 16, 24, 32, 40, 48, 64, soc.vector_cores) if c <= soc.vector_cores})
    tiles = sorted({max(align, (cap >> s) // align * align) for s in range(1, 14)})
    rows = [list(r) for r in itertools.product(cores, tiles, (0, 1), range(op.impls))]
    return np.array(rows, dtype=np.int64).reshape(-1, len(VEC_FIELDS))


def exhaustive_best(soc: Soc, op: MatMul, threads: int = 1) -> tuple[np.ndarray | None, float, int]:
    """Brute force over the whole matmul space: (best strategy row, its time in µs, evaluations)."""
    from .. import _sim

    best_row, best_t, n = None, float("inf"), 0
    params = op.params()
    for chunk in iter_matmul_space(soc, op):
        times, _ = _sim.simulate_times(soc.native, op.kind, params, chunk, threads)
        n += len(chunk)
        i = int(np.argmin(times))
        if times[i] < best_t:
            best_row, best_t = chunk[i].copy(), float(times[i])
    return best_row, best_t, n
