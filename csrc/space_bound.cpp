// Lower bounds on the time of a Cube outer choice, whatever its staging (aoe/opat/bounds.py explains
// each term): the numpy `cube_bound` it replaced (tests/opat_space_reference.py) for one outer row,
// with the same operations in the same order, so that every bound has the bits numpy computed
// (built with -ffp-contract=off).
#include <algorithm>
#include <stdexcept>

#include "space.h"

namespace aoesim {
namespace space {

CubeSplit cube_split(const SoC& s, const CubeProb& p, int64_t uc, int64_t s_m, int64_t s_n, int64_t s_k) {
    const int64_t m = p.M, n = p.N, k = p.K, ea = p.ea;
    const int64_t batch = std::max(p.batch_a, p.batch_b);
    const int64_t k0 = py_fdiv(32, ea);
    CubeSplit c;
    c.t_m = std::min(s_m, m), c.t_n = std::min(s_n, n), c.t_k = std::min(s_k, k);
    const int64_t t_m = c.t_m, t_n = c.t_n, t_k = c.t_k;
    const int64_t a_m = py_align(t_m, 16), a_n = py_align(t_n, 16), a_k = py_align(t_k, k0);
    c.a_m = a_m;
    const int64_t k_blocks = py_cdiv(k, s_k);
    const int64_t tasks = batch * py_cdiv(m, s_m) * py_cdiv(n, s_n) * k_blocks;
    c.waves = double(py_cdiv(tasks, uc));  // L2 tiling only ever adds waves
    const double f = s.freq_mhz;
    c.fractals = double(py_fdiv(a_m, 16) * py_fdiv(a_n, 16) * py_fdiv(a_k, k0));
    const double active = double(std::min(uc, tasks));
    const double share = active / (s.hbm_gbps * s.hbm_efficiency * 1000.0 / f);  // cycles per HBM byte, shared
    const double l2_bpc = s.l2_gbps > 0 ? s.l2_gbps * 1000.0 / f : s.l2_rate * s.cube_cores;
    const double cpb_h = np_max(1.0 / s.ddr_rate, share);
    const double cpb_l2 = np_max(1.0 / s.l2_rate, active / l2_bpc);
    c.out_e = k_blocks > 1 ? 4.0 : double(p.eo);  // split-K writes fp32 partials
    const double out_task = double((p.c_nz ? a_m : t_m) * (p.c_nz ? a_n : t_n)) * c.out_e;
    c.fix_pre = out_task * np_max(1.0 / s.fixpipe_rate, cpb_h);
    // L1 -> L0: A once per N block and B once per M block, unless a single K block lets the order
    // keep one of them in L0
    c.l0a = double(a_m * a_k * ea) / (s.l1_to_l0a_rate * p.a_mte1_eff);
    c.l0b = double(a_n * a_k * ea) / (s.l1_to_l0b_rate * p.b_mte1_eff);
    const double nd2nz = 1.0 / s.nd2nz_efficiency;
    double panels = 0.0, compulsory = 0.0;
    if (p.a_mem) {
        panels = panels + double((p.a_nz ? a_m : t_m) * (p.a_nz ? a_k : t_k) * ea) * (p.a_nz ? 1.0 : nd2nz);
        compulsory += double((p.a_nz ? py_align(m, 16) : m) * (p.a_nz ? py_align(k, k0) : k) * ea * p.batch_a);
    }
    if (p.b_mem) {
        panels = panels + double((p.b_nz ? a_n : t_n) * (p.b_nz ? a_k : t_k) * ea) * (p.b_nz ? 1.0 : nd2nz);
        compulsory += double((p.b_nz ? py_align(k, k0) : k) * (p.b_nz ? py_align(n, 16) : n) * ea * p.batch_b);
    }
    const double t2 = panels * np_min(cpb_h, cpb_l2) + (p.bias ? double(t_n) * 4.0 * cpb_h : 0.0);
    const double floor = (compulsory / double(tasks) + out_task) * share;
    c.t2_floor = np_max(t2, floor);
    return c;
}

double cube_block_bound(const SoC& s, const CubeProb& p, const CubeSplit& c, int64_t b_m, int64_t b_n,
                        int64_t b_k) {
    return cube_its_bound(s, p, c, b_m, b_n, py_cdiv(c.t_m, b_m), py_cdiv(c.t_n, b_n), py_cdiv(c.t_k, b_k));
}

CubeProb conv_prob(const ConvShape& d) {
    CubeProb p;
    const int64_t c0 = d.c0, khw = d.khw;
    const double plain = (khw == 1 && d.sh == 1 && d.sw == 1) ? 1.0 : 0.5;  // load3d's img2col rate
    p.batch_a = p.batch_b = d.g;
    p.ea = d.ea;
    p.eo = d.eo;
    p.a_nz = p.b_nz = p.c_nz = true;
    p.bias = d.bias;
    if (d.filt()) {  // M = Cout, N = channels x window, K = pixels; the feature map is a patch
        p.M = d.co_g, p.N = py_align(d.cin_g, c0) * khw, p.K = d.n * d.ho * d.wo;
        p.a_mte1_eff = 1.0, p.b_mte1_eff = plain, p.a_mem = true, p.b_mem = false;
    } else {         // M = pixels, N = output channels, K = input channels x window
        const int64_t out_h = d.dx() ? d.h : d.ho, out_w = d.dx() ? d.w : d.wo;
        p.M = d.n * out_h * out_w, p.N = d.dx() ? d.cin_g : d.co_g;
        p.K = py_align(d.dx() ? d.co_g : d.cin_g, c0) * khw;
        p.a_mte1_eff = plain, p.b_mte1_eff = 1.0, p.a_mem = false, p.b_mem = true;
    }
    return p;
}

CubeSplit conv_split(const SoC& s, const ConvShape& d, const CubeProb& p, int64_t bd, int64_t hd, int64_t nd,
                     int64_t gd) {
    int64_t s_m, s_n, s_k;
    if (d.filt()) {
        s_m = py_align(d.co_g, 16);
        s_n = std::min(p.N, py_cdiv(py_cdiv(d.cin_g, d.c0), nd) * d.khw * d.c0);
        s_k = std::min(py_align(p.K, d.c0), py_cdiv(d.n, bd) * py_cdiv(d.ho, hd) * d.wo);
    } else {
        const int64_t out_h = d.dx() ? d.h : d.ho, out_w = d.dx() ? d.w : d.wo;
        s_m = py_cdiv(d.n, bd) * py_cdiv(out_h, hd) * out_w;
        s_n = py_align(py_cdiv(p.N, nd), 16);
        s_k = p.K;
    }
    const int64_t tasks = d.g * py_cdiv(p.M, s_m) * py_cdiv(p.N, s_n) * py_cdiv(p.K, s_k);
    return cube_split(s, p, std::min(bd * hd * nd * gd, tasks), s_m, s_n, s_k);
}

CubeProb matmul_prob(const MmShape& d) {
    CubeProb p;
    p.M = d.m, p.N = d.n, p.K = d.k, p.batch_a = d.batch_a, p.batch_b = d.batch_b, p.ea = d.ea, p.eo = d.eo;
    p.a_nz = d.a_nz, p.b_nz = d.b_nz, p.c_nz = d.c_nz, p.bias = d.bias;
    p.a_mte1_eff = p.b_mte1_eff = 1.0;
    p.a_mem = p.b_mem = true;
    return p;
}

ConvShape conv_shape(const int64_t* v, int64_t len) {
    if (len != CONV_SHAPE_LEN) throw std::invalid_argument("a conv shape vector has 18 values");
    ConvShape d;
    d.dir = int(v[0]);
    d.n = v[1], d.c = v[2], d.h = v[3], d.w = v[4], d.cout = v[5], d.kh = v[6], d.kw = v[7];
    d.sh = v[8], d.sw = v[9], d.ea = v[10], d.eo = v[11], d.g = v[12], d.ho = v[13], d.wo = v[14];
    d.ekh = v[15], d.ekw = v[16], d.bias = v[17] != 0;
    if (d.dir < 0 || d.dir > 2) throw std::invalid_argument("conv direction must be 0, 1 or 2");
    for (int i = 1; i < 17; ++i)
        if (v[i] < 1) throw std::invalid_argument("conv shape values must be positive");
    if (d.ea > 32 || d.c % d.g || d.cout % d.g) throw std::invalid_argument("conv shape is inconsistent");
    d.c0 = py_fdiv(32, d.ea);
    d.cin_g = py_fdiv(d.c, d.g), d.co_g = py_fdiv(d.cout, d.g), d.khw = d.kh * d.kw, d.win = d.khw * d.c0;
    d.c1_total = py_cdiv(d.cin_g, d.c0);
    d.co16 = py_align(d.co_g, 16);
    if (d.dx()) {
        d.out_h = d.h, d.out_w = d.w, d.out_c = d.cin_g, d.k_al = py_align(d.co_g, d.c0) * d.khw;
    } else {
        d.out_h = d.ho, d.out_w = d.wo, d.out_c = d.co_g, d.k_al = py_align(d.cin_g, d.c0) * d.khw;
    }
    d.k_whole = py_cdiv(d.k_al, d.win) * d.win;
    return d;
}

MmShape mm_shape(const int64_t* v, int64_t len) {
    if (len != MM_SHAPE_LEN) throw std::invalid_argument("a matmul shape vector has 12 values");
    MmShape d;
    d.m = v[0], d.n = v[1], d.k = v[2], d.batch_a = v[3], d.batch_b = v[4], d.ea = v[5], d.eo = v[6];
    d.a_nz = v[7] != 0, d.b_nz = v[8] != 0, d.c_nz = v[9] != 0, d.bias = v[10] != 0, d.l2 = v[11] != 0;
    for (int i = 0; i < 7; ++i)
        if (v[i] < 1) throw std::invalid_argument("matmul shape values must be positive");
    if (d.ea > 32) throw std::invalid_argument("matmul element size is out of range");
    return d;
}

}  // namespace space
}  // namespace aoesim
