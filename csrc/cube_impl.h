// The Cube pipeline model over lanes (lanes.h): one row at a time for the full result, N rows at a
// time (one per SIMD lane) for the tuning hot path. matmul and conv inline it into their batch loops.
// Included only from kernels.inc, inside the per-ISA namespace.
//
// Per lane this is exactly the one-row model: the same operations in the same order, the same fused
// multiply-adds (fma, see lanes.h). Where one row branches (l2 tiling, the last rules), N rows take
// both sides and select, and a rule that fails marks its lanes instead of returning (the first
// failed rule names the reason, as for one row).

// The 23 matmul strategy fields of a lane group (a conv fills them from its own strategy).
template <class L>
struct MmRow {
    using I = typename L::I;
    I uc, sM, sN, sK, bM, bN, bK, dA, dB, stM, stN, ord, sKa, sKb, dbA, dbB, dbC, l2Mc, l2Nc, l2Mb, l2Nb,
        l2ord, l2en;
};

// The operand scales a conv sets per strategy (CubeProblem's; 1 for a matmul).
template <class L>
struct CubeScales {
    using D = typename L::D;
    D a_l1, b_l1, a_gm, b_gm;
};

template <class L>
struct Priced {
    typename L::D time;
    typename L::I reason;
};

// Record a failed rule: one row returns at once, N rows mark the lanes it fails first. `Exit`: N rows
// return once every lane has failed (a test and a branch per rule, so in the shared model only the
// domain rule and the L1 rule do, the latter before the traffic model; past the others the failed
// lanes are computed on and masked at the end. A conv's own rules all exit: perturbed conv rows fail
// there, and going on costs more than the tests).
template <class L, bool Exit = true>
AOE_INLINE bool fail(typename L::I& reason, typename L::M cond, int code) {
    if constexpr (L::W == 1) {
        if (cond) reason = code;
        return cond;
    } else {
        using I = typename L::I;
        if constexpr (L::W == 4) {  // AVX2: and/or and one vptest instead of a blend and a movemask
            const I alive = reason == 0;
            reason |= alive & cond & code;  // (a lane that failed before keeps its reason: it is not alive)
            return Exit && none_left(alive, cond);  // every lane failed, now or before
        } else {
            reason = sel((reason == 0) & cond, splat<I>(code), reason);
            return Exit && all(reason != 0);
        }
    }
}

template <class L, bool Full>
AOE_INLINE Priced<L> rejected(typename L::I reason, Result* out) {
    if constexpr (Full) *out = invalid(int(reason));
    return {splat<typename L::D>(std::numeric_limits<double>::infinity()), reason};
}

// Inside a model function with `reason`, `out` and template parameters L, Full. AOE_RULE may return
// for N rows (Exit), AOE_MARK only for one row.
#define AOE_RULE(cond, code)                                                    \
    do {                                                                        \
        if (fail<L>(reason, (cond), (code))) return rejected<L, Full>(reason, out); \
    } while (0)
#define AOE_MARK(cond, code)                                                           \
    do {                                                                               \
        if (fail<L, false>(reason, (cond), (code))) return rejected<L, Full>(reason, out); \
    } while (0)

// Busy cycles of one core task, per pipe, plus what the overlap rules need to know.
template <class L>
struct Task {
    using D = typename L::D;
    using M = typename L::M;
    D mte2_a, mte2_b;   // GM -> L1 (HBM or L2), already divided by DMA efficiency
    D mte1_a, mte1_b;   // L1 -> L0A / L0B (load3d for conv A)
    D cube;             // mmad cycles
    D fix;              // L0C -> GM
    D scalar;           // issue + sync
    D hbm_floor;        // cycles the chip-wide HBM share needs for this task's bytes
    D exposed_latency;  // GM latency of single-buffered chunk loads (nothing overlaps it)
    M db_l1a, db_l1b;   // L1 ping-pong (MTE2 overlaps the rest)
    M db_l0a, db_l0b;   // L0 ping-pong (MTE1 overlaps Cube)
    M db_l0c;           // L0C ping-pong (FixPipe overlaps Cube)
    D n_chunks, n_blocks, n_out;  // granularity of the fill/drain
};

