"""Lower bounds on the time of Cube strategies, whatever is left open (per outer choice: its staging).

A Cube kernel's outer choice (core split, per-core block, base block) fixes how many waves of tasks
run and, per task, the Cube work, the L0 block count, the output a task writes and the least data it
must read. The simulator's per-task time is at least the busiest of its pipes plus what never
overlaps (the first GM round trip, the pipeline fill and drain), so each of these bounds it:

- Cube: the padded block's fractal multiplies plus the fixed cost of every base block;
- MTE2: the task's operand panels read once (the best reuse any staging can reach), at the faster
  of the L2 and HBM rates the active cores share, through the ND2NZ conversion for ND operands;
- HBM floor: the task's share of the operands every kernel must fetch from HBM once, and its output;
- MTE1, FixPipe and the scalar issue cost, which the outer choice alone fixes (up to the order);
- plus one GM latency and the fill/drain terms of the MTE1 and FixPipe stages.

That bound per outer choice is computed natively while the space is built (csrc/space_bound.cpp,
`aoe._sim.conv_space` / `matmul_space`); a convolution is mapped onto matmul terms as the
simulator's img2col maps it, and since its feature-map operand is read as a patch whose size depends
on its L1 staging, only the weight-side (or, for dW, the dy-side) panel counts there. This module
holds the bound of a whole strategy (`cube_row_bound`: the staging known), which best-first search
prices in order of.

The simulator's own bounds are therefore never above its time (`tests/test_opat_search.py` checks it
over whole expansions of random matmuls and convolutions); searches prune with them (exact) and order
by them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..sim import Conv2D, MatMul
from ..sim.ops import DTYPE_BYTES
from ..soc import Soc


def _cdiv(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray | int:
    return -(-a // b)


def _al(a: np.ndarray | int, b: int) -> np.ndarray | int:
    return -(-a // b) * b


@dataclass(frozen=True)
class ConvDims:
    """A convolution's sizes as the kernel model reads them (per group, C0-aligned, dilated window)."""

    n: int
    c: int
    h: int
    w: int
    cout: int
    kh: int
    kw: int
    sh: int
    sw: int
    ea: int
    c0: int
    g: int
    cin_g: int
    co_g: int
    ho: int
    wo: int
    khw: int
    ekh: int
    ekw: int


def conv_dims(op: Conv2D) -> ConvDims:
    """`ConvDims` of a conv operator."""
    n, c, h, w = op.x
    cout, _, kh, kw = op.weight
    ea = DTYPE_BYTES[op.dtype]
    ho, wo = op.out_hw
    return ConvDims(n, c, h, w, cout, kh, kw, op.strides[0], op.strides[1], ea, 32 // ea, op.groups,
                    c // op.groups, cout // op.groups, ho, wo, kh * kw, op.dilations[0] * (kh - 1) + 1,
                    op.dilations[1] * (kw - 1) + 1)


def _formats(op: MatMul) -> tuple[bool, bool, bool]:
    return op.a_format == "FRACTAL_NZ", op.b_format == "FRACTAL_NZ", op.c_format == "FRACTAL_NZ"


def _burst(nz: bool, trans: bool, x: np.ndarray, y: np.ndarray, full_x: int, full_y: int, ea: int) -> np.ndarray:
    """DMA burst bytes of an L1 chunk of x by y elements of an operand (A: rows by K, B: K by columns)
    whose whole extents are full_x, full_y: contiguous runs in GM, as the simulator counts them."""
    if nz:
        return np.where(x >= full_x, x * y * ea, x * 32.0)
    if not trans:
        return np.where(y >= full_y, x * full_y * ea, y * ea)
    return np.where(x >= full_x, y * full_x * ea, x * ea)


