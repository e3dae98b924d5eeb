"""Default (pre-tuning) strategies: what CANN's tiling heuristics would pick.

These are the "before" of every tuning report, so they follow CANN's published defaults (base block
(128, 256, 64) for fp16 on Atlas A2, (256, 256, 64) with a 256 KB L0C, K streamed through L1 in
256-element chunks with L1 and L0 ping-pong, balanced multi-core split, L2 tiling when the operands
do not fit in L2) rather than a strawman.
"""
from __future__ import annotations

import math

import numpy as np

from .. import _sim
from ..soc import Soc, load_soc
from .ops import DTYPE_BYTES, Conv2D, MatMul, SimOp, VectorOp

MM_FIELDS: list[str] = list(_sim.strategy_fields(_sim.K_MATMUL))
VEC_FIELDS: list[str] = list(_sim.strategy_fields(_sim.K_VECTOR))
CONV_FIELDS: list[str] = list(_sim.strategy_fields(_sim.K_CONV))


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _valid(soc: Soc, op: SimOp, rows: list[list[int]]) -> np.ndarray:
    _, reasons = _sim.simulate_times(soc.native, op.kind, op.params(), np.asarray(rows, dtype=np.int64), 1)
    return reasons


def _core_split(cores: int, batch: int, m_blk: int, n_blk: int) -> tuple[int, int, int]:
    """Balanced (batchDim, mDim, nDim): fewest base blocks on the busiest core, then fewest cores."""
    best: tuple[tuple[int, int], tuple[int, int, int]] | None = None
    for b_dim in range(1, min(batch, cores) + 1):
        rest = cores // b_dim
        for m_dim in range(1, min(rest, m_blk) + 1):
            n_dim = min(rest // m_dim, n_blk)
            load = _cdiv(batch, b_dim) * _cdiv(m_blk, m_dim) * _cdiv(n_blk, n_dim)
            key = (load, b_dim * m_dim * n_dim)
            if best is None or key < best[0]:
                best = (key, (b_dim, m_dim, n_dim))
    assert best is not None
    return best[1]


def default_matmul(soc: Soc, op: MatMul) -> dict[str, int]:
    """CANN-like matmul tiling for `op` on `soc`."""
    ea = DTYPE_BYTES[op.dtype]
    k0 = 32 // ea
    kscale = 2 / ea  # baseK 64 for fp16 = 128 B per row of a fractal group; keep the bytes
    # CANN's base blocks, then smaller ones it falls back to when the output has too few blocks to
    # keep every core busy (small M or N): the estimate below picks the best-balanced one.
    cands = [(128, 256, 64), (256, 128, 64), (128, 128, 128), (64, 512, 32), (128, 128, 64), (64, 256, 64),
             (256, 64, 64), (64, 128, 128), (128, 64, 128), (64, 64, 128), (32, 128, 128), (128, 32, 128)]
    canonical = 4
    if soc.l0c >= 256 * 1024:
        cands.insert(0, (256, 256, 64))
        canonical = 5
    m16, n16, kal = _align(op.m, 16), _align(op.n, 16), _align(op.k, k0)
    batch = max(op.batch, op.batch_b or op.batch)
    best = None
    for rank, (bm, bn, bk) in enumerate(cands):
        if rank >= canonical and best is not None and best[2] * 4 >= 3 * soc.cube_cores:
            break  # CANN's own blocks keep at least 3/4 of the cores busy: no need to fall back
        bm, bn = min(bm, m16), min(bn, n16)
        bk = min(max(k0, int(bk * kscale) // k0 * k0), kal)
        # L0 capacity without double buffering is the hard limit
        if bm * bk * ea > soc.l0a or bn * bk * ea > soc.l0b or bm * bn * 4 > soc.l0c:
            continue
        # busiest core's Cube work (padding and core balance included); fall-back blocks (smaller,
        # less L1 reuse) must win by more than 15%; among CANN's own, the first is preferred
        b_dim, m_dim, n_dim = _core_split(soc.cube_cores, batch, _cdiv(op.m, bm), _cdiv(op.n, bn))
        per_core = (_cdiv(batch, b_dim) * _cdiv(_cdiv(op.m, bm), m_dim) * _cdiv(_cdiv(op.n, bn), n_dim)
                    * bm * bn * kal)
        est = per_core * ((1.0 + 0.04 * rank) if rank < canonical else 1.15)
        used = min(soc.cube_cores, batch * _cdiv(op.m, bm) * _cdiv(op.n, bn))
        if best is None or (est, rank) < (best[0], best[1]):
            best = (est, rank, used, bm, bn, bk)
    assert best is not None, "no base block fits L0; SoC buffers are implausibly small"
    _, _, _, bm, bn, bk = best
    # L2 tiling first (when A and B together overflow L2): cut M and N into L2 tiles whose operand
    # panels fit, splitting the longer side; every tile is then spread over all cores.
    mc = nc = 1
    if (op.m * op.k + op.k * op.n) * ea > 0.8 * soc.l2:
        while (_cdiv(op.m, mc) + _cdiv(op.n, nc)) * op.k * ea > 0.8 * soc.l2 and (mc * bm < op.m or nc * bn < op.n):
            if (_cdiv(op.m, mc) >= _cdiv(op.n, nc) and mc * bm < op.m) or nc * bn >= op.n:
                mc += 1
            else:
                nc += 1
    tile_m, tile_n = _cdiv(op.m, mc), _cdiv(op.n, nc)
    b_dim, m_dim, n_dim = _core_split(soc.cube_cores, batch, _cdiv(tile_m, bm), _cdiv(tile_n, bn))
    s_m = min(_cdiv(_cdiv(tile_m, bm), m_dim) * bm, m16)
    s_n = min(_cdiv(_cdiv(tile_n, bn), n_dim) * bn, n16)
    m_blocks, n_blocks = _cdiv(op.m, s_m), _cdiv(op.n, s_n)
    tasks = batch * m_blocks * n_blocks
    k_iter = _cdiv(min(op.k, kal), bk)
    step_k = max(1, min(k_iter, 256 // bk if bk <= 256 else 1))
    l2_m_blk, l2_n_blk = min(m_blocks, _cdiv(tile_m, s_m)), min(n_blocks, _cdiv(tile_n, s_n))
    tiling = {
        "usedCoreNum": min(soc.cube_cores, tasks), "singleCoreM": s_m, "singleCoreN": s_n, "singleCoreK": op.k,
        "baseM": bm, "baseN": bn, "baseK": bk, "depthA1": 2 * step_k, "depthB1": 2 * step_k,
        "stepM": 1, "stepN": 1, "iterateOrder": 0 if s_m <= s_n else 1, "stepKa": step_k, "stepKb": step_k,
        "dbL0A": int(2 * bm * bk * ea <= soc.l0a), "dbL0B": int(2 * bn * bk * ea <= soc.l0b),
        "dbL0C": int(2 * bm * bn * 4 <= soc.l0c),
        "l2MTileCnt": _cdiv(m_blocks, l2_m_blk), "l2NTileCnt": _cdiv(n_blocks, l2_n_blk),
        "l2MTileBlock": l2_m_blk, "l2NTileBlock": l2_n_blk, "l2IterateOrder": 0, "tilingEnable": int(mc * nc > 1),
    }
    # Degrade gracefully if the L1 does not hold the ping-pong buffers (bias, huge K steps).
    tries = [tiling]
    single = dict(tiling, depthA1=step_k, depthB1=step_k)
    tries.append(single)
    tries.append(dict(single, stepKa=1, stepKb=1, depthA1=1, depthB1=1))
    rows = [[t[f] for f in MM_FIELDS] for t in tries]
    reasons = _valid(soc, op, rows)
    for t, r in zip(tries, reasons):
        if r == 0:
            return t
    raise AssertionError(f"default matmul tiling invalid ({_sim.REASONS[int(reasons[0])]}) for {op}")


def default_vector(soc: Soc, op: VectorOp, allowed_impls: set[int] | None = None) -> dict[str, int]:
    """CANN-like vector tiling: all useful cores, the largest double-buffered UB tile that fits.

    `allowed_impls` restricts the implementations (e.g. no atomic multi-core reduction under
    op_select_implmode=high_precision).
    """
    ea = DTYPE_BYTES[op.dtype]
    align = 32 // ea
    elems = op.elements
    rows = elems
    row_len = 1
    if op.axes and op.op_type not in ("Transpose", "TransData"):
        # the native model's rows: reduced extent x the contiguous width after the last reduced axis
        reduced = int(np.prod([op.shape[a] for a in op.axes], dtype=np.float64))
        inner = int(np.prod(op.shape[max(op.axes) + 1:], dtype=np.float64))
        row_len = reduced * inner
        rows = max(1, elems // max(1, row_len))
    units = rows if op.axes else _cdiv(elems, align)
    impl = 0
    # (a row shorter than two 32 B blocks has nothing to split: impl 1 needs a block per core)
    if (op.op_type.startswith("Reduce") and rows < soc.vector_cores and op.impls > 1
            and row_len >= 2 * align and (allowed_impls is None or 1 in allowed_impls)):
        impl = 1  # too few rows to keep the cores busy: split rows and accumulate atomically
        units = max(1, min(soc.vector_cores, _cdiv(row_len, align)))
    block = max(1, min(soc.vector_cores, units))
    per_core = _align(_cdiv(elems, block), align)
    cap = (soc.ub - soc.ub_reserved) // ea
    # largest first: the whole per-core share, then UB-sized tiles halving down
    tiles = sorted({per_core} | {min(per_core, (cap >> s) // align * align) for s in range(16)}, reverse=True)
    tiles = [t for t in tiles if t >= align]
    softmax_fit = op.op_type == "SoftmaxV2"
    cands = []
    for db in (1, 0):
        for t in tiles:
            cands.append([block, t, db, 2 if softmax_fit and t >= row_len else impl])
            if softmax_fit:
                cands.append([block, t, db, impl])
    if allowed_impls is not None:
        cands = [c for c in cands if c[3] in allowed_impls] or [[block, t, 1, min(allowed_impls)] for t in tiles]
    reasons = _valid(soc, op, cands)
    for c, r in zip(cands, reasons):
        if r == 0:
            return dict(zip(VEC_FIELDS, (int(v) for v in c)))
    raise AssertionError(f"no valid default vector tiling for {op}")


def _divisor_at_most(x: int, limit: int) -> int:
    """Largest divisor of x that is <= limit (>= 1)."""
    for d in range(min(x, limit), 0, -1):
        if x % d == 0:
            return d
    return 1


def default_conv(soc: Soc, op: Conv2D) -> dict[str, int]:
    """CANN-like Conv2D / backprop tiling: batch then output rows over cores, ~128-pixel L0 blocks."""
    n, c, h, w = op.x
    cout, _, kh, kw = op.weight
    ea = DTYPE_BYTES[op.dtype]
    c0 = 32 // ea
    g = op.groups
    ho, wo = op.out_hw
    cin_g, co_g = c // g, cout // g
    cores = soc.cube_cores
    filt = op.op_type.endswith("BackpropFilter")
    if op.op_type.endswith("BackpropInput"):
        out_h, out_w, out_c, k_al = h, w, cin_g, _align(co_g, c0) * kh * kw
    else:
        out_h, out_w, out_c, k_al = ho, wo, co_g, _align(cin_g, c0) * kh * kw
    n_units = _cdiv(cin_g, c0) if filt else _cdiv(out_c, 16)  # dW splits N by C0-channel groups
    # Balanced split over groups, batch, output rows and channel blocks: least work on the busiest
    # core, then fewest cores; each dim is normalised so that no core is left without a block.
    best = None
    for gd in range(1, min(g, cores) + 1):
        for bd in range(1, min(n, cores // gd) + 1):
            for hd in range(1, min(out_h, cores // (gd * bd)) + 1):
                nd = min(n_units, cores // (gd * bd * hd))
                dims = [_cdiv(x, _cdiv(x, d)) for x, d in ((g, gd), (n, bd), (out_h, hd), (n_units, nd))]
                load = _cdiv(g, dims[0]) * _cdiv(n, dims[1]) * _cdiv(out_h, dims[2]) * _cdiv(n_units, dims[3])
                key = (load, dims[0] * dims[1] * dims[2] * dims[3])
                if best is None or key < best[0]:
                    best = (key, dims)
    assert best is not None
    gd, bd, hd, nd = best[1]
    ho_core = _cdiv(out_h, hd)
    wo_l0 = _divisor_at_most(out_w, 128)
    ho_l0 = max(1, min(ho_core, 128 // wo_l0))
    win = kh * kw * c0  # L1 stages whole kernel windows of C0-channel groups
    if filt:
        k_l0 = min(_align(co_g, 16), 128)  # Cout block of dW
    else:
        k_l0 = min(64 * 2 // ea, k_al)
        n_l0 = min(_align(_cdiv(out_c, nd), 16), 256)
    c1_core = _cdiv(_cdiv(cin_g, c0), nd)
    cands = []
    for ho_mult in (4, 2, 1):
        ho_l1 = min(ho_core // ho_l0 * ho_l0, ho_l0 * ho_mult) or ho_l0
        for k_steps in (4, 2, 1):
            if filt:
                # kBL1 = whole windows of k_steps channel groups; nL0 a multiple of 16 dividing it
                k_a1 = k_l0
                k_b1 = win * min(k_steps, c1_core)
                n_l0_c = next((d for d in range(128, 15, -16) if k_b1 % d == 0), min(128, _align(k_b1, 16)))
                k_l0_c = k_l0
            else:
                k_a1 = min(win * k_steps, _cdiv(k_al, win) * win)
                k_b1, n_l0_c = k_a1, n_l0
                k_l0_c = math.gcd(k_a1, k_l0)  # kL0 must divide the L1 K chunks
            for pbuf in (31, 15, 12, 0):
                cands.append([bd, hd, nd, gd, ho_l1, out_w if not filt else wo, k_a1, k_b1, ho_l0, wo_l0, k_l0_c,
                              n_l0_c, pbuf, 0])
    reasons = _valid(soc, op, cands) if cands else np.array([_sim.REASONS.index("inconsistent")])
    for cand, r in zip(cands, reasons):
        if r == 0:
            return dict(zip(CONV_FIELDS, (int(v) for v in cand)))
    # Fallback for shapes the blocks above do not fit (a prime output width leaves 1-pixel L0 rows
    # that the L1 block cannot step over; a 16x16 patch-embedding kernel overflows L1 with whole rows):
    # smaller L1/L0 pixel blocks, then the narrowest N block, the way CANN shrinks its tiling.
    small = []
    for ho_b in (4, 2, 1):
        for wo_b in sorted({_divisor_at_most(out_w, lim) for lim in (64, 16, 8)} | {min(out_w, 16)}, reverse=True):
            if ho_b > ho_core or wo_b > out_w:
                continue
            for c in cands[::4]:
                for n_l0_f in sorted({c[11], 16}, reverse=True):
                    for pbuf in (31, 0):
                        small.append([*c[:4], ho_b, wo_b, *c[6:8], ho_b, wo_b, c[10], n_l0_f, pbuf, 0])
    reasons2 = _valid(soc, op, small) if small else np.array([], dtype=np.int64)
    for cand, r in zip(small, reasons2):
        if r == 0:
            return dict(zip(CONV_FIELDS, (int(v) for v in cand)))
    raise AssertionError(f"no valid default conv tiling for {op} ({_sim.REASONS[int(reasons[0])]})")


def default_strategy(soc: Soc | str, op: SimOp) -> dict[str, int]:
    """The heuristic strategy CANN would use for `op` on `soc` (a `Soc`, a SoC name or an .ini path)."""
    soc = load_soc(soc)
    if isinstance(op, MatMul):
        return default_matmul(soc, op)
    if isinstance(op, VectorOp):
        return default_vector(soc, op)
    if isinstance(op, Conv2D):
        return default_conv(soc, op)
    raise TypeError(f"not a simulator operator: {op!r}")
