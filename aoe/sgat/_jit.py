"""The fusion-plan evaluator's Numba code: the cost formulas of evaluator.py's docstring, compiled once.

Imported only by `evaluator._jitted()` (it points Numba's cache at the user's cache directory first);
never import it directly. The arithmetic is written in the order of the model's formulas and Numba
compiles without fastmath (LLVM then never contracts a * b + c into one rounding: bench/sgat_parity.py
and tests/test_sgat_golden.py check the bits), so every plan costs the same bits on every machine.
`_max`/`_min` follow Python's rule (the first argument unless the second compares strictly beyond
it), which fixes how a NaN or a tie is resolved. A divisor taken from the input arrays is checked:
a zero (only broken input: a zero byte count, core count or bandwidth) sets an error code instead of
producing inf or NaN, and evaluator.py raises Python's ZeroDivisionError.

The array layout and model constants are repeated here rather than imported: Numba's cache is keyed
by this file alone, so constants read from another file could go stale in it; evaluator.py refuses
to load this module when the two copies differ.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

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
N_SPLITS = 2
N_TILES = 8
TILE_BASE = 512
MAX_KERNELS = 16
CUBE_REF_TILE = 16384.0
UB_TMP = 1.25
DMA_OVERHEAD = 64.0
UB_ALIGN = 32.0

INF = np.inf
# error codes of a plan (0 = priced)
ERR_ZERO_DIVISION = 1   # a divisor from the input arrays is zero
ERR_CYCLE = 2           # the kernels of a plan form a cycle (reach/anc disagree with edges)
CHUNK = 512             # plans per task of the parallel evaluator (scratch arrays allocated once per task)

# error_model="numpy": no hidden zero checks (the divisors that can be zero are checked explicitly)
_JIT = dict(cache=True, nogil=True, error_model="numpy")


@njit(**_JIT)
def _max(a, b):
    return b if b > a else a


@njit(**_JIT)
def _min(a, b):
    return b if b < a else a


@njit(**_JIT)
def kernel_cost(K, split, tile, l2, edges, opf, edgef, tens, tensf, socp):
    """(time in µs of the kernel holding the ops of bitmask K, inf when it cannot be built; error code)."""
    n = opf.shape[0]
    ne = edges.shape[0]
    hbm = socp[S_HBM_BPUS]
    if socp[S_L2_BPUS] == 0.0:
        return INF, ERR_ZERO_DIVISION
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
        if opf[i, BYTES] == 0.0:
            return INF, ERR_ZERO_DIVISION
        frac = _min(1.0, saved / opf[i, BYTES])
        c = opf[i, C]
        m = opf[i, M]
        return opf[i, T] - (_max(c, m) - _max(c, m * (1.0 - frac))), 0
    sep = socp[S_SEPARATED] > 0.5
    tile_el = float(TILE_BASE << tile)   # > 0: plain divisions by it below
    emax = 1.0   # >= 1 (_max never takes a NaN second argument): plain divisions by it
    has_cube = False
    for i in range(n):
        if (K >> i) & 1:
            emax = _max(emax, opf[i, EMAIN])
            if opf[i, CUBE] > 0.5:
                has_cube = True
    cores = socp[S_CUBE_CORES] if has_cube else socp[S_VEC_CORES]
    used = np.ceil(emax / tile_el)
    if used > cores:
        used = cores
    if tile_el * cores == 0.0:
        return INF, ERR_ZERO_DIVISION
    ntiles = np.ceil(emax / (tile_el * cores))
    cols_in_tile = 0.0
    if split == 1:
        # whole columns per tile: the longest column (in main-tensor elements) must fit
        need = 0.0
        for i in range(n):
            if (K >> i) & 1:
                if opf[i, EMAIN] == 0.0:
                    return INF, ERR_ZERO_DIVISION
                need = _max(need, opf[i, CROWS] * emax / opf[i, EMAIN])
        if tile_el < need:
            return INF, 0
        if need == 0.0:
            return INF, ERR_ZERO_DIVISION
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
                    return INF, 0
                if sep and opf[s, CUBE] > 0.5 and opf[i, CUBE] < 0.5:
                    saved += edgef[e, READB] * (1.0 - ratio)
                    extra += socp[S_HANDOFF_US]
                else:
                    saved += edgef[e, READB]
                if opf[i, CUBE] > 0.5:
                    # the Cube reads its operand from L1: whole K panels / kh rows, halo recomputed
                    if tile_el < edgef[e, MINTILE]:
                        return INF, 0
                    if opf[s, EMAIN] == 0.0:
                        return INF, ERR_ZERO_DIVISION
                    if tile_el * edgef[e, READB] / opf[s, EMAIN] * 2.0 > socp[S_L1]:
                        return INF, 0
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
        if opf[i, BYTES] == 0.0:
            return INF, ERR_ZERO_DIVISION
        frac = _min(1.0, saved / opf[i, BYTES])
        if split == 0:
            mem += opf[i, M] * (1.0 - frac)
            if opf[i, RED] > 0.5:
                # partial results of every core are accumulated atomically (read + write)
                if hbm == 0.0:
                    return INF, ERR_ZERO_DIVISION
                mem += opf[i, OUTB] * used * 2.0 / hbm
            if opf[i, ROW] > 0.0:
                if opf[i, EMAIN] == 0.0:
                    return INF, ERR_ZERO_DIVISION
                if tile_el < opf[i, ROW] * emax / opf[i, EMAIN]:
                    return INF, 0
        else:
            if opf[i, ROW] > 0.0:
                return INF, 0
            run = cols_in_tile * opf[i, CRUN]
            # UB tiles are 32-byte aligned: a narrower column block cannot be moved
            if run < UB_ALIGN:
                return INF, 0
            mem += opf[i, M] * (1.0 - frac) * (run + DMA_OVERHEAD) / run
        if opf[i, CUBE] > 0.5:
            ccube += opf[i, C] * pen
        else:
            cvec += opf[i, C]
            # its share of a tile: every input and output it touches
            ub_el += opf[i, BYTES] / emax
        rsum += opf[i, R]
        rmax = _max(rmax, opf[i, R])
    ub_need = tile_el * ub_el * UB_TMP
    l0c_need = tile_el * 4.0 if has_cube else 0.0
    if ub_need > socp[S_UB] or l0c_need > socp[S_L0C]:
        return INF, 0
    db = ub_need * 2.0 <= socp[S_UB] and l0c_need * 2.0 <= socp[S_L0C]
    if used == 0.0:
        return INF, ERR_ZERO_DIVISION
    scale = cores / used   # idle cores: the same compute on fewer of them
    comp = _max(ccube, cvec) * scale
    # the Scalar unit sets up every tile (a pipe of its own: it overlaps when double-buffered)
    over = ntiles * (socp[S_TILE_US] + socp[S_INSTR_US] * float(cnt))
    if db:
        body = _max(_max(comp, mem), over)
    else:
        body = comp + mem + over + ntiles * socp[S_LAT_US]
    return socp[S_LAUNCH] + body + rmax + 0.25 * (rsum - rmax) + extra, 0


@njit(**_JIT)
def label_kernels(row, edges, ne, n, label):
    """Each op labelled with the smallest op index of its component over the fused edges among the
    first `ne` edges (a fixpoint, so every edge order agrees)."""
    for i in range(n):
        label[i] = i
    changed = True
    while changed:
        changed = False
        for e in range(ne):
            if row[e] != 1:
                continue
            s = edges[e, 0]
            d = edges[e, 1]
            if label[s] != label[d]:
                lo = label[s] if label[s] < label[d] else label[d]
                label[s] = lo
                label[d] = lo
                changed = True


@njit(**_JIT)
def _evaluate_range(lo, hi, plans, edges, opf, edgef, tens, tensf, reach, anc, socp, out, err):
    """Times of plans lo..hi-1 into out (error codes into err)."""
    n = opf.shape[0]
    ne = edges.shape[0]
    width = ne + 3
    row = np.empty(width, dtype=np.int64)
    label = np.empty(n, dtype=np.int64)
    kmask = np.empty(n, dtype=np.int64)
    rank = np.empty(n, dtype=np.int64)
    kdep = np.empty(n, dtype=np.int64)
    live = np.empty(n + 1)
    for p in range(lo, hi):
        # one read of the row: the plan cannot change under the checks below
        for j in range(width):
            row[j] = plans[p, j]
        ok = True
        for e in range(ne):
            if row[e] < 0 or row[e] > 1:
                ok = False
        split = row[ne]
        tile = row[ne + 1]
        l2 = row[ne + 2]
        if split < 0 or split >= N_SPLITS or tile < 0 or tile >= N_TILES or l2 < 0 or l2 > 1 or not ok:
            out[p] = INF
            continue
        # kernels = components of the fused edges (label = smallest op index)
        label_kernels(row, edges, ne, n, label)
        for e in range(ne):
            if row[e] == 0 and label[edges[e, 0]] == label[edges[e, 1]]:
                ok = False
        if not ok:
            out[p] = INF
            continue
        for i in range(n):
            kmask[i] = 0
        for i in range(n):
            kmask[label[i]] |= np.int64(1) << i
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
            if (desc & an) & ~K:   # a path leaves the kernel and comes back: not convex
                ok = False
                break
            cost, code = kernel_cost(K, split, tile, l2, edges, opf, edgef, tens, tensf, socp)
            if code != 0:
                err[p] = code
                return
            total += cost
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
                    kdep[b] |= np.int64(1) << a
            done = 0
            r = 0
            while r < nk:
                k = 0
                while k < n and not (kmask[k] != 0 and not (done >> k) & 1 and (kdep[k] & ~done) == 0):
                    k += 1
                # convex kernels of a DAG always leave one ready: none means reach/anc contradict the edges
                if k == n:
                    err[p] = ERR_CYCLE
                    return
                rank[k] = r
                r += 1
                done |= np.int64(1) << k
            for s in range(r + 1):
                live[s] = 0.0
            for t in range(tens.shape[0]):
                pk = label[tens[t, 0]]
                end = -1
                for i in range(n):
                    if (tens[t, 1] >> i) & 1 and label[i] != pk:
                        ri = rank[label[i]]
                        if ri > end:
                            end = ri
                if end > rank[pk]:
                    for s in range(rank[pk], end):
                        live[s] += tensf[t, 0]
            for s in range(r):
                if live[s] > socp[S_L2CAP]:
                    total = INF
        out[p] = total


@njit(**_JIT)
def evaluate(plans, edges, opf, edgef, tens, tensf, reach, anc, socp, out, err):
    """Times of every plan into out, on this thread."""
    _evaluate_range(0, plans.shape[0], plans, edges, opf, edgef, tens, tensf, reach, anc, socp, out, err)


@njit(parallel=True, **_JIT)
def evaluate_parallel(plans, edges, opf, edgef, tens, tensf, reach, anc, socp, out, err):
    """Times of every plan into out, chunks of CHUNK plans spread over Numba's threads (same bits:
    every plan is priced alone)."""
    count = plans.shape[0]
    chunks = (count + CHUNK - 1) // CHUNK
    for c in prange(chunks):
        lo = c * CHUNK
        hi = min(lo + CHUNK, count)
        _evaluate_range(lo, hi, plans, edges, opf, edgef, tens, tensf, reach, anc, socp, out, err)


@njit(**_JIT)
def kernel_costs(masks, split, tile, l2, edges, opf, edgef, tens, tensf, socp, out, err):
    """Times of single kernels (op bitmasks) into out; stops at the first error (code into err[0])."""
    for j in range(masks.shape[0]):
        cost, code = kernel_cost(masks[j], split, tile, l2, edges, opf, edgef, tens, tensf, socp)
        if code != 0:
            err[0] = code
            return
        out[j] = cost


@njit(**_JIT)
def complete(plans, k, edges, n):
    """In place: edges k.. of each plan fused iff their ends are already in one kernel."""
    ne = edges.shape[0]
    label = np.empty(n, dtype=np.int64)
    for p in range(plans.shape[0]):
        row = plans[p]
        label_kernels(row, edges, k, n, label)
        for e in range(k, ne):
            row[e] = 1 if label[edges[e, 0]] == label[edges[e, 1]] else 0
