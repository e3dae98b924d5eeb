// Conv2D, Conv2DBackpropInput and Conv2DBackpropFilter as img2col on the Cube.
//
// Activations are NC1HWC0 and weights FRACTAL_Z inside the kernel, so channels pad to C0. The conv is
// mapped onto the matmul pipeline (cube_eval): M = output pixels, K = C1*C0*kh*kw, N = Cout per group,
// groups as the batch. What differs from a plain matmul is carried by CubeProblem's scales: MTE2 loads
// the feature-map patch (with its halo) instead of the img2col matrix, the patch is what occupies L1,
// and load3d expands it into L0A at a reduced rate.
//
// Strategy (CANN Conv2DV2 knowledge): batchDim, hoDim, nDim, groupDim split the work over cores;
// hoL1 x woL1 output pixels and kAL1 / kBL1 K-elements (kAL1 a multiple of kh*kw*C0: whole kernel windows
// of C0-channel groups) are staged in L1; hoL0 x woL0 pixels, kL0 and
// nL0 form one L0 block; pBufferFlag bits = 1 AL1, 2 BL1, 4 AL0, 8 BL0, 16 CL0 ping-pong;
// iterateMNOrder 0 = M (pixels) inner, 1 = N inner.
// Conv2DBackpropInput is the forward conv of dy (zero-inserted by the stride) with the rotated weight:
// the Cube also multiplies the inserted zeros. Conv2DBackpropFilter computes dW = dy^T x img2col(x):
// there the pixel tiles (hoL1*woL1, hoL0*woL0) tile the reduction axis, kAL1/kL0 tile Cout and
// kBL1/nL0 tile Cin*kh*kw, and batchDim*hoDim split the pixels over cores (atomic accumulation).
#include <algorithm>
#include <cmath>

#include "cube.h"
#include "sim.h"