def cube_row_bound(soc: Soc, prob: dict, mm: dict[str, np.ndarray]) -> np.ndarray:
    """Lower bound (µs) of whole Cube strategies in matmul terms: the outer choice's bound with the staging known.

    The staging fixes how often each operand panel is re-read (whole K panels in L1 and the order),
    the DMA burst lengths, the chunks (scalar cost, and a GM round trip per chunk of a single-buffered
    operand), the L1 -> L0 traffic, which pipes overlap and the L2 tiling's waves; what stays a bound
    is where the reads are served (the compulsory share from HBM, every re-read taken as an L2 hit)
    and the HBM floor (compulsory bytes). `mm`: the 23 matmul fields by name, and `a_gm_scale` / `b_gm_scale` (a conv's patch).
    """
    m, n, k = prob["M"], prob["N"], prob["K"]
    ea, eo = prob["ea"], prob["eo"]
    a_nz, b_nz, c_nz = prob["a_nz"], prob["b_nz"], prob["c_nz"]
    batch = max(prob["batch_a"], prob["batch_b"])
    k0 = 32 // ea
    uc, s_m, s_n, s_k = mm["usedCoreNum"], mm["singleCoreM"], mm["singleCoreN"], mm["singleCoreK"]
    b_m, b_n, b_k = mm["baseM"], mm["baseN"], mm["baseK"]
    st_m, st_n, ska, skb, order = mm["stepM"], mm["stepN"], mm["stepKa"], mm["stepKb"], mm["iterateOrder"]
    db1a, db1b = mm["depthA1"] == 2 * st_m * ska, mm["depthB1"] == 2 * st_n * skb
    t_m, t_n, t_k = np.minimum(s_m, m), np.minimum(s_n, n), np.minimum(s_k, k)
    a_m, a_n, a_k = _al(t_m, 16), _al(t_n, 16), _al(t_k, k0)
    m_it, n_it, k_it = _cdiv(t_m, b_m), _cdiv(t_n, b_n), _cdiv(t_k, b_k)
    blocks = (m_it * n_it * k_it).astype(np.float64)
    m_b, n_b, k_b = _cdiv(m, s_m), _cdiv(n, s_n), _cdiv(k, s_k)
    per_batch = m_b * n_b * k_b
    tasks = batch * per_batch
    f = soc.freq_mhz
    gm_a = mm.get("a_gm_scale", 1.0)
    gm_b = mm.get("b_gm_scale", 1.0)
    gmm, gmn = (_al(m, 16) if a_nz else m), (_al(n, 16) if b_nz else n)
    gmk = _al(k, k0) if (a_nz or b_nz) else k
    a_b = gmm * (gmk if a_nz else k) * ea * gm_a
    b_b = (gmk if b_nz else k) * gmn * ea * gm_b
    conc = 1.0 if batch == 1 else np.minimum(batch, np.maximum(1.0, uc / per_batch))
    tiled = (mm["tilingEnable"] == 1) & ((a_b + b_b) * conc > soc.l2_usable * soc.l2)
    waves = np.where(tiled, mm["l2MTileCnt"] * mm["l2NTileCnt"]
                     * _cdiv(batch * mm["l2MTileBlock"] * mm["l2NTileBlock"] * k_b, uc), _cdiv(tasks, uc))
    cube = (a_m // 16) * (a_n // 16) * (a_k // k0) + soc.mmad_overhead_cycles * blocks
    active = np.minimum(uc, tasks).astype(np.float64)
    share = active / (soc.hbm_gbps * soc.hbm_efficiency * 1000.0 / f)
    l2_bpc = soc.l2_gbps * 1000.0 / f if soc.l2_gbps > 0 else soc.l2_rate * soc.cube_cores
    cpb_h = np.maximum(1.0 / soc.ddr_rate, share)
    # re-reads: an operand whose whole K panel is in L1 comes back only when the outer loop does
    m_t, n_t = _cdiv(m_it, st_m), _cdiv(n_it, st_n)
    a_back = np.where((order == 0) & (m_t != 1), n_t, 1)
    b_back = np.where((order == 1) & (n_t != 1), m_t, 1)
    a_mult = np.where(ska >= k_it, a_back, n_it).astype(np.float64)
    b_mult = np.where(skb >= k_it, b_back, m_it).astype(np.float64)
    a_task = (a_m if a_nz else t_m) * (a_k if a_nz else t_k) * ea * a_mult * gm_a
    b_task = (a_n if b_nz else t_n) * (a_k if b_nz else t_k) * ea * b_mult * gm_b
    # of all the bytes the cores read, the compulsory ones come from HBM: at least that share of
    # every read is at the HBM rate (the rest, re-reads, may hit L2)
    compulsory = a_b * prob["batch_a"] + b_b * prob["batch_b"]
    reads = a_b * batch * n_b * a_mult + b_b * batch * m_b * b_mult
    fh = np.minimum(1.0, compulsory / np.maximum(reads, 1e-30))
    cpb_l2 = np.maximum(1.0 / soc.l2_rate, active / l2_bpc)
    cpb_rd = np.where(cpb_h >= cpb_l2, cpb_l2 + fh * (cpb_h - cpb_l2), cpb_h)
    # DMA bursts: NZ chunks are long runs, ND rows short strided ones (through ND2NZ)
    rows_a, k_a = np.minimum(st_m * b_m, t_m), np.minimum(ska * b_k, t_k)
    cols_b, k_bl = np.minimum(st_n * b_n, t_n), np.minimum(skb * b_k, t_k)
    run_a = _burst(a_nz, bool(prob.get("ta")), rows_a, k_a, m, k, ea)
    run_b = _burst(b_nz, bool(prob.get("tb")), k_bl, cols_b, k, n, ea)
    nd2nz = 1.0 / soc.nd2nz_efficiency
    ovh = soc.dma_overhead_bytes
    mte2_a = a_task * cpb_rd * (run_a + ovh) / run_a * (1.0 if a_nz else nd2nz)
    mte2_b = b_task * cpb_rd * (run_b + ovh) / run_b * (1.0 if b_nz else nd2nz) \
        + (t_n * 4.0 * cpb_h if prob["bias"] else 0.0)
    l0a = a_m * a_k * ea * np.where((k_it == 1) & (order == 1), 1, n_it) / (soc.l1_to_l0a_rate * prob["a_mte1_eff"])
    l0b = a_n * a_k * ea * np.where((k_it == 1) & (order == 0), 1, m_it) / (soc.l1_to_l0b_rate * prob["b_mte1_eff"])
    out_e = np.where(k_b > 1, 4.0, float(eo))
    out_task = (a_m if c_nz else t_m) * (a_n if c_nz else t_n) * out_e
    run_c = np.minimum(b_m, a_m) * 32.0 if c_nz else np.minimum(b_n, t_n) * out_e
    fix = out_task * np.maximum(1.0 / soc.fixpipe_rate, cpb_h) * (run_c + ovh) / run_c
    chunks_a = a_mult * m_t * _cdiv(k_it, ska)
    chunks_b = b_mult * n_t * _cdiv(k_it, skb)
    latency = soc.dma_latency_cycles * (np.where(db1a, 0.0, chunks_a) + np.where(db1b, 0.0, chunks_b) + 1.0)
    scalar = soc.scalar_task_cycles + soc.scalar_chunk_cycles * (chunks_a + chunks_b) + soc.scalar_iter_cycles * blocks
    floor = (compulsory / tasks + out_task) * share
    # the pipeline as the simulator combines it (every term above is exact or a lower bound)
    t1 = l0a + l0b
    ov1 = np.where(mm["dbL0A"] == 1, l0a, 0.0) + np.where(mm["dbL0B"] == 1, l0b, 0.0)
    inner = np.maximum(ov1, cube) + (t1 - ov1)
    withc = np.where(mm["dbL0C"] == 1, np.maximum(inner, fix), inner + fix)
    ov2 = np.where(db1a, mte2_a, 0.0) + np.where(db1b, mte2_b, 0.0)
    t2 = mte2_a + mte2_b
    total = np.maximum(np.maximum(np.maximum(ov2, withc) + (t2 - ov2), scalar), floor) + latency
    fill = t2 / np.maximum(1.0, chunks_a + chunks_b) + t1 / blocks + fix / (m_it * n_it)
    return soc.launch_us + waves * (total + fill) / f


def matmul_row_bound(soc: Soc, op: MatMul, rows: np.ndarray, fields: dict[str, int]) -> np.ndarray:
    """`cube_row_bound` of whole matmul strategies."""
    a_nz, b_nz, c_nz = _formats(op)
    prob = {"M": op.m, "N": op.n, "K": op.k, "batch_a": op.batch, "batch_b": op.batch_b or op.batch,
            "ea": DTYPE_BYTES[op.dtype], "eo": DTYPE_BYTES[op.out_dtype], "a_nz": a_nz, "b_nz": b_nz,
            "c_nz": c_nz, "bias": bool(op.bias), "a_mte1_eff": 1.0, "b_mte1_eff": 1.0,
            "ta": bool(op.trans_a), "tb": bool(op.trans_b)}
    return cube_row_bound(soc, prob, {f: rows[:, j] for f, j in fields.items()})


def conv_row_bound(soc: Soc, op: Conv2D, rows: np.ndarray, fields: dict[str, int]) -> np.ndarray:
    """`cube_row_bound` of whole conv strategies, mapped onto matmul terms as the simulator maps them
    (img2col; the feature map read as its patch with the halo, load3d at half the L1 -> L0 rate)."""
    d = conv_dims(op)
    n, h, w, ea, c0, g, cin_g, co_g = d.n, d.h, d.w, d.ea, d.c0, d.g, d.cin_g, d.co_g
    ho, wo, sh, sw, khw, ekh, ekw = d.ho, d.wo, d.sh, d.sw, d.khw, d.ekh, d.ekw
    load3d = 1.0 if (khw == 1 and sh == 1 and sw == 1) else 0.5
    col = {f: rows[:, j] for f, j in fields.items()}
    bd, hd, nd, gd = col["batchDim"], col["hoDim"], col["nDim"], col["groupDim"]
    ho_l1, wo_l1, ka, kb = col["hoL1"], col["woL1"], col["kAL1"], col["kBL1"]
    ho_l0, wo_l0, k_l0, n_l0 = col["hoL0"], col["woL0"], col["kL0"], col["nL0"]
    pbuf = col["pBufferFlag"]
    pix_l0, pix_l1 = ho_l0 * wo_l0, ho_l1 * wo_l1
    px_steps = (ho_l1 // ho_l0) * (wo_l1 // wo_l0)
    prob = {"batch_a": g, "batch_b": g, "ea": ea, "eo": DTYPE_BYTES[op.out_dtype], "a_nz": True, "b_nz": True,
            "c_nz": True, "bias": bool(op.bias)}
    mm: dict[str, np.ndarray] = {"iterateOrder": col["iterateMNOrder"], "dbL0A": (pbuf >> 2) & 1,
                                 "dbL0B": (pbuf >> 3) & 1, "dbL0C": (pbuf >> 4) & 1}
    one = np.ones(len(rows), np.int64)
    if op.op_type.endswith("BackpropFilter"):
        nal, pixels, c1 = _al(cin_g, c0) * khw, n * ho * wo, _cdiv(cin_g, c0)
        prob.update(M=co_g, N=nal, K=pixels, a_mte1_eff=1.0, b_mte1_eff=load3d)
        r_ = np.minimum((ho_l1 - 1) * sh + ekh, h).astype(np.float64)
        c_ = np.minimum((wo_l1 - 1) * sw + ekw, w).astype(np.float64)
        patch = r_ * c_ * np.minimum(kb // khw, _al(cin_g, c0)) * ea
        mm["b_gm_scale"] = np.minimum(1.0, patch / (pix_l1 * np.minimum(kb, nal) * ea))
        mm.update(singleCoreM=one * _al(co_g, 16), singleCoreN=np.minimum(nal, _cdiv(c1, nd) * khw * c0),
                  singleCoreK=np.minimum(_al(pixels, c0), _cdiv(n, bd) * _cdiv(ho, hd) * wo),
                  baseM=k_l0, baseN=n_l0, baseK=_al(pix_l0, c0), stepKa=px_steps, stepKb=px_steps,
                  stepM=ka // k_l0, stepN=_cdiv(kb, n_l0))
    else:
        dx = op.op_type.endswith("BackpropInput")
        out_h, out_w = (h, w) if dx else (ho, wo)
        in_c, out_c = (co_g, cin_g) if dx else (cin_g, co_g)
        in_h, in_w = (ho, wo) if dx else (h, w)
        step_h, step_w = (1, 1) if dx else (sh, sw)
        kal = _al(in_c, c0) * khw
        prob.update(M=n * out_h * out_w, N=out_c, K=kal, a_mte1_eff=load3d, b_mte1_eff=1.0)
        r_ = ((ho_l1 - 1) * step_h + ekh).astype(np.float64)
        c_ = ((wo_l1 - 1) * step_w + ekw).astype(np.float64)
        if dx:
            r_, c_ = np.ceil(r_ / sh), np.ceil(c_ / sw)
        patch = np.minimum(r_, in_h) * np.minimum(c_, in_w) * np.minimum(ka // khw, _al(in_c, c0)) * ea
        mm["a_gm_scale"] = np.minimum(1.0, patch / (pix_l1 * np.minimum(ka, kal) * ea))
        mm.update(singleCoreM=_cdiv(n, bd) * _cdiv(out_h, hd) * out_w, singleCoreN=_al(_cdiv(out_c, nd), 16),
                  singleCoreK=one * kal, baseM=_al(pix_l0, 16), baseN=n_l0, baseK=k_l0,
                  stepM=px_steps, stepN=one, stepKa=ka // k_l0, stepKb=kb // k_l0)
    tasks = g * _cdiv(prob["M"], mm["singleCoreM"]) * _cdiv(prob["N"], mm["singleCoreN"]) \
        * _cdiv(prob["K"], mm["singleCoreK"])
    mm["usedCoreNum"] = np.minimum(bd * hd * nd * gd, tasks)
    db_a, db_b = pbuf & 1, (pbuf >> 1) & 1
    mm["depthA1"] = mm["stepM"] * mm["stepKa"] * (1 + db_a)
    mm["depthB1"] = mm["stepN"] * mm["stepKb"] * (1 + db_b)
    mm.update(tilingEnable=0 * one, l2MTileCnt=one, l2NTileCnt=one, l2MTileBlock=one, l2NTileBlock=one)
    return cube_row_bound(soc, prob, mm)
