"""Default (pre-tuning) strategies: what CANN's tiling heuristics would pick.

These are the "before" of every tuning report: what the compiler runs without tuning. They follow
CANN's published defaults and the rules its tiling functions apply from the shapes and the SoC
description alone (never by running the kernel), rule by rule:

Matmul (`default_matmul`)
  M1. Base blocks: CANN's (128, 256, 64) for fp16, (256, 256, 64) with a 256 KB L0C, then the
      alternatives (256, 128), (128, 128, 128), (64, 512, 32); smaller fall-back blocks only when they
      beat those by more than 15% (too few output blocks for the cores). baseK keeps 128 B rows.
  M2. Core split (batch, M, N): each core gets one singleCoreM x singleCoreN region of whole base blocks
      (usedCoreNum = the regions, never more than the blocks); the choice minimises the busiest core's
      estimate: the larger of its Cube fractals and its bytes (A and B panels, output) at its share of
      HBM, plus a fixed cost per task it runs (task start-up and the first GM round trip); among
      splits with the same blocks per core, the squarest region (least A + B per core).
  M3. K streamed through L1 in 256-element chunks, L1 and L0 ping-pong; L2 tiling when A and B
      overflow 80% of L2 (the longer side cut first).
  M4. More cores never hurt: M1-M3 are applied with every core budget from the SoC's Cube cores
      down to one, and the tiling the price list finds fastest is the default (the full budget's among
      equals). The estimates of M1-M2 change their base block or split with the core count in ways
      the hardware's costs do not follow (a fall-back block with 16-element fp32 K rows, one more
      task per core); CANN's blockDim = min(cores, work units) never makes a bigger chip slower.
Convolution (`default_conv`: Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter)
  C1. Core split over groups, batch, output rows and channel blocks (16 output channels; for the
      filter gradient C0-channel groups of Cin, i.e. columns of Cin*kh*kw): the least estimated time of
      the busiest core (Cube fractals, img2col expansion into L0, bytes moved at its HBM share, fixed cost
      per group task), among splits within 2% of it the fewest cores.
  C2. A split of the feature map leaves every core whole rows and at least one 16-pixel fractal: a
      7x7 map is never cut over 7 cores. For the filter gradient the pixels are the reduction: a split of
      them (batch or rows) adds fp32 partial sums that every core writes atomically, which the estimate
      charges, so small maps split over Cin*kh*kw instead; it cuts the reduction by whole images
      first, and by rows only once every image has a core of its own (short rows make small L0 blocks).
  C3. L0 blocks of about 128 output pixels (whole output-row divisors), K in 64-element (fp16) steps,
      L1 holding whole kernel windows of 1-4 C0-channel groups and 1-4 L0 row blocks; full ping-pong is
      kept first (the L1 block shrinks before a buffer loses its second half); a smaller pixel block or
      N block only when those do not fit.
  C4. Depthwise convolutions are priced as CANN's depthwise kernels run them (`aoe.ops` builds the
      descriptor): the filter in C1HWNCoC0, a C0 x C0 diagonal block per C0 channels, i.e. a group conv
      of C1 groups of C0 channels on the Cube; the Vector unit's depthwise kernel is an Impl alternative.
  C5. As M4: the split C1 picks for each core budget up to the SoC's (one enumeration: a budget's
      splits are those using at most its cores), each tiled by C3, and the fastest is the default.
Vector (`default_vector`)
  V1. blockDim: rows (row operators) or 32 B blocks, as many cores as the busiest core's share needs
      (blockDim = ceil(units / ceil(units / cores))); a reduction of fewer rows than cores splits its
      rows over cores (atomic add) when every core keeps a 32 B block.
  V2. Tiles: the largest UB tile that fits with double buffering, evened out over the loop count it
      implies (Ascend C's tileLength = blockLength / tileNum: no short tail loop); a share that can be
      cut in two is, so that ping-pong has two loops in flight (BUFFER_NUM = 2). Single buffering only
      when nothing double-buffered fits.
  V3. Softmax keeps a whole row in UB when it fits (its one-pass implementation), else two passes.
  V4. As M4: V1-V3 for every core budget up to the SoC's vector cores (the distinct (impl, blockDim)
      pairs), priced in one batch, the fastest the default. A memory-bound share keeps its whole
      number of UB loops when the cores go up 1.5x while each loop gets 2/3 of the HBM share, and a
      row split over cores (impl 1) adds an atomic partial sum per core.

Every rule is a candidate list tried in order; the first candidate the simulator accepts is the
default (`default_strategy` never returns an invalid strategy). The cost estimates are coarse on
purpose: tuning still finds what they miss (pipe overlap, L1 staging, iterate order, Format, Impl).
The one use of the simulator's times is M4 / C5 / V4: it only chooses among the rule's own tilings
for smaller core budgets, which a strategy prices the same on any SoC with enough cores, so a SoC
with more cores (which considers every smaller budget too) is never slower.
"""
from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from .. import _sim
from ..soc import Soc, require_soc
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