// Combine the pipes of one task: double-buffered stages overlap, single-buffered ones serialise,
// and the first chunk / last output block cannot overlap anything (fill and drain).
template <class L>
AOE_INLINE typename L::D task_cycles(const Task<L>& t, typename L::D* fill_out) {
    using D = typename L::D;
    const D zero = splat<D>(0.0);
    const D t1 = t.mte1_a + t.mte1_b;
    const D ov1 = sel(t.db_l0a, t.mte1_a, zero) + sel(t.db_l0b, t.mte1_b, zero);
    const D inner = vmax(ov1, t.cube) + (t1 - ov1);
    const D withc = sel(t.db_l0c, vmax(inner, t.fix), inner + t.fix);
    const D t2 = t.mte2_a + t.mte2_b;
    const D ov2 = sel(t.db_l1a, t.mte2_a, zero) + sel(t.db_l1b, t.mte2_b, zero);
    D total = vmax(ov2, withc) + (t2 - ov2);
    total = vmax(total, vmax(t.scalar, t.hbm_floor)) + t.exposed_latency;
    const D fill = t2 / t.n_chunks + t1 / t.n_blocks + t.fix / t.n_out;
    *fill_out = fill;
    return total + fill;
}

// A matmul-layout strategy (the 23 MatMulV3TunnerTiling fields) on a Cube problem.
// `Full` (one row only): fill *out with the whole Result; otherwise only the time and the reason.
// `reason0`: lanes already rejected (by a conv's own rules) keep that reason.
// `Cv` (0 for a matmul): the row is a conv's mapping (conv_impl.h), which turns L2 tiling off and whose
// usedCoreNum is clamped here to the task count (cores beyond the blocks the split produces stay idle),
// so the rule against idle cores cannot fail; 1 = forward or dx, which also fix stepN = 1 and
// singleCoreK = K, 2 = dW. What those fixed fields would compute is skipped; where the general code
// would compute the same value another way, the comment says why it is the same.
template <class L, bool Full, int Cv = 0>
AOE_INLINE Priced<L> cube_eval_g(const SoC& s, const CubeProblem& p, const CubePrep& c, const MmRow<L>& f,
                                 const CubeScales<L>& sc, typename L::I reason0, Result* out) {
    using I = typename L::I;
    using D = typename L::D;
    using Mk = typename L::M;  // a mask (M is the problem's M)
    static_assert(!Full || L::W == 1, "the full result is computed one row at a time");
    constexpr bool Conv = Cv != 0, StN1 = Cv == 1;
    const D zero = splat<D>(0.0), one = splat<D>(1.0);
    I reason = reason0;
    const int64_t batch = c.batch;
    const I M = splat<I>(p.M), N = splat<I>(p.N), K = splat<I>(p.K);
    // blocks of each dimension, and tasks (a matmul: once the domain rule holds, below)
    I mB, nB, kB, per_batch, tasks;
#define AOE_BLOCKS()                                                                   \
    do {                                                                               \
        mB = ceil_div(M, f.sM), nB = ceil_div(N, f.sN);                                \
        kB = StN1 ? splat<I>(1) : ceil_div(K, f.sK); /* K / K: 1 on either path */     \
        per_batch = StN1 ? mul(mB, nB) : mul(mB, nB, kB);                              \
        tasks = mul(batch, per_batch);                                                 \
    } while (0)
    if constexpr (Conv) AOE_BLOCKS();
    const I uc = Conv ? vmin(f.uc, tasks) : f.uc, sM = f.sM, sN = f.sN, sK = f.sK, bM = f.bM, bN = f.bN, bK = f.bK, dA = f.dA, dB = f.dB;
    const I stM = f.stM, stN = f.stN, ord = f.ord, sKa = f.sKa, sKb = f.sKb, dbA = f.dbA, dbB = f.dbB, dbC = f.dbC;
    const I l2Mc = f.l2Mc, l2Nc = f.l2Nc, l2Mb = f.l2Mb, l2Nb = f.l2Nb, l2ord = f.l2ord, l2en = f.l2en;

    // --- domain and hardware constraints (never a silent number for an impossible strategy) ---
    // One rule for the domain: a negative field, a count below 1 or a flag above 1. Once no field
    // is negative, "x < 1 for some x" is "min < 1" and "a flag > 1" is "their OR > 1".
    {
        const I neg = uc | sM | sN | sK | bM | bN | bK | dA | dB | stM | stN | ord | sKa | sKb | dbA | dbB | dbC |
                      l2Mc | l2Nc | l2Mb | l2Nb | l2ord | l2en;
        const I least = vmin(vmin(vmin(vmin(uc, sM), vmin(sN, sK)), vmin(vmin(bM, bN), vmin(bK, dA))),
                             vmin(vmin(vmin(dB, stM), vmin(stN, sKa)), sKb));
        const I flags = ord | dbA | dbB | dbC | l2en | l2ord;
        AOE_RULE((neg < 0) | (least < 1) | (flags > 1), RS_BAD_VALUE);
    }
    const int64_t k0 = c.k0, ea = p.ea;
    const double ea_d = double(ea);
    AOE_MARK(uc > s.cube_cores, RS_CORES);
    AOE_MARK((((bM | bN) & 15) | (bK & (k0 - 1))) != 0, RS_MISALIGNED);
    AOE_MARK((sM > c.Mal) | (sN > c.Nal) | (sK > c.Kal), RS_EXCEEDS_SHAPE);
    const I tM = vmin(sM, M), tN = vmin(sN, N), tK = vmin(sK, K);  // full task
    const I aM = align_pow2(tM, 16), aN = align_pow2(tN, 16), aK = align_pow2(tK, k0);
    AOE_MARK((bM > aM) | (bN > aN) | (bK > aK), RS_EXCEEDS_SHAPE);
    const I mIter = ceil_div(tM, bM), nIter = ceil_div(tN, bN), kIter = ceil_div(tK, bK);
    AOE_MARK((stM > mIter) | (stN > nIter) | (sKa > kIter) | (sKb > kIter), RS_EXCEEDS_SHAPE);
    if constexpr (L::W == 1) {
        AOE_MARK(sKa != sKb && fmod_i(sKa, sKb) && fmod_i(sKb, sKa), RS_INCONSISTENT);
    } else {
        // Both are >= 1 here (the domain rule), and fmod_i(a, b) = a != 0 when a < b (fdiv gives 0, on
        // either of its paths): so the rule needs only the larger modulo the smaller.
        AOE_MARK((sKa != sKb) & (fmod_i(vmax(sKa, sKb), vmin(sKa, sKb)) != 0), RS_INCONSISTENT);
    }
    // (stN 1: stN * sKb is sKb)
    const I stN_sKb = StN1 ? sKb : mul(stN, sKb);
    const Mk dbl1a = dA == mul(2 * stM, sKa), dbl1b = dB == (StN1 ? sKb + sKb : mul(2 * stN, sKb));
    AOE_MARK((mnot(dbl1a) & (dA != mul(stM, sKa))) | (mnot(dbl1b) & (dB != stN_sKb)), RS_INCONSISTENT);
    // x * ea and x * (1 + flag) as shifts: ea is a power of two and the flags are 0 or 1 once the
    // domain rule holds (& 1 only keeps failed lanes' shift counts in range)
    const int64_t eal = c.ea_log2;
    AOE_MARK(shl(shl(mul(bM, bK), eal), dbA & 1) > s.l0a, RS_L0A);
    AOE_MARK(shl(shl(mul(bN, bK), eal), dbB & 1) > s.l0b, RS_L0B);
    AOE_MARK(shl(mul(bM, bN) * 4, dbC & 1) > s.l0c, RS_L0C);
    {
        const D l1_bias = p.bias ? to_d(stN * bN * 4) : zero;
        AOE_RULE(fma(to_d(shl(mul(dA, bM, bK), eal)), sc.a_l1, to_d(shl(mul(dB, bN, bK), eal)) * sc.b_l1) + l1_bias > double(s.l1),
                 RS_L1);
    }
    if constexpr (!Conv) {
        AOE_BLOCKS();
        AOE_MARK(uc > tasks, RS_INCONSISTENT);  // idle cores: usedCoreNum must not exceed blocks
    }
#undef AOE_BLOCKS
    const Mk l2on = l2en != 0;
    if (!Conv && any(l2on)) {
        AOE_MARK(l2on & ((l2Mb < 1) | (l2Nb < 1) | (l2Mb > mB) | (l2Nb > nB) | (l2Mc != ceil_div(mB, l2Mb)) |
                         (l2Nc != ceil_div(nB, l2Nb))),
                 RS_INCONSISTENT);
    }

    // operand bytes in GM: a conv scales them per strategy (its L1 patch), so the prep holds them unscaled
    const D A_b = c.A_b * sc.a_gm, B_b = c.B_b * sc.b_gm;
    const D A_tot = A_b * double(p.batch_a), B_tot = B_b * double(p.batch_b);
    // --- chip-level traffic: compulsory bytes, re-reads, and where re-reads are served ---
    const D out_e = sel(kB > 1, splat<D>(4.0), splat<D>(double(p.eo)));  // split-K accumulates fp32 partials atomically

    // Reuse inside a task: an operand whose whole K panel fits its L1 buffer is re-loaded only when
    // the outer loop comes back to it; otherwise every base block streams its K panel again.
    // (stN 1: nIter / 1. nIter is in [1, N] here, N < 2^62, where ceil_div(x, 1) and x convert to the
    // same double and are both 1 or both not: all that is asked of nT below)
    const I mT = ceil_div(mIter, stM), nT = StN1 ? nIter : ceil_div(nIter, stN);
    const Mk akf = sKa >= kIter, bkf = sKb >= kIter;
    // M first (order 0): N outer, M inner -> B stays, A comes back once per N tile (unless one
    // M tile holds it all); N first: the mirror image. Written as selects, not branches: in a
    // batch of candidates the order flips unpredictably.
    const I a_back = sel((ord == 0) & (mT != 1), nT, splat<I>(1));
    const I b_back = sel((ord == 1) & (nT != 1), mT, splat<I>(1));
    const D a_mult = to_d(sel(akf, a_back, nIter));
    const D b_mult = to_d(sel(bkf, b_back, mIter));
    // the task's sizes as doubles, each converted once (a conv's forward tK is K, its aK the prep's Kal)
    const D tM_d = to_d(tM), tN_d = to_d(tN), aM_d = to_d(aM), aN_d = to_d(aN);
    const D tK_d = StN1 ? splat<D>(double(p.K)) : to_d(tK), aK_d = StN1 ? splat<D>(double(c.Kal)) : to_d(aK);
    const D a_task = (p.a_nz ? aM_d : tM_d) * (p.a_nz ? aK_d : tK_d) * ea_d * a_mult * sc.a_gm;
    const D b_task = (p.b_nz ? aN_d : tN_d) * (p.b_nz ? aK_d : tK_d) * ea_d * b_mult * sc.b_gm;
    // Whole-chip reads: every (M block, K block) panel of A is read by all nB column blocks.
    const double batch_d = double(batch);
    const D R = fma(A_b * batch_d * to_d(nB), a_mult, B_b * batch_d * to_d(mB) * b_mult);
    const D comp = A_tot + B_tot;
    const D conc_batches =
        batch == 1 ? one : vmin(splat<D>(batch_d), vmax(one, to_d(uc) / to_d(per_batch)));
    const D W = (A_b + B_b) * conc_batches;
    const Mk l2_tiled = l2on & (W > c.l2u), untiled = mnot(l2_tiled);
    D hbm_rd = zero, waves = zero;
    if constexpr (Conv) {  // never L2-tiled
        const D miss = sel(W <= c.l2u, zero, 1.0 - c.l2u / W);
        hbm_rd = fma(miss, vmax(zero, R - comp), comp);
        waves = to_d(ceil_div(tasks, uc));
    } else if (any(l2_tiled)) {
        // L2 tiling: the re-read working set is one L2 tile; the operand that is not kept is
        // fetched from HBM once per L2 tile of the other dimension.
        const D tileB = vmin(to_d(l2Nb * sN), splat<D>(c.gmN)) * c.gmK * ea_d;
        const D Wt = fma(vmin(to_d(l2Mb * sM), splat<D>(c.gmM)) * c.gmK, splat<D>(ea_d), tileB) * conc_batches;
        const D miss = sel(Wt <= c.l2u, zero, 1.0 - c.l2u / Wt);
        const D comp_t = sel(l2ord == 0, fma(A_tot, to_d(l2Nc), B_tot), fma(B_tot, to_d(l2Mc), A_tot));
        hbm_rd = sel(l2_tiled, vmin(R, fma(miss, vmax(zero, R - comp_t), comp_t)), hbm_rd);
        waves = sel(l2_tiled, to_d(l2Mc * l2Nc) * to_d(ceil_div(batch * l2Mb * l2Nb * kB, uc)), waves);
    }
    if (!Conv && any(untiled)) {
        const D miss = sel(W <= c.l2u, zero, 1.0 - c.l2u / W);
        hbm_rd = sel(untiled, fma(miss, vmax(zero, R - comp), comp), hbm_rd);
        waves = sel(untiled, to_d(ceil_div(tasks, uc)), waves);
    }
    const D fh = sel(R > 0, hbm_rd / R, one);

    // --- per-core rates: HBM is shared by the active cores, L2 too (kept as cycles per byte) ---
    const D active = to_d(Conv ? uc : vmin(uc, tasks));  // (a conv's uc is clamped already)
    const D cpb_hbm_share = active * c.inv_hbm_bpc;
    const D cpb_h = vmax(splat<D>(c.inv_ddr), cpb_hbm_share);
    const D cpb_l2 = vmax(splat<D>(c.inv_l2_rate), active * c.inv_l2_bpc);
    const D cpb_rd = fma(fh, cpb_h, (1.0 - fh) * cpb_l2);

    // DMA burst lengths: NZ chunks are long runs, ND rows are short strided bursts through ND2NZ.
    const D rowsA = to_d(vmin(mul(stM, bM), tM)), kA = to_d(vmin(mul(sKa, bK), tK));
    const D colsB = to_d(vmin(StN1 ? bN : mul(stN, bN), tN)), kBl = to_d(vmin(mul(sKb, bK), tK));
    const double Md = double(p.M), Nd = double(p.N), Kd = double(p.K);
    D runA, runB;
    if (p.a_nz) runA = sel(rowsA >= Md, rowsA * kA * ea_d, rowsA * 32.0);
    else if (!p.ta) runA = sel(kA >= Kd, rowsA * Kd * ea_d, kA * ea_d);
    else runA = sel(rowsA >= Md, kA * Md * ea_d, rowsA * ea_d);
    if (p.b_nz) runB = sel(kBl >= Kd, colsB * kBl * ea_d, kBl * 32.0);
    else if (!p.tb) runB = sel(colsB >= Nd, kBl * Nd * ea_d, colsB * ea_d);
    else runB = sel(kBl >= Kd, colsB * Kd * ea_d, kBl * ea_d);
    // 1 / efficiency = (run + overhead) / run, and the ND2NZ mode on top for ND operands
    const D inv_effA = (runA + s.dma_overhead_bytes) / runA * (p.a_nz ? 1.0 : c.inv_nd2nz);
    const D inv_effB = (runB + s.dma_overhead_bytes) / runB * (p.b_nz ? 1.0 : c.inv_nd2nz);

    Task<L> t;
    t.mte2_a = a_task * cpb_rd * inv_effA;
    t.mte2_b = b_task * cpb_rd * inv_effB + (p.bias ? tN_d * 4.0 * cpb_h : zero);
    // L0 reuse: with a single K step the A block stays in L0A across the N-inner loop (and B in
    // L0B across the M-inner loop).
    const D l0a = aM_d * aK_d * ea_d * sel((kIter == 1) & (ord == 1), one, to_d(nIter));
    const D l0b = aN_d * aK_d * ea_d * sel((kIter == 1) & (ord == 0), one, to_d(mIter));
    t.mte1_a = l0a * c.inv_l0a;
    t.mte1_b = l0b * c.inv_l0b;
    const D n_blocks = to_d(mul(mIter, nIter, kIter));
    // fractals: aM / 16 is aM >> 4 (aM a multiple of 16), whose double is aM's scaled by 2^-4, exactly
    t.cube = fma(aM_d * 0.0625 * (aN_d * 0.0625) * (aK_d * (1.0 / double(k0))), splat<D>(p.cube_scale),
                 s.mmad_overhead_cycles * n_blocks);
    // an NZ output is written in whole fractals, padding included (as the compulsory bytes count it)
    const D out_task = (p.c_nz ? aM_d : tM_d) * (p.c_nz ? aN_d : tN_d) * out_e;
    const D runC = p.c_nz ? to_d(vmin(bM, aM)) * 32.0 : to_d(vmin(bN, tN)) * out_e;
    t.fix = out_task * vmax(splat<D>(c.inv_fix), cpb_h) * (runC + s.dma_overhead_bytes) / runC;
    const D chunks_a = a_mult * to_d(mT) * to_d(ceil_div(kIter, sKa));
    const D chunks_b = b_mult * to_d(nT) * to_d(ceil_div(kIter, sKb));
    const D chunks = chunks_a + chunks_b;
    // a single-buffered L1 operand waits a full GM round trip per chunk; ping-pong hides it
    t.exposed_latency = s.dma_latency_cycles * (sel(dbl1a, zero, chunks_a) + sel(dbl1b, zero, chunks_b) + 1.0);
    t.scalar = fma(splat<D>(s.scalar_iter_cycles), n_blocks,
                   fma(splat<D>(s.scalar_chunk_cycles), chunks, splat<D>(s.scalar_task_cycles)));
    const D hbm_task = fma(a_task + b_task, fh, out_task);
    t.hbm_floor = hbm_task * cpb_hbm_share;
    t.db_l1a = dbl1a; t.db_l1b = dbl1b; t.db_l0a = dbA != 0; t.db_l0b = dbB != 0; t.db_l0c = dbC != 0;
    t.n_chunks = vmax(one, chunks);
    t.n_blocks = n_blocks;
    t.n_out = to_d(mul(mIter, nIter));
    D fill;
    const D task = task_cycles<L>(t, &fill);

    if constexpr (!Full) {
        // the same sum as finish() (one kernel, no vector cycles), nothing else
        const D time = s.launch_us + (waves * task) / s.cycles_per_us() + 0.0 / s.vec_cycles_per_us();
        if constexpr (L::W == 1) return {time, RS_OK};
        else return {sel(reason == 0, time, splat<D>(std::numeric_limits<double>::infinity())), reason};
    } else {
        Result r;
        const double wu = waves * c.inv_cpu;
        r.busy_us[P_MTE2] = wu * (t.mte2_a + t.mte2_b);
        r.busy_us[P_MTE1] = wu * (t.mte1_a + t.mte1_b);
        r.busy_us[P_CUBE] = wu * t.cube;
        r.busy_us[P_FIXPIPE] = wu * t.fix;
        r.busy_us[P_SCALAR] = wu * t.scalar;
        r.busy_us[P_OVERHEAD] = fma(wu, fill, s.launch_us);
        r.hbm_bytes = fma(c.C_tot, kB > 1 ? double(kB) * 4.0 / double(p.eo) : 1.0, hbm_rd) + c.bias_tot;
        r.l2_bytes = R - hbm_rd;
        r.flops = p.flops;
        r.bytes = comp + c.C_tot + c.bias_tot;
        finish(s, r, waves * task, 0.0, 1);
        *out = r;
        return {r.time_us, r.reason};
    }
}
