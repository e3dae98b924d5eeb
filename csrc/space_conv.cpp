// A convolution's Schedule space (aoe/opat/space.py `conv_space`, inner.py `ConvExpander`): the
// outer rows (core split x L0 block), in lexicographic order, each with its default staging in both
// iterate orders and its lower bound; and every legal, undominated L1 staging of any outer row.
#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <tuple>

#include "space.h"

namespace aoesim {
namespace space {

std::vector<int64_t> pow2_upto(int64_t limit, int64_t start) {
    std::vector<int64_t> out;
    for (int64_t v = start; v <= limit; v *= 2) out.push_back(v);
    if (out.empty()) out.push_back(start);
    return out;
}

std::vector<int64_t> block_sizes(int64_t dim, int64_t cap, int64_t align) {
    std::set<int64_t> out;
    for (int64_t b : pow2_upto(cap, align))
        if (b <= dim) out.insert(b);
    for (int64_t j = 1; j <= 4; ++j) {
        const int64_t b = py_align(py_cdiv(dim, j), align);
        if (b <= cap) out.insert(b);
    }
    return {out.begin(), out.end()};
}

std::vector<int64_t> conv_splits(int cores, int64_t g, int64_t n, int64_t out_h, int64_t n_units) {
    // every (g, batch, rows, units) split with at most `cores` parts in all and none above its
    // dimension, as its effective split (d parts of x are ceil(x / ceil(x / d)) parts), packed as
    // the numpy original packed them (8 bits each) so that the order and any collision are the same
    const int64_t lim[4] = {g, n, out_h, n_units};
    std::set<int64_t> keys;
    auto eff = [&](int j, int64_t t) { return py_cdiv(lim[j], py_cdiv(lim[j], t)); };
    for (int64_t gd = 1; gd <= std::min<int64_t>(cores, g); ++gd)
        for (int64_t bd = 1; bd <= std::min<int64_t>(cores / gd, n); ++bd)
            for (int64_t hd = 1; hd <= std::min<int64_t>(cores / (gd * bd), out_h); ++hd)
                for (int64_t nd = 1; nd <= std::min<int64_t>(cores / (gd * bd * hd), n_units); ++nd)
                    keys.insert(((eff(0, gd) * 256 + eff(1, bd)) * 256 + eff(2, hd)) * 256 + eff(3, nd));
    std::vector<int64_t> splits;
    std::vector<int64_t> loads;
    for (int64_t key : keys) {
        const int64_t s[4] = {key >> 24, (key >> 16) & 255, (key >> 8) & 255, key & 255};
        int64_t load = 1;
        for (int j = 0; j < 4; ++j) load *= py_cdiv(lim[j], s[j]);
        splits.insert(splits.end(), s, s + 4);
        loads.push_back(load);
    }
    if (loads.empty()) return splits;
    const int64_t least = *std::min_element(loads.begin(), loads.end());
    std::vector<int64_t> out;
    for (size_t i = 0; i < loads.size(); ++i)
        if (loads[i] <= 2 * least) out.insert(out.end(), splits.begin() + 4 * i, splits.begin() + 4 * i + 4);
    return out;
}

namespace {

constexpr int64_t CONV_PIXELS[4] = {64, 128, 256, 512};  // L0 pixel-block targets
constexpr int64_t CONV_ROW_SPLITS[3] = {1, 2, 4};        // the core's rows whole or cut evenly

// An outer row's default staging (`_conv_default_inner`): the smallest hoL1 multiple, the
// largest K chunk in whole windows (dW: the smallest), full ping-pong; a row without a legal one is
// dropped (a value of 0 here). The hoL1 multiple depends on hoL0 and the rows per core only, the
// K chunks on kL0 and (dW) the C0 channel groups per core only: each is found once for all rows
// that share them.
constexpr int64_t DEFAULT_MULTS[4] = {1, 2, 4, 8};

int64_t default_ho_l1(int64_t ho_l0, int64_t ho_core) {
    for (int64_t m : DEFAULT_MULTS)
        if (ho_l0 * m <= std::max(ho_core, ho_l0)) return ho_l0 * m;
    return 0;
}

std::pair<int64_t, int64_t> default_k_chunks(const ConvShape& d, int64_t k_l0, int64_t c1_core) {
    int64_t ka = 0, kb = 0;
    if (d.filt()) {
        for (int i = 0; i < 3 && !ka; ++i)
            if (k_l0 * DEFAULT_MULTS[i] <= d.co16) ka = k_l0 * DEFAULT_MULTS[i];
        for (int i = 0; i < 3 && !kb; ++i)
            if (DEFAULT_MULTS[i] <= c1_core) kb = d.win * DEFAULT_MULTS[i];
        return {ka, kb};
    }
    for (int64_t m : DEFAULT_MULTS) {
        const int64_t v = d.win * m;
        if (v <= d.k_whole && v % k_l0 == 0) ka = v;
    }
    return {ka, ka};
}

// The per-core channel extent nL0 blocks are cut from (dW: channels x window), 16-aligned.
int64_t n_cap_of(const ConvShape& d, int64_t nd) {
    return d.filt() ? py_cdiv(py_cdiv(py_align(d.cin_g, d.c0) * d.kh * d.kw, nd), 16) * 16
                    : py_cdiv(py_cdiv(d.out_c, nd), 16) * 16;
}

}  // namespace

void conv_outer(const SoC& s, const ConvShape& d, const int64_t* seed, const OuterAlloc& alloc) {
    const bool filt = d.filt();
    const int64_t out_h = d.out_h, out_w = d.out_w, ea = d.ea, c0 = d.c0;
    const int64_t n_units = filt ? py_cdiv(d.cin_g, c0) : py_cdiv(d.out_c, 16);
    const std::vector<int64_t> sp = conv_splits(s.cube_cores, d.g, d.n, out_h, n_units);  // gd bd hd nd
    const int64_t n_split = int64_t(sp.size() / 4);
    // L0 pixel blocks: up to four widths dividing the output row, with rows for about 64 to 512
    // pixels, and the core's rows whole or cut evenly in 2 or 4
    std::vector<int64_t> wo_l0s;
    for (int64_t v = std::min<int64_t>(out_w, 256); v >= 1 && wo_l0s.size() < 4; --v)
        if (out_w % v == 0) wo_l0s.push_back(v);
    // distinct (split, hoL0, woL0) whose L0 block fits with ping-pong, packed as the numpy original packed them
    std::vector<int64_t> keys;
    auto add = [&](int64_t si, int64_t ho_l0, int64_t wo_l0) {
        bool keep;
        if (filt) {  // dW: the pixels are the K of both L0 operands (16 rows of each at least)
            const int64_t pix_al = py_cdiv(ho_l0 * wo_l0, c0) * c0;
            keep = pix_al * 16 * ea * 2 <= std::min(s.l0a, s.l0b);
        } else {     // the M of L0A (K at least C0) and of L0C (16 channels at least, fp32)
            const int64_t pix_al = py_cdiv(ho_l0 * wo_l0, 16) * 16;
            keep = pix_al * c0 * ea * 2 <= s.l0a && pix_al * 16 * 4 * 2 <= s.l0c;
        }
        if (keep) keys.push_back((si * 4096 + ho_l0) * 4096 + wo_l0);
    };
    for (int64_t si = 0; si < n_split; ++si) {
        const int64_t ho_core = py_cdiv(out_h, sp[size_t(4 * si + 2)]);
        for (int64_t wo_l0 : wo_l0s)
            for (int64_t m0 : CONV_PIXELS) add(si, std::max<int64_t>(1, std::min(ho_core, py_fdiv(m0, wo_l0))), wo_l0);
        for (int64_t wo_l0 : wo_l0s)
            for (int64_t j : CONV_ROW_SPLITS) add(si, py_cdiv(ho_core, j), wo_l0);
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    std::vector<std::vector<std::pair<int64_t, int64_t>>> blocks(static_cast<size_t>(n_split));
    for (int64_t key : keys) {
        const int64_t si = py_fdiv(key, 4096 * 4096);
        if (si < 0 || si >= n_split) throw std::out_of_range("conv L0 block out of the packing's range");
        blocks[size_t(si)].emplace_back(py_fdiv(key, 4096) % 4096, key % 4096);
    }
    // kL0 / nL0: powers of two and the whole per-core extent or an even split of it
    std::vector<int64_t> k_l0s;
    if (filt) {
        k_l0s = block_sizes(d.co16, 128, 16);
    } else {
        for (int64_t v : pow2_upto(8 * c0, c0))
            if (v <= d.k_al) k_l0s.push_back(v);
    }
    // the rows in lexicographic order of the strategy fields: splits by (batch, rows, units, g),
    // then hoL0 (= hoL1), woL0, kL0, nL0, each ascending (woL1 is the same in every row)
    std::vector<int64_t> order(static_cast<size_t>(n_split));
    for (int64_t i = 0; i < n_split; ++i) order[size_t(i)] = i;
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const int64_t* x = &sp[size_t(4 * a)];
        const int64_t* y = &sp[size_t(4 * b)];
        return std::make_tuple(x[1], x[2], x[3], x[0]) < std::make_tuple(y[1], y[2], y[3], y[0]);
    });
    const CubeProb prob = conv_prob(d);
    std::vector<int64_t> n_its;
    int64_t* w = nullptr;
    double* wb = nullptr;
    bool seed_found = false;
    // walked twice: first counting the rows (and looking for the seed's outer choice: groups,
    // batch, rows, units, L0 block), then writing them
    for (int pass = 0; pass < 2; ++pass) {
        int64_t kept = 0;
        for (int64_t si : order) {
            const int64_t gd = sp[size_t(4 * si)], bd = sp[size_t(4 * si + 1)], hd = sp[size_t(4 * si + 2)];
            const int64_t nd = sp[size_t(4 * si + 3)];
            const bool seed_split = seed && seed[0] == bd && seed[1] == hd && seed[2] == nd && seed[3] == gd;
            const std::vector<int64_t> n_l0s = block_sizes(n_cap_of(d, nd), filt ? 128 : 256, 16);
            const CubeSplit split = conv_split(s, d, prob, bd, hd, nd, gd);
            // the bound's iteration counts (per-core extent over block) found once per split and
            // block value: cube_block_bound's integers, so the same bits
            n_its.clear();
            for (int64_t nl : n_l0s) n_its.push_back(py_cdiv(split.t_n, nl));
            const int64_t ho_core = py_cdiv(out_h, hd), c1_core = py_cdiv(d.c1_total, nd);
            for (const auto& [ho_l0, wo_l0] : blocks[size_t(si)]) {
                const int64_t pix = ho_l0 * wo_l0;
                const int64_t pk = py_cdiv(pix, c0) * c0, pm = py_cdiv(pix, 16) * 16;
                const int64_t ho_l1 = default_ho_l1(ho_l0, ho_core);
                const bool seed_block = seed_split && seed[8] == ho_l0 && seed[9] == wo_l0;
                // dW: M = Cout (kL0), N = channels x window (nL0), K = pixels; else M = pixels,
                // N = output channels (nL0), K = kL0
                const int64_t b_m_pix = py_align(pix, 16);
                const int64_t it_pix = filt ? py_cdiv(split.t_k, py_align(pix, c0)) : py_cdiv(split.t_m, b_m_pix);
                for (int64_t kl : k_l0s) {
                    const auto [ka, kb] = default_k_chunks(d, kl, c1_core);
                    if (!ho_l1 || !ka || !kb) continue;
                    const int64_t it_kl = filt ? py_cdiv(split.t_m, kl) : py_cdiv(split.t_k, kl);
                    for (size_t j = 0; j < n_l0s.size(); ++j) {
                        const int64_t nl = n_l0s[j];
                        // the L0 buffers with ping-pong
                        const bool fit = filt ? kl * pk * ea * 2 <= s.l0a && nl * pk * ea * 2 <= s.l0b &&
                                                    kl * nl * 4 * 2 <= s.l0c
                                              : pm * kl * ea * 2 <= s.l0a && nl * kl * ea * 2 <= s.l0b &&
                                                    pm * nl * 4 * 2 <= s.l0c;
                        if (!fit) continue;
                        ++kept;
                        if (!pass) {
                            seed_found |= seed_block && seed[10] == kl && seed[11] == nl;
                            continue;
                        }
                        // no staging of an outer row goes below its bound (one for both orders)
                        wb[0] = wb[1] = filt ? cube_its_bound(s, prob, split, kl, nl, it_kl, n_its[j], it_pix)
                                             : cube_its_bound(s, prob, split, b_m_pix, nl, it_pix, n_its[j], it_kl);
                        const int64_t r[CONV_NF] = {bd, hd, nd, gd, ho_l1, out_w, ka, kb, ho_l0, wo_l0, kl, nl, 31, 0};
                        for (int c = 0; c < CONV_NF; ++c) w[c] = w[CONV_NF + c] = r[c];
                        w[2 * CONV_NF - 1] = 1;  // the other iterate order
                        w += 2 * CONV_NF;
                        wb += 2;
                    }
                }
            }
        }
        if (!pass) alloc(2 * kept + (seed && !seed_found ? 2 : 0), w, wb);
    }
    if (seed && !seed_found) add_seed(s, seed, CONV_NF, 13, w, wb);
}

void ConvStagings::check(const Key& k) const {
    if (std::min({k[0], k[1], k[2], k[4], k[5]}) < 1 || k[3] < (d_.filt() ? 1 : 0))
        throw std::invalid_argument("a conv class key has positive L0 blocks and rows (and channel split, dW)");
}

ConvStagings::Key ConvStagings::key(const int64_t* row) const {
    if (std::min({row[1], row[2], row[8], row[9], row[10], row[11]}) < 1)
        throw std::invalid_argument("conv outer rows need positive splits and L0 blocks");
    const int64_t hd = row[1];
    return {row[8], hd <= 64 ? ho_core_[hd] : py_cdiv(d_.out_h, hd), row[10], d_.filt() ? row[2] : 0, row[9], row[11]};
}

double ConvStagings::l1_a(const Key& k, int64_t ho_l1, int64_t ka, int64_t db_a) const {
    const ConvShape& d = d_;
    const int64_t ho_l0 = k[0], k_l0 = k[2], wo_l0 = k[4], pix_l0 = ho_l0 * wo_l0;
    if (d.filt()) {
        const int64_t pix_steps = py_fdiv(ho_l1, ho_l0) * py_fdiv(d.wo, wo_l0);
        return double(py_fdiv(ka, k_l0) * pix_steps * (1 + db_a) * k_l0 * py_align(pix_l0, d.c0) * d.ea);
    }
    // the feature map: the patch its pixels read (dx: rows of the zero-inserted dy, 1/stride real)
    const bool dx = d.dx();
    const int64_t out_w = dx ? d.w : d.wo;
    const int64_t in_c = dx ? d.co_g : d.cin_g, in_h = dx ? d.ho : d.h, in_w = dx ? d.wo : d.w;
    const int64_t step_h = dx ? 1 : d.sh, step_w = dx ? 1 : d.sw;
    double rows = double((ho_l1 - 1) * step_h + d.ekh);
    double cols = double((out_w - 1) * step_w + d.ekw);
    if (dx) {
        rows = std::ceil(rows / double(d.sh));
        cols = double(py_cdiv((out_w - 1) * step_w + d.ekw, d.sw));
    }
    rows = np_min(rows, double(in_h));
    cols = double(in_w) < cols ? double(in_w) : cols;  // Python's min(cols, in_w)
    const double patch = rows * cols * double(std::min(py_fdiv(ka, d.khw), py_align(in_c, d.c0))) * double(d.ea);
    const double scale = patch / double(py_align(ho_l1 * out_w, 16) * ka * d.ea);
    const int64_t step_m = py_fdiv(ho_l1, ho_l0) * py_fdiv(out_w, wo_l0);
    return double(step_m * py_fdiv(ka, k_l0) * (1 + db_a) * py_align(pix_l0, 16) * k_l0 * d.ea) * scale;
}

double ConvStagings::l1_b(const Key& k, int64_t ho_l1, int64_t kb, int64_t db_b) const {
    const ConvShape& d = d_;
    const int64_t ho_l0 = k[0], k_l0 = k[2], wo_l0 = k[4], n_l0 = k[5];
    if (!d.filt()) return double(py_fdiv(kb, k_l0) * (1 + db_b) * n_l0 * k_l0 * d.ea);
    // dW: the feature map is B, read as the patch of its pixels' rows
    const int64_t pix_steps = py_fdiv(ho_l1, ho_l0) * py_fdiv(d.wo, wo_l0);
    const int64_t step_n = py_cdiv(kb, n_l0);
    const double rows = double(std::min((ho_l1 - 1) * d.sh + d.ekh, d.h));
    const double cols = double(std::min((d.wo - 1) * d.sw + d.ekw, d.w));
    const double patch = rows * cols * double(std::min(py_fdiv(kb, d.khw), py_align(d.cin_g, d.c0))) * double(d.ea);
    const double scale = patch / double(py_align(ho_l1 * d.wo, d.c0) * kb * d.ea);
    return double(step_n * pix_steps * (1 + db_b) * n_l0 * py_align(ho_l0 * wo_l0, d.c0) * d.ea) * scale;
}

double ConvStagings::l1_bias(const Key& k, int64_t kb) const {
    if (!d_.bias) return 0.0;
    return d_.filt() ? double(py_cdiv(kb, k[5]) * k[5]) * 4.0 : double(k[5]) * 4.0 * 1.0;
}

const ConvStagings::APart& ConvStagings::a_part(const Key& k) {
    // candidates (`ConvExpander._candidates`): hoL1 multiples of hoL0, K chunks in whole
    // kernel windows (A's and B's, one dividing the other; dW: Cout and channel chunks); and A's
    // L1 bytes, which depend on neither nL0 nor (but for the candidates) the channel split
    const std::array<int64_t, 5> ak{k[0], k[1], k[2], k[3], k[4]};
    if (const APart* got = a_parts_.find(ak)) return *got;
    const ConvShape& d = d_;
    const int64_t ho_l0 = k[0], ho_core = k[1], k_l0 = k[2], n_dim = k[3];
    const int64_t rows_core = std::max(ho_core, ho_l0);
    APart p;
    p.hm.add(py_fdiv(rows_core, ho_l0));
    for (int64_t m : {1, 2, 4, 8, 16})
        if (ho_l0 * m <= rows_core) p.hm.add(m);
    if (d.filt()) {
        for (int64_t m : {1, 2, 4})
            if (k_l0 * m <= d.co16) p.ka.add(k_l0 * m);
        if (d.co16 % k_l0 == 0) p.ka.add(d.co16);
        const int64_t c1 = py_cdiv(d.c1_total, n_dim);
        for (int64_t m : {1, 2, 4})
            if (m <= c1) p.kb.add(d.win * m);
        p.kb.add(d.win * c1);
    } else {
        Few all;
        all.add(d.k_whole);
        for (int64_t m : {1, 2, 4, 8})
            if (d.win * m <= d.k_whole) all.add(d.win * m);
        for (int64_t v : all)
            if (v % k_l0 == 0) p.ka.add(v);
        p.kb = p.ka;
    }
    for (int h = 0; h < p.hm.n; ++h)
        for (int i = 0; i < p.ka.n; ++i) p.a1[h][i] = l1_a(k, ho_l0 * p.hm.v[h], p.ka.v[i], 0);
    return a_parts_.add(ak, p);
}

Table ConvStagings::derive(const Key& k) {
    // the L1 check of the four ping-pong combinations (bytes are linear in each operand's depth);
    // without ping-pong of an operand only where the same staging with it does not fit. A's bytes
    // depend on (hoL1, kAL1), B's on (hoL1, kBL1) (but for dW on kBL1 only): each found once
    const ConvShape& d = d_;
    const APart& p = a_part(k);
    const Few &hm = p.hm, &ka = p.ka, &kb = p.kb;
    Table out;
    out.reserve(size_t(hm.n * ka.n * kb.n * 2 * NS));
    double b1[8], rest[8];
    for (int j = 0; j < kb.n; ++j) rest[j] = l1_bias(k, kb.v[j]);
    for (int h = 0; h < hm.n; ++h) {
        const int64_t ho_l1 = k[0] * hm.v[h];
        if (d.filt() || h == 0)
            for (int j = 0; j < kb.n; ++j) b1[j] = l1_b(k, ho_l1, kb.v[j], 0);
        for (int i = 0; i < ka.n; ++i)
            for (int j = 0; j < kb.n; ++j) {
                const int64_t a_k = ka.v[i], b_k = kb.v[j];
                if (!d.filt() && a_k % b_k != 0 && b_k % a_k != 0) continue;
                const double a1 = p.a1[h][i];
                bool f[2][2];
                for (int da = 0; da < 2; ++da)
                    for (int db = 0; db < 2; ++db)
                        f[da][db] = double(1 + da) * a1 + double(1 + db) * b1[j] + rest[j] <= double(l1_);
                const bool keep[4] = {f[0][0] && !(f[0][1] || f[1][0]), f[0][1] && !f[1][1], f[1][0] && !f[1][1],
                                      f[1][1]};
                static const int64_t pb[4] = {28, 30, 29, 31};  // none, B, A, both
                for (int v = 0; v < 4; ++v)
                    if (keep[v])
                        for (int64_t ord = 0; ord < 2; ++ord) out.insert(out.end(), {ho_l1, a_k, b_k, pb[v], ord});
            }
    }
    return out;
}

const Table& ConvStagings::stagings(const Key& k) {
    const Table* t = classes_.find(k);
    return t ? *t : classes_.add(k, derive(k));
}

int64_t ConvStagings::plan(const int64_t* outer, int64_t n, std::vector<const Table*>& plan) {
    int64_t rows = 0;
    for (int64_t i = 0; i < n; ++i) {
        const Table& st = stagings(key(outer + i * CONV_NF));
        plan.push_back(&st);
        rows += int64_t(st.size() / NS);
    }
    return rows;
}

void ConvStagings::write(const int64_t* outer, int64_t n, const Table* const* plan, int64_t* out) {
    static const int cols[NS] = {4, 6, 7, 12, 13};  // hoL1, kAL1, kBL1, pBufferFlag, iterateMNOrder
    for (int64_t i = 0; i < n; ++i) {
        const int64_t* row = outer + i * CONV_NF;
        const Table& st = *plan[i];
        for (size_t j = 0; j < st.size(); j += NS, out += CONV_NF) {
            std::copy(row, row + CONV_NF, out);
            for (int c = 0; c < NS; ++c) out[cols[c]] = st[j + size_t(c)];
        }
    }
}

}  // namespace space
}  // namespace aoesim
