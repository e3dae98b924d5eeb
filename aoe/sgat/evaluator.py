"""The fusion-plan evaluator: many plans of one subgraph per call, in Numba nopython code.

A plan is a row of ints: one bit per internal edge (1 = producer and consumer run in one fused
kernel, the data stays on chip), then the split axis (0 = rows: every tile holds whole rows of the
kernel's main tensor; 1 = columns: every tile holds whole columns — the last axis of ND data, the
channels of NCHW data — across all rows), then the tile-size index t (the fused kernels iterate in
tiles of `TILE_BASE << t` elements per core), then the L2 flag (1 = intermediates handed from one
kernel to another stay resident in L2). Kernels are the connected components of the fused edges.
Invalid plans get `inf`:

- a value out of range; an unfused edge inside one kernel (inconsistent bits); a kernel that is not
  convex (some path leaves it and comes back: it could not run as one launch);
- a fused barrier edge (the consumer needs a whole-tensor reduction result) under the row split;
  under the column split a tile holds whole columns, so the reduction finishes inside the tile;
- under the column split: a tile smaller than one whole column, a column block narrower than the
  32-byte UB alignment, or a Softmax/LayerNorm row operator (its rows would be cut);
- a fused kernel whose live tiles (inputs, outputs, intermediates, +25% temporaries) do not fit UB
  even single-buffered, whose Cube accumulator tile does not fit L0C, whose Softmax/LayerNorm rows do
  not fit one tile, or whose on-chip Cube operand (a fused vector -> Cube edge) misses a whole K
  panel / kh rows or does not fit L1;
- with the L2 flag, a peak of live hand-off bytes above the usable L2.

Time of a plan = sum over its kernels. A lone kernel costs its default time (less the HBM time of
hand-off reads served by L2). A fused kernel costs
    launch + max(Cube compute, Vector compute, memory, tiles * per-tile set-up)   (double-buffered)
      or   compute + memory + tiles * (per-tile set-up + GM latency)    (only single buffering fits UB)
    + shared fill/set-up (largest op's + 25% of the others')
with memory = sum of each op's memory time scaled by the share of its bytes that still go to HBM
(fused reads are free; a write is free when every reader is in the kernel and nothing outside needs
it), plus atomic partials of reductions fused under the row split; under the column split every
op's memory time is divided by the DMA burst efficiency of its strided runs (run / (run + 64 B)).
Small tiles cost Cube efficiency and per-tile set-up; big tiles leave cores idle on small tensors. On separated SoCs (Ascend910B*) a Cube -> Vector edge
goes through L2 (and pays the hand-off), never UB.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numba import njit

if TYPE_CHECKING:
    from .model import RegionData

# opf columns
T, C, M, R, BYTES, CUBE, EMAIN, ROW, RED, OUTB, CROWS, CRUN = range(12)
N_OPF = 12
# edgef columns
READB, BARRIER, MINTILE, HALO = range(4)
N_EDGEF = 4
# socp entries
(S_LAUNCH, S_HBM_BPUS, S_L2_BPUS, S_UB, S_L0C, S_L1, S_L2CAP, S_TILE_US, S_SEPARATED, S_HANDOFF_US,
 S_CUBE_CORES, S_VEC_CORES, S_INSTR_US, S_LAT_US) = range(14)
N_SOCP = 14

N_SPLITS = 2           # split axis: 0 = rows (whole rows per tile), 1 = columns (whole columns per tile)
N_TILES = 8            # tile sizes TILE_BASE << 0 .. TILE_BASE << 7 elements per core tile
TILE_BASE = 512
MAX_KERNELS = 16       # bitmask width limit of the evaluator (partition caps subgraphs at 8)

INF = np.inf
CUBE_REF_TILE = 16384.0   # a 128x128 output block: smaller fused tiles cost Cube efficiency
UB_TMP = 1.25             # temporaries on top of the live tiles
DMA_OVERHEAD = 64.0       # bytes a DMA burst costs on top of its payload
UB_ALIGN = 32.0           # bytes: UB tiles (and strided column blocks) are 32-byte aligned


@njit(cache=True)
def _kernel_cost(K, split, tile, l2, edges, opf, edgef, tens, tensf, socp):
    """Time (µs) of the kernel holding the ops of bitmask K; inf when it cannot be built."""
    n = opf.shape[0]
    ne = edges.shape[0]
    hbm = socp[S_HBM_BPUS]
    ratio = hbm / socp[S_L2_BPUS]
    cnt = 0
    only = -1
    for i in range(n):
        if (K >> i) & 1:
            cnt += 1
            only = i
    if cnt == 1:
        i = only
        saved = 0.0
        if l2 == 1:
            for e in range(ne):
                if edges[e, 1] == i:
                    saved += edgef[e, READB] * (1.0 - ratio)
        frac = min(1.0, saved / opf[i, BYTES])
        c = opf[i, C]
        m = opf[i, M]
        return opf[i, T] - (max(c, m) - max(c, m * (1.0 - frac)))
    sep = socp[S_SEPARATED] > 0.5
    tile_el = float(TILE_BASE << tile)
    emax = 1.0
    has_cube = False
    for i in range(n):
        if (K >> i) & 1:
            emax = max(emax, opf[i, EMAIN])
            if opf[i, CUBE] > 0.5:
                has_cube = True
    cores = socp[S_CUBE_CORES] if has_cube else socp[S_VEC_CORES]
    used = np.ceil(emax / tile_el)
    if used > cores:
        used = cores
    ntiles = np.ceil(emax / (tile_el * cores))
    cols_in_tile = 0.0
    if split == 1:
        # whole columns per tile: the longest column (in main-tensor elements) must fit
        need = 0.0
        for i in range(n):
            if (K >> i) & 1:
                need = max(need, opf[i, CROWS] * emax / opf[i, EMAIN])
        if tile_el < need:
            return INF
        cols_in_tile = np.floor(tile_el / need)
    pen = 1.0
    if tile_el < CUBE_REF_TILE:
        pen = (CUBE_REF_TILE / tile_el) ** 0.3
    ccube = 0.0
    cvec = 0.0
    mem = 0.0
    rsum = 0.0
    rmax = 0.0
    extra = 0.0
    ub_el = 0.0
    for i in range(n):
        if not (K >> i) & 1:
            continue
        saved = 0.0
        for e in range(ne):
            if edges[e, 1] != i:
                continue
            s = edges[e, 0]
            if (K >> s) & 1:
                if edgef[e, BARRIER] > 0.5 and split == 0:
                    return INF
                if sep and opf[s, CUBE] > 0.5 and opf[i, CUBE] < 0.5:
                    saved += edgef[e, READB] * (1.0 - ratio)
                    extra += socp[S_HANDOFF_US]
                else:
                    saved += edgef[e, READB]
                if opf[i, CUBE] > 0.5:
                    # the Cube reads its operand from L1: whole K panels / kh rows, halo recomputed
                    if tile_el < edgef[e, MINTILE]:
                        return INF
                    if tile_el * edgef[e, READB] / opf[s, EMAIN] * 2.0 > socp[S_L1]:
                        return INF
                    cvec += opf[s, C] * edgef[e, HALO] / tile_el
            elif l2 == 1:
                saved += edgef[e, READB] * (1.0 - ratio)
        for t in range(tens.shape[0]):
            if tens[t, 0] != i:
                continue
            if tensf[t, 1] < 0.5 and (tens[t, 1] & ~K) == 0:
                if sep and opf[i, CUBE] > 0.5:
                    saved += tensf[t, 0] * (1.0 - ratio)
                else:
                    saved += tensf[t, 0]
        frac = min(1.0, saved / opf[i, BYTES])
        if split == 0:
            mem += opf[i, M] * (1.0 - frac)
            if opf[i, RED] > 0.5:
                # partial results of every core are accumulated atomically (read + write)
                mem += opf[i, OUTB] * used * 2.0 / hbm
            if opf[i, ROW] > 0.0 and tile_el < opf[i, ROW] * emax / opf[i, EMAIN]:
                return INF
        else:
            if opf[i, ROW] > 0.0:
                return INF
            run = cols_in_tile * opf[i, CRUN]
            if run < UB_ALIGN:
                return INF    # UB tiles are 32-byte aligned: a narrower column block cannot be moved
            mem += opf[i, M] * (1.0 - frac) * (run + DMA_OVERHEAD) / run
        if opf[i, CUBE] > 0.5:
            ccube += opf[i, C] * pen
        else:
            cvec += opf[i, C]
            # its share of a tile: every input and output it touches (the UB of the AIV core on
            # separated SoCs, of the core itself on coupled ones)
            ub_el += opf[i, BYTES] / emax
        rsum += opf[i, R]
        rmax = max(rmax, opf[i, R])
    ub_need = tile_el * ub_el * UB_TMP
    l0c_need = tile_el * 4.0 if has_cube else 0.0
    if ub_need > socp[S_UB] or l0c_need > socp[S_L0C]:
        return INF
    db = ub_need * 2.0 <= socp[S_UB] and l0c_need * 2.0 <= socp[S_L0C]
    scale = cores / used     # idle cores: the same compute on fewer of them
    comp = max(ccube, cvec) * scale
    # the Scalar unit sets up every tile (a pipe of its own: it overlaps when double-buffered)
    over = ntiles * (socp[S_TILE_US] + socp[S_INSTR_US] * cnt)
    if db:
        body = max(comp, mem, over)
    else:
        body = comp + mem + over + ntiles * socp[S_LAT_US]
    return socp[S_LAUNCH] + body + rmax + 0.25 * (rsum - rmax) + extra


@njit(cache=True)
def _evaluate(plans, edges, opf, edgef, tens, tensf, reach, anc, socp):
    n = opf.shape[0]
    ne = edges.shape[0]
    out = np.empty(plans.shape[0])
    label = np.empty(n, dtype=np.int64)
    kmask = np.empty(n, dtype=np.int64)
    rank = np.empty(n, dtype=np.int64)
    kdep = np.empty(n, dtype=np.int64)
    live = np.empty(n + 1)
    for p in range(plans.shape[0]):
        ok = True
        for e in range(ne):
            if plans[p, e] < 0 or plans[p, e] > 1:
                ok = False
        split = plans[p, ne]
        tile = plans[p, ne + 1]
        l2 = plans[p, ne + 2]
        if split < 0 or split >= N_SPLITS or tile < 0 or tile >= N_TILES or l2 < 0 or l2 > 1 or not ok:
            out[p] = INF
            continue
        # kernels = components of the fused edges (label = smallest op index)
        for i in range(n):
            label[i] = i
        changed = True
        while changed:
            changed = False
            for e in range(ne):
                if plans[p, e] == 1:
                    a = label[edges[e, 0]]
                    b = label[edges[e, 1]]
                    if a != b:
                        lo = min(a, b)
                        label[edges[e, 0]] = lo
                        label[edges[e, 1]] = lo
                        changed = True
        for e in range(ne):
            if plans[p, e] == 0 and label[edges[e, 0]] == label[edges[e, 1]]:
                ok = False
        if not ok:
            out[p] = INF
            continue
        for i in range(n):
            kmask[i] = 0
        for i in range(n):
            kmask[label[i]] |= 1 << i
        total = 0.0
        r = 0
        for k in range(n):
            K = kmask[k]
            if K == 0:
                continue
            r += 1
            desc = 0
            an = 0
            for i in range(n):
                if (K >> i) & 1:
                    desc |= reach[i]
                    an |= anc[i]
            if (desc & an) & ~K:
                ok = False
                break
            total += _kernel_cost(K, split, tile, l2, edges, opf, edgef, tens, tensf, socp)
        if not ok:
            out[p] = INF
            continue
        if l2 == 1 and total < INF:
            # execution order of the kernels: a topological order of the kernel graph
            nk = r
            for k in range(n):
                kdep[k] = 0
            for e in range(ne):
                a = label[edges[e, 0]]
                b = label[edges[e, 1]]
                if a != b:
                    kdep[b] |= 1 << a
            done = 0
            r = 0
            while r < nk:
                for k in range(n):
                    if kmask[k] != 0 and not (done >> k) & 1 and (kdep[k] & ~done) == 0:
                        rank[k] = r
                        r += 1
                        done |= 1 << k
                        break
            for s in range(r + 1):
                live[s] = 0.0
            for t in range(tens.shape[0]):
                pk = label[tens[t, 0]]
                end = -1
                for i in range(n):
                    if (tens[t, 1] >> i) & 1 and label[i] != pk:
                        end = max(end, rank[label[i]])
                if end > rank[pk]:
                    for s in range(rank[pk], end):
                        live[s] += tensf[t, 0]
            for s in range(r):
                if live[s] > socp[S_L2CAP]:
                    total = INF
        out[p] = total
    return out


@njit(cache=True)
def _kernel_costs(masks, split, tile, l2, edges, opf, edgef, tens, tensf, socp):
    out = np.empty(masks.shape[0])
    for j in range(masks.shape[0]):
        out[j] = _kernel_cost(masks[j], split, tile, l2, edges, opf, edgef, tens, tensf, socp)
    return out


def evaluate(rd: RegionData, plans: np.ndarray) -> np.ndarray:
    """Times (µs) of a batch of plans (N x plan_width ints) of one subgraph; inf when invalid."""
    plans = np.ascontiguousarray(plans, dtype=np.int64)
    if plans.ndim != 2 or plans.shape[1] != rd.plan_width:
        raise ValueError(f"plans must be rows of {rd.plan_width} ints, got shape {plans.shape}")
    return _evaluate(plans, *rd.arrays())


def kernel_costs(rd: RegionData, masks: np.ndarray, split: int, tile: int, l2: int) -> np.ndarray:
    """Times (µs) of single kernels (op bitmasks) at one split axis, tile index and L2 flag (chain DP)."""
    return _kernel_costs(np.ascontiguousarray(masks, dtype=np.int64), int(split), int(tile), int(l2), rd.edges,
                         rd.opf, rd.edgef, rd.tens, rd.tensf, rd.socp)


def unfused_plan(rd: RegionData) -> np.ndarray:
    """The unfused plan: every kernel on its own (CANN default strategy), row split, no L2 residency.

    Not the SGAT baseline: that is the compiler's default fusion (`default_fusion.default_plan`).
    """
    return np.zeros(rd.plan_width, dtype=np.int64)
