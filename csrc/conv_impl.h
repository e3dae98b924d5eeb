// A conv strategy row (CANN Conv2DV2 knowledge fields) as a Cube problem, over lanes (lanes.h):
// the conv's own rules, then the matmul-layout fields and operand scales for cube_eval_g.
// Included only from kernels.inc, inside the per-ISA namespace; conv.cpp has the model's story.

// The 14 conv strategy fields of a lane group.
template <class L>
struct ConvRow {
    using I = typename L::I;
    I bd, hd, nd, gd, hoL1, woL1, kAL1, kBL1, hoL0, woL0, kL0, nL0, pbuf, order;
};

// Dir: 1 = forward or dx (x.dir 0 or 1), 2 = dW; the batch loop picks it once.
template <class L, bool Full, int Dir>
AOE_INLINE Priced<L> conv_row_g(const SoC& s, const ConvCtx& x, const ConvRow<L>& q, Result* out) {
    using I = typename L::I;
    using D = typename L::D;
    I reason = splat<I>(0);
    const I bd = q.bd, hd = q.hd, nd = q.nd, gd = q.gd, hoL1 = q.hoL1, woL1 = q.woL1, kAL1 = q.kAL1;
    const I kBL1 = q.kBL1, hoL0 = q.hoL0, woL0 = q.woL0, kL0 = q.kL0, nL0 = q.nL0, pbuf = q.pbuf;
    // One rule for the domain (as in cube_eval_g): no field negative, the sizes at least 1, the
    // buffer flags 5 bits, the order a flag.
    {
        const I neg = bd | hd | nd | gd | hoL1 | woL1 | kAL1 | kBL1 | hoL0 | woL0 | kL0 | nL0 | pbuf | q.order;
        const I least = vmin(vmin(vmin(vmin(bd, hd), vmin(nd, gd)), vmin(vmin(hoL1, woL1), vmin(kAL1, kBL1))),
                             vmin(vmin(hoL0, woL0), vmin(kL0, nL0)));
        AOE_RULE((neg < 0) | (least < 1) | (pbuf > 31) | (q.order > 1), RS_BAD_VALUE);
    }
    const int64_t n = x.n, h = x.h, w = x.w, g = x.g, sh = x.sh, sw = x.sw, ekh = x.ekh, ekw = x.ekw;
    const int64_t ho = x.ho, wo = x.wo, ea = x.ea, c0 = x.c0, khw = x.khw;
    const double ea_d = double(ea);
    const I used = mul(bd, hd, nd, gd);
    AOE_RULE(used > s.cube_cores, RS_CORES);
    // hoL1 / hoL0 and woL1 / woL0: the L0 steps inside an L1 tile (whole when the rule holds)
    const I ho_steps = fdiv(hoL1, hoL0), wo_steps = fdiv(woL1, woL0);
    AOE_RULE(((hoL1 - mul(ho_steps, hoL0)) | (woL1 - mul(wo_steps, woL0))) != 0, RS_INCONSISTENT);
    AOE_RULE((gd > g) | (bd > n), RS_EXCEEDS_SHAPE);

    // Pixel counts are aligned to powers of two by masking: once the rules on hoL1 and woL1 below
    // hold, hoL0 <= hoL1 <= the output height and woL0 <= woL1 <= its width (each below 2^25), where
    // the mask equals align_up's rounded division exactly.
    const I pix_l0 = mul(hoL0, woL0), pix_l1 = mul(hoL1, woL1);
    MmRow<L> mm;
    CubeScales<L> sc{splat<D>(x.p.a_l1_scale), splat<D>(x.p.b_l1_scale), splat<D>(x.p.a_gm_scale),
                     splat<D>(x.p.b_gm_scale)};
    mm.ord = q.order;
    mm.dbA = (pbuf >> 2) & 1;
    mm.dbB = (pbuf >> 3) & 1;
    mm.dbC = (pbuf >> 4) & 1;
    // L1 ping-pong of A and of B: the depths double (x2 as a shift)
    const I al1 = pbuf & 1, bl1 = (pbuf >> 1) & 1;
    if constexpr (Dir == 1) {
        const int64_t out_h = x.out_h, out_w = x.out_w, in_c = x.in_c, out_c = x.out_c, kal = x.kal;
        AOE_RULE((hd > out_h) | (nd > ceil_div(out_c, int64_t(16))), RS_EXCEEDS_SHAPE);
        const I ho_core = ceil_div(splat<I>(out_h), hd);
        AOE_RULE((hoL1 > ho_core) | (woL1 > out_w), RS_EXCEEDS_SHAPE);
        // L1 holds whole kernel windows of C0-channel groups (kAL1 in units of kh*kw*C0)
        const I ka_steps = fdiv(kAL1, kL0), kb_steps = fdiv(kBL1, kL0);
        AOE_RULE(((kAL1 - mul(ka_steps, kL0)) | (kBL1 - mul(kb_steps, kL0)) | fmod_i(kAL1, splat<I>(khw * c0))) != 0,
                 RS_INCONSISTENT);
        // L1 patch for hoL1 x woL1 output pixels (dx: rows of the zero-inserted dy, of which 1/stride are real)
        D rows = to_d(mul(hoL1 - 1, x.step_h) + ekh), cols = to_d(mul(woL1 - 1, x.step_w) + ekw);
        if (x.dir == 1) {
            rows = ceil_pos(rows / double(sh));
            cols = ceil_pos(cols / double(sw));
        }
        rows = vmin(rows, splat<D>(double(x.in_h)));
        cols = vmin(cols, splat<D>(double(x.in_w)));
        const D ch_l1 = to_d(fdiv(kAL1, splat<I>(khw)));
        const D patch = rows * cols * vmin(ch_l1, splat<D>(double(align_up(in_c, c0)))) * ea_d;
        const D tile_img2col = to_d(align_pow2(pix_l1, 16)) * to_d(kAL1) * ea_d;
        sc.a_l1 = patch / tile_img2col;
        // GM: the patch (with halo) per tile instead of the img2col rows
        sc.a_gm = vmin(splat<D>(1.0), patch / (to_d(pix_l1) * to_d(vmin(kAL1, splat<I>(kal))) * ea_d));
        mm.uc = used;
        mm.sM = mul(ceil_div(splat<I>(n), bd), ho_core, out_w);
        mm.sN = align_pow2(ceil_div(splat<I>(out_c), nd), 16);
        mm.sK = splat<I>(kal);
        mm.bM = align_pow2(pix_l0, 16);
        mm.bN = nL0;
        mm.bK = kL0;
        mm.stM = mul(ho_steps, wo_steps);
        mm.stN = splat<I>(1);
        mm.sKa = ka_steps;
        mm.sKb = kb_steps;
        mm.dA = shl(mul(mm.stM, mm.sKa), al1);
        mm.dB = shl(mm.sKb, bl1);
    } else {
        // dW[co_g, C1*C0*kh*kw] = dy^T[co_g, pixels] x img2col(x)[pixels, C1*C0*kh*kw]
        const int64_t nal = x.nal, pixels = x.pixels, c1 = x.c1, cin_g = x.cin_g;
        AOE_RULE((hd > ho) | (nd > c1), RS_EXCEEDS_SHAPE);
        const I ho_core = ceil_div(splat<I>(ho), hd);
        AOE_RULE((hoL1 > ho_core) | (woL1 > wo), RS_EXCEEDS_SHAPE);
        const I ka_steps = fdiv(kAL1, kL0);
        AOE_RULE(((kAL1 - mul(ka_steps, kL0)) | fmod_i(kBL1, splat<I>(khw * c0))) != 0, RS_INCONSISTENT);
        const D rows = vmin(to_d(mul(hoL1 - 1, sh) + ekh), splat<D>(double(h)));
        const D cols = vmin(to_d(mul(woL1 - 1, sw) + ekw), splat<D>(double(w)));
        const D ch_l1 = to_d(fdiv(kBL1, splat<I>(khw)));
        const D patch = rows * cols * vmin(ch_l1, splat<D>(double(align_up(cin_g, c0)))) * ea_d;
        const D tile_img2col = to_d(align_pow2(pix_l1, c0)) * to_d(kBL1) * ea_d;  // C0 is 8, 16 or 32
        sc.b_l1 = patch / tile_img2col;
        sc.b_gm = vmin(splat<D>(1.0), patch / (to_d(pix_l1) * to_d(vmin(kBL1, splat<I>(nal))) * ea_d));
        mm.uc = used;
        mm.sM = splat<I>(align_up(x.co_g, int64_t(16)));
        mm.sN = vmin(splat<I>(nal), mul(ceil_div(splat<I>(c1), nd), khw, c0));
        mm.sK = vmin(splat<I>(align_up(pixels, c0)), mul(ceil_div(splat<I>(n), bd), ho_core, wo));
        mm.bM = kL0;
        mm.bN = nL0;
        mm.bK = align_pow2(pix_l0, c0);
        const I pix_steps = mul(ho_steps, wo_steps);
        mm.sKa = mm.sKb = pix_steps;
        mm.stM = ka_steps;
        mm.stN = ceil_div(kBL1, nL0);  // windows need not be a multiple of 16 (fp32: C0 = 8)
        mm.dA = shl(mul(mm.stM, pix_steps), al1);
        mm.dB = shl(mul(mm.stN, pix_steps), bl1);
    }
    // Cores beyond the blocks the split produces stay idle (CANN clamps the split the same way):
    // cube_eval_g<..., Clamp> clamps usedCoreNum to the task count.
    mm.l2Mc = mm.l2Nc = mm.l2Mb = mm.l2Nb = splat<I>(1);
    mm.l2ord = splat<I>(0);
    mm.l2en = splat<I>(0);
    return cube_eval_g<L, Full, Dir>(s, x.p, x.c, mm, sc, reason, out);  // lanes failed here keep their reason
}
