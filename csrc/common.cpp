// Layout tables, operator validation and dispatch shared by every kernel model.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "sim.h"

namespace aoesim {

int dtype_bytes(int dt) {
    switch (dt) {
        case DT_FLOAT: return 4;
        case DT_FLOAT16: return 2;
        case DT_BF16: return 2;
        case DT_INT8: return 1;
        case DT_INT32: return 4;
        default: return 0;
    }
}

namespace {
using Names = std::vector<std::string>;
// One of three per-kind field tables (an empty one for an unknown kind).
const Names& by_kind(int kind, const Names& mm, const Names& vec, const Names& conv) {
    static const Names none;
    switch (kind) {
        case K_MATMUL: return mm;
        case K_VECTOR: return vec;
        case K_CONV: return conv;
        default: return none;
    }
}
}  // namespace

const std::vector<std::string>& op_fields(int kind) {
    static const std::vector<std::string> mm = {
        "m", "n", "k", "batch_a", "batch_b", "dtype", "out_dtype", "a_format", "b_format", "c_format",
        "trans_a", "trans_b", "bias"};
    static const std::vector<std::string> vec = {
        "vop", "dtype", "out_dtype", "rank", "d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7",
        "in_format", "out_format", "axes_mask", "bcast_mask", "p0", "p1", "p2", "p3"};
    static const std::vector<std::string> conv = {
        "direction", "n", "c", "h", "w", "cout", "kh", "kw", "stride_h", "stride_w", "pad_top",
        "pad_bottom", "pad_left", "pad_right", "dilation_h", "dilation_w", "groups", "dtype", "out_dtype",
        "bias"};
    return by_kind(kind, mm, vec, conv);
}

const std::vector<std::string>& strategy_fields(int kind) {
    // Matmul: the 23 fields of CANN's MatMulV3TunnerTiling, in the knowledge-base order.
    static const std::vector<std::string> mm = {
        "usedCoreNum", "singleCoreM", "singleCoreN", "singleCoreK", "baseM", "baseN", "baseK",
        "depthA1", "depthB1", "stepM", "stepN", "iterateOrder", "stepKa", "stepKb", "dbL0A", "dbL0B",
        "dbL0C", "l2MTileCnt", "l2NTileCnt", "l2MTileBlock", "l2NTileBlock", "l2IterateOrder",
        "tilingEnable"};
    static const std::vector<std::string> vec = {"blockDim", "tileLen", "doubleBuffer", "impl"};
    // Conv: CANN Conv2DV2 knowledge fields.
    static const std::vector<std::string> conv = {
        "batchDim", "hoDim", "nDim", "groupDim", "hoL1", "woL1", "kAL1", "kBL1", "hoL0", "woL0", "kL0",
        "nL0", "pBufferFlag", "iterateMNOrder"};
    return by_kind(kind, mm, vec, conv);
}

namespace {
constexpr int64_t kMaxDim = int64_t(1) << 31;

bool is_float_in(int64_t dt) { return dt == DT_FLOAT16 || dt == DT_BF16 || dt == DT_FLOAT; }

std::string check_matmul(const int64_t* op) {
    const char* names[] = {"m", "n", "k", "batch_a", "batch_b"};
    for (int i = 0; i < 5; ++i)
        if (op[i] < 1 || op[i] > kMaxDim)
            return std::string(names[i]) + " must be in [1, 2^31], got " + std::to_string(op[i]);
    if (op[3] != op[4] && op[3] != 1 && op[4] != 1)
        return "batch_a and batch_b must be equal or one of them 1 (broadcast)";
    if (double(op[0]) * double(op[1]) * double(op[2]) * double(std::max(op[3], op[4])) > 1e18)
        return "matmul too large to model (m*n*k*batch > 1e18)";
    const int64_t dt = op[5], odt = op[6];
    if (!(is_float_in(dt) || dt == DT_INT8)) return "dtype must be float16, bfloat16, float32 or int8";
    if (dt == DT_INT8 ? !(odt == DT_INT32 || odt == DT_FLOAT16) : !is_float_in(odt))
        return "out_dtype does not match dtype (int8 -> int32/float16, floats -> a float type)";
    for (int i = 7; i < 10; ++i)
        if (op[i] != F_ND && op[i] != F_FRACTAL_NZ) return "matmul formats must be ND or FRACTAL_NZ";
    for (int i = 10; i < 13; ++i)
        if (op[i] != 0 && op[i] != 1) return "trans_a, trans_b and bias are flags (0 or 1)";
    return "";
}
}  // namespace

std::string check_vector(const int64_t* op);  // vector.cpp
std::string check_conv(const int64_t* op);    // conv.cpp

std::string check_op(int kind, const int64_t* op, int64_t n_op) {
    const auto& f = op_fields(kind);
    if (f.empty()) return "unknown operator kind " + std::to_string(kind);
    if (n_op != int64_t(f.size())) {
        std::ostringstream os;
        os << "operator parameters must have " << f.size() << " values, got " << n_op;
        return os.str();
    }
    switch (kind) {
        case K_MATMUL: return check_matmul(op);
        case K_VECTOR: return check_vector(op);
        case K_CONV: return check_conv(op);
    }
    return "unknown operator kind";
}

Result evaluate(const SoC& soc, int kind, const int64_t* op, const int64_t* st) {
    switch (kind) {
        case K_MATMUL: return eval_matmul(soc, op, st);
        case K_VECTOR: return eval_vector(soc, op, st);
        case K_CONV: return eval_conv(soc, op, st);
    }
    Result r;
    r.reason = RS_UNSUPPORTED;
    r.time_us = INFINITY;
    return r;
}

}  // namespace aoesim
