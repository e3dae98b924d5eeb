// Cube matmul (MatMul / BatchMatMul) cost model with TCubeTiling-style strategies.
//
// One core task computes a singleCoreM x singleCoreN block over singleCoreK; tasks (batch x M blocks
// x N blocks x K blocks) are dealt to usedCoreNum cores in waves. Inside a task the output is walked
// in L1 tiles of (stepM*baseM) x (stepN*baseN), each base block accumulating over K in L0C. The
// README ("The matmul model") gives the equations.
#include <algorithm>
#include <cmath>

#include "cube.h"
#include "sim.h"

namespace aoesim {

namespace {

enum MmOp { M_M, M_N, M_K, M_BATCH_A, M_BATCH_B, M_DTYPE, M_OUT_DTYPE, M_A_FMT, M_B_FMT, M_C_FMT,
            M_TRANS_A, M_TRANS_B, M_BIAS, M_NOP };


}  // namespace

CubeProblem matmul_problem(const int64_t* op) {
    CubeProblem p;
    p.M = op[M_M];
    p.N = op[M_N];
    p.K = op[M_K];
    p.batch_a = op[M_BATCH_A];
    p.batch_b = op[M_BATCH_B];
    p.ea = dtype_bytes(int(op[M_DTYPE]));
    p.eo = dtype_bytes(int(op[M_OUT_DTYPE]));
    p.a_nz = op[M_A_FMT] == F_FRACTAL_NZ;
    p.b_nz = op[M_B_FMT] == F_FRACTAL_NZ;
    p.c_nz = op[M_C_FMT] == F_FRACTAL_NZ;
    p.ta = op[M_TRANS_A] != 0;
    p.tb = op[M_TRANS_B] != 0;
    p.bias = op[M_BIAS] != 0;
    p.flops = 2.0 * double(p.M) * double(p.N) * double(p.K) * double(std::max(p.batch_a, p.batch_b));
    return p;
}

Result eval_matmul(const SoC& s, const int64_t* op, const int64_t* st) {
    return cube_eval(s, matmul_problem(op), st);
}

CubePrep prepare_cube(const SoC& s, const CubeProblem& p) {
    CubePrep c;
    c.batch = std::max(p.batch_a, p.batch_b);
    c.k0 = 32 / p.ea;  // fractal K: 16 fp16, 32 int8, 8 fp32
    c.k0_log2 = c.k0 == 32 ? 5 : c.k0 == 16 ? 4 : 3;
    c.ea_log2 = 5 - c.k0_log2;  // element bytes are 1, 2 or 4 (dtype_bytes)
    c.Mal = align_pow2(p.M, 16);
    c.Nal = align_pow2(p.N, 16);
    c.Kal = align_pow2(p.K, c.k0);
    c.gmM = p.a_nz ? double(c.Mal) : double(p.M);
    c.gmK = (p.a_nz || p.b_nz) ? double(c.Kal) : double(p.K);
    c.gmN = p.b_nz ? double(c.Nal) : double(p.N);
    // bytes of one batch of A / B in GM (conv: the feature map, smaller than its img2col matrix)
    c.A_b = c.gmM * (p.a_nz ? c.gmK : double(p.K)) * p.ea;  // x a_gm_scale per strategy
    c.B_b = (p.b_nz ? c.gmK : double(p.K)) * c.gmN * p.ea;  // x b_gm_scale per strategy
    c.C_tot = double(c.batch) * double(p.c_nz ? c.Mal : p.M) * double(p.c_nz ? c.Nal : p.N) * p.eo;
    c.bias_tot = p.bias ? double(p.N) * 4.0 : 0.0;
    c.l2u = s.l2_usable * double(s.l2);
    c.hbm_bpc = hbm_bytes_per_cycle(s, s.freq_mhz);
    c.l2_bpc = s.l2_gbps > 0 ? s.l2_gbps * 1000.0 / s.freq_mhz : s.l2_rate * s.cube_cores;
    c.inv_cpu = 1.0 / s.cycles_per_us();
    c.inv_l0a = 1.0 / (s.l1_to_l0a_rate * p.a_mte1_eff);
    c.inv_l0b = 1.0 / (s.l1_to_l0b_rate * p.b_mte1_eff);
    c.inv_nd2nz = 1.0 / s.nd2nz_efficiency;
    c.inv_hbm_bpc = 1.0 / c.hbm_bpc;
    c.inv_l2_bpc = 1.0 / c.l2_bpc;
    c.inv_ddr = 1.0 / s.ddr_rate;
    c.inv_l2_rate = 1.0 / s.l2_rate;
    c.inv_fix = 1.0 / s.fixpipe_rate;
    return c;
}

Result cube_eval(const SoC& s, const CubeProblem& p, const int64_t* st) {
    return cube_eval(s, p, prepare_cube(s, p), st);
}

Result cube_eval(const SoC& s, const CubeProblem& p, const CubePrep& c, const int64_t* st) {
    return cube_kernels().matmul(s, p, c, st);
}

void matmul_times(const SoC& s, const CubeProblem& p, const CubePrep& c, const int64_t* st, int64_t nf, int64_t lo,
                  int64_t hi, double* times, int32_t* reasons) {
    cube_kernels().matmul_times(s, p, c, st, nf, lo, hi, times, reasons);
}

namespace {
// Whether this CPU runs a kernel set of the build (null: not built).
bool cpu_runs(const CubeKernels* k) {
    if (!k) return false;
    if (k == cube_kernels_base()) return true;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
    // (libgcc reads the CPU's features in a constructor, before anything here runs)
    if (k == cube_kernels_v4()) return __builtin_cpu_supports("x86-64-v4");
    if (k == cube_kernels_v3()) return __builtin_cpu_supports("x86-64-v3");
#endif
    return false;
}
}  // namespace

const CubeKernels& cube_kernels() {
    static const CubeKernels* const best = [] {  // chosen once
        for (const CubeKernels* k : {cube_kernels_v4(), cube_kernels_v3()})
            if (cpu_runs(k)) return k;
        return cube_kernels_base();
    }();
    return *best;
}

const CubeKernels* cube_kernels_named(const std::string& isa) {
    for (const CubeKernels* k : {cube_kernels_base(), cube_kernels_v3(), cube_kernels_v4()})
        if (k && isa == k->isa && cpu_runs(k)) return k;
    return nullptr;
}

}  // namespace aoesim