def _fastest_budget(soc: Soc, op: SimOp, budgets: list[list[list[int]]]) -> tuple[int, int]:
    """(budget, candidate) of the default over core budgets (rules M4, C5, V4): each budget's candidates
    are its rules' tilings, best first, and its first valid one is its tiling; every candidate of every
    budget is priced in one native call, and the fastest budget's tiling wins (the earlier, fuller budget
    among equals). A tiling prices the same on any SoC with at least its cores, so a SoC with more
    cores, which considers every budget a smaller one does, is never slower."""
    rows = [c for cands in budgets for c in cands]
    if not budgets or not budgets[0]:
        raise AssertionError(f"no default tiling for {op} with all the cores")
    times, reasons = _sim.simulate_times(soc.native, op.kind, op.params(), np.asarray(rows, dtype=np.int64), 1)
    best: tuple[int, int, int] | None = None
    at = 0
    for b, cands in enumerate(budgets):
        i = next((i for i in range(len(cands)) if reasons[at + i] == 0), None)
        if i is None and b == 0:
            raise AssertionError(f"no valid default tiling for {op} with all the cores")
        if i is not None and (best is None or times[at + i] < times[best[2]]):
            best = (b, i, at + i)
        at += len(cands)
    assert best is not None
    return best[0], best[1]