namespace aoesim {

namespace {
enum COp { C_DIR, C_N, C_C, C_H, C_W, C_CO, C_KH, C_KW, C_SH, C_SW, C_PT, C_PB, C_PL, C_PR, C_DH, C_DW, C_G,
           C_DTYPE, C_ODTYPE, C_BIAS };
constexpr double kLoad3dEff = 0.5;  // img2col expansion rate vs a plain L1->L0 copy (inferred)
}  // namespace

std::string check_conv(const int64_t* op) {
    if (op[C_DIR] < 0 || op[C_DIR] > 2) return "direction must be 0 (Conv2D), 1 (BackpropInput) or 2 (BackpropFilter)";
    const char* names[] = {"n", "c", "h", "w", "cout", "kh", "kw", "stride_h", "stride_w"};
    for (int i = C_N; i <= C_SW; ++i)
        if (op[i] < 1 || op[i] > (int64_t(1) << 24)) return std::string(names[i - 1]) + " must be in [1, 2^24]";
    for (int i = C_PT; i <= C_PR; ++i)
        if (op[i] < 0 || op[i] > 4096) return "pads must be in [0, 4096]";
    if (op[C_DH] < 1 || op[C_DW] < 1 || op[C_DH] > 4096 || op[C_DW] > 4096) return "dilations must be in [1, 4096]";
    const int64_t g = op[C_G];
    if (g < 1 || op[C_C] % g || op[C_CO] % g) return "groups must divide both input and output channels";
    const int64_t ekh = op[C_DH] * (op[C_KH] - 1) + 1, ekw = op[C_DW] * (op[C_KW] - 1) + 1;
    if (op[C_H] + op[C_PT] + op[C_PB] < ekh || op[C_W] + op[C_PL] + op[C_PR] < ekw)
        return "the (dilated) kernel is larger than the padded input";
    const int64_t dt = op[C_DTYPE];
    if (!(dt == DT_FLOAT16 || dt == DT_BF16 || dt == DT_FLOAT || dt == DT_INT8))
        return "conv dtype must be float16, bfloat16, float32 or int8";
    if (!dtype_bytes(int(op[C_ODTYPE]))) return "conv out_dtype is not a known dtype";
    if (op[C_BIAS] != 0 && op[C_BIAS] != 1) return "bias is a flag (0 or 1)";
    const double work = double(op[C_N]) * op[C_C] * op[C_H] * op[C_W] * op[C_CO] / double(g) * op[C_KH] * op[C_KW];
    if (work > 1e17) return "convolution too large to model";
    return "";
}

ConvCtx conv_setup(const SoC& s, const int64_t* op) {
    ConvCtx x;
    x.dir = int(op[C_DIR]);
    x.n = op[C_N];
    const int64_t c = op[C_C], co = op[C_CO];
    x.h = op[C_H]; x.w = op[C_W]; x.kh = op[C_KH]; x.kw = op[C_KW];
    x.sh = op[C_SH]; x.sw = op[C_SW]; x.g = op[C_G];
    x.ekh = op[C_DH] * (x.kh - 1) + 1;
    x.ekw = op[C_DW] * (x.kw - 1) + 1;
    x.ho = (x.h + op[C_PT] + op[C_PB] - x.ekh) / x.sh + 1;
    x.wo = (x.w + op[C_PL] + op[C_PR] - x.ekw) / x.sw + 1;
    x.ea = dtype_bytes(int(op[C_DTYPE]));
    const int64_t eo = dtype_bytes(int(op[C_ODTYPE]));
    x.c0 = 32 / x.ea;
    x.cin_g = c / x.g;
    x.co_g = co / x.g;
    x.khw = x.kh * x.kw;
    x.plain = x.khw == 1 && x.sh == 1 && x.sw == 1;  // 1x1 stride-1: no img2col expansion
    CubeProblem& p = x.p;
    p.ea = x.ea;
    p.eo = eo;
    p.a_nz = p.b_nz = p.c_nz = true;  // NC1HWC0 / FRACTAL_Z inside the kernel
    p.bias = op[C_BIAS] != 0;
    p.batch_a = p.batch_b = x.g;
    p.flops = 2.0 * double(x.n) * x.ho * x.wo * co * x.cin_g * x.kh * x.kw;
    if (x.dir == 0 || x.dir == 1) {
        x.out_h = x.dir == 0 ? x.ho : x.h;
        x.out_w = x.dir == 0 ? x.wo : x.w;
        x.in_c = x.dir == 0 ? x.cin_g : x.co_g;
        x.out_c = x.dir == 0 ? x.co_g : x.cin_g;
        x.in_h = x.dir == 0 ? x.h : x.ho;
        x.in_w = x.dir == 0 ? x.w : x.wo;
        x.step_h = x.dir == 0 ? x.sh : 1;  // dx: stride-1 conv on dilated dy
        x.step_w = x.dir == 0 ? x.sw : 1;
        x.kal = align_up(x.in_c, x.c0) * x.khw;
        p.M = x.n * x.out_h * x.out_w;
        p.N = x.out_c;
        p.K = x.kal;
        p.a_mte1_eff = x.plain ? 1.0 : kLoad3dEff;
    } else {
        x.nal = align_up(x.cin_g, x.c0) * x.khw;
        x.pixels = x.n * x.ho * x.wo;
        x.c1 = align_up(x.cin_g, x.c0) / x.c0;  // cores split N by whole C0-channel groups
        p.M = x.co_g;
        p.N = x.nal;
        p.K = x.pixels;
        p.b_mte1_eff = x.plain ? 1.0 : kLoad3dEff;
    }
    x.c = prepare_cube(s, p);
    return x;
}

Result eval_conv(const SoC& s, const int64_t* op, const int64_t* st) {
    return cube_kernels().conv(s, conv_setup(s, op), st);
}

void conv_times(const SoC& s, const int64_t* op, const int64_t* st, int64_t nf, int64_t lo, int64_t hi,
                double* times, int32_t* reasons) {
    cube_kernels().conv_times(s, conv_setup(s, op), st, nf, lo, hi, times, reasons);
}

}  // namespace aoesim
