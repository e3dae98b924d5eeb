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
#include "cube_impl.h"
#include "sim.h"

namespace aoesim {

namespace {
enum COp { C_DIR, C_N, C_C, C_H, C_W, C_CO, C_KH, C_KW, C_SH, C_SW, C_PT, C_PB, C_PL, C_PR, C_DH, C_DW, C_G,
           C_DTYPE, C_ODTYPE, C_BIAS };
enum CSt { Q_BATCH, Q_HO, Q_N, Q_GROUP, Q_HOL1, Q_WOL1, Q_KAL1, Q_KBL1, Q_HOL0, Q_WOL0, Q_KL0, Q_NL0, Q_PBUF,
           Q_ORDER, Q_NST };
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

// Everything that depends on the operator alone: computed once per batch.
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

template <bool Full>
AOE_INLINE TimeReason conv_row(const SoC& s, const ConvCtx& x, const int64_t* st, Result* out) {
    for (int i = 0; i < Q_NST; ++i)
        if (st[i] < 0) return reject<Full>(out, RS_BAD_VALUE);
    for (int i = Q_BATCH; i <= Q_NL0; ++i)
        if (st[i] < 1) return reject<Full>(out, RS_BAD_VALUE);
    if (st[Q_PBUF] > 31 || st[Q_ORDER] > 1) return reject<Full>(out, RS_BAD_VALUE);
    const int dir = x.dir;
    const int64_t n = x.n, h = x.h, w = x.w, g = x.g, sh = x.sh, sw = x.sw, ekh = x.ekh, ekw = x.ekw;
    const int64_t ho = x.ho, wo = x.wo, ea = x.ea, c0 = x.c0, khw = x.khw;
    const int64_t bd = st[Q_BATCH], hd = st[Q_HO], nd = st[Q_N], gd = st[Q_GROUP];
    const int64_t hoL1 = st[Q_HOL1], woL1 = st[Q_WOL1], kAL1 = st[Q_KAL1], kBL1 = st[Q_KBL1];
    const int64_t hoL0 = st[Q_HOL0], woL0 = st[Q_WOL0], kL0 = st[Q_KL0], nL0 = st[Q_NL0];
    const int64_t pbuf = st[Q_PBUF];
    if (bd * hd * nd * gd > s.cube_cores) return reject<Full>(out, RS_CORES);
    if (fmod_i(hoL1, hoL0) || fmod_i(woL1, woL0)) return reject<Full>(out, RS_INCONSISTENT);
    if (gd > g || bd > n) return reject<Full>(out, RS_EXCEEDS_SHAPE);

    CubeProblem p = x.p;
    int64_t mm[S_NST] = {0};
    const int64_t pix_l0 = hoL0 * woL0, pix_l1 = hoL1 * woL1;
    mm[S_ITER_ORDER] = st[Q_ORDER];
    mm[S_DB_L0A] = (pbuf >> 2) & 1;
    mm[S_DB_L0B] = (pbuf >> 3) & 1;
    mm[S_DB_L0C] = (pbuf >> 4) & 1;
    const bool db_al1 = pbuf & 1, db_bl1 = (pbuf >> 1) & 1;
    if (dir == 0 || dir == 1) {
        const int64_t out_h = x.out_h, out_w = x.out_w, in_c = x.in_c, out_c = x.out_c;
        const int64_t kal = x.kal;
        if (hd > out_h || nd > ceil_div(out_c, 16)) return reject<Full>(out, RS_EXCEEDS_SHAPE);
        const int64_t ho_core = ceil_div(out_h, hd);
        if (hoL1 > ho_core || woL1 > out_w) return reject<Full>(out, RS_EXCEEDS_SHAPE);
        // L1 holds whole kernel windows of C0-channel groups (kAL1 in units of kh*kw*C0)
        if (fmod_i(kAL1, kL0) || fmod_i(kBL1, kL0) || fmod_i(kAL1, khw * c0)) return reject<Full>(out, RS_INCONSISTENT);
        // L1 patch for hoL1 x woL1 output pixels (dx: rows of the zero-inserted dy, of which 1/stride are real)
        double rows = double((hoL1 - 1) * x.step_h + ekh), cols = double((woL1 - 1) * x.step_w + ekw);
        if (dir == 1) { rows = ceil_pos(rows / double(sh)); cols = ceil_pos(cols / double(sw)); }
        rows = std::min(rows, double(x.in_h));
        cols = std::min(cols, double(x.in_w));
        const double ch_l1 = double(fdiv(kAL1, khw));
        const double patch = rows * cols * std::min(ch_l1, double(align_up(in_c, c0))) * ea;
        const double tile_img2col = double(align_up(pix_l1, 16)) * double(kAL1) * ea;
        p.a_l1_scale = patch / tile_img2col;
        // GM: the patch (with halo) per tile instead of the img2col rows
        p.a_gm_scale = std::min(1.0, patch / (double(pix_l1) * double(std::min(kAL1, kal)) * ea));
        mm[S_USED_CORE] = bd * hd * nd * gd;
        mm[S_SM] = ceil_div(n, bd) * ho_core * out_w;
        mm[S_SN] = align_up(ceil_div(out_c, nd), 16);
        mm[S_SK] = kal;
        mm[S_BM] = align_up(pix_l0, 16);
        mm[S_BN] = nL0;
        mm[S_BK] = kL0;
        mm[S_STEP_M] = fdiv(hoL1, hoL0) * fdiv(woL1, woL0);
        mm[S_STEP_N] = 1;
        mm[S_STEP_KA] = fdiv(kAL1, kL0);
        mm[S_STEP_KB] = fdiv(kBL1, kL0);
        mm[S_DEPTH_A1] = mm[S_STEP_M] * mm[S_STEP_KA] * (db_al1 ? 2 : 1);
        mm[S_DEPTH_B1] = mm[S_STEP_KB] * (db_bl1 ? 2 : 1);
    } else {
        // dW[co_g, C1*C0*kh*kw] = dy^T[co_g, pixels] x img2col(x)[pixels, C1*C0*kh*kw]
        const int64_t nal = x.nal, pixels = x.pixels, c1 = x.c1, cin_g = x.cin_g;
        if (hd > ho || nd > c1) return reject<Full>(out, RS_EXCEEDS_SHAPE);
        const int64_t ho_core = ceil_div(ho, hd);
        if (hoL1 > ho_core || woL1 > wo) return reject<Full>(out, RS_EXCEEDS_SHAPE);
        if (fmod_i(kAL1, kL0) || fmod_i(kBL1, khw * c0)) return reject<Full>(out, RS_INCONSISTENT);
        const double rows = std::min(double((hoL1 - 1) * sh + ekh), double(h));
        const double cols = std::min(double((woL1 - 1) * sw + ekw), double(w));
        const double ch_l1 = double(fdiv(kBL1, khw));
        const double patch = rows * cols * std::min(ch_l1, double(align_up(cin_g, c0))) * ea;
        const double tile_img2col = double(align_up(pix_l1, c0)) * double(kBL1) * ea;
        p.b_l1_scale = patch / tile_img2col;
        p.b_gm_scale = std::min(1.0, patch / (double(pix_l1) * double(std::min(kBL1, nal)) * ea));
        mm[S_USED_CORE] = bd * hd * nd * gd;
        mm[S_SM] = align_up(x.co_g, 16);
        mm[S_SN] = std::min(nal, ceil_div(c1, nd) * khw * c0);
        mm[S_SK] = std::min(align_up(pixels, c0), ceil_div(n, bd) * ho_core * wo);
        mm[S_BM] = kL0;
        mm[S_BN] = nL0;
        mm[S_BK] = align_up(pix_l0, c0);
        const int64_t pix_steps = fdiv(hoL1, hoL0) * fdiv(woL1, woL0);
        mm[S_STEP_KA] = mm[S_STEP_KB] = pix_steps;
        mm[S_STEP_M] = fdiv(kAL1, kL0);
        mm[S_STEP_N] = ceil_div(kBL1, nL0);  // windows need not be a multiple of 16 (fp32: C0 = 8)
        mm[S_DEPTH_A1] = mm[S_STEP_M] * pix_steps * (db_al1 ? 2 : 1);
        mm[S_DEPTH_B1] = mm[S_STEP_N] * pix_steps * (db_bl1 ? 2 : 1);
    }
    // Cores beyond the blocks the split produces stay idle (CANN clamps the split the same way).
    const int64_t tasks = g * ceil_div(p.M, mm[S_SM]) * ceil_div(p.N, mm[S_SN]) * ceil_div(p.K, mm[S_SK]);
    mm[S_USED_CORE] = std::min(mm[S_USED_CORE], tasks);
    mm[S_L2_MCNT] = mm[S_L2_NCNT] = mm[S_L2_MBLK] = mm[S_L2_NBLK] = 1;
    mm[S_TILING_EN] = 0;
    return cube_eval_inl<Full>(s, p, x.c, mm, out);
}

AOE_HOT Result eval_conv(const SoC& s, const int64_t* op, const int64_t* st) {
    Result r;
    conv_row<true>(s, conv_setup(s, op), st, &r);
    return r;
}

AOE_HOT void conv_times(const SoC& s, const int64_t* op, const int64_t* st, int64_t nf, int64_t lo, int64_t hi,
                        double* times, int32_t* reasons) {
    const ConvCtx x = conv_setup(s, op);
    for (int64_t i = lo; i < hi; ++i) {
        const TimeReason r = conv_row<false>(s, x, st + i * nf, nullptr);
        times[i] = r.time_us;
        reasons[i] = r.reason;
    }
}

}  // namespace aoesim
