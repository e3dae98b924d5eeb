// A matmul's Schedule space (aoe/opat/space.py `matmul_space`, inner.py `MatmulExpander`): the
// outer rows (base block x per-core block, split-K), each with CANN's staging in both iterate orders
// and its lower bound; and every legal, undominated staging (and L2 tiling) of any outer row.
#include <algorithm>
#include <set>
#include <stdexcept>
#include <utility>

#include "space.h"

namespace aoesim {
namespace space {

namespace {

// MM_FIELDS columns
enum : int { F_USED, F_SM, F_SN, F_SK, F_BM, F_BN, F_BK, F_DA, F_DB, F_STM, F_STN, F_ORD, F_SKA, F_SKB,
             F_DBA, F_DBB, F_DBC, F_L2MC, F_L2NC, F_L2MB, F_L2NB, F_L2ORD, F_TILE };

// CANN's staging of an outer row (`_mm_default_inner` and `_mm_l2_default`): K in
// 256-element chunks (or the whole K panel when it fits double-buffered), ping-pong where it fits.
void default_inner(const SoC& s, const MmShape& d, int64_t* r) {
    const int64_t bm = r[F_BM], bn = r[F_BN], bk = r[F_BK], ea = d.ea;
    const int64_t k_iter = py_cdiv(std::min(r[F_SK], d.k), bk);
    int64_t step = std::max<int64_t>(1, std::min(k_iter, std::max<int64_t>(1, py_fdiv(256, bk))));
    const int64_t bias = d.bias ? bn * 4 : 0;
    if (2 * k_iter * (bm + bn) * bk * ea + bias <= s.l1) step = k_iter;
    const bool l1_db = 2 * step * (bm + bn) * bk * ea + bias <= s.l1;
    r[F_SKA] = r[F_SKB] = step;
    r[F_STM] = r[F_STN] = 1;
    r[F_DA] = r[F_DB] = step * (l1_db ? 2 : 1);
    r[F_DBA] = 2 * bm * bk * ea <= s.l0a;
    r[F_DBB] = 2 * bn * bk * ea <= s.l0b;
    r[F_DBC] = 2 * bm * bn * 4 <= s.l0c;
    const int64_t mb = py_cdiv(d.m, r[F_SM]), nb = py_cdiv(d.n, r[F_SN]);
    r[F_L2MB] = mb, r[F_L2NB] = nb, r[F_L2MC] = r[F_L2NC] = 1;
    if (d.l2) {  // operands beyond L2: 2x2 tiles as the starting point
        const int64_t bm_ = py_cdiv(mb, 2), bn_ = py_cdiv(nb, 2);
        r[F_L2MB] = bm_, r[F_L2NB] = bn_;
        r[F_L2MC] = py_cdiv(mb, bm_), r[F_L2NC] = py_cdiv(nb, bn_);
        r[F_TILE] = 1;
    }
}

// the L2 tile counts of the L2 tiling variants, in the expansion's order ((1, 1) is the plain row)
constexpr int64_t L2_CUTS[8][2] = {{1, 2}, {1, 4}, {2, 1}, {2, 2}, {2, 4}, {4, 1}, {4, 2}, {4, 4}};

}  // namespace

void matmul_outer(const SoC& s, const MmShape& d, const int64_t* seed, const OuterAlloc& alloc) {
    const int64_t ea = d.ea, k0 = py_fdiv(32, ea), m = d.m, n = d.n, k = d.k;
    const int64_t m16 = py_align(m, 16), n16 = py_align(n, 16), kal = py_align(k, k0);
    const int64_t batch = std::max(d.batch_a, d.batch_b), cores = s.cube_cores;
    const std::vector<int64_t> bms = block_sizes(m16, 512, 16), bns = block_sizes(n16, 512, 16);
    const std::vector<int64_t> bks = block_sizes(kal, 32 * k0, k0);
    // first the outer choices (7 fields each, compact), then the rows: no large buffer grows
    std::vector<int64_t> picks;
    for (int64_t bm : bms)
        for (int64_t bn : bns) {
            if (bm * bn * 4 > s.l0c) continue;
            const int64_t m_blk = py_cdiv(m, bm), n_blk = py_cdiv(n, bn);
            // distinct per-core blocks of the core splits (md x nd cores, md * nd <= cores), sorted;
            // splits that leave more than half of the usable cores idle are dominated. A per-core
            // block shrinks as its split grows, so each distinct one has a least split, and a pair
            // of blocks is some split's exactly when the product of their least splits fits
            auto least = [&](int64_t blk, int64_t b, int64_t whole) {
                std::vector<std::pair<int64_t, int64_t>> v;  // (per-core block, least split), ascending
                for (int64_t parts = 1; parts <= std::min(cores, blk); ++parts) {
                    const int64_t size = std::min(py_cdiv(blk, parts) * b, whole);
                    if (v.empty() || v.back().first != size) v.emplace_back(size, parts);
                }
                std::reverse(v.begin(), v.end());
                return v;
            };
            const auto ms = least(m_blk, bm, m16), ns = least(n_blk, bn, n16);
            std::vector<std::pair<int64_t, int64_t>> pairs;
            for (const auto& [s_m, md] : ms)
                for (const auto& [s_n, nd] : ns)
                    if (md * nd <= cores) pairs.emplace_back(s_m, s_n);
            int64_t most = 0;
            std::vector<int64_t> out_tasks(pairs.size());
            for (size_t i = 0; i < pairs.size(); ++i) {
                out_tasks[i] = batch * py_cdiv(m, pairs[i].first) * py_cdiv(n, pairs[i].second);
                most = std::max(most, std::min(out_tasks[i], cores));
            }
            std::vector<size_t> kept;
            for (size_t i = 0; i < pairs.size(); ++i)
                if (std::min(out_tasks[i], cores) * 2 >= most) kept.push_back(i);
            for (int64_t bk : bks) {
                if (bm * bk * ea > s.l0a || bn * bk * ea > s.l0b) continue;
                std::set<int64_t> k_opts{k};
                for (int64_t parts : {2, 4, 8})
                    if (py_cdiv(k, parts) >= bk) k_opts.insert(py_align(py_cdiv(k, parts), bk));
                for (int64_t s_k : k_opts)
                    for (size_t i : kept) {
                        // split-K only when the output alone cannot fill the cores
                        if (s_k != k && !(out_tasks[i] < cores)) continue;
                        const int64_t used = std::min(out_tasks[i] * py_cdiv(k, s_k), cores);
                        picks.insert(picks.end(), {used, pairs[i].first, pairs[i].second, s_k, bm, bn, bk});
                    }
            }
        }
    const int64_t n_out = int64_t(picks.size() / 7);
    bool seed_found = false;
    for (int64_t i = 0; seed && !seed_found && i < n_out; ++i)
        seed_found = std::equal(seed, seed + 7, &picks[size_t(7 * i)]);  // the outer choice: first 7 fields
    int64_t* rows = nullptr;
    double* bound = nullptr;
    alloc(2 * n_out + (seed && !seed_found ? 2 : 0), rows, bound);
    const CubeProb prob = matmul_prob(d);
    // the bound's terms of a per-core block (uc follows from it): shared by every base block
    FlatMap<3, CubeSplit> splits;
    for (int64_t i = 0; i < n_out; ++i) {
        int64_t* r = rows + 2 * i * MM_NF;
        const int64_t* o = &picks[size_t(7 * i)];
        std::fill(r, r + MM_NF, 0);
        std::copy(o, o + 7, r);  // usedCoreNum, singleCoreM/N/K, baseM/N/K
        default_inner(s, d, r);
        const CubeSplit* c = splits.find({o[1], o[2], o[3]});
        if (!c) c = &splits.add({o[1], o[2], o[3]}, cube_split(s, prob, o[0], o[1], o[2], o[3]));
        bound[2 * i] = bound[2 * i + 1] = cube_block_bound(s, prob, *c, o[4], o[5], o[6]);  // both orders
        for (int f = 0; f < MM_NF; ++f) r[MM_NF + f] = r[f];
        r[F_ORD] = 0;
        r[MM_NF + F_ORD] = 1;
    }
    if (seed && !seed_found) add_seed(s, seed, MM_NF, F_ORD, rows + 2 * n_out * MM_NF, bound + 2 * n_out);
}

int matmul_impl_class(const int64_t* mnk, const int64_t* r) {
    const int64_t s_m = std::min(r[F_SM], mnk[0]), s_n = std::min(r[F_SN], mnk[1]), s_k = std::min(r[F_SK], mnk[2]);
    if (r[F_SK] < mnk[2]) return 3;
    if (r[F_STM] * r[F_BM] >= s_m && r[F_SKA] * r[F_BK] >= s_k) return 1;
    if (r[F_STN] * r[F_BN] >= s_n && r[F_SKB] * r[F_BK] >= s_k) return 2;
    return 0;
}

namespace {

// The steps `matmul_restage` sets (class 1: A's whole block and K panel in L1, B streamed one block
// and one K step at a time; class 2: the reverse).
void restage_steps(const int64_t* mnk, int cls, int64_t* r) {
    const int64_t bm = r[F_BM], bn = r[F_BN], bk = r[F_BK];
    if (std::min({bm, bn, bk}) < 1) throw std::invalid_argument("matmul outer rows need positive blocks");
    const int64_t k_iter = py_cdiv(std::min(r[F_SK], mnk[2]), bk);
    if (cls == 1) {
        r[F_STM] = py_cdiv(std::min(r[F_SM], mnk[0]), bm), r[F_SKA] = k_iter, r[F_SKB] = 1, r[F_STN] = 1;
    } else {
        r[F_STN] = py_cdiv(std::min(r[F_SN], mnk[1]), bn), r[F_SKB] = k_iter, r[F_SKA] = 1, r[F_STM] = 1;
    }
}

}  // namespace

int matmul_restaged_class(const int64_t* mnk, int cls, const int64_t* row) {
    if (cls != 1 && cls != 2) return matmul_impl_class(mnk, row);
    int64_t r[F_SKB + 1];  // the fields up to the K steps: all the class reads
    std::copy(row, row + F_SKB + 1, r);
    restage_steps(mnk, cls, r);
    return matmul_impl_class(mnk, r);
}

void matmul_restage(const int64_t* mnk, int64_t ea, int64_t l1, int cls, int64_t* r) {
    if (cls != 1 && cls != 2) return;
    restage_steps(mnk, cls, r);
    const int64_t bm = r[F_BM], bn = r[F_BN], bk = r[F_BK];
    const int64_t da = r[F_STM] * r[F_SKA], db = r[F_STN] * r[F_SKB];
    const bool fits_db = (2 * da * bm + 2 * db * bn) * bk * ea <= l1;
    r[F_DA] = fits_db ? 2 * da : da;
    r[F_DB] = fits_db ? 2 * db : db;
}

std::vector<int64_t> mm_first_of_each(const int64_t* outer, int64_t lo, int64_t hi) {
    // open addressing over row indices, compared on the outer choice's 7 fields
    std::vector<int64_t> out;
    if (hi <= lo) return out;
    size_t cap = 16;
    while (cap < size_t(2 * (hi - lo))) cap *= 2;
    std::vector<int64_t> slots(cap, -1);
    for (int64_t i = lo; i < hi; ++i) {
        const int64_t* r = outer + i * MM_NF;
        uint64_t h = 0x9E3779B97F4A7C15ull;
        for (int f = 0; f < 7; ++f) h = (h ^ uint64_t(r[f])) * 0xBF58476D1CE4E5B9ull, h ^= h >> 31;
        for (size_t j = size_t(h) & (cap - 1);; j = (j + 1) & (cap - 1)) {
            if (slots[j] < 0) {
                slots[j] = i;
                out.push_back(i);
                break;
            }
            if (std::equal(r, r + 7, outer + slots[j] * MM_NF)) break;
        }
    }
    return out;
}

MmStagings::MmStagings(const MmShape& d, int64_t l1, std::vector<int64_t> tmpl, std::vector<int64_t> up_a,
                       std::vector<int64_t> up_b, int impl)
    : d_(d), l1_(l1), t_(std::move(tmpl)), up_a_(std::move(up_a)), up_b_(std::move(up_b)), step_max_(1),
      impl_(impl) {
    const size_t rows = t_.size() / NS;
    if (t_.size() % NS || up_a_.size() != rows || up_b_.size() != rows)
        throw std::invalid_argument("the staging template and its ping-pong upgrades do not match");
    for (size_t i = 0; i < rows; ++i) {
        if (up_a_[i] < 0 || size_t(up_a_[i]) >= rows || up_b_[i] < 0 || size_t(up_b_[i]) >= rows)
            throw std::invalid_argument("a ping-pong upgrade is not a template row");
        const int64_t* t = &t_[i * NS];
        if (t[0] < -1 || t[1] < -1 || t[2] < 1 || t[3] < 1 || t[4] < 0 || t[4] > 1 || t[5] < 0 || t[5] > 1 ||
            t[6] < 0 || t[6] > 1)
            throw std::invalid_argument("a staging template row is out of its domain");
        step_max_ = std::max({step_max_, t_[i * NS + 2], t_[i * NS + 3]});
    }
}

void MmStagings::check(const Key& k) const {
    if (std::min({k[0], k[1], k[2], k[3], k[4], k[5]}) < 1 || k[6] < 0 || k[6] > 1)
        throw std::invalid_argument("a matmul class key has positive blocks and iteration counts, and a split-K flag");
}

MmStagings::Key MmStagings::key(const int64_t* row) const {
    // the template's M/N steps are at most step_max_: beyond one more, mIter and nIter make no difference
    const int64_t bm = row[F_BM], bn = row[F_BN], bk = row[F_BK];
    if (std::min({bm, bn, bk, row[F_SM], row[F_SN], row[F_SK]}) < 1)
        throw std::invalid_argument("matmul outer rows need positive blocks");
    return {bm, bn, bk, std::min(py_cdiv(std::min(row[F_SM], d_.m), bm), step_max_ + 1),
            std::min(py_cdiv(std::min(row[F_SN], d_.n), bn), step_max_ + 1),
            py_cdiv(std::min(row[F_SK], d_.k), bk), int64_t(row[F_SK] < d_.k)};
}

const MmStagings::Resolved& MmStagings::resolve(int64_t bk, int64_t k_iter) {
    // the whole-panel and 256-chunk codes become steps, kept only where they are not one of the
    // powers of two already; both K steps within kIter, one dividing the other
    if (const Resolved* got = resolved_.find({bk, k_iter})) return *got;
    const size_t rows = t_.size() / NS;
    const int64_t chunk = std::max<int64_t>(1, std::min(k_iter, std::max<int64_t>(1, py_fdiv(256, bk))));
    auto step = [&](int64_t code) { return code == 0 ? k_iter : (code == -1 ? chunk : code); };
    auto fresh = [&](int64_t code, int64_t st) {
        const bool pow2 = (st & (st - 1)) == 0;
        return code > 0 || ((!pow2 || st > 16) && (code == 0 || st != k_iter));
    };
    Resolved r;
    r.ska.resize(rows);
    r.skb.resize(rows);
    for (size_t i = 0; i < rows; ++i) {
        const int64_t* t = &t_[i * NS];
        const int64_t ska = r.ska[i] = step(t[0]), skb = r.skb[i] = step(t[1]);
        if (ska <= k_iter && skb <= k_iter && fresh(t[0], ska) && fresh(t[1], skb) && (ska % skb == 0 || skb % ska == 0))
            r.legal.push_back(int32_t(i));
    }
    std::vector<int32_t> pos(rows, -1);
    for (size_t j = 0; j < r.legal.size(); ++j) pos[size_t(r.legal[j])] = int32_t(j);
    for (int32_t i : r.legal) {
        const int64_t* t = &t_[size_t(i) * NS];
        r.da.push_back(t[2] * r.ska[size_t(i)] * (1 + t[5]));
        r.db.push_back(t[3] * r.skb[size_t(i)] * (1 + t[6]));
        r.step_n.push_back(t[3]);
        r.up_a.push_back(t[5] == 0 ? pos[size_t(up_a_[size_t(i)])] : -1);
        r.up_b.push_back(t[6] == 0 ? pos[size_t(up_b_[size_t(i)])] : -1);
    }
    return resolved_.add({bk, k_iter}, std::move(r));
}

const std::vector<int32_t>& MmStagings::block(int64_t bm, int64_t bn, int64_t bk, int64_t k_iter) {
    // the template rows legal for this K block whose L1 buffers fit, minus those dominated by the
    // same staging with L1 ping-pong of A (or B) added that fits too. A row and its ping-pong
    // upgrade share their steps, so whether the upgrade survives a class's step limits is whether
    // the row does: the prune is the same for every class of the block.
    if (const std::vector<int32_t>* got = blocks_.find({bm, bn, bk, k_iter})) return *got;
    const Resolved& r = resolve(bk, k_iter);
    const size_t n = r.legal.size();
    fit_.resize(n);
    const int64_t bias = d_.bias ? bn * 4 : 0;
    for (size_t j = 0; j < n; ++j) fit_[j] = (r.da[j] * bm + r.db[j] * bn) * bk * d_.ea + r.step_n[j] * bias <= l1_;
    std::vector<int32_t> rows;
    for (size_t j = 0; j < n; ++j)
        if (fit_[j] && !((r.up_a[j] >= 0 && fit_[size_t(r.up_a[j])]) || (r.up_b[j] >= 0 && fit_[size_t(r.up_b[j])])))
            rows.push_back(r.legal[j]);
    return blocks_.add({bm, bn, bk, k_iter}, std::move(rows));
}

Table MmStagings::derive(const Key& key) {
    // the block's undominated rows whose steps are within the iteration counts, in the
    // implementation class asked; template order
    const int64_t m_iter = key[3], n_iter = key[4], k_iter = key[5];
    const bool split_k = key[6] != 0;
    const Resolved& r = resolve(key[2], k_iter);
    const std::vector<int32_t>& rows = block(key[0], key[1], key[2], k_iter);
    Table out;
    for (int32_t i : rows) {
        const int64_t* t = &t_[size_t(i) * NS];
        if (t[2] > m_iter || t[3] > n_iter) continue;
        const int64_t ska = r.ska[size_t(i)], skb = r.skb[size_t(i)];
        if (impl_ >= 0) {  // `matmul_impl_class` of the row
            int cls = 3;
            if (!split_k) {
                const bool a_res = t[2] >= m_iter && ska >= k_iter, b_res = t[3] >= n_iter && skb >= k_iter;
                cls = a_res ? 1 : (b_res ? 2 : 0);
            }
            if (cls != impl_) continue;
        }
        out.insert(out.end(), {ska, skb, t[2], t[3], t[4], t[2] * ska * (1 + t[5]), t[3] * skb * (1 + t[6])});
    }
    return out;
}

const Table& MmStagings::stagings(const Key& k) {
    const Table* t = classes_.find(k);
    return t ? *t : classes_.add(k, derive(k));
}

int64_t MmStagings::l2_variants(int64_t mb, int64_t nb) const {
    if (!d_.l2) return 1;
    int64_t v = 1;
    for (const auto& c : L2_CUTS) v += 2 * (c[0] <= mb && c[1] <= nb);
    return v;
}

MmStagings::Plan MmStagings::plan(const int64_t* outer, int64_t n, bool tiled) {
    Plan p;
    p.tiled = tiled;
    p.idx = mm_first_of_each(outer, 0, n);
    for (int64_t i : p.idx) {
        const int64_t* row = outer + i * MM_NF;
        const Table& st = stagings(key(row));
        p.st.push_back(&st);
        p.rows += int64_t(st.size() / NS) *
                  (tiled ? l2_variants(py_cdiv(d_.m, row[F_SM]), py_cdiv(d_.n, row[F_SN])) : 1);
    }
    return p;
}

void MmStagings::tilings(const int64_t* rows, int64_t n, std::vector<int64_t>& out,
                         std::vector<int64_t>& owner) const {
    if (!d_.l2) return;
    for (const auto& c : L2_CUTS)
        for (int64_t ord = 0; ord < 2; ++ord)
            for (int64_t i = 0; i < n; ++i) {
                const int64_t* b = rows + i * MM_NF;
                // the blocks per core of the untiled row (what its L2 tile counts cut)
                const int64_t mb = py_cdiv(d_.m, b[F_SM]), nb = py_cdiv(d_.n, b[F_SN]);
                if (!(c[0] <= mb && c[1] <= nb)) continue;
                const size_t at = out.size();
                out.insert(out.end(), b, b + MM_NF);
                const int64_t blm = py_cdiv(mb, c[0]), bln = py_cdiv(nb, c[1]);
                out[at + F_TILE] = 1;
                out[at + F_L2MB] = blm, out[at + F_L2NB] = bln;
                out[at + F_L2MC] = py_cdiv(mb, blm), out[at + F_L2NC] = py_cdiv(nb, bln);
                out[at + F_L2ORD] = ord;
                owner.push_back(i);
            }
}

void MmStagings::write(const int64_t* outer, const Plan& p, int64_t* out) const {
    static const int cols[NS] = {F_SKA, F_SKB, F_STM, F_STN, F_ORD, F_DA, F_DB};
    int64_t* at = out;
    for (size_t j = 0; j < p.idx.size(); ++j) {
        const int64_t* row = outer + p.idx[j] * MM_NF;
        const Table& st = *p.st[j];
        const int64_t mb = py_cdiv(d_.m, row[F_SM]), nb = py_cdiv(d_.n, row[F_SN]);
        for (size_t s = 0; s < st.size(); s += NS, at += MM_NF) {
            std::copy(row, row + MM_NF, at);
            for (int c = 0; c < NS; ++c) at[cols[c]] = st[s + size_t(c)];
            at[F_TILE] = 0;
            at[F_L2MC] = at[F_L2NC] = 1;
            at[F_L2MB] = mb, at[F_L2NB] = nb;
            at[F_L2ORD] = 0;
        }
    }
    if (!d_.l2 || !p.tiled) return;
    const int64_t* plain_end = at;
    for (const auto& c : L2_CUTS)
        for (int64_t ord = 0; ord < 2; ++ord)
            for (const int64_t* b = out; b < plain_end; b += MM_NF) {
                const int64_t mb = b[F_L2MB], nb = b[F_L2NB];
                if (!(c[0] <= mb && c[1] <= nb)) continue;
                std::copy(b, b + MM_NF, at);
                const int64_t blm = py_cdiv(mb, c[0]), bln = py_cdiv(nb, c[1]);
                at[F_TILE] = 1;
                at[F_L2MB] = blm, at[F_L2NB] = bln;
                at[F_L2MC] = py_cdiv(mb, blm), at[F_L2NC] = py_cdiv(nb, bln);
                at[F_L2ORD] = ord;
                at += MM_NF;
            }
}

int64_t MmStagings::count(const int64_t* outer, int64_t n, int64_t limit) {
    const std::vector<int64_t> idx = mm_first_of_each(outer, 0, n);
    int64_t total = 0;
    for (size_t lo = 0; lo < idx.size(); lo += 2048) {
        const size_t hi = std::min(idx.size(), lo + 2048);
        for (size_t j = lo; j < hi; ++j) {
            const int64_t* row = outer + idx[j] * MM_NF;
            total += int64_t(stagings(key(row)).size() / NS) *
                     l2_variants(py_cdiv(d_.m, row[F_SM]), py_cdiv(d_.n, row[F_SN]));
        }
        if (limit >= 0 && total > limit) break;
    }
    return total;
}

}  // namespace space
}  // namespace aoesim
