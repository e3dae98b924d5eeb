"""Lower bounds on the time of a Cube outer choice, whatever its staging (L1 steps, order, ping-pong, L2).

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

The simulator's own bound is therefore never above its time (`tests/test_opat_search.py` checks it
over whole expansions of random matmuls and convolutions); searches prune with it (exact) and order
outer choices by it. A convolution's feature-map operand is read as a patch whose size depends on
its L1 staging, so for convolutions only the weight-side (or, for dW, the dy-side) panel counts.
"""
from __future__ import annotations

import numpy as np

from ..sim import Conv2D, MatMul
from ..sim.ops import DTYPE_BYTES
from ..soc import Soc


def _cdiv(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray | int:
    return -(-a // b)


def _al(a: np.ndarray | int, b: int) -> np.ndarray | int:
    return -(-a // b) * b


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


def _formats(op: MatMul) -> tuple[bool, bool, bool]:
    return op.a_format == "FRACTAL_NZ", op.b_format == "FRACTAL_NZ", op.c_format == "FRACTAL_NZ"


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
    n, c, h, w = op.x
    cout, _, kh, kw = op.weight
    ea = DTYPE_BYTES[op.dtype]
    c0 = 32 // ea
    g = op.groups
    cin_g, co_g = c // g, cout // g
    ho, wo = op.out_hw
    khw = kh * kw
    sh, sw = op.strides
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


def conv_l1_bytes(op: Conv2D, key: tuple[int, ...], stagings: np.ndarray) -> np.ndarray:
    """L1 bytes of conv stagings as the simulator counts them (its capacity check), for one class.

    `key`: hoL0, rows per core, kL0, nDim, woL0, nL0 (and the row width woL1 = the output width);
    `stagings`: hoL1, kAL1, kBL1, L1 ping-pong of A, of B. The feature-map operand occupies its patch
    (the rows and columns its output pixels read, with the halo), scaled as the simulator scales it.
    """
    _, c, h, w = op.x
    cout, _, kh, kw = op.weight
    ea = DTYPE_BYTES[op.dtype]
    c0 = 32 // ea
    g = op.groups
    cin_g, co_g = c // g, cout // g
    ho, wo = op.out_hw
    sh, sw = op.strides
    khw = kh * kw
    ekh, ekw = op.dilations[0] * (kh - 1) + 1, op.dilations[1] * (kw - 1) + 1
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
        return a + b + (step_n * n_l0 * 4 if op.bias else 0)
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
    return a + b + (n_l0 * 4 if op.bias else 0)
