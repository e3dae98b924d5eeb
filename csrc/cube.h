// Cube kernels (matmul and conv share the pipeline): the problem, its per-batch constants, the
// conv context, and the per-instruction-set kernel sets.
#pragma once

#include <algorithm>

#include "sim.h"

namespace aoesim {

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
    int64_t batch = 1, k0 = 16, k0_log2 = 4, ea_log2 = 1, Mal = 16, Nal = 16, Kal = 16;  // ea = 2^ea_log2
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

// Conv strategy layout: the 14 CANN Conv2DV2 knowledge fields (names in common.cpp, meaning in conv.cpp).
enum CSt { Q_BATCH, Q_HO, Q_N, Q_GROUP, Q_HOL1, Q_WOL1, Q_KAL1, Q_KBL1, Q_HOL0, Q_WOL0, Q_KL0, Q_NL0, Q_PBUF,
           Q_ORDER, Q_NST };

// Everything of a convolution that depends on the operator alone: computed once per batch.
struct ConvCtx {
    CubeProblem p;
    CubePrep c;
    int dir = 0;
    int64_t n = 1, h = 1, w = 1, kh = 1, kw = 1, sh = 1, sw = 1, g = 1, ekh = 1, ekw = 1, ho = 1, wo = 1;
    int64_t ea = 2, c0 = 16, cin_g = 1, co_g = 1, khw = 1;
    bool plain = false;
    // forward and dx: the output pixel grid and the map that feeds it
    int64_t out_h = 1, out_w = 1, in_c = 1, out_c = 1, in_h = 1, in_w = 1, step_h = 1, step_w = 1, kal = 1;
    // dW: columns (C1*C0*kh*kw), pixels (the reduction), C0-channel groups
    int64_t nal = 1, pixels = 1, c1 = 1;
};
ConvCtx conv_setup(const SoC& s, const int64_t* op);

// The Cube models' batch kernels, built once per instruction set (kernels.inc): the one-row full
// result and the times-only batch loop, for matmul and conv.
struct CubeKernels {
    const char* isa;  // "base", "x86-64-v3" or "x86-64-v4"
    int lanes;        // rows priced per SIMD step of the batch loops
    void (*matmul_times)(const SoC&, const CubeProblem&, const CubePrep&, const int64_t* st, int64_t nf,
                         int64_t lo, int64_t hi, double* times, int32_t* reasons);
    Result (*matmul)(const SoC&, const CubeProblem&, const CubePrep&, const int64_t* st);
    void (*conv_times)(const SoC&, const ConvCtx&, const int64_t* st, int64_t nf, int64_t lo, int64_t hi,
                       double* times, int32_t* reasons);
    Result (*conv)(const SoC&, const ConvCtx&, const int64_t* st);
};
// Each is null when this build or CPU cannot run it (kern_*.cpp).
const CubeKernels* cube_kernels_base();
const CubeKernels* cube_kernels_v3();
const CubeKernels* cube_kernels_v4();
// The fastest set this CPU runs (chosen once), or the one named (null if unavailable).
const CubeKernels& cube_kernels();
const CubeKernels* cube_kernels_named(const std::string& isa);

}  // namespace aoesim