def _core_split(cores: int, batch: int, m_blk: int, n_blk: int, bm: int = 1, bn: int = 1) -> tuple[int, int, int]:
    """Balanced (batchDim, mDim, nDim): fewest base blocks on the busiest core, then the squarest
    region (the least A and B a core loads: singleCoreM + singleCoreN), then fewest cores."""
    best: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None
    for b_dim in range(1, min(batch, cores) + 1):
        rest = cores // b_dim
        for m_dim in range(1, min(rest, m_blk) + 1):
            n_dim = min(rest // m_dim, n_blk)
            load = _cdiv(batch, b_dim) * _cdiv(m_blk, m_dim) * _cdiv(n_blk, n_dim)
            key = (load, _cdiv(m_blk, m_dim) * bm + _cdiv(n_blk, n_dim) * bn, b_dim * m_dim * n_dim)
            if best is None or key < best[0]:
                best = (key, (b_dim, m_dim, n_dim))
    assert best is not None
    return best[1]


def default_matmul(soc: Soc, op: MatMul) -> dict[str, int]:
    """CANN-like matmul tiling for `op` on `soc`: the fastest of rules M1-M3 over core budgets (M4)."""
    seen: set[tuple[tuple[int, ...], ...]] = set()
    budgets: list[list[dict[str, int]]] = []
    for k in range(soc.cube_cores, 0, -1):
        tries = _matmul_tries(soc, op, k)
        key = tuple(tuple(t[f] for f in MM_FIELDS) for t in tries)
        if key not in seen:  # many budgets give the same tiling: price it once
            seen.add(key)
            budgets.append(tries)
    b, i = _fastest_budget(soc, op, [[[t[f] for f in MM_FIELDS] for t in tries] for tries in budgets])
    return budgets[b][i]


def _matmul_tries(soc: Soc, op: MatMul, cores: int) -> list[dict[str, int]]:
    """Rules M1-M3 with `cores` Cube cores: the tiling, then its fall-backs (the first valid one wins)."""
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
        if rank >= canonical and best is not None and best[2] * 4 >= 3 * cores:
            break  # CANN's own blocks keep at least 3/4 of the cores busy: no need to fall back
        bm, bn = min(bm, m16), min(bn, n16)
        bk = min(max(k0, int(bk * kscale) // k0 * k0), kal)
        # L0 capacity without double buffering is the hard limit
        if bm * bk * ea > soc.l0a or bn * bk * ea > soc.l0b or bm * bn * 4 > soc.l0c:
            continue
        # busiest core's Cube work (padding and core balance included); fall-back blocks (smaller,
        # less L1 reuse) must win by more than 15%; among CANN's own, the first is preferred
        b_dim, m_dim, n_dim = _core_split(cores, batch, _cdiv(op.m, bm), _cdiv(op.n, bn), bm, bn)
        waves = _cdiv(batch, b_dim)
        s_m_e, s_n_e = _cdiv(_cdiv(op.m, bm), m_dim) * bm, _cdiv(_cdiv(op.n, bn), n_dim) * bn
        cube = waves * s_m_e * s_n_e * kal / (16 * 16 * k0)
        # what the busiest core moves (its A and B panels and its output) at its share of HBM, and a
        # fixed cost per task it runs (launch of the task's pipeline, first GM round trip)
        used_e = b_dim * m_dim * n_dim
        moved = waves * ((min(s_m_e, op.m) + min(s_n_e, op.n)) * op.k * ea + s_m_e * s_n_e * 2)
        rate = min(soc.ddr_rate, soc.hbm_gbps * soc.hbm_efficiency * 1000.0 / soc.freq_mhz / used_e)
        per_core = max(cube, moved / rate) + waves * (soc.scalar_task_cycles + soc.dma_latency_cycles)
        est = per_core * ((1.0 + 0.04 * rank) if rank < canonical else 1.15)
        used = min(cores, batch * _cdiv(op.m, bm) * _cdiv(op.n, bn))
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
    b_dim, m_dim, n_dim = _core_split(cores, batch, _cdiv(tile_m, bm), _cdiv(tile_n, bn), bm, bn)
    s_m = min(_cdiv(_cdiv(tile_m, bm), m_dim) * bm, m16)
    s_n = min(_cdiv(_cdiv(tile_n, bn), n_dim) * bn, n16)
    m_blocks, n_blocks = _cdiv(op.m, s_m), _cdiv(op.n, s_n)
    tasks = batch * m_blocks * n_blocks
    k_iter = _cdiv(min(op.k, kal), bk)
    step_k = max(1, min(k_iter, 256 // bk if bk <= 256 else 1))
    l2_m_blk, l2_n_blk = min(m_blocks, _cdiv(tile_m, s_m)), min(n_blocks, _cdiv(tile_n, s_n))
    tiling = {
        "usedCoreNum": min(cores, tasks), "singleCoreM": s_m, "singleCoreN": s_n, "singleCoreK": op.k,
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
    return tries


def _even(tile: int, length: int, align: int) -> int:
    """The aligned tile that covers `length` in as many loops as `tile` does, with equal loops."""
    return min(tile, _align(_cdiv(length, _cdiv(length, tile)), align))


def default_vector(soc: Soc, op: VectorOp, allowed_impls: set[int] | None = None) -> dict[str, int]:
    """CANN-like vector tiling: all useful cores, the largest double-buffered UB tile that fits.

    `allowed_impls` restricts the implementations (e.g. no atomic multi-core reduction under
    op_select_implmode=high_precision). The fastest of rules V1-V3 over core budgets (rule V4).
    """
    shape = _vector_rows(op)
    splits: list[tuple[int, int]] = []
    for k in range(soc.vector_cores, 0, -1):
        split = _vector_split(op, shape, k, allowed_impls)
        if split not in splits:  # the tiles depend on the core budget only through these
            splits.append(split)
    if allowed_impls is None:
        rows, counts = _vector_split_rows(soc, op, shape, splits)
        return dict(zip(VEC_FIELDS, (int(v) for v in rows[_fastest_row(soc, op, rows, counts)])))
    budgets = [_vector_cands(soc, op, shape, impl, block, allowed_impls) for impl, block in splits]
    b, i = _fastest_budget(soc, op, budgets)
    return dict(zip(VEC_FIELDS, (int(v) for v in budgets[b][i])))


def _fastest_row(soc: Soc, op: SimOp, rows: np.ndarray, counts: np.ndarray) -> int:
    """`_fastest_budget` over budgets given as one array of rows and each budget's row count: the index
    of the winning row (the first valid candidate of the fastest budget, the earlier among equals)."""
    if not len(counts) or not counts[0]:
        raise AssertionError(f"no default tiling for {op} with all the cores")
    times, reasons = _sim.simulate_times(soc.native, op.kind, op.params(), rows, 1)
    starts = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    ok = np.flatnonzero(reasons == 0)
    at = np.searchsorted(ok, starts)                      # each budget's first valid row, if it has one
    first = ok[np.minimum(at, len(ok) - 1)] if len(ok) else starts
    has = (at < len(ok)) & (first < starts + counts)
    if not has[0]:
        raise AssertionError(f"no valid default tiling for {op} with all the cores")
    t = np.where(has, times[first], np.inf)
    t[1:][np.isnan(t[1:])] = np.inf                       # (a later budget wins only by a smaller time)
    return int(first[int(np.argmin(t))])


def _vector_split_rows(soc: Soc, op: VectorOp, shape: tuple[int, int, int],
                       splits: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """`_vector_cands` of every split (impl, blockDim) at once, without `allowed_impls`: the candidate
    rows split after split, in the order it lists them, and how many each split has.

    The same rules V2-V3 on a (split x tile) grid: each split's 17 tiles (its whole share and the UB
    tiles halving down), evened out, de-duplicated and sorted per split, then the double-buffered
    candidates (of the tiles that leave two loops, else all) and the single-buffered ones.
    """
    ea = DTYPE_BYTES[op.dtype]
    align = 32 // ea
    elems, rows, row_len = shape
    impl = np.array([s[0] for s in splits], np.int64)[:, None]
    block = np.array([s[1] for s in splits], np.int64)[:, None]
    per_core = -(-(-(-elems // block)) // align) * align
    cap = (soc.ub - soc.ub_reserved) // ea
    ub_tiles = np.array([(cap >> s) // align * align for s in range(16)], np.int64)[None, :]
    tiles = np.concatenate([per_core, np.minimum(per_core, ub_tiles)], axis=1)
    keep = tiles >= align
    t = np.where(keep, tiles, align)                      # (dropped tiles: any value that divides safely)

    def even(length: Any) -> np.ndarray:                  # `_even` of every tile
        return np.minimum(t, -(-(-(-length // -(-length // t))) // align) * align)

    share_rows = -(-rows // block)
    if op.axes and op.op_type not in ("Transpose", "TransData"):
        per_row = np.maximum(1, t // row_len)
        whole = -(-(-(-share_rows // -(-share_rows // per_row)) * row_len) // align) * align
        other, other_share = np.where(t >= row_len, whole, even(row_len)), share_rows * row_len
        other_one = share_rows >= 2
    else:
        other, other_share, other_one = even(per_core), per_core, per_core >= 2 * align
    split_share = -(-row_len // block)                   # impl 1: the row is split over the cores
    one = impl == 1
    tiles = np.where(one, even(split_share), other)
    share = np.where(one, split_share, other_share)
    one_loop = np.where(one, split_share >= 2 * align, other_one)
    # de-duplicated, largest first (dropped tiles as -1, sorted last)
    tiles = -np.sort(-np.where(keep, tiles, -1), axis=1)
    kept = tiles > 0
    kept[:, 1:] &= tiles[:, 1:] != tiles[:, :-1]
    two = kept & ~(one_loop & (tiles >= share))
    db1 = np.where(two.any(axis=1, keepdims=True), two, kept)
    softmax_fit = op.op_type == "SoftmaxV2"
    n, m = tiles.shape
    pairs = 2 if softmax_fit else 1
    out = np.empty((n, 2, m, pairs, 4), np.int64)         # split, db (1 then 0), tile, [softmax pair], field
    out[..., 0] = block[:, :, None, None]
    out[..., 1] = tiles[:, None, :, None]
    out[:, 0, ..., 2], out[:, 1, ..., 2] = 1, 0
    out[..., 3] = impl[:, :, None, None]
    if softmax_fit:
        out[..., 0, 3] = np.where(tiles >= row_len, 2, impl)[:, None, :]
    mask = np.broadcast_to(np.stack([db1, kept], axis=1)[..., None], (n, 2, m, pairs))
    return out[mask], mask.reshape(n, -1).sum(axis=1)


def _vector_rows(op: VectorOp) -> tuple[int, int, int]:
    """(elements, rows, row length) of the native model: a row is the reduced extent x the width after
    the last reduced axis."""
    elems = op.elements
    if op.axes and op.op_type not in ("Transpose", "TransData"):
        reduced = int(np.prod([op.shape[a] for a in op.axes], dtype=np.float64))
        row_len = reduced * int(np.prod(op.shape[max(op.axes) + 1:], dtype=np.float64))
        return elems, max(1, elems // max(1, row_len)), row_len
    return elems, elems, 1


def _vector_split(op: VectorOp, shape: tuple[int, int, int], cores: int,
                  allowed_impls: set[int] | None) -> tuple[int, int]:
    """Rule V1 with `cores` vector cores: (impl, blockDim); `shape` is `_vector_rows(op)`."""
    align = 32 // DTYPE_BYTES[op.dtype]
    elems, rows, row_len = shape
    units = rows if op.axes else _cdiv(elems, align)
    impl = 0
    # (a row shorter than two 32 B blocks has nothing to split: impl 1 needs a block per core)
    if (op.op_type.startswith("Reduce") and rows < cores and op.impls > 1
            and row_len >= 2 * align and (allowed_impls is None or 1 in allowed_impls)):
        impl = 1  # too few rows to keep the cores busy: split rows and accumulate atomically
        units = max(1, min(cores, row_len // align))  # a full 32 B block per core at least
    block = max(1, min(cores, units))
    return impl, _cdiv(units, _cdiv(units, block))  # as many cores as the busiest core's share needs


def _vector_cands(soc: Soc, op: VectorOp, shape: tuple[int, int, int], impl: int, block: int,
                  allowed_impls: set[int] | None) -> list[list[int]]:
    """Rules V2-V3 for a split of `block` cores: the candidates, best first (the first valid one wins)."""
    ea = DTYPE_BYTES[op.dtype]
    align = 32 // ea
    elems, rows, row_len = shape
    per_core = _align(_cdiv(elems, block), align)
    cap = (soc.ub - soc.ub_reserved) // ea
    # largest first: the whole per-core share, then UB-sized tiles halving down; each one evened out
    # over the loop count it implies (Ascend C's tileLength = blockLength / tileNum), so no short tail
    tiles = sorted({per_core} | {min(per_core, (cap >> s) // align * align) for s in range(16)}, reverse=True)
    tiles = [t for t in tiles if t >= align]
    share_rows = _cdiv(rows, block)
    if impl == 1:
        share = _cdiv(row_len, block)
        tiles = [_even(t, share, align) for t in tiles]
        one_loop = share >= 2 * align
    elif op.axes and op.op_type not in ("Transpose", "TransData"):
        tiles = [_align(_cdiv(share_rows, _cdiv(share_rows, t // row_len)) * row_len, align) if t >= row_len
                 else _even(t, row_len, align) for t in tiles]
        share, one_loop = share_rows * row_len, share_rows >= 2
    else:
        tiles = [_even(t, per_core, align) for t in tiles]
        share, one_loop = per_core, per_core >= 2 * align
    tiles = sorted(set(tiles), reverse=True)
    # ping-pong needs two loops in flight: with double buffering a share that can be cut in two is
    # (Ascend C's BUFFER_NUM = 2); a single loop is left to the single-buffered candidates
    two = [t for t in tiles if not (one_loop and t >= share)]
    softmax_fit = op.op_type == "SoftmaxV2"
    cands = []
    for db in (1, 0):
        for t in (two or tiles) if db else tiles:
            cands.append([block, t, db, 2 if softmax_fit and t >= row_len else impl])
            if softmax_fit:
                cands.append([block, t, db, impl])
    if allowed_impls is not None:
        cands = [c for c in cands if c[3] in allowed_impls] or [[block, t, 1, min(allowed_impls)] for t in tiles]
    return cands


def _divisor_at_most(x: int, limit: int) -> int:
    """Largest divisor of x that is <= limit (>= 1)."""
    for d in range(min(x, limit), 0, -1):
        if x % d == 0:
            return d
    return 1


def _conv_split(soc: Soc, op: Conv2D, out_h: int, out_w: int, n_units: int,
                k_al: int) -> list[tuple[int, ...]]:
    """(groupDim, batchDim, hoDim, nDim): the core split with the least estimated time per core, for
    each core budget from the SoC's cores down to one (distinct splits, the full budget's first).

    The estimate is what a tiling function can know without running the kernel: the busiest core's
    Cube fractals (pixels and channels padded to 16, K to C0), its img2col expansion into L0 (which a
    split of the channels does not shrink), the bytes it moves (its feature-map patch with halo,
    its weight slice, its output, fp32 partial sums when the reduction of a filter gradient is split)
    at its share of the chip's HBM bandwidth, and the Scalar unit's issue of its L0 blocks (rule C3's
    ~128-pixel blocks, fewer pixels when the core holds few rows); the largest of the four, plus a
    fixed cost per group task it runs. A spatial split must leave every core
    whole output rows and at least one 16-pixel fractal; among splits within 2% of the best estimate
    the one with fewest cores wins (fewer partial sums, fewer duplicated weight loads). The splits a
    budget of k cores enumerates are exactly those of the full budget using at most k cores, so one
    enumeration serves every budget.
    """
    n, c, h, w = op.x
    cout, _, kh, kw = op.weight
    ea, eo = DTYPE_BYTES[op.dtype], DTYPE_BYTES[op.out_dtype]
    c0 = 32 // ea
    g = op.groups
    cin_g, co_g = c // g, cout // g
    sh = op.strides[0]
    ekh = op.dilations[0] * (kh - 1) + 1
    filt = op.op_type.endswith("BackpropFilter")
    dx = op.op_type.endswith("BackpropInput")
    cores = soc.cube_cores
    chip_bpc = soc.hbm_gbps * soc.hbm_efficiency * 1000.0 / soc.freq_mhz
    in_c = _align(co_g if dx else cin_g, c0)           # channels of the map that is read
    in_h, in_w = (op.out_hw if dx else (h, w))
    step = 1 if dx else sh
    # img2col (load3d) expands the patch into L0 at about half the plain copy rate (the simulator's
    # inferred constant); a 1x1 stride-1 conv is a plain copy
    load3d = 1.0 if kh * kw == 1 and op.strides == (1, 1) else 0.5
    fixed = soc.scalar_task_cycles + soc.dma_latency_cycles  # per task (a group is a task of its own)
    wo_l0 = _divisor_at_most(out_w, 128)
    seen: set[tuple[int, ...]] = set()
    scored: list[tuple[float, int, tuple[int, ...]]] = []
    # (each level's effective parts and per-core share computed in its own loop: the same values)
    for gd in range(1, min(g, cores) + 1):
        g_d = _cdiv(g, _cdiv(g, gd))
        g_c = _cdiv(g, g_d)
        for bd in range(1, min(n, cores // gd) + 1):
            b_d = _cdiv(n, _cdiv(n, bd))
            n_c = _cdiv(n, b_d)
            for hd in range(1, min(out_h, cores // (gd * bd)) + 1):
                h_d = _cdiv(out_h, _cdiv(out_h, hd))
                rows = _cdiv(out_h, h_d)
                for nd in range(1, min(n_units, cores // (gd * bd * hd)) + 1):
                    n_d = _cdiv(n_units, _cdiv(n_units, nd))
                    dims = (g_d, b_d, h_d, n_d)
                    if dims in seen:
                        continue
                    seen.add(dims)
                    u_c = _cdiv(n_units, n_d)
                    if dims[2] > 1 and rows * out_w < 16:
                        continue  # a core would get less than one fractal of output pixels
                    if filt and dims[2] > 1 and dims[1] < n:
                        continue  # dW cuts its reduction by whole images first, rows only past the batch
                    used = dims[0] * dims[1] * dims[2] * dims[3]
                    pix = n_c * rows * out_w
                    # L0 pixel blocks as C3 cuts them: whole-row divisors of ~128 pixels within the core's rows
                    l0_pix = n_c * _cdiv(rows, max(1, min(rows, 128 // wo_l0))) * (out_w // wo_l0)
                    patch_rows = min(in_h, (rows - 1) * step + ekh) if not dx else min(in_h, _cdiv(rows + ekh, sh))
                    if filt:
                        n_core = u_c * c0 * kh * kw  # dW columns: C0-channel groups x kernel window
                        cube = _cdiv(co_g, 16) * _cdiv(n_core, 16) * _cdiv(pix, c0)
                        expand = _align(pix, c0) * n_core * ea / (soc.l1_to_l0b_rate * load3d)
                        blocks = l0_pix * _cdiv(co_g, 128) * _cdiv(n_core, min(n_core, 128, 4 * c0 * kh * kw))
                        split_k = dims[1] * dims[2] > 1
                        moved = (co_g * pix + n_c * patch_rows * w * u_c * c0) * ea \
                            + _align(co_g, 16) * n_core * (4 if split_k else eo)
                    else:
                        n_core = u_c * 16
                        cube = _cdiv(pix, 16) * u_c * (k_al // c0)
                        expand = _align(pix, 16) * k_al * ea / (soc.l1_to_l0a_rate * load3d)
                        blocks = l0_pix * _cdiv(n_core, 256) * _cdiv(k_al, 128 // ea)
                        moved = (n_c * patch_rows * in_w * in_c + n_core * k_al) * ea + pix * n_core * eo
                    rate = min(soc.ddr_rate, chip_bpc / used)
                    scalar = blocks * soc.scalar_iter_cycles  # issuing ~128-pixel L0 blocks
                    scored.append((g_c * (max(cube, expand, moved / rate, scalar) + fixed), used, dims))
    assert scored, "no core split"
    # For each budget k: among the splits using at most k cores, the least (cores, estimate, dims) of those
    # within 2% of their least estimate. With the splits sorted by that key once, a budget's splits are a
    # head of them, its least estimate the running minimum, and its pick the first of the head within 2%.
    ranked = sorted((u, e, d) for e, u, d in scored)
    least_of_head, least = [], math.inf
    for _, e, _ in ranked:
        least = min(least, e)
        least_of_head.append(least)
    picks: list[tuple[int, ...]] = []
    end = len(ranked)
    for k in range(cores, 0, -1):
        while end and ranked[end - 1][0] > k:
            end -= 1
        if not end:
            raise ValueError("min() arg is an empty sequence")  # (no split within the budget)
        limit = 1.02 * least_of_head[end - 1]
        pick = next(d for _, e, d in ranked[:end] if e <= limit)
        if pick not in picks:
            picks.append(pick)
    return picks


def default_conv(soc: Soc, op: Conv2D) -> dict[str, int]:
    """CANN-like Conv2D / backprop tiling: core split by estimate (rules C1, C2), ~128-pixel L0 blocks;
    the fastest of those over core budgets (rule C5)."""
    out_h, out_w, _, k_al, n_units = _conv_dims(op)
    splits = _conv_split(soc, op, out_h, out_w, n_units, k_al)
    # every split's rule-C3 candidates built at once and checked in one native call; each split's first
    # valid one in rule order (ping-pong first), the fall-backs only for a split without any
    cands, ho_core = _conv_cands_grid(op, splits)
    reasons = _valid(soc, op, cands.reshape(-1, cands.shape[-1])).reshape(len(splits), -1)
    ok = reasons[:, _PING_PONG_FIRST] == 0
    first = np.asarray(_PING_PONG_FIRST)[ok.argmax(axis=1)]
    tilings = [dict(zip(CONV_FIELDS, (int(v) for v in cands[s, first[s]]))) if ok[s].any() else
               _conv_pick(soc, op, cands[s].tolist(), reasons[s], int(ho_core[s])) for s in range(len(splits))]
    b, _ = _fastest_budget(soc, op, [[[t[f] for f in CONV_FIELDS]] if t is not None else [] for t in tilings])
    return tilings[b]  # type: ignore[return-value]  # _fastest_budget picks a budget with a tiling


def _conv_dims(op: Conv2D) -> tuple[int, int, int, int, int]:
    """(out_h, out_w, out_c, K aligned, N units) of the map a core split cuts."""
    _, c, h, w = op.x
    cout, _, kh, kw = op.weight
    c0 = 32 // DTYPE_BYTES[op.dtype]
    cin_g, co_g = c // op.groups, cout // op.groups
    if op.op_type.endswith("BackpropInput"):
        out_h, out_w, out_c, k_al = h, w, cin_g, _align(co_g, c0) * kh * kw
    else:
        out_h, out_w, out_c, k_al = op.out_hw[0], op.out_hw[1], co_g, _align(cin_g, c0) * kh * kw
    n_units = _cdiv(cin_g, c0) if op.op_type.endswith("BackpropFilter") else _cdiv(out_c, 16)  # dW: C0 groups
    return out_h, out_w, out_c, k_al, n_units


def _conv_tiling(soc: Soc, op: Conv2D, split: tuple[int, ...]) -> dict[str, int] | None:
    """Rule C3 for the core split (groupDim, batchDim, hoDim, nDim): the first valid tiling, else None."""
    cands, ho_core = _conv_cands(soc, op, split)
    return _conv_pick(soc, op, cands, _valid(soc, op, cands), ho_core)


# rule C3's candidates of a split in the order they are tried: the full ping-pong ones first
_PING_PONG_FIRST = sorted(range(36), key=lambda i: i % 4)


def _conv_cands(soc: Soc, op: Conv2D, split: tuple[int, ...]) -> tuple[list[list[int]], int]:
    """Rule C3's candidate tilings of a core split (36, in rule order), and the output rows per core."""
    cands, ho_core = _conv_cands_grid(op, [split])
    return cands[0].tolist(), int(ho_core[0])


def _conv_cands_grid(op: Conv2D, splits: list[tuple[int, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """Rule C3's candidate tilings of every core split (groupDim, batchDim, hoDim, nDim): an array of
    splits x 36 rows in rule order (L1 rows 4, 2, 1 L0 blocks; K chunks of 4, 2, 1 windows; ping-pong
    31, 15, 12, 0), and each split's output rows per core."""
    c = op.x[1]
    cout, _, kh, kw = op.weight
    ea = DTYPE_BYTES[op.dtype]
    c0 = 32 // ea
    g = op.groups
    wo = op.out_hw[1]
    cin_g, co_g = c // g, cout // g
    filt = op.op_type.endswith("BackpropFilter")
    out_h, out_w, out_c, k_al, _ = _conv_dims(op)
    sp = np.array(splits, np.int64).reshape(-1, 4)
    gd, bd, hd, nd = (sp[:, i] for i in range(4))
    ho_core = -(-out_h // hd)
    wo_l0 = _divisor_at_most(out_w, 128)
    ho_l0 = np.maximum(1, np.minimum(ho_core, 128 // wo_l0))
    win = kh * kw * c0  # L1 stages whole kernel windows of C0-channel groups
    if filt:
        k_l0 = min(_align(co_g, 16), 128)  # Cout block of dW
    else:
        k_l0 = min(64 * 2 // ea, k_al)
        n_l0 = np.minimum(-(-(-(-out_c // nd)) // 16) * 16, 256)
    c1_core = -(-_cdiv(cin_g, c0) // nd)
    out = np.zeros((len(sp), 3, 3, 4, 14), np.int64)   # split, L1 rows, K chunk, ping-pong, field
    out[..., 0], out[..., 1], out[..., 2], out[..., 3] = (x[:, None, None, None] for x in (bd, hd, nd, gd))
    for a, ho_mult in enumerate((4, 2, 1)):
        ho_l1 = np.minimum(ho_core // ho_l0 * ho_l0, ho_l0 * ho_mult)
        out[:, a, ..., 4] = np.where(ho_l1 == 0, ho_l0, ho_l1)[:, None, None]
    out[..., 5] = out_w if not filt else wo
    for b, k_steps in enumerate((4, 2, 1)):
        if filt:
            # kBL1 = whole windows of k_steps channel groups; nL0 a multiple of 16 dividing it
            k_b1 = win * np.minimum(k_steps, c1_core)
            n_l0_c = np.minimum(128, -(-k_b1 // 16) * 16)
            for d in range(16, 129, 16):     # the largest divisor from 128 down wins: set it last
                n_l0_c = np.where(k_b1 % d == 0, d, n_l0_c)
            k_a1, k_l0_c = k_l0, k_l0
        else:
            k_a1 = min(win * k_steps, _cdiv(k_al, win) * win)
            k_b1, n_l0_c = k_a1, n_l0
            k_l0_c = math.gcd(k_a1, k_l0)  # kL0 must divide the L1 K chunks
        out[:, :, b, :, 6] = k_a1
        out[:, :, b, :, 7] = k_b1[:, None, None] if filt else k_b1
        out[:, :, b, :, 10] = k_l0_c
        out[:, :, b, :, 11] = n_l0_c[:, None, None]
    out[..., 8] = ho_l0[:, None, None, None]
    out[..., 9] = wo_l0
    out[..., 12] = np.array([31, 15, 12, 0], np.int64)
    return out.reshape(len(sp), 36, 14), ho_core


def _conv_pick(soc: Soc, op: Conv2D, cands: list[list[int]], reasons: np.ndarray, ho_core: int) -> dict[str, int] | None:
    """The first valid of a split's rule-C3 candidates (`reasons`: theirs), else of the smaller fall-backs."""
    out_w = _conv_dims(op)[1]
    # ping-pong first: the L1 block shrinks before a buffer loses its second half (rule C3)
    for i in sorted(range(len(cands)), key=lambda i: i % 4):
        if reasons[i] == 0:
            return dict(zip(CONV_FIELDS, (int(v) for v in cands[i])))
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
    return next((dict(zip(CONV_FIELDS, (int(v) for v in cand))) for cand, r in zip(small, reasons2) if r == 0), None)


def default_strategy(soc: Soc, op: SimOp) -> dict[str, int]:
    """The heuristic strategy CANN would use for `op` on `soc` (a `Soc` value; `aoe.sim.default_strategy`
    also takes a name)."""
    return dict(_default_strategy(soc if isinstance(soc, Soc) else require_soc(soc, "default_strategy"), op))


# A case's default is asked for several times while it is tuned (the space's seed, the price before
# tuning, each layout variant): derive it once. Soc and the operators are frozen values, so the
# cache key is the whole description; callers get a copy.
@functools.lru_cache(maxsize=4096)
def _default_strategy(soc: Soc, op: SimOp) -> dict[str, int]:
    if isinstance(op, MatMul):
        return default_matmul(soc, op)
    if isinstance(op, VectorOp):
        return default_vector(soc, op)
    if isinstance(op, Conv2D):
        return default_conv(soc, op)
    raise TypeError(f"not a simulator operator: {op!r}")
