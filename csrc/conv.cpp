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

AOE_HOT Result eval_conv(const SoC& s, const int64_t* op, const int64_t* st) {
    for (int i = 0; i < Q_NST; ++i)
        if (st[i] < 0) return invalid(RS_BAD_VALUE);
    for (int i = Q_BATCH; i <= Q_NL0; ++i)
        if (st[i] < 1) return invalid(RS_BAD_VALUE);
    if (st[Q_PBUF] > 31 || st[Q_ORDER] > 1) return invalid(RS_BAD_VALUE);
    const int dir = int(op[C_DIR]);
    const int64_t n = op[C_N], c = op[C_C], h = op[C_H], w = op[C_W], co = op[C_CO], kh = op[C_KH], kw = op[C_KW];
    const int64_t sh = op[C_SH], sw = op[C_SW], g = op[C_G];
    const int64_t ekh = op[C_DH] * (kh - 1) + 1, ekw = op[C_DW] * (kw - 1) + 1;
    const int64_t ho = (h + op[C_PT] + op[C_PB] - ekh) / sh + 1, wo = (w + op[C_PL] + op[C_PR] - ekw) / sw + 1;
    const int64_t ea = dtype_bytes(int(op[C_DTYPE])), eo = dtype_bytes(int(op[C_ODTYPE]));
    const int64_t c0 = 32 / ea;
    const int64_t cin_g = c / g, co_g = co / g;
    const int64_t bd = st[Q_BATCH], hd = st[Q_HO], nd = st[Q_N], gd = st[Q_GROUP];
    const int64_t hoL1 = st[Q_HOL1], woL1 = st[Q_WOL1], kAL1 = st[Q_KAL1], kBL1 = st[Q_KBL1];
    const int64_t hoL0 = st[Q_HOL0], woL0 = st[Q_WOL0], kL0 = st[Q_KL0], nL0 = st[Q_NL0];
    const int64_t pbuf = st[Q_PBUF];
    if (bd * hd * nd * gd > s.cube_cores) return invalid(RS_CORES);
    if (hoL1 % hoL0 || woL1 % woL0) return invalid(RS_INCONSISTENT);
    if (gd > g || bd > n) return invalid(RS_EXCEEDS_SHAPE);

    CubeProblem p;
    p.ea = ea;
    p.eo = eo;
    p.a_nz = p.b_nz = p.c_nz = true;  // NC1HWC0 / FRACTAL_Z inside the kernel
    p.bias = op[C_BIAS] != 0;
    p.batch_a = p.batch_b = g;
    p.flops = 2.0 * double(n) * ho * wo * co * cin_g * kh * kw;
    int64_t mm[S_NST] = {0};
    const int64_t khw = kh * kw;
    const int64_t pix_l0 = hoL0 * woL0, pix_l1 = hoL1 * woL1;
    mm[S_ITER_ORDER] = st[Q_ORDER];
    mm[S_DB_L0A] = (pbuf >> 2) & 1;
    mm[S_DB_L0B] = (pbuf >> 3) & 1;
    mm[S_DB_L0C] = (pbuf >> 4) & 1;
    const bool db_al1 = pbuf & 1, db_bl1 = (pbuf >> 1) & 1;
    const bool plain = khw == 1 && sh == 1 && sw == 1;  // 1x1 stride-1: no img2col expansion
    if (dir == 0 || dir == 1) {
        // output pixel grid and the input that feeds it
        const int64_t out_h = dir == 0 ? ho : h, out_w = dir == 0 ? wo : w;
        const int64_t in_c = dir == 0 ? cin_g : co_g, out_c = dir == 0 ? co_g : cin_g;
        const int64_t in_h = dir == 0 ? h : ho, in_w = dir == 0 ? w : wo;
        const int64_t step_h = dir == 0 ? sh : 1, step_w = dir == 0 ? sw : 1;  // dx: stride-1 conv on dilated dy
        const int64_t kal = align_up(in_c, c0) * khw;
        if (hd > out_h || nd > ceil_div(out_c, 16)) return invalid(RS_EXCEEDS_SHAPE);
        const int64_t ho_core = ceil_div(out_h, hd);
        if (hoL1 > ho_core || woL1 > out_w) return invalid(RS_EXCEEDS_SHAPE);
        // L1 holds whole kernel windows of C0-channel groups (kAL1 in units of kh*kw*C0)
        if (kAL1 % kL0 || kBL1 % kL0 || kAL1 % (khw * c0)) return invalid(RS_INCONSISTENT);
        p.M = n * out_h * out_w;
        p.N = out_c;
        p.K = kal;
        // L1 patch for hoL1 x woL1 output pixels (dx: rows of the zero-inserted dy, of which 1/stride are real)
        double rows = double((hoL1 - 1) * step_h + ekh), cols = double((woL1 - 1) * step_w + ekw);
        if (dir == 1) { rows = ceil_pos(rows / double(sh)); cols = ceil_pos(cols / double(sw)); }
        rows = std::min(rows, double(in_h));
        cols = std::min(cols, double(in_w));
        const double ch_l1 = double(kAL1 / khw);
        const double patch = rows * cols * std::min(ch_l1, double(align_up(in_c, c0))) * ea;
        const double tile_img2col = double(align_up(pix_l1, 16)) * double(kAL1) * ea;
        p.a_l1_scale = patch / tile_img2col;
        // GM: the patch (with halo) per tile instead of the img2col rows
        p.a_gm_scale = std::min(1.0, patch / (double(pix_l1) * double(std::min(kAL1, kal)) * ea));
        p.a_mte1_eff = plain ? 1.0 : kLoad3dEff;
        mm[S_USED_CORE] = bd * hd * nd * gd;
        mm[S_SM] = ceil_div(n, bd) * ho_core * out_w;
        mm[S_SN] = align_up(ceil_div(out_c, nd), 16);
        mm[S_SK] = kal;
        mm[S_BM] = align_up(pix_l0, 16);
        mm[S_BN] = nL0;
        mm[S_BK] = kL0;
        mm[S_STEP_M] = (hoL1 / hoL0) * (woL1 / woL0);
        mm[S_STEP_N] = 1;
        mm[S_STEP_KA] = kAL1 / kL0;
        mm[S_STEP_KB] = kBL1 / kL0;
        mm[S_DEPTH_A1] = mm[S_STEP_M] * mm[S_STEP_KA] * (db_al1 ? 2 : 1);
        mm[S_DEPTH_B1] = mm[S_STEP_KB] * (db_bl1 ? 2 : 1);
    } else {
        // dW[co_g, C1*C0*kh*kw] = dy^T[co_g, pixels] x img2col(x)[pixels, C1*C0*kh*kw]
        const int64_t nal = align_up(cin_g, c0) * khw;
        const int64_t pixels = n * ho * wo;
        const int64_t c1 = align_up(cin_g, c0) / c0;  // cores split N by whole C0-channel groups
        if (hd > ho || nd > c1) return invalid(RS_EXCEEDS_SHAPE);
        const int64_t ho_core = ceil_div(ho, hd);
        if (hoL1 > ho_core || woL1 > wo) return invalid(RS_EXCEEDS_SHAPE);
        if (kAL1 % kL0 || kBL1 % (khw * c0)) return invalid(RS_INCONSISTENT);
        p.M = co_g;
        p.N = nal;
        p.K = pixels;
        const double rows = std::min(double((hoL1 - 1) * sh + ekh), double(h));
        const double cols = std::min(double((woL1 - 1) * sw + ekw), double(w));
        const double ch_l1 = double(kBL1 / khw);
        const double patch = rows * cols * std::min(ch_l1, double(align_up(cin_g, c0))) * ea;
        const double tile_img2col = double(align_up(pix_l1, c0)) * double(kBL1) * ea;
        p.b_l1_scale = patch / tile_img2col;
        p.b_gm_scale = std::min(1.0, patch / (double(pix_l1) * double(std::min(kBL1, nal)) * ea));
        p.b_mte1_eff = plain ? 1.0 : kLoad3dEff;
        mm[S_USED_CORE] = bd * hd * nd * gd;
        mm[S_SM] = align_up(co_g, 16);
        mm[S_SN] = std::min(nal, ceil_div(c1, nd) * khw * c0);
        mm[S_SK] = std::min(align_up(pixels, c0), ceil_div(n, bd) * ho_core * wo);
        mm[S_BM] = kL0;
        mm[S_BN] = nL0;
        mm[S_BK] = align_up(pix_l0, c0);
        const int64_t pix_steps = (hoL1 / hoL0) * (woL1 / woL0);
        mm[S_STEP_KA] = mm[S_STEP_KB] = pix_steps;
        mm[S_STEP_M] = kAL1 / kL0;
        mm[S_STEP_N] = ceil_div(kBL1, nL0);  // windows need not be a multiple of 16 (fp32: C0 = 8)
        mm[S_DEPTH_A1] = mm[S_STEP_M] * pix_steps * (db_al1 ? 2 : 1);
        mm[S_DEPTH_B1] = mm[S_STEP_N] * pix_steps * (db_bl1 ? 2 : 1);
    }
    // Cores beyond the blocks the split produces stay idle (CANN clamps the split the same way).
    const int64_t tasks = g * ceil_div(p.M, mm[S_SM]) * ceil_div(p.N, mm[S_SN]) * ceil_div(p.K, mm[S_SK]);
    mm[S_USED_CORE] = std::min(mm[S_USED_CORE], tasks);
    mm[S_L2_MCNT] = mm[S_L2_NCNT] = mm[S_L2_MBLK] = mm[S_L2_NBLK] = 1;
    mm[S_TILING_EN] = 0;
    return cube_eval(s, p, mm);
}

}  // namespace aoesim
