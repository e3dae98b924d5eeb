"""The numpy Schedule-space code that the native spaces (csrc/space_*.cpp) replaced, kept as the tests' oracle.

`aoe.opat` builds its conv and matmul spaces natively; these are the Python functions it used
before, unchanged except that the spaces are returned as (outer rows, their lower bounds, the expander)
instead of a `FactoredSpace`. The native code must give the same rows in the same order and the same bound bits
(tests/test_opat_space_native.py), so the tuning results stay what they were.
"""
from __future__ import annotations

import functools
import itertools
from typing import Callable

import numpy as np

from aoe.opat.bounds import _al, _cdiv, _formats, conv_dims
from aoe.opat.stagings import MM_INNER, UP_A, UP_B
from aoe.sim import Conv2D, MatMul, VectorOp
from aoe.sim.heuristics import CONV_FIELDS, MM_FIELDS, VEC_FIELDS
from aoe.sim.ops import DTYPE_BYTES
from aoe.soc import Soc

_align = _al
_F = {name: i for i, name in enumerate(MM_FIELDS)}
_C = {name: i for i, name in enumerate(CONV_FIELDS)}
MM_OUTER = [_F[f] for f in ("usedCoreNum", "singleCoreM", "singleCoreN", "singleCoreK", "baseM", "baseN", "baseK")]
STEP_MAX = int(MM_INNER[:, 2:4].max())




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


