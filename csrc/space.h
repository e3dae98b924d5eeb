// OPAT Schedule spaces, natively: the outer choices of a Cube operator (core split, per-core and
// base/L0 blocks, each with one default staging and a lower bound on its time) and the inner
// choices (L1 stagings) of any batch of them. aoe/opat/space.py and inner.py describe the spaces.
// This replaced numpy code, kept as the tests' oracle in tests/opat_space_reference.py and
// opat_inner_reference.py (the names in backquotes below are its functions): the same enumeration,
// in the same order, giving the same integers and the same bits.
//
// Every integer rule is the Python one with Python's floor-division semantics (`py_cdiv`). The
// floating-point ones (lower bounds, a convolution's L1 bytes) follow the Python's operation order
// term by term and are compiled with -ffp-contract=off (CMakeLists.txt), so they round as numpy does.
#pragma once

#include <array>
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "sim.h"

namespace aoesim {
namespace space {

// Python's a // b and -(-a // b) on int64 (the divisor never zero here).
inline int64_t py_fdiv(int64_t a, int64_t b) {
    const int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int64_t py_cdiv(int64_t a, int64_t b) { return -py_fdiv(-a, b); }
inline int64_t py_align(int64_t a, int64_t b) { return py_cdiv(a, b) * b; }

// Powers of two from `start` up to `limit`, or just `start` when it is above it (`_pow2`).
std::vector<int64_t> pow2_upto(int64_t limit, int64_t start);
// Block sizes of one dimension: powers of two up to the dimension, and the whole (aligned) dimension
// or an even split into 2-4 blocks where it fits `cap`; sorted, distinct (`_block_sizes`).
std::vector<int64_t> block_sizes(int64_t dim, int64_t cap, int64_t align);

// A convolution as the spaces read it. Layout of the Python vector (inner.py `conv_shape`):
constexpr int CONV_SHAPE_LEN = 18;  // dir n c h w cout kh kw sh sw ea eo g ho wo ekh ekw bias
struct ConvShape {
    int dir = 0;  // 0 forward, 1 dX (BackpropInput), 2 dW (BackpropFilter)
    int64_t n, c, h, w, cout, kh, kw, sh, sw, ea, eo, g, ho, wo, ekh, ekw;
    bool bias = false;
    // derived: C0, per-group channels, window, the output the Cube computes and its K
    int64_t c0, cin_g, co_g, khw, win, out_h, out_w, out_c, k_al, c1_total;
    int64_t co16, k_whole;  // dW: Cout 16-aligned; else the K panel in whole windows
    bool filt() const { return dir == 2; }
    bool dx() const { return dir == 1; }
};
ConvShape conv_shape(const int64_t* v, int64_t len);  // throws std::invalid_argument when malformed

// A matmul as the spaces read it. Layout of the Python vector (inner.py `matmul_shape`):
constexpr int MM_SHAPE_LEN = 12;  // m n k batch_a batch_b ea eo a_nz b_nz c_nz bias l2_tiling
struct MmShape {
    int64_t m, n, k, batch_a, batch_b, ea, eo;
    bool a_nz, b_nz, c_nz, bias;
    bool l2;  // operands beyond half of L2: the L2 tiling variants are part of the space
};
MmShape mm_shape(const int64_t* v, int64_t len);

// A Cube problem in matmul terms for the outer lower bound (`cube_bound`'s `prob`).
struct CubeProb {
    int64_t M, N, K, batch_a, batch_b, ea, eo;
    bool a_nz, b_nz, c_nz, bias, a_mem, b_mem;
    double a_mte1_eff, b_mte1_eff;
};
// The terms of `cube_bound` that the core split and the per-core block fix (shared by every base
// block of that split: computed once, with the operations numpy did, then reused as they are).
struct CubeSplit {
    int64_t t_m, t_n, t_k, a_m;
    double waves, fractals, out_e, fix_pre, l0a, l0b, t2_floor;
};
CubeSplit cube_split(const SoC& s, const CubeProb& p, int64_t uc, int64_t s_m, int64_t s_n, int64_t s_k);
// Lower bound (µs) of one Cube outer choice in matmul terms (`cube_bound`, one row).
double cube_block_bound(const SoC& s, const CubeProb& p, const CubeSplit& c, int64_t b_m, int64_t b_n,
                        int64_t b_k);
// numpy's maximum / minimum (a NaN wins, as there)
inline double np_max(double a, double b) { return (a >= b || a != a) ? a : b; }
inline double np_min(double a, double b) { return (a <= b || a != a) ? a : b; }
// The same given the block's iteration counts (per-core extent over block, rounded up). Inline: a
// loop over blocks overlaps the divisions of consecutive ones (only the -ffp-contract=off files
// use it).
inline double cube_its_bound(const SoC& s, const CubeProb& p, const CubeSplit& c, int64_t b_m, int64_t b_n,
                             int64_t m_it, int64_t n_it, int64_t k_it) {
    const double blocks = double(m_it * n_it * k_it);
    const double cube = c.fractals + s.mmad_overhead_cycles * blocks;
    const double run_c = p.c_nz ? double(std::min(b_m, c.a_m)) * 32.0 : double(std::min(b_n, c.t_n)) * c.out_e;
    const double fix = c.fix_pre * (run_c + s.dma_overhead_bytes) / run_c;
    const double t1 = k_it == 1 ? np_min(c.l0a + c.l0b * double(m_it), c.l0a * double(n_it) + c.l0b)
                                : c.l0a * double(n_it) + c.l0b * double(m_it);
    const double scalar = (s.scalar_task_cycles + 2 * s.scalar_chunk_cycles) + s.scalar_iter_cycles * blocks;
    double busy = np_max(np_max(cube, t1), np_max(fix, scalar));
    busy = np_max(busy, c.t2_floor);
    const double task = busy + s.dma_latency_cycles + t1 / blocks + fix / double(m_it * n_it);
    return s.launch_us + c.waves * task / s.freq_mhz;
}

// A convolution in matmul terms (`conv_bound`: the simulator's img2col) and one core
// split's terms (fields batchDim, hoDim, nDim, groupDim).
CubeProb conv_prob(const ConvShape& d);
CubeSplit conv_split(const SoC& s, const ConvShape& d, const CubeProb& p, int64_t bd, int64_t hd, int64_t nd,
                     int64_t gd);
CubeProb matmul_prob(const MmShape& d);

// Distinct effective conv core splits (g, batch, rows, channel units) within 2x the least work per
// core, in the Python's order (space.py `_conv_splits`): 4 values per split.
std::vector<int64_t> conv_splits(int cores, int64_t g, int64_t n, int64_t out_h, int64_t n_units);

constexpr int CONV_NF = 14;  // conv strategy fields (aoe.sim.heuristics.CONV_FIELDS)
constexpr int MM_NF = 23;    // matmul strategy fields (MM_FIELDS)

// Where a space's outer rows go: asked once for room for `n` rows (and `n` bounds), it points
// `rows` and `bound` at it.
using OuterAlloc = std::function<void(int64_t n, int64_t*& rows, double*& bound)>;
// The outer rows of a conv space, each with its default staging in both iterate orders, and one
// lower bound per row (`conv_space`, then `add_seed_outer`). `seed`: CANN's default strategy (14 fields) or
// null; when its outer choice is not among the rows, it is added at the end in both iterate orders,
// with the launch time as its bound (a true but weak one: the beam prices it first).
void conv_outer(const SoC& s, const ConvShape& d, const int64_t* seed, const OuterAlloc& alloc);
// The outer rows of a matmul space, each with CANN's staging in both iterate orders, and one lower
// bound per row (`matmul_space`, then `add_seed_outer`); `seed` (23 fields) as for `conv_outer`.
void matmul_outer(const SoC& s, const MmShape& d, const int64_t* seed, const OuterAlloc& alloc);
// Append `seed` and its other iterate order (field `order_col`) with the launch time as bound.
inline void add_seed(const SoC& s, const int64_t* seed, int nf, int order_col, int64_t* rows, double* bound) {
    std::copy(seed, seed + nf, rows);
    std::copy(seed, seed + nf, rows + nf);
    rows[nf + order_col] = 1 - seed[order_col];
    bound[0] = bound[1] = s.launch_us;
}

using Table = std::vector<int64_t>;  // a class's stagings, NS values each

// A map from a small integer key to values that never move once added, open addressing over a
// power-of-two table: an expander's derived classes (key -> stagings) are looked up once per outer
// row on the expansion's path, and a plan keeps pointers to them.
template <int N, class V>
class FlatMap {
  public:
    using Key = std::array<int64_t, N>;
    const V* find(const Key& k) const {
        if (keys_.empty()) return nullptr;
        for (size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
            const int32_t at = slots_[i];
            if (at < 0) return nullptr;
            if (keys_[size_t(at)] == k) return &values_[size_t(at)];
        }
    }
    const V& add(const Key& k, V v) {
        if (2 * (keys_.size() + 1) > slots_.size()) grow();
        keys_.push_back(k);
        values_.push_back(std::move(v));
        place(k, int32_t(keys_.size() - 1));
        return values_.back();
    }

  private:
    static size_t hash(const Key& k) {
        uint64_t h = 0x9E3779B97F4A7C15ull;
        for (int64_t v : k) h = (h ^ uint64_t(v)) * 0xBF58476D1CE4E5B9ull, h ^= h >> 31;
        return size_t(h);
    }
    void place(const Key& k, int32_t at) {
        size_t i = hash(k) & mask_;
        while (slots_[i] >= 0) i = (i + 1) & mask_;
        slots_[i] = at;
    }
    void grow() {
        slots_.assign(std::max<size_t>(64, 2 * slots_.size()), -1);
        mask_ = slots_.size() - 1;
        for (size_t i = 0; i < keys_.size(); ++i) place(keys_[i], int32_t(i));
    }
    std::vector<Key> keys_;
    std::deque<V> values_;
    std::vector<int32_t> slots_;
    size_t mask_ = 0;
};
template <int N>
using ClassTable = FlatMap<N, Table>;

// The L1 stagings of conv outer rows (`ConvExpander`), each class's derived once.
class ConvStagings {
  public:
    using Key = std::array<int64_t, 6>;  // hoL0, rows per core, kL0, nDim (dW) or 0, woL0, nL0
    static constexpr int NS = 5;         // hoL1, kAL1, kBL1, pBufferFlag, iterateMNOrder
    ConvStagings(const ConvShape& d, int64_t l1) : d_(d), l1_(l1) {
        for (int64_t hd = 1; hd <= 64; ++hd) ho_core_[hd] = py_cdiv(d.out_h, hd);
    }
    Key key(const int64_t* row) const;
    void check(const Key& k) const;  // throws std::invalid_argument for a key no outer row has
    // the legal stagings of a class, in the expansion's order
    const Table& stagings(const Key& k);
    // L1 bytes of a staging (hoL1, kAL1, kBL1, L1 ping-pong of A, of B) of one class, as the
    // simulator counts them (`conv_l1_bytes`): the A part (it depends on hoL1 and kAL1
    // only), the B part (hoL1, kBL1) and the bias (kBL1)
    double l1_a(const Key& k, int64_t ho_l1, int64_t ka, int64_t db_a) const;
    double l1_b(const Key& k, int64_t ho_l1, int64_t kb, int64_t db_b) const;
    double l1_bias(const Key& k, int64_t kb) const;
    // the stagings of each of `n` outer rows appended to `plan` (entries stay valid while this
    // object lives); returns how many rows they expand to
    int64_t plan(const int64_t* outer, int64_t n, std::vector<const Table*>& plan);
    // write `n` outer rows, each once per staging of its plan entry (from plan[0]), to `out`
    static void write(const int64_t* outer, int64_t n, const Table* const* plan, int64_t* out);

  private:
    // A few distinct values, sorted (a class's candidate multiples and chunks: at most 8 each).
    struct Few {
        int64_t v[8];
        int n = 0;
        void add(int64_t x) {
            int i = n;
            for (int j = 0; j < n; ++j)
                if (v[j] == x) return;
            while (i > 0 && v[i - 1] > x) v[i] = v[i - 1], --i;
            v[i] = x;
            ++n;
        }
        const int64_t* begin() const { return v; }
        const int64_t* end() const { return v + n; }
    };
    // A class's candidates (hoL1 multiples, A's and B's K chunks) and A's L1 bytes of each (hoL1
    // multiple, A chunk): shared by the classes that differ in nL0 only
    struct APart {
        Few hm, ka, kb;
        double a1[8][8];
    };
    const APart& a_part(const Key& k);
    Table derive(const Key& k);
    ConvShape d_;
    int64_t l1_;
    ClassTable<6> classes_;
    FlatMap<5, APart> a_parts_;
    int64_t ho_core_[65];  // rows per core of each hoDim up to 64
};

// The L1 stagings of matmul outer rows (`MatmulExpander`), from the staging template
// (stagings.py `MM_INNER`: step K of A and B coded 0 = whole panel, -1 = 256-element chunks, step M,
// step N, iterate order, L1 ping-pong of A and B) and its ping-pong upgrades (`UP_A`, `UP_B`).
class MmStagings {
  public:
    using Key = std::array<int64_t, 7>;  // baseM, baseN, baseK, mIter, nIter (capped), kIter, split-K
    static constexpr int NS = 7;         // stepKa, stepKb, stepM, stepN, iterateOrder, depthA1, depthB1
    MmStagings(const MmShape& d, int64_t l1, std::vector<int64_t> tmpl, std::vector<int64_t> up_a,
               std::vector<int64_t> up_b, int impl);
    Key key(const int64_t* row) const;
    void check(const Key& k) const;  // throws std::invalid_argument for a key no outer row has
    const Table& stagings(const Key& k);
    // The expansion of some outer rows: the first row of each distinct outer shape, its stagings,
    // and how many rows they give with the L2 tilings.
    struct Plan {
        std::vector<int64_t> idx;
        std::vector<const Table*> st;
        int64_t rows = 0;
        bool tiled = true;  // the L2 tiling variants are part of the expansion (when the space has them)
    };
    // `tiled = false`: the untiled stagings only (a search that prices tilings apart asks for them)
    Plan plan(const int64_t* outer, int64_t n, bool tiled = true);
    // write a plan's rows to `out`: the plain rows, then the L2 tiling variants (cut by cut, order by
    // order, each over every plain row) when the space has them and the plan is tiled
    void write(const int64_t* outer, const Plan& p, int64_t* out) const;
    // the L2 tiling variants of `n` untiled rows, in `write`'s order, and the row each comes from
    void tilings(const int64_t* rows, int64_t n, std::vector<int64_t>& out, std::vector<int64_t>& owner) const;
    // how many rows the distinct outer shapes among `n` rows expand to, stopping after the 2048
    // distinct rows that pass `limit` (when >= 0)
    int64_t count(const int64_t* outer, int64_t n, int64_t limit);
    int64_t l2_variants(int64_t mb, int64_t nb) const;

  private:
    // the template resolved for one K block and K-iteration count: legal rows (on the K side) and
    // each row's K steps
    struct Resolved {
        std::vector<int32_t> legal;
        std::vector<int64_t> ska, skb;  // per template row
        // per legal row: L1 depths in blocks, N step, and the legal position of its ping-pong
        // upgrade of A (of B), or -1 (already on, or not legal)
        std::vector<int64_t> da, db, step_n;
        std::vector<int32_t> up_a, up_b;
    };
    const Resolved& resolve(int64_t bk, int64_t k_iter);
    const std::vector<int32_t>& block(int64_t bm, int64_t bn, int64_t bk, int64_t k_iter);
    Table derive(const Key& k);
    MmShape d_;
    int64_t l1_;
    std::vector<int64_t> t_, up_a_, up_b_;
    int64_t step_max_;
    int impl_;  // -1: every staging; else only matmul implementation class `impl_`
    ClassTable<7> classes_;
    FlatMap<2, Resolved> resolved_;
    FlatMap<4, std::vector<int32_t>> blocks_;
    std::vector<char> fit_;  // scratch of `block`, per legal row
};

// A matmul strategy's implementation class (`matmul_impl_class`): 0 standard, 1 A resident
// in L1, 2 B resident, 3 split-K; `mnk`: M, N, K.
int matmul_impl_class(const int64_t* mnk, const int64_t* row);
// Move a matmul outer row's default staging into implementation class 1 or 2 (`_mm_restage`): the
// resident operand's whole block and K panel in L1, the other streamed one block and one K step at
// a time; L1 ping-pong of both where it fits `l1`. Other classes: unchanged.
void matmul_restage(const int64_t* mnk, int64_t ea, int64_t l1, int cls, int64_t* row);
// `matmul_impl_class` of a row as `matmul_restage` would leave it (only the steps it sets matter).
int matmul_restaged_class(const int64_t* mnk, int cls, const int64_t* row);

// Indices of the first row of each distinct outer shape among rows [lo, hi) of `outer` (matmul: the
// 7 fields that identify an outer choice), in order.
std::vector<int64_t> mm_first_of_each(const int64_t* outer, int64_t lo, int64_t hi);

}  // namespace space
}  // namespace aoesim
