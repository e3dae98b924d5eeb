// The simulated Ascend AI Core: shared types of every kernel cost model.
//
// Every model is a pure function (SoC, operator, strategy) -> Result. Operators and strategies
// travel as flat int64 vectors so that a whole batch of candidates is one numpy array and the
// hot loop never touches Python objects.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

// The vector model (vector.cpp) is also compiled for x86-64-v3 (AVX2/FMA/VEX), picked at load time
// when the CPU has it: VEX int<->double conversions avoid the false dependencies that dominate the
// baseline build (about 2x faster), while the module still runs on any x86-64 (and other
// architectures). The Cube kernels have their own per-instruction-set builds (kernels.inc).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define AOE_HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define AOE_HOT
#endif
#if defined(__GNUC__)
#define AOE_INLINE inline __attribute__((always_inline))
#else
#define AOE_INLINE inline
#endif

namespace aoesim {

// Hardware description, filled from a CANN platform_config style .ini by the Python loader.
// Rates are bytes per cycle of the AI Core clock unless the name says otherwise.
struct SoC {
    std::string name;
    int cube_cores = 1;        // AIC cores (or coupled AI cores)
    int vector_cores = 1;      // AIV cores (== cube_cores when coupled)
    bool separated = false;    // cube_vector_split: AIC and AIV are different cores
    double freq_mhz = 1000;    // cube clock
    double vec_freq_mhz = 1000;
    int64_t l0a = 65536, l0b = 65536, l0c = 262144, l1 = 1048576, ub = 262144, l2 = 33554432;
    int64_t ub_reserved = 0;   // bytes at the top of UB the kernel may not use
    int cube_m = 16, cube_n = 16, cube_k = 16;  // fp16 fractal; k doubles for int8
    double vec_bytes_per_cycle = 256;  // one repeat
    double hbm_gbps = 1200;    // chip-wide HBM bandwidth, GB/s (peak)
    double hbm_efficiency = 0.9;  // achievable fraction of the peak (refresh, page and bank conflicts)
    double l2_gbps = 0;        // chip-wide L2 bandwidth, GB/s (0 = per-core rate x cores)
    double ddr_rate = 64;      // per-core max GM(HBM) read rate
    double l2_rate = 128;      // per-core max L2 read rate
    double l1_to_l0a_rate = 512, l1_to_l0b_rate = 256;
    double fixpipe_rate = 128; // L0C -> GM
    double ub_to_gm_rate = 64; // MTE3
    double gm_to_ub_rate = 64; // MTE2 into UB (capped by ddr/l2 share too)
    double l1_to_ub_rate = 128;
    double l2_usable = 0.8;    // fraction of L2 a kernel's working set may count on
    double dma_overhead_bytes = 64;   // per contiguous burst: efficiency = run / (run + this)
    double dma_latency_cycles = 700;  // GM round trip of one transfer; hidden only by ping-pong
    double nd2nz_efficiency = 0.85;   // extra cost of the ND->NZ strided MTE2 mode
    double mmad_overhead_cycles = 32; // per mmad: cube pipeline fill + MTE1/Cube flag handshake
    double vec_instr_overhead_cycles = 12;  // per vector instruction issue
    double scalar_iter_cycles = 40;   // scalar issue + flag sync per inner iteration
    double scalar_chunk_cycles = 120; // per L1/UB chunk (address calc, DMA descriptors)
    double scalar_task_cycles = 1500; // per core task (tiling read, loop setup)
    double launch_us = 3.0;           // kernel launch + completion, per kernel
    double cv_handoff_us = 1.0;       // separated cores: AIC -> AIV sync through GM
    double cycles_per_us() const { return freq_mhz; }
    double vec_cycles_per_us() const { return vec_freq_mhz; }
};

// Pipes reported in Result::busy_us and Result::bound.
enum Pipe : int { P_MTE2 = 0, P_MTE1, P_CUBE, P_VECTOR, P_FIXPIPE, P_SCALAR, P_OVERHEAD, P_COUNT };

// Why a strategy is rejected. 0 = valid. Stable numbers: they are part of the Python API.
enum Reason : int {
    RS_OK = 0,
    RS_BAD_VALUE = 1,        // a field is out of its domain (negative, zero where >= 1 needed, flag not 0/1)
    RS_CORES = 2,            // more cores than the SoC has
    RS_MISALIGNED = 3,       // base block / tile not a multiple of the fractal or 32 B
    RS_L0A = 4,
    RS_L0B = 5,
    RS_L0C = 6,
    RS_L1 = 7,
    RS_UB = 8,
    RS_INCONSISTENT = 9,     // fields that contradict each other (depth vs step, L2 tile counts...)
    RS_EXCEEDS_SHAPE = 10,   // a block larger than the (aligned) problem
    RS_UNSUPPORTED = 11,     // the operator/dtype/format combination is not modelled
    RS_COUNT
};

struct Result {
    double time_us = 0;
    int reason = RS_OK;
    double busy_us[P_COUNT] = {0, 0, 0, 0, 0, 0, 0};
    double hbm_bytes = 0;
    double l2_bytes = 0;
    int bound = P_OVERHEAD;
    double flops = 0;       // useful (unpadded) FLOPs of the operator
    double bytes = 0;       // compulsory bytes (inputs read once + outputs written once)
};

// Operator kinds; each has its own op-parameter and strategy layout (see the *_fields tables).
enum OpKind : int { K_MATMUL = 1, K_VECTOR = 2, K_CONV = 3 };

// CANN ge::DataType and ge::Format codes (interoperable with bank files).
enum DType : int { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_INT8 = 2, DT_INT32 = 3, DT_BF16 = 27 };
enum Format : int { F_NCHW = 0, F_NHWC = 1, F_ND = 2, F_NC1HWC0 = 3, F_FRACTAL_Z = 4, F_FRACTAL_NZ = 29 };

int dtype_bytes(int dt);  // 0 when unknown

// Field-name tables: the single source of truth for the flat layouts.
const std::vector<std::string>& op_fields(int kind);
const std::vector<std::string>& strategy_fields(int kind);

// Validate operator parameters once per batch: returns "" when fine, else a message.
std::string check_op(int kind, const int64_t* op, int64_t n_op);

// Evaluate one strategy. op/strategy lengths are checked by the caller.
Result evaluate(const SoC& soc, int kind, const int64_t* op, const int64_t* st);

Result eval_matmul(const SoC& soc, const int64_t* op, const int64_t* st);
Result eval_vector(const SoC& soc, const int64_t* op, const int64_t* st);
Result eval_conv(const SoC& soc, const int64_t* op, const int64_t* st);
// Times and reasons of conv strategy rows [lo, hi) (per-operator work done once).
void conv_times(const SoC& soc, const int64_t* op, const int64_t* st, int64_t nf, int64_t lo, int64_t hi,
                double* times, int32_t* reasons);

// Vector operator table (vector.cpp): code -> name and number of implementations.
int vector_op_count();
const char* vector_op_name(int code);
int vector_op_impls(int code);

// Shared helpers for the models (the Cube kernels use those they call always inlined: see lanes.h).
AOE_INLINE Result invalid(int reason) {
    Result r;
    r.reason = reason;
    r.time_us = std::numeric_limits<double>::infinity();
    return r;
}
// Ceiling of a non-negative double without a libm call (baseline x86-64 has no roundsd).
inline double ceil_pos(double x) {
    const double t = double(int64_t(x));
    return t + (t < x ? 1.0 : 0.0);
}
// Through double: a floating divide is several times cheaper than a 64-bit integer one on the hot
// path, and exact here (operands < 2^50, so a non-integer quotient never rounds onto an integer).
inline int64_t ceil_div(int64_t a, int64_t b) { return int64_t(ceil_pos(double(a) / double(b))); }
// Exact floor(a / b) and a mod b of non-negative integers through double (a 64-bit integer divide
// costs tens of cycles; one correction step makes the rounded double quotient exact).
inline int64_t fdiv(int64_t a, int64_t b) {
    int64_t q = int64_t(double(a) / double(b));
    q -= q * b > a;
    q += (q + 1) * b <= a;
    return q;
}
inline int64_t fmod_i(int64_t a, int64_t b) { return a - fdiv(a, b) * b; }
inline int64_t align_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }
inline int64_t align_pow2(int64_t a, int64_t b) { return (a + b - 1) & ~(b - 1); }  // b a power of two
// Chip-wide achievable HBM bytes per cycle of a clock of `freq_mhz`.
inline double hbm_bytes_per_cycle(const SoC& s, double freq_mhz) {
    return s.hbm_gbps * s.hbm_efficiency * 1000.0 / freq_mhz;
}
inline double dma_eff(const SoC& s, double run_bytes) { return run_bytes / (run_bytes + s.dma_overhead_bytes); }
// Total time of a kernel and the pipe that bounds it (inline: a times-only caller drops the rest).
AOE_INLINE void finish(const SoC& s, Result& r, double core_cycles, double vec_cycles, int kernels) {
    r.time_us = kernels * s.launch_us + core_cycles / s.cycles_per_us() + vec_cycles / s.vec_cycles_per_us();
    int best = 0;
    for (int p = 1; p < P_COUNT; ++p)
        if (r.busy_us[p] > r.busy_us[best]) best = p;
    r.bound = best;
}

}  // namespace aoesim