def conv_l1_bytes(op: Conv2D, key: tuple, stagings: np.ndarray, part: str = "all") -> np.ndarray:
    """L1 bytes of conv stagings as the simulator counts them (its capacity check).

    `key`: hoL0, rows per core, kL0, nDim, woL0, nL0 (scalars, or arrays of one value per staging);
    the row width woL1 is the output width. `stagings`: hoL1, kAL1, kBL1, L1 ping-pong of A, of B.
    The feature-map operand occupies its patch (the rows and columns its output pixels read, with the
    halo), scaled as the simulator scales it. `part`: "a", "b", "bias" or "all" (their sum).
    """
    d = conv_dims(op)
    h, w, ea, c0, cin_g, co_g, ho, wo = d.h, d.w, d.ea, d.c0, d.cin_g, d.co_g, d.ho, d.wo
    sh, sw, khw, ekh, ekw = d.sh, d.sw, d.khw, d.ekh, d.ekw
    ho_l0, _, k_l0, _, wo_l0, n_l0 = key
    ho_l1, ka, kb, db_a, db_b = (stagings[:, j] for j in range(5))
    pix_l0 = ho_l0 * wo_l0
    if op.op_type.endswith("BackpropFilter"):
        pix_steps = (ho_l1 // ho_l0) * (wo // wo_l0)
        step_n = _cdiv(kb, n_l0)
        rows = np.minimum((ho_l1 - 1) * sh + ekh, h).astype(np.float64)
        cols = float(min((wo - 1) * sw + ekw, w))
        patch = rows * cols * np.minimum(kb // khw, _al(cin_g, c0)) * ea
        scale = patch / (_al(ho_l1 * wo, c0) * kb * ea)
        bk = _al(pix_l0, c0)
        a = ((ka // k_l0) * pix_steps * (1 + db_a) * k_l0 * bk * ea).astype(np.float64)
        b = (step_n * pix_steps * (1 + db_b) * n_l0 * bk * ea).astype(np.float64) * scale
        bias = step_n * n_l0 * 4.0 if op.bias else np.zeros(len(stagings))
    else:
        dx = op.op_type.endswith("BackpropInput")
        out_w = w if dx else wo
        in_c, in_h, in_w = (co_g, ho, wo) if dx else (cin_g, h, w)
        step_h, step_w = (1, 1) if dx else (sh, sw)
        rows = ((ho_l1 - 1) * step_h + ekh).astype(np.float64)
        cols = float((out_w - 1) * step_w + ekw)
        if dx:
            rows, cols = np.ceil(rows / sh), float(-(-cols // sw))
        rows, cols = np.minimum(rows, in_h), min(cols, float(in_w))
        patch = rows * cols * np.minimum(ka // khw, _al(in_c, c0)) * ea
        scale = patch / (_al(ho_l1 * out_w, 16) * ka * ea)
        step_m = (ho_l1 // ho_l0) * (out_w // wo_l0)
        a = (step_m * (ka // k_l0) * (1 + db_a) * _al(pix_l0, 16) * k_l0 * ea).astype(np.float64) * scale
        b = ((kb // k_l0) * (1 + db_b) * n_l0 * k_l0 * ea).astype(np.float64)
        bias = n_l0 * 4.0 * np.ones(len(stagings)) if op.bias else np.zeros(len(stagings))
    return {"a": a, "b": b, "bias": bias}[part] if part != "all" else a + b + bias



# --- the matmul template's resolution (aoe/opat/stagings.py) ---



@functools.lru_cache(maxsize=4096)
def k_stagings(bk: int, k_iter: int) -> tuple[np.ndarray, np.ndarray]:
    """The `MM_INNER` template for one K block and K-iteration count: the staging fields of every
    template row (columns as `_MM_STAGING`) and which rows are legal on the K side alone."""
    t = MM_INNER  # stepKa, stepKb, stepM, stepN, order, L1 db A, L1 db B
    chunk = max(1, min(k_iter, max(1, 256 // bk)))
    ska = np.where(t[:, 0] == 0, k_iter, np.where(t[:, 0] == -1, chunk, t[:, 0]))
    skb = np.where(t[:, 1] == 0, k_iter, np.where(t[:, 1] == -1, chunk, t[:, 1]))
    def fresh(code: np.ndarray, step: np.ndarray) -> np.ndarray:
        # the whole-panel and 256-chunk steps only where they are not one of the powers of two already
        pow2 = (step & (step - 1)) == 0
        return (code > 0) | ((~pow2 | (step > 16)) & ((code == 0) | (step != k_iter)))

    table = np.stack([ska, skb, t[:, 2], t[:, 3], t[:, 4], t[:, 2] * ska * (1 + t[:, 5]),
                      t[:, 3] * skb * (1 + t[:, 6])], axis=1)
    legal = (ska <= k_iter) & (skb <= k_iter) & fresh(t[:, 0], ska) & fresh(t[:, 1], skb) \
        & ((ska % skb == 0) | (skb % ska == 0))
    table.setflags(write=False)
    legal.setflags(write=False)
    return table, legal



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



# --- expanders (aoe/opat/inner.py) ---



def _first_of_each(keys: np.ndarray) -> np.ndarray:
    """Indices of the first row of each distinct key row, in order (a hash pass, no sort)."""
    first: dict[bytes, int] = {}
    for i, k in enumerate(np.ascontiguousarray(keys)):
        first.setdefault(k.tobytes(), i)
    return np.fromiter(first.values(), np.int64, len(first))


def _classes(keys: np.ndarray, stagings: Callable[[tuple[int, ...]], np.ndarray],
             prepare: Callable[[list[tuple[int, ...]]], None] | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """The stagings of each distinct class key among `keys` (one per row, non-negative ints; `stagings(key)`
    asked once per distinct key, after `prepare(distinct keys)` if given) and the index of each row's class."""
    radix = keys.max(axis=0) + 1 if len(keys) else np.ones(keys.shape[1], np.int64)
    if float(np.prod(radix.astype(np.float64))) < 2.0 ** 62:
        codes = np.zeros(len(keys), np.int64)      # one int per key: a 1-D unique is much cheaper
        for j in range(keys.shape[1]):
            codes = codes * radix[j] + keys[:, j]
        _, first, inv = np.unique(codes, return_index=True, return_inverse=True)
        uniq = keys[first]
    else:
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    distinct = [tuple(k) for k in uniq.tolist()]
    if prepare is not None:
        prepare(distinct)
    return [stagings(k) for k in distinct], inv.ravel()


def _class_counts(keys: np.ndarray, stagings: Callable[[tuple[int, ...]], np.ndarray],
                  prepare: Callable[[list[tuple[int, ...]]], None] | None = None) -> np.ndarray:
    """How many stagings each row's class has."""
    tables, inv = _classes(keys, stagings, prepare)
    return np.fromiter((len(t) for t in tables), np.int64, len(tables))[inv]


def _by_class(keys: np.ndarray, stagings: Callable[[tuple[int, ...]], np.ndarray],
              prepare: Callable[[list[tuple[int, ...]]], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's class stagings, gathered at once: (the stagings of every row, one after the other;
    how many each row has)."""
    tables, inv = _classes(keys, stagings, prepare)
    sizes = np.fromiter((len(t) for t in tables), np.int64, len(tables))
    counts = sizes[inv]
    total = int(counts.sum())
    if not total:
        return np.zeros((0, tables[0].shape[1] if tables else 0), np.int64), counts
    starts = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    ends = np.cumsum(counts)
    # row r's stagings sit at starts[class of r] ... in the flat table; its output rows at ends[r] - counts[r] ...
    idx = np.repeat(starts[inv] - (ends - counts), counts) + np.arange(total)
    return np.concatenate(tables)[idx], counts


@functools.lru_cache(maxsize=65536)
def _block_stagings(bm: int, bn: int, bk: int, k_iter: int, ea: int, bias: bool, l1_cap: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """`k_stagings` of one base block, with the rows whose L1 buffers do not fit dropped from the mask."""
    table, legal = k_stagings(bk, k_iter)
    step_n, da, db = table[:, 3], table[:, 5], table[:, 6]
    l1 = (da * bm + db * bn) * bk * ea + (step_n * bn * 4 if bias else 0)
    ok = legal & (l1 <= l1_cap)
    ok.setflags(write=False)
    return table, ok


# the template's M (0) and N (1) steps: which rows step at most / at least m blocks, m up to STEP_MAX + 1
_STEP_UPTO = [{m: MM_INNER[:, 2 + d] <= m for m in range(1, STEP_MAX + 2)} for d in (0, 1)]
_STEP_FROM = [{m: MM_INNER[:, 2 + d] >= m for m in range(1, STEP_MAX + 2)} for d in (0, 1)]


# the inner fields a staging sets, in the order of `MatmulExpander._stagings`' columns
_MM_STAGING = [_F[f] for f in ("stepKa", "stepKb", "stepM", "stepN", "iterateOrder", "depthA1", "depthB1")]


class MatmulExpander:
    """Every inner variant of matmul outer rows.

    The legal L1 stagings of an outer row depend only on its base block and its iteration counts
    (baseM/N/K, kIter, mIter/nIter up to the largest step, split-K or not): a handful of classes
    however many core splits share them. Each class's stagings are derived once (from the
    `MM_INNER` template, see `k_stagings`) and reused, so a search that expands a few outer rows
    at a time does not pay the template's masks again for each of them.
    """

    def __init__(self, soc: Soc, op: MatMul, impl: int | None = None) -> None:
        self.soc, self.op, self.impl = soc, op, impl
        self.ea = DTYPE_BYTES[op.dtype]
        # operands beyond half of L2: L2 tiling variants too
        self.l2 = (op.m * op.k + op.k * op.n) * self.ea > 0.5 * soc.l2
        self._classes: dict[tuple[int, ...], np.ndarray] = {}
        self._only: dict[int, MatmulExpander] = {}

    def only(self, impl: int) -> MatmulExpander:
        """An expander of the same rows restricted to one implementation class (`matmul_impl_class`)."""
        got = self._only.get(impl)
        if got is None:
            got = self._only[impl] = MatmulExpander(self.soc, self.op, impl)
        return got

    def _stagings(self, key: tuple[int, ...]) -> np.ndarray:
        """The legal stagings of one class (rows of `_MM_STAGING` values, in template order)."""
        got = self._classes.get(key)
        if got is not None:
            return got
        bm, bn, bk, m_iter, n_iter, k_iter, split_k = key
        table, ok = _block_stagings(bm, bn, bk, k_iter, self.ea, bool(self.op.bias), self.soc.l1)
        ok = ok & _STEP_UPTO[0][m_iter] & _STEP_UPTO[1][n_iter]
        # dominated: the same staging with L1 ping-pong of A (or B) added fits too
        ok &= ~(((MM_INNER[:, 5] == 0) & ok[UP_A]) | ((MM_INNER[:, 6] == 0) & ok[UP_B]))
        if self.impl is not None:
            # `matmul_impl_class` of these rows: stepM * baseM >= min(singleCoreM, M) is stepM >= mIter, ...
            if split_k:
                ok = ok if self.impl == 3 else np.zeros_like(ok)
            else:
                a_res = _STEP_FROM[0][m_iter] & (table[:, 0] >= k_iter)
                b_res = _STEP_FROM[1][n_iter] & (table[:, 1] >= k_iter)
                ok = ok & {0: ~a_res & ~b_res, 1: a_res, 2: ~a_res & b_res}.get(self.impl, np.zeros_like(ok))
        got = self._classes[key] = table[ok]
        return got

    def _keys(self, outer: np.ndarray) -> np.ndarray:
        """The class key of each outer row (see `_stagings`)."""
        op = self.op
        bm, bn, bk = (outer[:, _F[f]] for f in ("baseM", "baseN", "baseK"))
        # the template's M/N steps are at most STEP_MAX: beyond one more, mIter and nIter make no difference
        return np.stack([bm, bn, bk,
                         np.minimum(_cdiv(np.minimum(outer[:, _F["singleCoreM"]], op.m), bm), STEP_MAX + 1),
                         np.minimum(_cdiv(np.minimum(outer[:, _F["singleCoreN"]], op.n), bn), STEP_MAX + 1),
                         _cdiv(np.minimum(outer[:, _F["singleCoreK"]], op.k), bk),
                         outer[:, _F["singleCoreK"]] < op.k], axis=1)

    def _l2_variants(self, mb: np.ndarray, nb: np.ndarray) -> np.ndarray:
        """How many L2 tilings each row has (1 without L2 tiling)."""
        if not self.l2:
            return np.ones(len(mb), np.int64)
        return 1 + sum(2 * ((cm <= mb) & (cn <= nb)) for cm, cn in itertools.product((1, 2, 4), repeat=2)
                       if (cm, cn) != (1, 1))

    def count(self, outer: np.ndarray, limit: int | None = None) -> int:
        """Size of `expand(outer)` without building it (with `limit`: any total above it once passed)."""
        outer = outer[_first_of_each(outer[:, MM_OUTER])]
        total = 0
        for i in range(0, len(outer), 2048):
            part = outer[i:i + 2048]
            per = _class_counts(self._keys(part), self._stagings)
            mb = _cdiv(self.op.m, part[:, _F["singleCoreM"]])
            nb = _cdiv(self.op.n, part[:, _F["singleCoreN"]])
            total += int((per * self._l2_variants(mb, nb)).sum())
            if limit is not None and total > limit:
                break
        return total

    def __call__(self, outer: np.ndarray) -> np.ndarray:
        """Every inner variant of each outer row (duplicates of the same outer shape collapse first)."""
        outer = outer[_first_of_each(outer[:, MM_OUTER])]
        return self._expand(outer, np.zeros(len(outer), np.int64))[0]

    def many(self, groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """`self(group)` of every group at once: the rows, group after group, and where each group starts."""
        gid = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
        outer = np.concatenate(groups)
        first = _first_of_each(np.column_stack([gid, outer[:, MM_OUTER]]))  # duplicates collapse per group
        rows, rgid = self._expand(outer[first], gid[first])
        if self.l2:  # the L2 variants come after their group's plain rows, as `self(group)` orders them
            order = np.argsort(rgid, kind="stable")
            rows, rgid = rows[order], rgid[order]
        return rows, np.searchsorted(rgid, np.arange(len(groups) + 1))

    def _expand(self, outer: np.ndarray, gid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The inner variants of distinct outer rows (and the group of each variant, from `gid`)."""
        op = self.op
        stagings, counts = _by_class(self._keys(outer), self._stagings)
        base = np.repeat(outer, counts, axis=0)
        bgid = np.repeat(gid, counts)
        if not len(base):
            return base, bgid
        base[:, _MM_STAGING] = stagings
        mb, nb = _cdiv(op.m, base[:, _F["singleCoreM"]]), _cdiv(op.n, base[:, _F["singleCoreN"]])
        base[:, _F["tilingEnable"]] = 0
        base[:, _F["l2MTileCnt"]] = base[:, _F["l2NTileCnt"]] = 1
        base[:, _F["l2MTileBlock"]], base[:, _F["l2NTileBlock"]] = mb, nb
        base[:, _F["l2IterateOrder"]] = 0
        if not self.l2:
            return base, bgid
        variants, vgids = [base], [bgid]
        for cm, cn in itertools.product((1, 2, 4), repeat=2):
            if (cm, cn) == (1, 1):
                continue
            sel = (cm <= mb) & (cn <= nb)
            for order in (0, 1):
                v = base[sel].copy()
                blm, bln = _cdiv(mb[sel], cm), _cdiv(nb[sel], cn)
                v[:, _F["tilingEnable"]] = 1
                v[:, _F["l2MTileBlock"]], v[:, _F["l2NTileBlock"]] = blm, bln
                v[:, _F["l2MTileCnt"]], v[:, _F["l2NTileCnt"]] = _cdiv(mb[sel], blm), _cdiv(nb[sel], bln)
                v[:, _F["l2IterateOrder"]] = order
                variants.append(v)
                vgids.append(bgid[sel])
        return np.concatenate(variants), np.concatenate(vgids)


_CONV_STAGING = [_C[f] for f in ("hoL1", "kAL1", "kBL1", "pBufferFlag", "iterateMNOrder")]


class ConvExpander:
    """Every L1 staging of conv outer rows (hoL1 multiples, K chunks in whole windows, L1 ping-pong, order).

    The legal stagings of an outer row depend only on its L0 block, its rows per core and (dW) its
    channel split: each class's stagings are derived once and reused, in the order hoL1, kAL1,
    kBL1, then ping-pong (L0 always) and iterate order. The values, and why:

    - hoL1: 1, 2, 4, 8 and 16 L0 blocks of rows, and all the rows of the core (its whole share in L1);
    - K chunks in whole kernel windows: 1, 2, 4, 8 windows of C0 channels and the whole K panel (the
      channel count need not be a power of two); A's and B's chunks separately, one dividing the
      other as the kernel requires (B's weights and A's feature map are re-read at different rates);
      dW: Cout chunks of 1, 2, 4 L0 blocks or all of Cout, channel chunks of 1, 2, 4 windows or all;
    - L1 ping-pong of A and of B: a staging without it is kept only where the same staging with it
      does not fit L1 (the model never runs slower with ping-pong: a dominance prune, exact).
    """

    def __init__(self, soc: Soc, op: Conv2D, filt: bool, win: int, c0: int, k_al: int) -> None:
        self.op, self.l1 = op, soc.l1
        self.filt, self.win, self.k_al = filt, win, k_al
        _, c, h, _ = op.x
        self.c1_total = _cdiv(c // op.groups, c0)
        self.co_g = op.weight[0] // op.groups
        self.out_h = h if op.op_type.endswith("BackpropInput") else op.out_hw[0]
        self._classes: dict[tuple[int, ...], np.ndarray] = {}
        self._cands: dict[tuple[int, ...], np.ndarray] = {}

    def _candidates(self, key4: tuple[int, ...]) -> np.ndarray:
        """hoL1, kAL1, kBL1 of a class before the L1 check (they depend on hoL0, rows, kL0, nDim only)."""
        got = self._cands.get(key4)
        if got is None:
            ho_l0, ho_core, k_l0, n_dim = key4
            rows_core = max(ho_core, ho_l0)
            hm = sorted({m for m in (1, 2, 4, 8, 16) if ho_l0 * m <= rows_core} | {rows_core // ho_l0})
            if self.filt:
                co = _align(self.co_g, 16)
                ka = sorted({k_l0 * m for m in (1, 2, 4) if k_l0 * m <= co} | ({co} if co % k_l0 == 0 else set()))
                c1 = _cdiv(self.c1_total, n_dim)
                kb = sorted({self.win * m for m in (1, 2, 4) if m <= c1} | {self.win * c1})
                pairs = [(a, b) for a in ka for b in kb]
            else:
                whole = _cdiv(self.k_al, self.win) * self.win
                ks = sorted({self.win * m for m in (1, 2, 4, 8) if self.win * m <= whole} | {whole})
                ks = [k for k in ks if k % k_l0 == 0]
                pairs = [(a, b) for a in ks for b in ks if a % b == 0 or b % a == 0]
            got = self._cands[key4] = np.array([(ho_l0 * m, a, b) for m in hm for a, b in pairs],
                                               np.int64).reshape(-1, 3)
        return got

    def _stagings(self, key: tuple[int, ...]) -> np.ndarray:
        """The legal stagings of one class (rows of `_CONV_STAGING` values, in the expansion's order)."""
        got = self._classes.get(key)
        if got is None:
            self._derive([key])
            got = self._classes[key]
        return got

    def _prepare(self, keys: list[tuple[int, ...]]) -> None:
        """Derive the classes among `keys` not derived yet, in one pass."""
        missing = [k for k in keys if k not in self._classes]
        if missing:
            self._derive(missing)

    def _derive(self, keys: list[tuple[int, ...]]) -> None:
        """Derive the stagings of several classes: candidates, the L1 check of all four ping-pong
        combinations at once, and the dominance prune (L1 bytes are linear in each operand's depth)."""
        cands = [self._candidates(k[:4]) for k in keys]
        counts = [len(c) for c in cands]
        st = np.concatenate(cands) if cands else np.zeros((0, 3), np.int64)
        kcols = tuple(np.repeat(np.array(keys, np.int64).reshape(-1, 6), counts, axis=0).T)
        single = np.column_stack([st, np.zeros((len(st), 2), np.int64)])  # no ping-pong, order 0
        # single-buffered A and B bytes, and the bias: doubling a depth doubles its operand's bytes
        a1, b1, rest = (conv_l1_bytes(self.op, kcols, single, part=p) for p in ("a", "b", "bias"))
        f = [(1 + da) * a1 + (1 + db) * b1 + rest <= self.l1 for da in (0, 1) for db in (0, 1)]
        f00, f01, f10, f11 = f
        keep = np.stack([f00 & ~(f01 | f10), f01 & ~f11, f10 & ~f11, f11], axis=1)  # no ping-pong, B, A, both
        pb = np.array([28, 30, 29, 31], np.int64)
        r, c = np.nonzero(keep)  # row-major: each staging's kept variants in the order above
        got = np.repeat(np.column_stack([st[r], pb[c]]), 2, axis=0)
        got = np.column_stack([got, np.tile(np.array([0, 1], np.int64), len(r))])
        owner = np.repeat(np.arange(len(keys)), counts)[r]
        ends = np.cumsum(2 * np.bincount(owner, minlength=len(keys)))
        for key, part in zip(keys, np.split(got, ends[:-1])):
            self._classes[key] = part

    def __call__(self, outer: np.ndarray) -> np.ndarray:
        """Every staging of each outer row, row by row."""
        return self._expand(outer)[0]

    def many(self, groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """`self(group)` of every group at once: the rows, group after group, and where each group starts."""
        rows, counts = self._expand(np.concatenate(groups))
        per_row = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=per_row[1:])
        return rows, per_row[np.concatenate([[0], np.cumsum([len(g) for g in groups])])]

    def count(self, outer: np.ndarray, limit: int | None = None) -> int:
        """Size of `self(outer)` without building it."""
        return int(_class_counts(self._keys(outer), self._stagings, self._prepare).sum()) if len(outer) else 0

    def _keys(self, outer: np.ndarray) -> np.ndarray:
        """The class key of each outer row: L0 rows, rows per core, K block, channel split (dW), L0 width
        and N block (see `_candidates` and `_derive`)."""
        return np.stack([outer[:, _C["hoL0"]], _cdiv(self.out_h, outer[:, _C["hoDim"]]), outer[:, _C["kL0"]],
                         outer[:, _C["nDim"]] if self.filt else np.zeros(len(outer), np.int64),
                         outer[:, _C["woL0"]], outer[:, _C["nL0"]]], axis=1)

    def _expand(self, outer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stagings of each outer row, and how many each has."""
        if not len(outer):
            return outer.reshape(-1, len(CONV_FIELDS)), np.zeros(0, np.int64)
        stagings, counts = _by_class(self._keys(outer), self._stagings, self._prepare)
        out = np.repeat(outer, counts, axis=0)
        if len(out):
            out[:, _CONV_STAGING] = stagings
        return out, counts


# --- implementation classes (aoe/opat/inner.py, tune.py) ---

def matmul_impl_class(op: MatMul, rows: np.ndarray) -> np.ndarray:
    """Class of each matmul strategy: 0 standard, 1 A resident in L1, 2 B resident, 3 split-K."""
    s_m = np.minimum(rows[:, _F["singleCoreM"]], op.m)
    s_n = np.minimum(rows[:, _F["singleCoreN"]], op.n)
    s_k = np.minimum(rows[:, _F["singleCoreK"]], op.k)
    a_res = (rows[:, _F["stepM"]] * rows[:, _F["baseM"]] >= s_m) & (rows[:, _F["stepKa"]] * rows[:, _F["baseK"]] >= s_k)
    b_res = (rows[:, _F["stepN"]] * rows[:, _F["baseN"]] >= s_n) & (rows[:, _F["stepKb"]] * rows[:, _F["baseK"]] >= s_k)
    cls = np.where(a_res, 1, np.where(b_res, 2, 0))
    return np.where(rows[:, _F["singleCoreK"]] < op.k, 3, cls)


def _mm_restage(op: MatMul, soc: Soc, cls: int, outer: np.ndarray) -> np.ndarray:
    """Default staging inside a matmul implementation class (resident operands: whole panel in L1)."""
    if cls not in (1, 2):
        return outer
    ea = DTYPE_BYTES[op.dtype]
    r = outer.copy()
    bm, bn, bk = r[:, _F["baseM"]], r[:, _F["baseN"]], r[:, _F["baseK"]]
    m_iter = -(-np.minimum(r[:, _F["singleCoreM"]], op.m) // bm)
    n_iter = -(-np.minimum(r[:, _F["singleCoreN"]], op.n) // bn)
    k_iter = -(-np.minimum(r[:, _F["singleCoreK"]], op.k) // bk)
    if cls == 1:
        r[:, _F["stepM"]], r[:, _F["stepKa"]], r[:, _F["stepKb"]], r[:, _F["stepN"]] = m_iter, k_iter, 1, 1
    else:
        r[:, _F["stepN"]], r[:, _F["stepKb"]], r[:, _F["stepKa"]], r[:, _F["stepM"]] = n_iter, k_iter, 1, 1
    da = r[:, _F["stepM"]] * r[:, _F["stepKa"]]
    db = r[:, _F["stepN"]] * r[:, _F["stepKb"]]
    fits_db = (2 * da * bm + 2 * db * bn) * bk * ea <= soc.l1
    r[:, _F["depthA1"]] = np.where(fits_db, 2 * da, da)
    r[:, _F["depthB1"]] = np.where(fits_db, 2 * db, db)
    return r


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
