"""The numpy Schedule-space code that the native spaces (csrc/space_*.cpp) replaced, kept as the tests'
oracle (the expanders: `opat_inner_reference.py`).

`aoe.opat` builds its conv and matmul spaces natively; these are the Python functions it used
before, unchanged except that a space is returned as (outer rows, their lower bounds, the expander)
instead of a `FactoredSpace`. The native code must give the same rows in the same order and the
same bound bits (tests/test_opat_space_native.py), so the tuning results stay what they were.
"""
from __future__ import annotations

import functools
import itertools

import numpy as np
from opat_inner_reference import ConvExpander, MatmulExpander

from aoe.opat.bounds import _al, _cdiv, _formats, conv_dims
from aoe.sim import Conv2D, MatMul, VectorOp
from aoe.sim.heuristics import CONV_FIELDS, MM_FIELDS, VEC_FIELDS
from aoe.sim.ops import DTYPE_BYTES
from aoe.soc import Soc

_align = _al
_F = {name: i for i, name in enumerate(MM_FIELDS)}
_C = {name: i for i, name in enumerate(CONV_FIELDS)}


# --- vector spaces (aoe/opat/space.py) ---

def vector_space(soc: Soc, op: VectorOp) -> np.ndarray:
    """The vector tiling space: core counts, UB tile sizes, double buffering, implementations."""
    ea = DTYPE_BYTES[op.dtype]
    align = 32 // ea
    cap = (soc.ub - soc.ub_reserved) // ea
    cores = sorted({c for c in (1, 2, 4, 8, 16, 24, 32, 40, 48, 64, soc.vector_cores) if c <= soc.vector_cores})
    tiles = sorted({max(align, (cap >> s) // align * align) for s in range(1, 14)})
    rows = [list(r) for r in itertools.product(cores, tiles, (0, 1), range(op.impls))]
    return np.array(rows, dtype=np.int64).reshape(-1, len(VEC_FIELDS))


# --- bounds (aoe/opat/bounds.py) ---



def cube_bound(soc: Soc, prob: dict, uc: np.ndarray, s_m: np.ndarray, s_n: np.ndarray, s_k: np.ndarray,
               b_m: np.ndarray, b_n: np.ndarray, b_k: np.ndarray) -> np.ndarray:
    """Lower bound (µs) of Cube strategies given in matmul terms (used cores, per-core and base blocks).

    `prob`: M, N, K, batch_a, batch_b, ea, eo, a_nz, b_nz, c_nz, bias, a_mte1_eff, b_mte1_eff, and
    `a_mem` / `b_mem`: whether the operand's GM bytes are its matrix form (False: a conv patch).
    """
    m, n, k = prob["M"], prob["N"], prob["K"]
    ea, eo = prob["ea"], prob["eo"]
    a_nz, b_nz, c_nz = prob["a_nz"], prob["b_nz"], prob["c_nz"]
    batch = max(prob["batch_a"], prob["batch_b"])
    k0 = 32 // ea
    t_m, t_n, t_k = np.minimum(s_m, m), np.minimum(s_n, n), np.minimum(s_k, k)
    a_m, a_n, a_k = _al(t_m, 16), _al(t_n, 16), _al(t_k, k0)
    m_it, n_it, k_it = _cdiv(t_m, b_m), _cdiv(t_n, b_n), _cdiv(t_k, b_k)
    blocks = (m_it * n_it * k_it).astype(np.float64)
    k_blocks = _cdiv(k, s_k)
    tasks = batch * _cdiv(m, s_m) * _cdiv(n, s_n) * k_blocks
    waves = _cdiv(tasks, uc).astype(np.float64)   # L2 tiling only ever adds waves
    f = soc.freq_mhz
    cube = (a_m // 16) * (a_n // 16) * (a_k // k0) + soc.mmad_overhead_cycles * blocks
    active = np.minimum(uc, tasks).astype(np.float64)
    share = active / (soc.hbm_gbps * soc.hbm_efficiency * 1000.0 / f)     # cycles per HBM byte, shared
    l2_bpc = soc.l2_gbps * 1000.0 / f if soc.l2_gbps > 0 else soc.l2_rate * soc.cube_cores
    cpb_h = np.maximum(1.0 / soc.ddr_rate, share)
    cpb_l2 = np.maximum(1.0 / soc.l2_rate, active / l2_bpc)
    out_e = np.where(k_blocks > 1, 4.0, float(eo))     # split-K writes fp32 partials
    out_task = (a_m if c_nz else t_m) * (a_n if c_nz else t_n) * out_e
    run_c = np.minimum(b_m, a_m) * 32.0 if c_nz else np.minimum(b_n, t_n) * out_e
    fix = out_task * np.maximum(1.0 / soc.fixpipe_rate, cpb_h) * (run_c + soc.dma_overhead_bytes) / run_c
    # L1 -> L0: A is loaded once per N block and B once per M block, unless a single K block lets
    # the order keep one of them in L0
    l0a = a_m * a_k * ea / (soc.l1_to_l0a_rate * prob["a_mte1_eff"])
    l0b = a_n * a_k * ea / (soc.l1_to_l0b_rate * prob["b_mte1_eff"])
    t1 = np.where(k_it == 1, np.minimum(l0a + l0b * m_it, l0a * n_it + l0b), l0a * n_it + l0b * m_it)
    scalar = soc.scalar_task_cycles + 2 * soc.scalar_chunk_cycles + soc.scalar_iter_cycles * blocks
    busy = np.maximum(np.maximum(cube, t1), np.maximum(fix, scalar))
    nd2nz = 1.0 / soc.nd2nz_efficiency
    panels = np.zeros(len(uc))
    compulsory = 0.0
    if prob["a_mem"]:
        panels = panels + (a_m if a_nz else t_m) * (a_k if a_nz else t_k) * ea * (1.0 if a_nz else nd2nz)
        compulsory += (_al(m, 16) if a_nz else m) * (_al(k, k0) if a_nz else k) * ea * prob["batch_a"]
    if prob["b_mem"]:
        panels = panels + (a_n if b_nz else t_n) * (a_k if b_nz else t_k) * ea * (1.0 if b_nz else nd2nz)
        compulsory += (_al(k, k0) if b_nz else k) * (_al(n, 16) if b_nz else n) * ea * prob["batch_b"]
    t2 = panels * np.minimum(cpb_h, cpb_l2) + (t_n * 4.0 * cpb_h if prob["bias"] else 0.0)
    floor = (compulsory / tasks + out_task) * share
    busy = np.maximum(busy, np.maximum(t2, floor))
    task = busy + soc.dma_latency_cycles + t1 / blocks + fix / (m_it * n_it)
    return soc.launch_us + waves * task / f


def matmul_bound(soc: Soc, op: MatMul, outer: np.ndarray, fields: dict[str, int]) -> np.ndarray:
    """`cube_bound` of matmul outer rows (columns named by `fields`)."""
    a_nz, b_nz, c_nz = _formats(op)
    prob = {"M": op.m, "N": op.n, "K": op.k, "batch_a": op.batch, "batch_b": op.batch_b or op.batch,
            "ea": DTYPE_BYTES[op.dtype], "eo": DTYPE_BYTES[op.out_dtype], "a_nz": a_nz, "b_nz": b_nz,
            "c_nz": c_nz, "bias": bool(op.bias), "a_mte1_eff": 1.0, "b_mte1_eff": 1.0, "a_mem": True, "b_mem": True}
    cols = [outer[:, fields[f]] for f in ("usedCoreNum", "singleCoreM", "singleCoreN", "singleCoreK",
                                          "baseM", "baseN", "baseK")]
    return cube_bound(soc, prob, *cols)


def conv_bound(soc: Soc, op: Conv2D, outer: np.ndarray, fields: dict[str, int]) -> np.ndarray:
    """`cube_bound` of conv outer rows, mapped onto the matmul terms the simulator's img2col uses."""
    d = conv_dims(op)
    n, h, w, ea, c0, g, cin_g, co_g = d.n, d.h, d.w, d.ea, d.c0, d.g, d.cin_g, d.co_g
    ho, wo, khw, sh, sw = d.ho, d.wo, d.khw, d.sh, d.sw
    plain = 1.0 if (khw == 1 and sh == 1 and sw == 1) else 0.5   # load3d's img2col rate
    bd, hd, nd, gd = (outer[:, fields[f]] for f in ("batchDim", "hoDim", "nDim", "groupDim"))
    pix_l0 = outer[:, fields["hoL0"]] * outer[:, fields["woL0"]]
    k_l0, n_l0 = outer[:, fields["kL0"]], outer[:, fields["nL0"]]
    prob = {"batch_a": g, "batch_b": g, "ea": ea, "eo": DTYPE_BYTES[op.out_dtype], "a_nz": True, "b_nz": True,
            "c_nz": True, "bias": bool(op.bias)}
    if op.op_type.endswith("BackpropFilter"):
        nal, pixels, c1 = _al(cin_g, c0) * khw, n * ho * wo, _cdiv(cin_g, c0)
        prob.update(M=co_g, N=nal, K=pixels, a_mte1_eff=1.0, b_mte1_eff=plain, a_mem=True, b_mem=False)
        s_m = np.full(len(outer), _al(co_g, 16))
        s_n = np.minimum(nal, _cdiv(c1, nd) * khw * c0)
        s_k = np.minimum(_al(pixels, c0), _cdiv(n, bd) * _cdiv(ho, hd) * wo)
        b_m, b_n, b_k = k_l0, n_l0, _al(pix_l0, c0)
    else:
        dx = op.op_type.endswith("BackpropInput")
        out_h, out_w = (h, w) if dx else (ho, wo)
        in_c, out_c = (co_g, cin_g) if dx else (cin_g, co_g)
        kal = _al(in_c, c0) * khw
        prob.update(M=n * out_h * out_w, N=out_c, K=kal, a_mte1_eff=plain, b_mte1_eff=1.0, a_mem=False, b_mem=True)
        s_m = _cdiv(n, bd) * _cdiv(out_h, hd) * out_w
        s_n = _al(_cdiv(out_c, nd), 16)
        s_k = np.full(len(outer), kal)
        b_m, b_n, b_k = _al(pix_l0, 16), n_l0, k_l0
    tasks = g * _cdiv(prob["M"], s_m) * _cdiv(prob["N"], s_n) * _cdiv(prob["K"], s_k)
    uc = np.minimum(bd * hd * nd * gd, tasks)
    return cube_bound(soc, prob, uc, s_m, s_n, s_k, b_m, b_n, b_k)


# --- outer rows (aoe/opat/space.py) ---



def _pow2(limit: int, start: int) -> list[int]:
    out, v = [], start
    while v <= limit:
        out.append(v)
        v *= 2
    return out or [start]


def _block_sizes(dim: int, cap: int, align: int) -> list[int]:
    """Base-block sizes of one dimension: powers of two, and the whole (aligned) dimension or an even
    split of it into 2-4 blocks when that fits (a 112-row M is one 112 block, not 128 with padding
    or 64 + 48)."""
    out = {b for b in _pow2(cap, align) if b <= dim}
    out.update(b for b in (_align(-(-dim // j), align) for j in (1, 2, 3, 4)) if b <= cap)
    return sorted(out)


def matmul_space(soc: Soc, op: MatMul) -> tuple[np.ndarray, np.ndarray, MatmulExpander]:
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
    return outer, lb, expand


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


_CONV_PIXELS = (64, 128, 256, 512)
_CONV_ROW_SPLITS = (1, 2, 4)


def conv_space(soc: Soc, op: Conv2D) -> tuple[np.ndarray, np.ndarray, ConvExpander]:
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
    return outer, lb, expand


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



# --- CANN's default outer choice as a member (aoe/opat/space.py `space_for`) ---

def add_seed_outer(soc: Soc, outer: np.ndarray, lb: np.ndarray, seed: np.ndarray, cols: list[int],
                   order_col: int) -> tuple[np.ndarray, np.ndarray]:
    """Make CANN's default outer choice (core split, per-core and base blocks) a member of the space:
    the outer rows and bounds with the seed in both iterate orders added when its outer choice is
    not among them (bound: the launch time)."""
    known = outer[:, cols]
    new = [r for r in seed[None, :] if not (known == r[cols]).all(axis=1).any()]
    if not new:
        return outer, lb
    add = np.repeat(np.array(new, np.int64), 2, axis=0)
    add[1::2, order_col] = 1 - add[1::2, order_col]
    return np.concatenate([outer, add]), np.concatenate([lb, np.full(len(add), float(soc.launch_us))])
