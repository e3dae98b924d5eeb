// Vector-unit kernels (elementwise, reductions, Softmax, LayerNorm, Transpose, TransData, pooling).
//
// A vector kernel streams its data GM -> UB (MTE2), computes on the Vector unit in repeats of 256 B
// (masked tails waste lanes), and writes UB -> GM (MTE3). The strategy splits the rows over blockDim
// cores and the UB into tiles of tileLen elements, optionally double-buffered; `impl` selects an
// alternative algorithm where the operator has one. On separated SoCs (Ascend910B*) these kernels run
// on the AIV cores.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "sim.h"

namespace aoesim {

namespace {

enum VClass { C_ELT, C_ROW, C_TRANSPOSE, C_TRANSDATA, C_POOL };

struct VopSpec {
    const char* name;
    int cls;
    int n_in;           // inputs as large as the main input
    int n_out;          // outputs as large as the main input (C_ROW: 0 means reduced outputs only)
    int n_red_out;      // outputs of the reduced size (row statistics, reductions)
    int n_tmp;          // UB temporaries, in tiles
    double vcost[3];    // vector cycles per 256 B of main input, per implementation
    int ninstr;         // vector instructions per tile (issue overhead)
    int nreduce;        // row reductions per pass (C_ROW): each is one instruction per row
    int passes[3];      // GM passes over a row that does not fit in a tile (0: impl needs the row in UB)
    int n_impl;
    bool per_row_of_p0 = false;  // vector work scales with p0 (GEMV: one pass over B per row of A)
    int n_chan_params = 0;       // per-channel fp32 vectors (axis 1) loaded once per core, kept in UB
    double vcost_per_p0 = 0;     // extra vector cycles per 256 B for each unit of p0 (LRN: window size)
    int in_from_p0p1 = 0;        // input is p0 x p1 planes of the main (output) shape's planes (Resize)
    // vcost is per 128 elements whatever the dtype: fp16 is computed in fp32, so fp32 costs no more per
    // element (CANN's fits: Exp k = 0.0311 fp16 / 0.0307 fp32, Sqrt 0.0312 / 0.0313, Div 0.0460 / 0.0454)
    bool per_elem = false;
    bool per_out_byte = false;   // cost follows the output's bytes (Cast: fp16->fp32 k 0.0147, fp32->fp16 0.0087)
};

// Recipes: instruction counts and per-repeat costs for CANN's vector operators. Where CANN's own
// fitted cost of the Ascend C API exists (hicann/ge autofuse ATT, api_perf_register/v1/perf_param_v1.cpp,
// NPU arch 2201 = Atlas A2: cycles = k * elements + b), vcost is k x 128 (fp16 elements per 256 B
// repeat) and ninstr is b / the SoC's vec_instr_overhead_cycles (20 on Atlas A2): Add/Sub/Mul/Max/Min
// 1.35 (k 0.0103..0.0111), RealDiv 5.9 (Div 0.046), Sqrt 4 (0.0312), Rsqrt 1 (0.0071), Sigmoid 13 / 6
// (0.1011, b 116), Tanh 25 / 9 (0.1976, b 182), Erf 90 / 24 (0.6996, b 478), Select 1.5 / 2 (0.0118,
// b 46), Sign 11 / 6 (0.0855, b 119), Pow 83 / 126 (PowerWithScalar 0.6497, b 2517). Relu, Abs, Exp
// already matched it (k x 128 = 1, 1, 4). The others' costs are inferred from their expansions.
const VopSpec kVops[] = {
    // name              cls        in out red tmp  vcost             ni nr passes    impls
    {"Relu",             C_ELT,      1, 1, 0, 0, {1, 0, 0},          1, 0, {1, 0, 0}, 1},
    {"Abs",              C_ELT,      1, 1, 0, 0, {1, 0, 0},          1, 0, {1, 0, 0}, 1},
    {"Neg",              C_ELT,      1, 1, 0, 0, {1, 0, 0},          1, 0, {1, 0, 0}, 1},
    {"Add",              C_ELT,      2, 1, 0, 0, {1.35, 0, 0},       1, 0, {1, 0, 0}, 1},
    {"Sub",              C_ELT,      2, 1, 0, 0, {1.35, 0, 0},       1, 0, {1, 0, 0}, 1},
    {"Mul",              C_ELT,      2, 1, 0, 0, {1.35, 0, 0},       1, 0, {1, 0, 0}, 1},
    {"Maximum",          C_ELT,      2, 1, 0, 0, {1.35, 0, 0},       1, 0, {1, 0, 0}, 1},
    {"Minimum",          C_ELT,      2, 1, 0, 0, {1.35, 0, 0},       1, 0, {1, 0, 0}, 1},
    {"RealDiv",          C_ELT,      2, 1, 0, 0, {5.9, 0, 0},        1, 0, {1, 0, 0}, 1, false, 0, 0, 0, true},
    {"Exp",              C_ELT,      1, 1, 0, 0, {4, 0, 0},          1, 0, {1, 0, 0}, 1, false, 0, 0, 0, true},
    {"Log",              C_ELT,      1, 1, 0, 0, {4, 0, 0},          1, 0, {1, 0, 0}, 1, false, 0, 0, 0, true},
    {"Sqrt",             C_ELT,      1, 1, 0, 0, {4, 0, 0},          1, 0, {1, 0, 0}, 1, false, 0, 0, 0, true},
    {"Rsqrt",            C_ELT,      1, 1, 0, 0, {1, 0, 0},          1, 0, {1, 0, 0}, 1},
    {"Pow",              C_ELT,      1, 1, 0, 1, {83, 0, 0},       126, 0, {1, 0, 0}, 1},
    {"Sigmoid",          C_ELT,      1, 1, 0, 1, {13, 0, 0},         6, 0, {1, 0, 0}, 1, false, 0, 0, 0, true},
    {"Tanh",             C_ELT,      1, 1, 0, 1, {25, 0, 0},         9, 0, {1, 0, 0}, 1, false, 0, 0, 0, true},
    {"Gelu",             C_ELT,      1, 1, 0, 2, {16, 0, 0},         8, 0, {1, 0, 0}, 1},
    {"Erf",              C_ELT,      1, 1, 0, 2, {90, 0, 0},        24, 0, {1, 0, 0}, 1, false, 0, 0, 0, true},
    {"LeakyRelu",        C_ELT,      1, 1, 0, 0, {2, 0, 0},          2, 0, {1, 0, 0}, 1},
    {"ClipByValue",      C_ELT,      1, 1, 0, 0, {2, 0, 0},          2, 0, {1, 0, 0}, 1},
    {"Cast",             C_ELT,      1, 1, 0, 0, {1, 0, 0},          1, 0, {1, 0, 0}, 1, false, 0, 0, 0, false, true},
    {"ReluGrad",         C_ELT,      2, 1, 0, 1, {2, 0, 0},          2, 0, {1, 0, 0}, 1},
    {"GeluGrad",         C_ELT,      2, 1, 0, 2, {24, 0, 0},        12, 0, {1, 0, 0}, 1},
    {"SigmoidGrad",      C_ELT,      2, 1, 0, 1, {3, 0, 0},          3, 0, {1, 0, 0}, 1},
    {"TanhGrad",         C_ELT,      2, 1, 0, 1, {3, 0, 0},          3, 0, {1, 0, 0}, 1},
    {"Select",           C_ELT,      3, 1, 0, 0, {1.5, 0, 0},        2, 0, {1, 0, 0}, 1},
    {"DropOutDoMask",    C_ELT,      2, 1, 0, 0, {2, 0, 0},          2, 0, {1, 0, 0}, 1},
    {"ApplyAdamD",       C_ELT,      4, 3, 0, 2, {18, 0, 0},        12, 0, {1, 0, 0}, 1},
    {"BNTrainingUpdate", C_ELT,      1, 1, 0, 1, {4, 0, 0},          4, 0, {1, 0, 0}, 1},
    {"BNTrainingReduceGrad", C_ELT,  2, 1, 0, 1, {6, 0, 0},          5, 0, {1, 0, 0}, 1},
    // data movement: MTE only
    {"Concat",           C_ELT,      1, 1, 0, 0, {0, 0, 0},          0, 0, {1, 0, 0}, 1},
    {"Split",            C_ELT,      1, 1, 0, 0, {0, 0, 0},          0, 0, {1, 0, 0}, 1},
    {"Slice",            C_ELT,      1, 1, 0, 0, {0, 0, 0},          0, 0, {1, 0, 0}, 1},
    {"Pad",              C_ELT,      1, 1, 0, 0, {0, 0, 0},          0, 0, {1, 0, 0}, 1},
    {"Gather",           C_ELT,      1, 1, 0, 0, {0, 0, 0},          0, 0, {1, 0, 0}, 1},
    {"Tile",             C_ELT,      1, 1, 0, 0, {0, 0, 0},          0, 0, {1, 0, 0}, 1},
    // row operators: reductions over the masked axes
    // ReduceX impl 0: each core owns whole rows; impl 1: a row is split over cores (atomic add)
    {"ReduceSumD",       C_ROW,      1, 0, 1, 1, {1, 1, 0},          1, 1, {1, 1, 0}, 2},
    {"ReduceMeanD",      C_ROW,      1, 0, 1, 1, {1, 1, 0},          2, 1, {1, 1, 0}, 2},
    {"ReduceMaxD",       C_ROW,      1, 0, 1, 1, {1, 1, 0},          1, 1, {1, 1, 0}, 2},
    // Softmax impl 0: three passes (max, sum of exp, normalise: exp computed twice);
    // impl 1: online two-pass (running max and rescaled sum); impl 2: single pass, row in UB.
    {"SoftmaxV2",        C_ROW,      1, 1, 0, 2, {13, 14, 8},        5, 2, {3, 2, 0}, 3},
    {"SoftmaxGrad",      C_ROW,      2, 1, 0, 1, {5, 0, 0},          4, 1, {2, 0, 0}, 1},
    // LayerNorm impl 0: two-pass statistics (mean, then variance); impl 1: Welford one-pass.
    {"LayerNorm",        C_ROW,      1, 1, 2, 2, {6, 8.5, 0},        7, 2, {3, 2, 0}, 2},
    {"LayerNormGrad",    C_ROW,      3, 1, 0, 3, {12, 0, 0},        10, 2, {2, 0, 0}, 1},
    {"BNTrainingReduce", C_ROW,      1, 0, 2, 1, {2, 0, 0},          2, 2, {1, 0, 0}, 1},
    {"BNTrainingUpdateGrad", C_ROW,  2, 0, 2, 2, {3, 0, 0},          3, 2, {1, 0, 0}, 1},
    // Matmul alternatives on the Vector unit (Impl tuning): a GEMV reduces B [K, N] over K for each of
    // p0 rows of A (fp16 accumulation: high_performance only); a depthwise conv does kh*kw
    // multiply-adds per output on NC1HWC0 data (pooling machinery, p0..p3 = kernel and stride).
    {"Gemv",             C_ROW,      1, 0, 1, 1, {2, 0, 0},          2, 1, {1, 0, 0}, 1, true},
    {"DepthwiseConv2D",  C_POOL,     1, 1, 0, 2, {2, 0, 0},          2, 0, {1, 0, 0}, 1},
    {"Transpose",        C_TRANSPOSE,1, 1, 0, 1, {2, 0, 0},          2, 0, {1, 0, 0}, 1},
    {"TransData",        C_TRANSDATA,1, 1, 0, 1, {2, 0, 0},          2, 0, {1, 0, 0}, 1},
    {"MaxPool",          C_POOL,     1, 1, 0, 1, {1, 0, 0},          1, 0, {1, 0, 0}, 1},
    {"AvgPool",          C_POOL,     1, 1, 0, 1, {1.25, 0, 0},       2, 0, {1, 0, 0}, 1},
    {"MaxPoolGrad",      C_POOL,     3, 1, 0, 2, {2, 0, 0},          3, 0, {1, 0, 0}, 1},
    {"AvgPoolGrad",      C_POOL,     1, 1, 0, 1, {1.5, 0, 0},        2, 0, {1, 0, 0}, 1},
    // --- inference operators of common CNN / transformer graphs (appended: codes above stay stable) ---
    // BNInfer: y = (x - mean) * (scale / sqrt(var + eps)) + offset on NC1HWC0. The per-channel
    // factor is computed once per core on C elements; per element it is vsub, vmul, vadd (3 repeats)
    // with the channel vectors read at repeat stride 0 (no broadcast materialised). The four fp32
    // per-channel inputs (scale, offset, mean, variance) are loaded once per core and stay in UB.
    {"BNInfer",          C_ELT,      1, 1, 0, 1, {3, 0, 0},          3, 0, {1, 0, 0}, 1, false, 4},
    // LRN across channels: y = x / (bias + alpha/size * sum_window x^2)^beta. Per element: square (1),
    // scale and bias (2), pow as exp(beta*ln(.)) (4 + 1 + 4), the divide as a multiply by the
    // reciprocal (1) = 13 repeats; plus the window: each of the size-1 neighbour offsets needs a
    // lane-shifted copy and an add (2 repeats each: vcost_per_p0 = 2, the -1 folded into the base).
    // p0 = window size. Neighbouring C1 planes are re-read as a halo (see eval_vector).
    {"LRN",              C_ELT,      1, 1, 0, 3, {11, 0, 0},         6, 0, {1, 0, 0}, 1, false, 0, 2},
    // Activations: repeats per 256 B are the count of vector instructions of their usual expansion.
    {"HardSigmoid",      C_ELT,      1, 1, 0, 0, {4, 0, 0},          4, 0, {1, 0, 0}, 1},  // muls, adds, max, min
    {"HardSwish",        C_ELT,      1, 1, 0, 1, {5, 0, 0},          5, 0, {1, 0, 0}, 1},  // HardSigmoid, mul
    {"Swish",            C_ELT,      1, 1, 0, 1, {11, 0, 0},         5, 0, {1, 0, 0}, 1},  // Sigmoid, mul
    {"Softplus",         C_ELT,      1, 1, 0, 1, {9, 0, 0},          3, 0, {1, 0, 0}, 1},  // exp, adds, ln
    {"Elu",              C_ELT,      1, 1, 0, 1, {8, 0, 0},          5, 0, {1, 0, 0}, 1},  // exp, adds, muls, cmp, sel
    {"Mish",             C_ELT,      1, 1, 0, 2, {22, 0, 0},        10, 0, {1, 0, 0}, 1},  // Softplus, Tanh, mul
    {"Sin",              C_ELT,      1, 1, 0, 2, {12, 0, 0},         8, 0, {1, 0, 0}, 1},  // range reduction + polynomial
    {"Floor",            C_ELT,      1, 1, 0, 0, {2, 0, 0},          2, 0, {1, 0, 0}, 1},  // vconv with rounding, back
    {"Sign",             C_ELT,      1, 1, 0, 1, {11, 0, 0},         6, 0, {1, 0, 0}, 1},  // two compares, select
    {"Softsign",         C_ELT,      1, 1, 0, 1, {6, 0, 0},          3, 0, {1, 0, 0}, 1},  // abs, adds, div
    {"FloorMod",         C_ELT,      2, 1, 0, 1, {8, 0, 0},          4, 0, {1, 0, 0}, 1},  // div, floor, mul, sub
    {"PRelu",            C_ELT,      2, 1, 0, 1, {4, 0, 0},          4, 0, {1, 0, 0}, 1},  // max, min, mul, add
    // ArgMax/ArgMin: a reduction that carries the index (compare + select per repeat).
    {"ArgMaxV2",         C_ROW,      1, 0, 1, 2, {3, 0, 0},          3, 2, {1, 0, 0}, 1},
    // Resize on NC1HWC0: main shape = the output; p0 x p1 = the input plane (H x W). Nearest copies
    // C0 vectors (1 repeat per output); bilinear weighs 4 neighbours (4 mul + 3 add + index/weight
    // arithmetic amortised over a row: 8 repeats). Input rows are read once and reused in UB.
    {"ResizeNearestNeighborV2", C_ELT, 1, 1, 0, 0, {1, 0, 0},        1, 0, {1, 0, 0}, 1, false, 0, 0, 1},
    {"ResizeBilinearV2", C_ELT,      1, 1, 0, 2, {8, 0, 0},          6, 0, {1, 0, 0}, 1, false, 0, 0, 1},
    // Gradients of the activations above (inputs dy and x or y): the forward expansion's derivative.
    {"HardSwishGrad",    C_ELT,      2, 1, 0, 2, {7, 0, 0},          7, 0, {1, 0, 0}, 1},  // 2 cmp, 2 sel, muls, adds, mul
    {"HardSigmoidGrad",  C_ELT,      2, 1, 0, 1, {6, 0, 0},          6, 0, {1, 0, 0}, 1},  // muls, adds, 2 cmp, sel, mul
    {"SoftplusGrad",     C_ELT,      2, 1, 0, 1, {11, 0, 0},         5, 0, {1, 0, 0}, 1},  // Sigmoid, mul
    {"EluGrad",          C_ELT,      2, 1, 0, 1, {4, 0, 0},          4, 0, {1, 0, 0}, 1},  // cmp, adds, sel, mul
    {"ErfGrad",          C_ELT,      2, 1, 0, 1, {8, 0, 0},          5, 0, {1, 0, 0}, 1},  // square, muls, exp, muls, mul
    {"SinGrad",          C_ELT,      2, 1, 0, 2, {13, 0, 0},         9, 0, {1, 0, 0}, 1},  // Sin of the shifted x, mul
    {"MishGrad",         C_ELT,      2, 1, 0, 3, {30, 0, 0},        14, 0, {1, 0, 0}, 1},  // Softplus, Tanh, Sigmoid, 4 mul/add
    {"SoftsignGrad",     C_ELT,      2, 1, 0, 1, {7, 0, 0},          4, 0, {1, 0, 0}, 1},  // abs, adds, mul, div
    {"AbsGrad",          C_ELT,      2, 1, 0, 1, {4, 0, 0},          4, 0, {1, 0, 0}, 1},  // Sign, mul
    {"LeakyReluGrad",    C_ELT,      2, 1, 0, 1, {3, 0, 0},          3, 0, {1, 0, 0}, 1},  // cmp, muls, sel
    {"SqrtGrad",         C_ELT,      2, 1, 0, 1, {5, 0, 0},          2, 0, {1, 0, 0}, 1},  // div, muls
    // LRNGrad (inputs dy, x, y): the forward's normaliser recomputed (13 repeats), dy * y / norm summed
    // over the same window (2 per offset) and the two terms combined (3): 16 + 2 x window size.
    {"LRNGrad",          C_ELT,      3, 1, 0, 3, {14, 0, 0},         8, 0, {1, 0, 0}, 1, false, 0, 2},
    // Binary gradients (inputs dy, a, b; outputs da, db at full size; a broadcast db is then reduced
    // by a ReduceSum the graph carries): MaximumGrad/MinimumGrad compare and select twice (3),
    // PReluGrad compares, selects and multiplies twice (4).
    {"MaximumGrad",      C_ELT,      3, 2, 0, 1, {3, 0, 0},          3, 0, {1, 0, 0}, 1},
    {"PReluGrad",        C_ELT,      3, 2, 0, 1, {4, 0, 0},          4, 0, {1, 0, 0}, 1},
    // --- losses and TensorFlow's norm pieces of training graphs (appended: codes above stay stable) ---
    // SquaredDifference (x - y)^2: vsub, vmul (1.35 each, the Add/Sub/Mul fit above); the second input
    // is often a broadcast row statistic (a decomposed norm's mean).
    {"SquaredDifference", C_ELT,     2, 1, 0, 0, {2.7, 0, 0},       2, 0, {1, 0, 0}, 1},
    // Softmax cross-entropy over the class axis (rows of logits). Outputs the per-row loss (reduced) and
    // the gradient softmax - labels (full size). SoftmaxV2's three-pass recipe (13: max, exp-sum,
    // normalise with exp computed twice) plus, per element, the label term: sparse labels (int32 per
    // row, read once) compare the lane index and select (1.5); dense labels (a second full input)
    // multiply-and-sum for the loss and subtract for the gradient (1.35 + 1 + 1.35).
    {"SparseSoftmaxCrossEntropyWithLogits", C_ROW, 1, 1, 1, 2, {14.5, 0, 0}, 7, 2, {3, 0, 0}, 1},
    {"SoftmaxCrossEntropyWithLogits",       C_ROW, 2, 1, 1, 2, {16.7, 0, 0}, 9, 3, {3, 0, 0}, 1},
    // NLLLossGrad: the gradient of the picked log-probabilities is zero except one element per row;
    // the kernel fills [N, C] (vector_dup, one repeat per 256 B) and writes it; its inputs are a row
    // each (target, weight): nothing of the input's size is read.
    {"NLLLossGrad",      C_ELT,      0, 1, 0, 0, {1, 0, 0},          1, 0, {1, 0, 0}, 1},
};
constexpr int kNumVops = int(sizeof(kVops) / sizeof(kVops[0]));

enum VOp { V_VOP, V_DTYPE, V_OUT_DTYPE, V_RANK, V_D0, V_IN_FMT = 12, V_OUT_FMT, V_AXES, V_BCAST,
           V_P0, V_P1, V_P2, V_P3 };
enum VSt { T_BLOCK, T_TILE, T_DB, T_IMPL };

}  // namespace

int vector_op_count() { return kNumVops; }
const char* vector_op_name(int i) { return (i >= 0 && i < kNumVops) ? kVops[i].name : ""; }
int vector_op_impls(int i) { return (i >= 0 && i < kNumVops) ? kVops[i].n_impl : 0; }

std::string check_vector(const int64_t* op) {
    const int64_t v = op[V_VOP];
    if (v < 0 || v >= kNumVops) return "unknown vector operator code " + std::to_string(v);
    if (!dtype_bytes(int(op[V_DTYPE])) || !dtype_bytes(int(op[V_OUT_DTYPE])))
        return "vector dtype must be float16, bfloat16, float32, int8 or int32";
    const int64_t rank = op[V_RANK];
    if (rank < 1 || rank > 8) return "vector operator rank must be 1..8";
    double total = 1;
    for (int i = 0; i < 8; ++i) {
        const int64_t d = op[V_D0 + i];
        if (d < 1 || d > (int64_t(1) << 40)) return "vector dims must be positive (unused dims = 1)";
        if (i >= rank && d != 1) return "dims beyond rank must be 1";
        total *= double(d);
    }
    if (total > 1e13) return "vector operator too large to model (> 1e13 elements)";
    if (op[V_AXES] < 0 || op[V_AXES] >= (int64_t(1) << rank)) return "axes_mask must select axes < rank";
    if (op[V_BCAST] < 0 || op[V_BCAST] >= (int64_t(1) << rank)) return "bcast_mask must select axes < rank";
    const VopSpec& sp = kVops[v];
    if (sp.cls == C_ROW && op[V_AXES] == 0) return std::string(sp.name) + " needs at least one axis in axes_mask";
    if (sp.cls == C_POOL) {
        if (rank != 4) return "pooling takes an NCHW shape (rank 4)";
        if (op[V_P0] < 1 || op[V_P1] < 1 || op[V_P2] < 1 || op[V_P3] < 1)
            return "pooling needs positive kernel (p0, p1) and stride (p2, p3)";
        if (op[V_P0] > op[V_D0 + 2] || op[V_P1] > op[V_D0 + 3]) return "pooling kernel larger than the input";
    }
    if (sp.vcost_per_p0 > 0 && (op[V_P0] < 1 || op[V_P0] > 4096))
        return std::string(sp.name) + " needs a window size p0 in 1..4096";
    if (sp.in_from_p0p1) {
        if (rank != 4) return std::string(sp.name) + " takes an NCHW output shape (rank 4)";
        if (op[V_P0] < 1 || op[V_P1] < 1 || op[V_P0] > (int64_t(1) << 31) || op[V_P1] > (int64_t(1) << 31))
            return std::string(sp.name) + " needs the input height p0 and width p1 (positive)";
    }
    if (sp.cls == C_TRANSPOSE) {
        // p0 packs the permutation, 4 bits per axis, axis 0 in the lowest bits
        int seen = 0;
        for (int i = 0; i < rank; ++i) {
            const int64_t a = (op[V_P0] >> (4 * i)) & 15;
            if (a >= rank || (seen >> a) & 1) return "Transpose p0 must pack a permutation of the axes";
            seen |= 1 << a;
        }
    }
    if (sp.cls == C_TRANSDATA) {
        const int64_t a = op[V_P0], b = op[V_P1];
        const bool nz = (a == F_ND && b == F_FRACTAL_NZ) || (a == F_FRACTAL_NZ && b == F_ND);
        const bool c0 = (a == F_NCHW && b == F_NC1HWC0) || (a == F_NC1HWC0 && b == F_NCHW) ||
                        (a == F_NHWC && b == F_NC1HWC0) || (a == F_NC1HWC0 && b == F_NHWC);
        if (!nz && !c0) return "TransData supports ND<->FRACTAL_NZ and NCHW/NHWC<->NC1HWC0 (p0=src, p1=dst)";
        if (nz && rank < 2) return "TransData ND<->FRACTAL_NZ needs rank >= 2";
        if (c0 && rank != 4) return "TransData to/from NC1HWC0 needs an NCHW/NHWC rank-4 shape";
    }
    return "";
}

AOE_HOT Result eval_vector(const SoC& s, const int64_t* op, const int64_t* st) {
    const VopSpec& sp = kVops[op[V_VOP]];
    const int64_t blk = st[T_BLOCK], tile = st[T_TILE], db = st[T_DB], impl = st[T_IMPL];
    if (blk < 1 || tile < 1 || db < 0 || db > 1 || impl < 0) return invalid(RS_BAD_VALUE);
    if (impl >= sp.n_impl) return invalid(RS_BAD_VALUE);
    if (blk > s.vector_cores) return invalid(RS_CORES);
    const int64_t ei = dtype_bytes(int(op[V_DTYPE])), eo = dtype_bytes(int(op[V_OUT_DTYPE]));
    const int64_t align = 32 / ei;  // 32 B alignment of UB tiles
    if (tile % align) return invalid(RS_MISALIGNED);
    const int rank = int(op[V_RANK]);
    const int64_t* d = op + V_D0;
    const double cyc_us = s.vec_cycles_per_us();

    double E = 1;
    for (int i = 0; i < rank; ++i) E *= double(d[i]);

    // Split the data into rows x row length (R) x inner width (I): R is the reduced extent of a
    // row operator, I the contiguous width the reduction runs across (1 when reducing the last axis).
    double rows = E, R = 1, I = 1;
    const int64_t axes = op[V_AXES];
    if (sp.cls == C_ROW) {
        int last = -1;
        R = 1;
        for (int i = 0; i < rank; ++i)
            if ((axes >> i) & 1) { R *= double(d[i]); last = i; }
        for (int i = last + 1; i < rank; ++i) I *= double(d[i]);
        rows = E / (R * I);
    }
    const double row_len = R * I;  // elements per row (a row = everything one output row needs)

    // Padding: NZ / NC1HWC0 tensors carry aligned dimensions.
    double E_out = E;
    double run_in = 0, run_out = 0;  // contiguous burst lengths in bytes
    const bool nz_in = op[V_IN_FMT] == F_FRACTAL_NZ;
    double vcost = sp.vcost[impl];
    if (sp.cls == C_TRANSDATA) {
        const int64_t a = op[V_P0], b = op[V_P1];
        if (a == F_ND || b == F_ND) {
            const double m = double(d[rank - 2]), n = double(d[rank - 1]);
            const double padded = (E / (m * n)) * double(align_up(int64_t(m), 16)) * double(align_up(int64_t(n), 16));
            if (a == F_ND) { E_out = padded; run_in = n * ei; run_out = 32; }
            else { E_out = E; E = padded; run_in = 32; run_out = n * eo; }
            vcost = 0;  // pure DMA reshuffle with 32 B bursts on one side
        } else {
            const double c = double(d[1]), hw = double(d[2]) * double(d[3]);
            const double c0 = 32.0 / double(ei);
            const double padded = double(d[0]) * ceil_pos(c / c0) * c0 * hw;
            if (b == F_NC1HWC0) { E_out = padded; run_in = (a == F_NCHW ? hw : c) * ei; run_out = 32 * 16; }
            else { E_out = E; E = padded; run_in = 32 * 16; run_out = (b == F_NCHW ? hw : c) * eo; }
        }
    } else if (sp.cls == C_TRANSPOSE) {
        int last_src = int((op[V_P0] >> (4 * (rank - 1))) & 15);
        if (last_src == rank - 1) {  // last axis stays: strided DMA, no vector work
            vcost = 0;
            run_in = run_out = double(d[rank - 1]) * ei;
        } else {
            run_in = 512;
            run_out = 512;  // vnchwconv works on 16x16 blocks
        }
    }

    // Work split: C_ROW splits whole rows over cores unless impl 1 of a reduction splits a row.
    const bool split_rows = sp.cls == C_ROW && impl == 1 && std::strncmp(sp.name, "Reduce", 6) == 0;
    double per_core_rows, per_core_elems, passes = 1, tiles, tile_elems;
    if (sp.cls == C_ROW) {
        if (!split_rows && double(blk) > rows) return invalid(RS_INCONSISTENT);
        if (split_rows) {
            const double part = ceil_pos(row_len / double(blk));
            if (part < align) return invalid(RS_INCONSISTENT);
            per_core_rows = rows;
            const double seg = std::min(double(tile), part);
            if (double(tile) > double(align_up(int64_t(part), align))) return invalid(RS_EXCEEDS_SHAPE);
            tiles = rows * ceil_pos(part / seg);
            tile_elems = seg;
            per_core_elems = rows * part;
        } else {
            per_core_rows = ceil_pos(rows / double(blk));
            per_core_elems = per_core_rows * row_len;
            if (double(tile) > double(align_up(int64_t(std::min(per_core_elems, 1e15)), align)))
                return invalid(RS_EXCEEDS_SHAPE);
            if (double(tile) >= row_len) {
                const double rpt = std::floor(double(tile) / row_len);
                tiles = ceil_pos(per_core_rows / rpt);
                tile_elems = rpt * row_len;
            } else {
                if (sp.passes[impl] == 0) return invalid(RS_UB);  // this impl needs a whole row in UB
                passes = sp.passes[impl];
                tiles = per_core_rows * ceil_pos(row_len / double(tile)) * passes;
                tile_elems = double(tile);
            }
        }
        if (run_in == 0) run_in = std::min(tile_elems, row_len) * ei;
    } else {
        if (double(blk) > ceil_pos(E / double(align))) return invalid(RS_INCONSISTENT);
        per_core_elems = double(align_up(int64_t(ceil_pos(E / double(blk))), align));
        if (double(tile) > per_core_elems) return invalid(RS_EXCEEDS_SHAPE);
        per_core_rows = 0;
        tiles = ceil_pos(per_core_elems / double(tile));
        tile_elems = double(tile);
        if (run_in == 0) run_in = tile_elems * ei;
    }
    if (run_out == 0) run_out = std::min(tile_elems, E_out) * eo;

    // Resize reads p0 x p1 input planes for d2 x d3 output planes: input bytes scale by the ratio.
    const double in_ratio = sp.in_from_p0p1 ? double(op[V_P0]) * double(op[V_P1]) / (double(d[2]) * double(d[3])) : 1.0;
    // Per-channel parameter vectors (fp32, axis 1), resident in UB and loaded once per core.
    const double param_bytes = sp.n_chan_params * double(rank >= 2 ? d[1] : d[0]) * 4.0;
    // UB capacity: inputs, outputs and temporaries of one tile, twice when double-buffered.
    const double n_in = double(sp.n_in) * in_ratio;
    const double out_tiles = sp.n_out * double(eo) / double(ei);
    double ub_need = double(tile) * ei * ((n_in + out_tiles) * (1 + db) + sp.n_tmp) + param_bytes;
    const double ub_cap = double(s.ub - s.ub_reserved);
    // A broadcast second input that is reused across tiles stays resident in UB.
    const int64_t bc = op[V_BCAST];
    double E2 = 0;
    if (bc && sp.cls == C_ELT && sp.n_in >= 2) {
        E2 = 1;
        for (int i = 0; i < rank; ++i)
            if (!((bc >> i) & 1)) E2 *= double(d[i]);
        if (E2 * ei <= ub_cap / 4) ub_need += E2 * ei - double(tile) * ei * (1 + db);  // resident, not streamed
        else E2 = 0;
    }
    if (ub_need > ub_cap) return invalid(RS_UB);

    // --- per-tile pipes (vector-core cycles) ---
    const double active = std::min<double>(double(blk), std::max(1.0, sp.cls == C_ROW && !split_rows ? rows : E / align));
    const double hbm_bpc = hbm_bytes_per_cycle(s, s.vec_freq_mhz);
    const double l2_bpc = s.l2_gbps > 0 ? s.l2_gbps * 1000.0 / s.vec_freq_mhz : s.l2_rate * s.vector_cores;
    const double sh_h = std::min(s.gm_to_ub_rate, hbm_bpc / active);
    const double sh_l2 = std::min(s.l2_rate, l2_bpc / active);
    const double sh_w = std::min(s.ub_to_gm_rate, hbm_bpc / active);
    const double streamed_in = E2 > 0 ? n_in - 1 : n_in;
    const double in_bytes_tile = tile_elems * ei * streamed_in;
    // First pass from HBM; later passes over the same rows hit L2 (rows in flight are small).
    const double in_pass_bytes = in_bytes_tile;
    // A row operator reducing the last axis of a FRACTAL_NZ tensor (the fractal's inner 16): the rows of
    // a tile are whole 16-row fractals, read as N/16 contiguous runs of rows x 16 elements.
    const bool nz_last = nz_in && sp.cls == C_ROW && I == 1;
    if (nz_last) run_in = std::max(run_in, std::min(tile_elems, 16.0 * std::max(1.0, tile_elems / row_len)) * ei);
    const double eff_in = dma_eff(s, std::max(run_in, 1.0)) * (nz_in && sp.cls == C_ROW && !nz_last ? 0.9 : 1.0);
    const double eff_out = dma_eff(s, std::max(run_out, 1.0));
    const double first_frac = 1.0 / passes;
    double t2 = (in_pass_bytes * first_frac / sh_h + in_pass_bytes * (1 - first_frac) / sh_l2) / eff_in;

    double out_elems_tile;
    if (sp.cls == C_ROW) {
        // outputs: full-size ones per element; reduced ones per row
        const double rows_in_tile = std::max(1.0, tile_elems / row_len);
        out_elems_tile = (sp.n_out * tile_elems + sp.n_red_out * rows_in_tile * I) / passes;
    } else {
        out_elems_tile = sp.n_out * tile_elems * (E_out / E);
    }
    double t3 = out_elems_tile * eo / sh_w / eff_out;

    const double rep_bytes = sp.per_out_byte ? double(eo) : sp.per_elem ? 2.0 : double(ei);
    const double repeats = ceil_pos(tile_elems * rep_bytes / s.vec_bytes_per_cycle);
    if (sp.per_row_of_p0 && op[V_P0] > 1) vcost *= double(op[V_P0]);
    if (sp.vcost_per_p0 > 0) {
        vcost += sp.vcost_per_p0 * double(op[V_P0]);
        if (rank == 4) {
            // A channel window crossing C0 groups needs the neighbouring C1 planes of each tile: a halo
            // of 2 * ceil(radius / C0) planes re-read per tile (bounded by the planes that exist).
            const double c0 = 32.0 / double(ei), c1 = ceil_pos(double(d[1]) / c0);
            const double plane = double(d[2]) * double(d[3]) * c0;
            const double halo = std::min(2.0 * ceil_pos(double((op[V_P0] - 1) / 2) / c0), c1 - 1.0);
            t2 *= 1.0 + std::max(0.0, halo) / std::max(1.0, tile_elems / plane);
        }
    }
    double tv = vcost * repeats / passes;
    double instrs = double(sp.ninstr) * ceil_pos(std::max(repeats, 1.0) / 255.0);
    if (sp.cls == C_ROW) {
        // One reduce instruction per row per reduction; a row narrower than a repeat masks lanes.
        const double rows_in_tile = std::max(1.0, tile_elems / row_len);
        const double width = I > 1 ? I : std::min(row_len, tile_elems);
        const double lanes = s.vec_bytes_per_cycle / ei;
        const double mask_waste = width < lanes ? lanes / width : 1.0;
        tv *= (I > 1 ? std::min(mask_waste, 16.0) : 1.0);
        if (nz_last) {
            // NZ keeps the reduced axis across fractals: each reduction is N/16 - 1 full-width
            // elementwise vmax/vadd over the rows x 16 slabs (in vcost) and one 16-lane block reduce
            // per row group, not one reduce instruction per row as in ND. This is why CANN's Format
            // tuning moves a BERT Softmax next to its BatchMatMuls to NZ (58.781 -> 26.876 us).
            const double n1 = ceil_pos(std::min(row_len, tile_elems) / 16.0);
            tv += double(sp.nreduce) * ceil_pos(rows_in_tile * 16.0 * ei / s.vec_bytes_per_cycle);
            instrs += double(sp.nreduce) * n1;
        } else {
            if (nz_in) tv += repeats;  // reducing a non-last axis across fractals: a gather per repeat
            instrs += double(sp.nreduce) * rows_in_tile * std::max(1.0, std::log2(std::max(2.0, std::min(row_len, tile_elems) * ei / 256.0)));
        }
    }
    if (sp.cls == C_POOL) {
        const double kh = double(op[V_P0]), kw = double(op[V_P1]), sh = double(op[V_P2]), sw = double(op[V_P3]);
        const double ho = std::floor((double(d[2]) - kh) / sh) + 1, wo = std::floor((double(d[3]) - kw) / sw) + 1;
        const double ratio = (ho * wo) / (double(d[2]) * double(d[3]));
        out_elems_tile = tile_elems * ratio;
        t3 = out_elems_tile * eo / sh_w / eff_out;
        tv = vcost * kh * kw * ceil_pos(out_elems_tile * ei / s.vec_bytes_per_cycle);
        instrs = double(sp.ninstr) * kh * kw * std::max(1.0, ceil_pos(out_elems_tile * ei / s.vec_bytes_per_cycle / 255.0));
        // halo rows re-read when a tile ends inside a pooling window
        const double tile_rows = std::max(1.0, tile_elems / double(d[3]));
        t2 *= 1.0 + std::max(0.0, kh - sh) / tile_rows;
    }
    if (E2 == 0 && bc && sp.n_in >= 2) tv += repeats;  // broadcast re-materialised per tile
    tv += instrs * s.vec_instr_overhead_cycles;

    const double scalar = s.scalar_chunk_cycles;
    // Single buffering waits a GM round trip for every load and store; ping-pong only for the first.
    const double lat = 2.0 * s.dma_latency_cycles;
    const double per_tile = db ? std::max(std::max(t2, tv), std::max(t3, scalar)) : t2 + tv + t3 + scalar + lat;
    const double fill = db ? (t2 + t3 + tv - std::max(std::max(t2, tv), t3)) + lat : 0.0;
    const double core_bytes = (in_bytes_tile * first_frac + out_elems_tile * eo) * tiles;
    const double hbm_floor = core_bytes / (hbm_bpc / active);
    double total = std::max(per_tile * tiles, hbm_floor) + fill + s.scalar_task_cycles;
    const double resident_in = E2 * ei + param_bytes;  // broadcast operand / channel params, once per core
    total += resident_in / sh_h;
    double extra_us = 0;
    if (split_rows) {  // atomic accumulation of per-core partials
        extra_us += double(blk) * rows * I * 4.0 / (hbm_bpc * cyc_us);
    }

    Result r;
    r.busy_us[P_MTE2] = (t2 * tiles + resident_in / sh_h) / cyc_us;
    r.busy_us[P_VECTOR] = tv * tiles / cyc_us;
    r.busy_us[P_FIXPIPE] = t3 * tiles / cyc_us;
    r.busy_us[P_SCALAR] = (scalar * tiles + s.scalar_task_cycles) / cyc_us;
    r.busy_us[P_OVERHEAD] = s.launch_us + fill / cyc_us + extra_us;
    const double in_total = E * ei * n_in;
    const double out_total = sp.cls == C_ROW ? (sp.n_out * E + sp.n_red_out * rows * I) * eo : sp.n_out * E_out * eo;
    const double in_hbm = ((sp.cls == C_ELT && E2 > 0) ? E * ei * (streamed_in) + E2 * ei : in_total) + param_bytes;
    r.hbm_bytes = in_hbm + out_total;
    r.l2_bytes = in_hbm * (passes - 1);
    r.bytes = in_hbm + out_total;
    r.flops = E * std::max(1.0, vcost);
    finish(s, r, 0.0, total, 1);
    r.time_us += extra_us;
    return r;
}

}  // namespace aoesim
