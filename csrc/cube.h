// Per-core pipeline of a Cube kernel (matmul and conv share it).
#pragma once

#include <algorithm>

#include "sim.h"

namespace aoesim {

// Busy cycles of one core task, per pipe, plus what the overlap rules need to know.
struct CubeTask {
    double mte2_a = 0, mte2_b = 0;   // GM -> L1 (HBM or L2), already divided by DMA efficiency
    double mte1_a = 0, mte1_b = 0;   // L1 -> L0A / L0B (load3d for conv A)
    double cube = 0;                 // mmad cycles
    double fix = 0;                  // L0C -> GM
    double scalar = 0;               // issue + sync
    double hbm_floor = 0;            // cycles the chip-wide HBM share needs for this task's bytes
    double exposed_latency = 0;      // GM latency of single-buffered chunk loads (nothing overlaps it)
    bool db_l1a = false, db_l1b = false;   // L1 ping-pong (MTE2 overlaps the rest)
    bool db_l0a = false, db_l0b = false;   // L0 ping-pong (MTE1 overlaps Cube)
    bool db_l0c = false;                   // L0C ping-pong (FixPipe overlaps Cube)
    double n_chunks = 1, n_blocks = 1, n_out = 1;  // granularity of the fill/drain
};

// Matmul strategy layout: the 23 MatMulV3TunnerTiling fields (names in common.cpp).
enum MmSt { S_USED_CORE, S_SM, S_SN, S_SK, S_BM, S_BN, S_BK, S_DEPTH_A1, S_DEPTH_B1, S_STEP_M, S_STEP_N,
            S_ITER_ORDER, S_STEP_KA, S_STEP_KB, S_DB_L0A, S_DB_L0B, S_DB_L0C, S_L2_MCNT, S_L2_NCNT,
            S_L2_MBLK, S_L2_NBLK, S_L2_ORDER, S_TILING_EN, S_NST };

// A Cube problem in matmul terms: C[batch, M, N] = A[batch_a, M, K] @ B[batch_b, K, N].
// Convolutions map onto it (img2col), with the scales saying how their operands differ from plain
// matrices in GM, in L1, and on the L1 -> L0 path (load3d).
struct CubeProblem {
    int64_t M = 1, N = 1, K = 1, batch_a = 1, batch_b = 1;
    int64_t ea = 2, eo = 2;               // element bytes of A/B and of C
    bool a_nz = false, b_nz = false, c_nz = false, ta = false, tb = false, bias = false;
    double a_gm_scale = 1, b_gm_scale = 1;  // GM bytes of an operand / bytes of its matrix form
    double a_l1_scale = 1, b_l1_scale = 1;  // L1 footprint / matrix-form footprint
    double a_mte1_eff = 1, b_mte1_eff = 1;  // L1 -> L0 rate factor (load3d img2col < 1)
    double cube_scale = 1;                  // Cube work factor (zero taps of a strided transposed conv)
    double flops = 0;                       // useful FLOPs
};

// What depends only on (SoC, problem): computed once per batch, not per strategy.
struct CubePrep {
    int64_t batch = 1, k0 = 16, k0_log2 = 4, Mal = 16, Nal = 16, Kal = 16;
    double gmM = 0, gmK = 0, gmN = 0, A_b = 0, B_b = 0, C_tot = 0, bias_tot = 0;  // A_b, B_b: gm scale 1
    double l2u = 0, hbm_bpc = 1, l2_bpc = 1, inv_cpu = 1, inv_l0a = 1, inv_l0b = 1, inv_nd2nz = 1;
    // reciprocals of the rates, so the per-strategy code multiplies instead of dividing
    double inv_hbm_bpc = 1, inv_l2_bpc = 1, inv_ddr = 1, inv_l2_rate = 1, inv_fix = 1;
};
CubePrep prepare_cube(const SoC& s, const CubeProblem& p);

// Evaluate a matmul-layout strategy (the 23 MatMulV3TunnerTiling fields) on a Cube problem.
Result cube_eval(const SoC& s, const CubeProblem& p, const CubePrep& prep, const int64_t* st);
Result cube_eval(const SoC& s, const CubeProblem& p, const int64_t* st);
// Times and reasons of strategy rows [lo, hi) (the tuning hot path: nothing else is computed).
void matmul_times(const SoC& s, const CubeProblem& p, const CubePrep& c, const int64_t* st, int64_t nf,
                  int64_t lo, int64_t hi, double* times, int32_t* reasons);
// The matmul operator vector as a Cube problem.
CubeProblem matmul_problem(const int64_t* op);

// Combine the pipes of one task: double-buffered stages overlap, single-buffered ones serialise,
// and the first chunk / last output block cannot overlap anything (fill and drain).
// Always inlined: called out of line from an x86-64-v3 batch loop it runs as baseline SSE code, and
// under LTO GCC dropped the vzeroupper before that call; on Intel cores the SSE/AVX transition with
// dirty upper registers made the whole matmul loop 2.5x slower (200 instead of 80 ns per row).
AOE_INLINE double cube_task_cycles(const CubeTask& t, double* fill_out) {
    const double t1 = t.mte1_a + t.mte1_b;
    const double ov1 = (t.db_l0a ? t.mte1_a : 0.0) + (t.db_l0b ? t.mte1_b : 0.0);
    const double inner = std::max(ov1, t.cube) + (t1 - ov1);
    const double withc = t.db_l0c ? std::max(inner, t.fix) : inner + t.fix;
    const double t2 = t.mte2_a + t.mte2_b;
    const double ov2 = (t.db_l1a ? t.mte2_a : 0.0) + (t.db_l1b ? t.mte2_b : 0.0);
    double total = std::max(ov2, withc) + (t2 - ov2);
    total = std::max(total, std::max(t.scalar, t.hbm_floor)) + t.exposed_latency;
    const double fill = t2 / t.n_chunks + t1 / t.n_blocks + t.fix / t.n_out;
    if (fill_out) *fill_out = fill;
    return total + fill;
}

}  // namespace aoesim
