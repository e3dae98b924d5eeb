// The Cube pipeline model as an inline function: matmul.cpp and conv.cpp inline it into their batch
// loops (one call per batch, not per strategy; fields a caller does not read are never computed).
#pragma once

#include <algorithm>
#include <cmath>

#include "cube.h"
#include "sim.h"

namespace aoesim {

struct TimeReason {
    double time_us;
    int reason;
};

// An invalid strategy: the full Result too when asked for.
template <bool Full>
AOE_INLINE TimeReason reject(Result* out, int reason) {
    if constexpr (Full) *out = invalid(reason);
    return {std::numeric_limits<double>::infinity(), reason};
}

// The body of cube_eval, inlined into each batch loop (so a times-only loop computes only the time).
// `Full`: fill *out with the whole Result; otherwise only the time and the reason are computed.
template <bool Full>
AOE_INLINE TimeReason cube_eval_inl(const SoC& s, const CubeProblem& p, const CubePrep& c, const int64_t* st,
                                    Result* out) {
    int64_t any = 0;  // one sign test for all fields (vectorises) instead of 23 branches
    for (int i = 0; i < S_NST; ++i) any |= st[i];
    if (any < 0) return reject<Full>(out, RS_BAD_VALUE);
    const int64_t M = p.M, N = p.N, K = p.K;
    const int64_t batch = c.batch, ea = p.ea, eo = p.eo, k0 = c.k0;
    const bool a_nz = p.a_nz, b_nz = p.b_nz, c_nz = p.c_nz, ta = p.ta, tb = p.tb, bias = p.bias;

    const int64_t uc = st[S_USED_CORE], sM = st[S_SM], sN = st[S_SN], sK = st[S_SK];
    const int64_t bM = st[S_BM], bN = st[S_BN], bK = st[S_BK];
    const int64_t dA = st[S_DEPTH_A1], dB = st[S_DEPTH_B1], stM = st[S_STEP_M], stN = st[S_STEP_N];
    const int64_t sKa = st[S_STEP_KA], sKb = st[S_STEP_KB];
    const int64_t ord = st[S_ITER_ORDER], dbA = st[S_DB_L0A], dbB = st[S_DB_L0B], dbC = st[S_DB_L0C];
    const int64_t l2en = st[S_TILING_EN], l2ord = st[S_L2_ORDER];
    const int64_t l2Mc = st[S_L2_MCNT], l2Nc = st[S_L2_NCNT], l2Mb = st[S_L2_MBLK], l2Nb = st[S_L2_NBLK];

    // --- domain and hardware constraints (never a silent number for an impossible strategy) ---
    if (uc < 1 || sM < 1 || sN < 1 || sK < 1 || bM < 1 || bN < 1 || bK < 1 || dA < 1 || dB < 1 ||
        stM < 1 || stN < 1 || sKa < 1 || sKb < 1 || ord > 1 || dbA > 1 || dbB > 1 || dbC > 1 ||
        l2en > 1 || l2ord > 1)
        return reject<Full>(out, RS_BAD_VALUE);
    if (uc > s.cube_cores) return reject<Full>(out, RS_CORES);
    if ((bM & 15) || (bN & 15) || (bK & (k0 - 1))) return reject<Full>(out, RS_MISALIGNED);
    if (sM > c.Mal || sN > c.Nal || sK > c.Kal) return reject<Full>(out, RS_EXCEEDS_SHAPE);
    const int64_t tM = std::min(sM, M), tN = std::min(sN, N), tK = std::min(sK, K);  // full task
    const int64_t aM = align_pow2(tM, 16), aN = align_pow2(tN, 16), aK = align_pow2(tK, k0);
    if (bM > aM || bN > aN || bK > aK) return reject<Full>(out, RS_EXCEEDS_SHAPE);
    const int64_t mIter = ceil_div(tM, bM), nIter = ceil_div(tN, bN), kIter = ceil_div(tK, bK);
    if (stM > mIter || stN > nIter || sKa > kIter || sKb > kIter) return reject<Full>(out, RS_EXCEEDS_SHAPE);
    if (sKa != sKb && fmod_i(sKa, sKb) && fmod_i(sKb, sKa)) return reject<Full>(out, RS_INCONSISTENT);
    const bool dbl1a = dA == 2 * stM * sKa, dbl1b = dB == 2 * stN * sKb;
    if (!dbl1a && dA != stM * sKa) return reject<Full>(out, RS_INCONSISTENT);
    if (!dbl1b && dB != stN * sKb) return reject<Full>(out, RS_INCONSISTENT);
    if (bM * bK * ea * (1 + dbA) > s.l0a) return reject<Full>(out, RS_L0A);
    if (bN * bK * ea * (1 + dbB) > s.l0b) return reject<Full>(out, RS_L0B);
    if (bM * bN * 4 * (1 + dbC) > s.l0c) return reject<Full>(out, RS_L0C);
    if (double(dA * bM * bK * ea) * p.a_l1_scale + double(dB * bN * bK * ea) * p.b_l1_scale +
            (bias ? stN * bN * 4 : 0) > double(s.l1))
        return reject<Full>(out, RS_L1);
    const int64_t mB = ceil_div(M, sM), nB = ceil_div(N, sN), kB = ceil_div(K, sK);
    const int64_t per_batch = mB * nB * kB;
    const int64_t tasks = batch * per_batch;
    if (uc > tasks) return reject<Full>(out, RS_INCONSISTENT);  // idle cores: usedCoreNum must not exceed blocks
    if (l2en) {
        if (l2Mb < 1 || l2Nb < 1 || l2Mb > mB || l2Nb > nB || l2Mc != ceil_div(mB, l2Mb) ||
            l2Nc != ceil_div(nB, l2Nb))
            return reject<Full>(out, RS_INCONSISTENT);
    }

    Result r;
    // operand bytes in GM: a conv scales them per strategy (its L1 patch), so the prep holds them unscaled
    const double A_b = c.A_b * p.a_gm_scale, B_b = c.B_b * p.b_gm_scale;
    const double A_tot = A_b * double(p.batch_a), B_tot = B_b * double(p.batch_b);
    // --- chip-level traffic: compulsory bytes, re-reads, and where re-reads are served ---
    const double out_e = kB > 1 ? 4.0 : double(eo);  // split-K accumulates fp32 partials atomically

    // Reuse inside a task: an operand whose whole K panel fits its L1 buffer is re-loaded only when
    // the outer loop comes back to it; otherwise every base block streams its K panel again.
    const int64_t mT = ceil_div(mIter, stM), nT = ceil_div(nIter, stN);
    const bool akf = sKa >= kIter, bkf = sKb >= kIter;
    // M first (order 0): N outer, M inner -> B stays, A comes back once per N tile (unless one
    // M tile holds it all); N first: the mirror image. Written as selects, not branches: in a
    // batch of candidates the order flips unpredictably.
    const int64_t a_back = (ord == 0 && mT != 1) ? nT : 1;
    const int64_t b_back = (ord == 1 && nT != 1) ? mT : 1;
    const double a_mult = double(akf ? a_back : nIter);
    const double b_mult = double(bkf ? b_back : mIter);
    const double a_task = double(a_nz ? aM : tM) * double(a_nz ? aK : tK) * ea * a_mult * p.a_gm_scale;
    const double b_task = double(b_nz ? aN : tN) * double(b_nz ? aK : tK) * ea * b_mult * p.b_gm_scale;
    // Whole-chip reads: every (M block, K block) panel of A is read by all nB column blocks.
    const double R = A_b * double(batch) * double(nB) * a_mult + B_b * double(batch) * double(mB) * b_mult;
    const double comp = A_tot + B_tot;
    const double conc_batches =
        batch == 1 ? 1.0 : std::min<double>(double(batch), std::max(1.0, double(uc) / double(per_batch)));
    const double W = (A_b + B_b) * conc_batches;
    const bool l2_tiled = l2en && W > c.l2u;
    double hbm_rd;
    if (l2_tiled) {
        // L2 tiling: the re-read working set is one L2 tile; the operand that is not kept is
        // fetched from HBM once per L2 tile of the other dimension.
        const double tileA = std::min(double(l2Mb * sM), c.gmM) * c.gmK * ea;
        const double tileB = std::min(double(l2Nb * sN), c.gmN) * c.gmK * ea;
        const double Wt = (tileA + tileB) * conc_batches;
        const double miss = Wt <= c.l2u ? 0.0 : 1.0 - c.l2u / Wt;
        const double comp_t = l2ord == 0 ? A_tot * double(l2Nc) + B_tot : A_tot + B_tot * double(l2Mc);
        hbm_rd = std::min(R, comp_t + miss * std::max(0.0, R - comp_t));
    } else {
        const double miss = W <= c.l2u ? 0.0 : 1.0 - c.l2u / W;
        hbm_rd = comp + miss * std::max(0.0, R - comp);
    }
    const double fh = R > 0 ? hbm_rd / R : 1.0;

    // --- per-core rates: HBM is shared by the active cores, L2 too (kept as cycles per byte) ---
    const double active = double(std::min<int64_t>(uc, tasks));
    const double cpb_hbm_share = active * c.inv_hbm_bpc;
    const double cpb_h = std::max(c.inv_ddr, cpb_hbm_share);
    const double cpb_l2 = std::max(c.inv_l2_rate, active * c.inv_l2_bpc);
    const double cpb_rd = fh * cpb_h + (1 - fh) * cpb_l2;

    // DMA burst lengths: NZ chunks are long runs, ND rows are short strided bursts through ND2NZ.
    const double rowsA = double(std::min(stM * bM, tM)), kA = double(std::min(sKa * bK, tK));
    const double colsB = double(std::min(stN * bN, tN)), kBl = double(std::min(sKb * bK, tK));
    double runA, runB;
    if (a_nz) runA = rowsA >= M ? rowsA * kA * ea : rowsA * 32.0;
    else if (!ta) runA = kA >= K ? rowsA * double(K) * ea : kA * ea;
    else runA = rowsA >= M ? kA * double(M) * ea : rowsA * ea;
    if (b_nz) runB = kBl >= K ? colsB * kBl * ea : kBl * 32.0;
    else if (!tb) runB = colsB >= N ? kBl * double(N) * ea : colsB * ea;
    else runB = kBl >= K ? colsB * double(K) * ea : kBl * ea;
    // 1 / efficiency = (run + overhead) / run, and the ND2NZ mode on top for ND operands
    const double inv_effA = (runA + s.dma_overhead_bytes) / runA * (a_nz ? 1.0 : c.inv_nd2nz);
    const double inv_effB = (runB + s.dma_overhead_bytes) / runB * (b_nz ? 1.0 : c.inv_nd2nz);

    CubeTask t;
    t.mte2_a = a_task * cpb_rd * inv_effA;
    t.mte2_b = b_task * cpb_rd * inv_effB + (bias ? tN * 4.0 * cpb_h : 0.0);
    // L0 reuse: with a single K step the A block stays in L0A across the N-inner loop (and B in
    // L0B across the M-inner loop).
    const double l0a = double(aM) * aK * ea * ((kIter == 1 && ord == 1) ? 1.0 : double(nIter));
    const double l0b = double(aN) * aK * ea * ((kIter == 1 && ord == 0) ? 1.0 : double(mIter));
    t.mte1_a = l0a * c.inv_l0a;
    t.mte1_b = l0b * c.inv_l0b;
    const double n_blocks = double(mIter * nIter * kIter);
    t.cube = double(aM >> 4) * double(aN >> 4) * double(aK >> c.k0_log2) * p.cube_scale + s.mmad_overhead_cycles * n_blocks;
    // an NZ output is written in whole fractals, padding included (as the compulsory bytes count it)
    const double out_task = double(c_nz ? aM : tM) * double(c_nz ? aN : tN) * out_e;
    const double runC = c_nz ? double(std::min(bM, aM)) * 32.0 : double(std::min(bN, tN)) * out_e;
    t.fix = out_task * std::max(c.inv_fix, cpb_h) * (runC + s.dma_overhead_bytes) / runC;
    const double chunks_a = a_mult * double(mT) * double(ceil_div(kIter, sKa));
    const double chunks_b = b_mult * double(nT) * double(ceil_div(kIter, sKb));
    const double chunks = chunks_a + chunks_b;
    // a single-buffered L1 operand waits a full GM round trip per chunk; ping-pong hides it
    t.exposed_latency = s.dma_latency_cycles * ((dbl1a ? 0.0 : chunks_a) + (dbl1b ? 0.0 : chunks_b) + 1.0);
    t.scalar = s.scalar_task_cycles + s.scalar_chunk_cycles * chunks + s.scalar_iter_cycles * n_blocks;
    const double hbm_task = (a_task + b_task) * fh + out_task;
    t.hbm_floor = hbm_task * cpb_hbm_share;
    t.db_l1a = dbl1a; t.db_l1b = dbl1b; t.db_l0a = dbA; t.db_l0b = dbB; t.db_l0c = dbC;
    t.n_chunks = std::max(1.0, chunks);
    t.n_blocks = n_blocks;
    t.n_out = double(mIter * nIter);
    double fill = 0;
    const double task_cycles = cube_task_cycles(t, &fill);

    double waves;
    if (l2_tiled) waves = double(l2Mc * l2Nc) * double(ceil_div(batch * l2Mb * l2Nb * kB, uc));
    else waves = double(ceil_div(tasks, uc));

    const double wu = waves * c.inv_cpu;
    if constexpr (!Full) {
        // the same sum as finish() (one kernel, no vector cycles), nothing else
        return {s.launch_us + (waves * task_cycles) / s.cycles_per_us() + 0.0 / s.vec_cycles_per_us(), RS_OK};
    } else {
        r.busy_us[P_MTE2] = wu * (t.mte2_a + t.mte2_b);
        r.busy_us[P_MTE1] = wu * (t.mte1_a + t.mte1_b);
        r.busy_us[P_CUBE] = wu * t.cube;
        r.busy_us[P_FIXPIPE] = wu * t.fix;
        r.busy_us[P_SCALAR] = wu * t.scalar;
        r.busy_us[P_OVERHEAD] = s.launch_us + wu * fill;
        r.hbm_bytes = hbm_rd + c.C_tot * (kB > 1 ? double(kB) * 4.0 / double(eo) : 1.0) + c.bias_tot;
        r.l2_bytes = R - hbm_rd;
        r.flops = p.flops;
        r.bytes = comp + c.C_tot + c.bias_tot;
        finish(s, r, waves * task_cycles, 0.0, 1);
        *out = r;
        return {r.time_us, r.reason};
    }
}

}  // namespace aoesim
