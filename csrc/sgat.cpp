// The fusion-plan evaluator of subgraph tuning (aoe/sgat/evaluator.py describes the cost model).
//
// Many plans of one subgraph per call, from the per-operator prices the simulator gave once. The
// arithmetic is written in the order of the model's formulas and this file is compiled with
// -ffp-contract=off (CMakeLists.txt): a * b + c is never fused into one rounding, so every plan costs
// the same bits on every machine. `min`/`max` follow Python's rule (the first argument unless the
// second compares strictly beyond it), which fixes how a NaN or a tie is resolved. A division by zero
// (only possible with broken input: a zero byte count, core count or bandwidth) raises Python's
// ZeroDivisionError instead of producing inf or NaN.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace py = pybind11;

namespace {

// Array layout, the same numbers as aoe/sgat/evaluator.py (which checks them against sgat_layout()).
enum Opf { T, C, M, R, BYTES, CUBE, EMAIN, ROW, RED, OUTB, CROWS, CRUN, N_OPF };
enum Edgef { READB, BARRIER, MINTILE, HALO, N_EDGEF };
enum Socp {
    S_LAUNCH, S_HBM_BPUS, S_L2_BPUS, S_UB, S_L0C, S_L1, S_L2CAP, S_TILE_US, S_SEPARATED, S_HANDOFF_US,
    S_CUBE_CORES, S_VEC_CORES, S_INSTR_US, S_LAT_US, N_SOCP
};
constexpr int64_t N_SPLITS = 2;
constexpr int64_t N_TILES = 8;
constexpr int64_t TILE_BASE = 512;
constexpr int64_t MAX_KERNELS = 16;  // op bitmasks live in one int64; the partition caps subgraphs at 8
constexpr double CUBE_REF_TILE = 16384.0;
constexpr double UB_TMP = 1.25;
constexpr double DMA_OVERHEAD = 64.0;
constexpr double UB_ALIGN = 32.0;
const double INF = std::numeric_limits<double>::infinity();

struct ZeroDivision : std::domain_error {
    ZeroDivision() : std::domain_error("division by zero") {}
};

inline double pymax(double a, double b) { return b > a ? b : a; }
inline double pymin(double a, double b) { return b < a ? b : a; }
// A quotient whose divisor comes from the input arrays and could be zero.
inline double qdiv(double a, double b) {
    if (b == 0.0) throw ZeroDivision();
    return a / b;
}
inline bool has(int64_t mask, int64_t i) { return (mask >> i) & 1; }

// One subgraph's cost data, copied out of the numpy arrays (a few hundred bytes) so that the loop
// runs without the GIL and nothing another thread does to those arrays can move an index.
struct Region {
    int64_t n = 0, ne = 0, nt = 0;
    std::vector<int64_t> edges, tens, reach, anc;
    std::vector<double> opf, edgef, tensf, socp;

    int64_t src(int64_t e) const { return edges[2 * e]; }
    int64_t dst(int64_t e) const { return edges[2 * e + 1]; }
    double op(int64_t i, int f) const { return opf[i * N_OPF + f]; }
    double ed(int64_t e, int f) const { return edgef[e * N_EDGEF + f]; }
};

// Time (µs) of the kernel holding the ops of bitmask K; inf when it cannot be built.
double kernel_cost(const Region& g, int64_t K, int64_t split, int64_t tile, int64_t l2) {
    const int64_t n = g.n, ne = g.ne;
    const double* sp = g.socp.data();
    const double hbm = sp[S_HBM_BPUS];
    const double ratio = qdiv(hbm, sp[S_L2_BPUS]);
    int64_t cnt = 0, only = -1;
    for (int64_t i = 0; i < n; ++i) {
        if (has(K, i)) {
            ++cnt;
            only = i;
        }
    }
    if (cnt == 1) {
        const int64_t i = only;
        double saved = 0.0;
        if (l2 == 1) {
            for (int64_t e = 0; e < ne; ++e)
                if (g.dst(e) == i) saved += g.ed(e, READB) * (1.0 - ratio);
        }
        const double frac = pymin(1.0, qdiv(saved, g.op(i, BYTES)));
        const double c = g.op(i, C), m = g.op(i, M);
        return g.op(i, T) - (pymax(c, m) - pymax(c, m * (1.0 - frac)));
    }
    const bool sep = sp[S_SEPARATED] > 0.5;
    const double tile_el = double(TILE_BASE << tile);  // > 0: plain divisions by it below
    double emax = 1.0;  // >= 1 (max never takes a NaN second argument): plain divisions by it
    bool has_cube = false;
    for (int64_t i = 0; i < n; ++i) {
        if (has(K, i)) {
            emax = pymax(emax, g.op(i, EMAIN));
            if (g.op(i, CUBE) > 0.5) has_cube = true;
        }
    }
    const double cores = has_cube ? sp[S_CUBE_CORES] : sp[S_VEC_CORES];
    double used = std::ceil(emax / tile_el);
    if (used > cores) used = cores;
    const double ntiles = std::ceil(qdiv(emax, tile_el * cores));
    double cols_in_tile = 0.0;
    if (split == 1) {
        // whole columns per tile: the longest column (in main-tensor elements) must fit
        double need = 0.0;
        for (int64_t i = 0; i < n; ++i)
            if (has(K, i)) need = pymax(need, qdiv(g.op(i, CROWS) * emax, g.op(i, EMAIN)));
        if (tile_el < need) return INF;
        cols_in_tile = std::floor(qdiv(tile_el, need));
    }
    double pen = 1.0;
    if (tile_el < CUBE_REF_TILE) pen = std::pow(CUBE_REF_TILE / tile_el, 0.3);
    double ccube = 0.0, cvec = 0.0, mem = 0.0, rsum = 0.0, rmax = 0.0, extra = 0.0, ub_el = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        if (!has(K, i)) continue;
        double saved = 0.0;
        for (int64_t e = 0; e < ne; ++e) {
            if (g.dst(e) != i) continue;
            const int64_t s = g.src(e);
            if (has(K, s)) {
                if (g.ed(e, BARRIER) > 0.5 && split == 0) return INF;
                if (sep && g.op(s, CUBE) > 0.5 && g.op(i, CUBE) < 0.5) {
                    saved += g.ed(e, READB) * (1.0 - ratio);
                    extra += sp[S_HANDOFF_US];
                } else {
                    saved += g.ed(e, READB);
                }
                if (g.op(i, CUBE) > 0.5) {
                    // the Cube reads its operand from L1: whole K panels / kh rows, halo recomputed
                    if (tile_el < g.ed(e, MINTILE)) return INF;
                    if (qdiv(tile_el * g.ed(e, READB), g.op(s, EMAIN)) * 2.0 > sp[S_L1]) return INF;
                    cvec += g.op(s, C) * g.ed(e, HALO) / tile_el;
                }
            } else if (l2 == 1) {
                saved += g.ed(e, READB) * (1.0 - ratio);
            }
        }
        for (int64_t t = 0; t < g.nt; ++t) {
            if (g.tens[2 * t] != i) continue;
            if (g.tensf[2 * t + 1] < 0.5 && (g.tens[2 * t + 1] & ~K) == 0) {
                if (sep && g.op(i, CUBE) > 0.5) saved += g.tensf[2 * t] * (1.0 - ratio);
                else saved += g.tensf[2 * t];
            }
        }
        const double frac = pymin(1.0, qdiv(saved, g.op(i, BYTES)));
        if (split == 0) {
            mem += g.op(i, M) * (1.0 - frac);
            // partial results of every core are accumulated atomically (read + write)
            if (g.op(i, RED) > 0.5) mem += qdiv(g.op(i, OUTB) * used * 2.0, hbm);
            if (g.op(i, ROW) > 0.0 && tile_el < qdiv(g.op(i, ROW) * emax, g.op(i, EMAIN))) return INF;
        } else {
            if (g.op(i, ROW) > 0.0) return INF;
            const double run = cols_in_tile * g.op(i, CRUN);
            // UB tiles are 32-byte aligned: a narrower column block cannot be moved
            if (run < UB_ALIGN) return INF;
            mem += qdiv(g.op(i, M) * (1.0 - frac) * (run + DMA_OVERHEAD), run);
        }
        if (g.op(i, CUBE) > 0.5) {
            ccube += g.op(i, C) * pen;
        } else {
            cvec += g.op(i, C);
            // its share of a tile: every input and output it touches
            ub_el += g.op(i, BYTES) / emax;
        }
        rsum += g.op(i, R);
        rmax = pymax(rmax, g.op(i, R));
    }
    const double ub_need = tile_el * ub_el * UB_TMP;
    const double l0c_need = has_cube ? tile_el * 4.0 : 0.0;
    if (ub_need > sp[S_UB] || l0c_need > sp[S_L0C]) return INF;
    const bool db = ub_need * 2.0 <= sp[S_UB] && l0c_need * 2.0 <= sp[S_L0C];
    const double scale = qdiv(cores, used);  // idle cores: the same compute on fewer of them
    const double comp = pymax(ccube, cvec) * scale;
    // the Scalar unit sets up every tile (a pipe of its own: it overlaps when double-buffered)
    const double over = ntiles * (sp[S_TILE_US] + sp[S_INSTR_US] * double(cnt));
    const double body = db ? pymax(pymax(comp, mem), over) : comp + mem + over + ntiles * sp[S_LAT_US];
    return sp[S_LAUNCH] + body + rmax + 0.25 * (rsum - rmax) + extra;
}

// The kernels of a plan: each op labelled with the smallest op index of its component over the fused
// edges among the first `ne` of `edges` (pairs of op indices); a fixpoint, so every edge order agrees.
void label_kernels(const int64_t* row, const int64_t* edges, int64_t ne, int64_t n, int64_t* label) {
    for (int64_t i = 0; i < n; ++i) label[i] = i;
    bool changed = true;
    while (changed) {
        changed = false;
        for (int64_t e = 0; e < ne; ++e) {
            if (row[e] != 1) continue;
            const int64_t s = edges[2 * e], d = edges[2 * e + 1];
            if (label[s] != label[d]) {
                label[s] = label[d] = label[s] < label[d] ? label[s] : label[d];
                changed = true;
            }
        }
    }
}

// Times of `count` plans (rows of ne + 3 ints) into out.
void evaluate_plans(const Region& g, const int64_t* plans, int64_t count, double* out) {
    const int64_t n = g.n, ne = g.ne, width = ne + 3;
    std::vector<int64_t> row(width), label(n), kmask(n), rank(n), kdep(n);
    std::vector<double> live(n + 1);
    for (int64_t p = 0; p < count; ++p) {
        // one read of the row: the plan cannot change under the checks below
        std::memcpy(row.data(), plans + p * width, sizeof(int64_t) * width);
        bool ok = true;
        for (int64_t e = 0; e < ne; ++e)
            if (row[e] < 0 || row[e] > 1) ok = false;
        const int64_t split = row[ne], tile = row[ne + 1], l2 = row[ne + 2];
        if (split < 0 || split >= N_SPLITS || tile < 0 || tile >= N_TILES || l2 < 0 || l2 > 1 || !ok) {
            out[p] = INF;
            continue;
        }
        // kernels = components of the fused edges (label = smallest op index)
        label_kernels(row.data(), g.edges.data(), ne, n, label.data());
        for (int64_t e = 0; e < ne; ++e)
            if (row[e] == 0 && label[g.src(e)] == label[g.dst(e)]) ok = false;
        if (!ok) {
            out[p] = INF;
            continue;
        }
        for (int64_t i = 0; i < n; ++i) kmask[i] = 0;
        for (int64_t i = 0; i < n; ++i) kmask[label[i]] |= int64_t(1) << i;
        double total = 0.0;
        int64_t r = 0;
        for (int64_t k = 0; k < n; ++k) {
            const int64_t K = kmask[k];
            if (K == 0) continue;
            ++r;
            int64_t desc = 0, an = 0;
            for (int64_t i = 0; i < n; ++i) {
                if (has(K, i)) {
                    desc |= g.reach[i];
                    an |= g.anc[i];
                }
            }
            if ((desc & an) & ~K) {  // a path leaves the kernel and comes back: not convex
                ok = false;
                break;
            }
            total += kernel_cost(g, K, split, tile, l2);
        }
        if (!ok) {
            out[p] = INF;
            continue;
        }
        if (l2 == 1 && total < INF) {
            // execution order of the kernels: a topological order of the kernel graph
            const int64_t nk = r;
            for (int64_t k = 0; k < n; ++k) kdep[k] = 0;
            for (int64_t e = 0; e < ne; ++e) {
                const int64_t a = label[g.src(e)], b = label[g.dst(e)];
                if (a != b) kdep[b] |= int64_t(1) << a;
            }
            int64_t done = 0;
            r = 0;
            while (r < nk) {
                int64_t k = 0;
                while (k < n && !(kmask[k] != 0 && !has(done, k) && (kdep[k] & ~done) == 0)) ++k;
                // convex kernels of a DAG always leave one ready: none means reach/anc contradict the edges
                if (k == n) throw std::invalid_argument("sgat evaluator: the kernels of a plan form a cycle "
                                                        "(reach/anc disagree with edges)");
                rank[k] = r++;
                done |= int64_t(1) << k;
            }
            for (int64_t s = 0; s <= r; ++s) live[s] = 0.0;
            for (int64_t t = 0; t < g.nt; ++t) {
                const int64_t pk = label[g.tens[2 * t]];
                int64_t end = -1;
                for (int64_t i = 0; i < n; ++i) {
                    if (has(g.tens[2 * t + 1], i) && label[i] != pk) {
                        const int64_t ri = rank[label[i]];
                        if (ri > end) end = ri;
                    }
                }
                if (end > rank[pk])
                    for (int64_t s = rank[pk]; s < end; ++s) live[s] += g.tensf[2 * t];
            }
            for (int64_t s = 0; s < r; ++s)
                if (live[s] > g.socp[S_L2CAP]) total = INF;
        }
        out[p] = total;
    }
}

// Fill edges k.. of each plan (rows of `width` ints): fused iff its ends are already in one kernel.
void complete_plans(int64_t* plans, int64_t count, int64_t width, int64_t k, const int64_t* edges, int64_t ne,
                    int64_t n) {
    std::vector<int64_t> label(n);
    for (int64_t p = 0; p < count; ++p) {
        int64_t* row = plans + p * width;
        label_kernels(row, edges, k, n, label.data());
        for (int64_t e = k; e < ne; ++e) row[e] = label[edges[2 * e]] == label[edges[2 * e + 1]] ? 1 : 0;
    }
}

// ---- argument checking --------------------------------------------------------------------------

std::string shape_str(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t d = 0; d < a.ndim(); ++d) s += (d ? ", " : "") + std::to_string(a.shape(d));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

// The array's data as T, after checking dtype, shape (-1 = any length on that axis) and C order.
template <class T>
const T* checked(const py::array& a, const char* name, std::initializer_list<int64_t> shape) {
    const std::string what = std::string("sgat evaluator: ") + name;
    if (!py::isinstance<py::array_t<T>>(a))
        throw py::type_error(what + " must be a numpy array of " +
                             (std::is_same<T, double>::value ? "float64" : "int64") + ", got " +
                             std::string(py::str(a.dtype())));
    bool ok = a.ndim() == py::ssize_t(shape.size());
    int d = 0;
    for (int64_t s : shape) {
        if (ok && s >= 0 && a.shape(d) != s) ok = false;
        ++d;
    }
    if (!ok) {
        std::string want = "(";
        d = 0;
        for (int64_t s : shape) want += (d++ ? ", " : "") + (s < 0 ? std::string("?") : std::to_string(s));
        throw py::value_error(what + " must have shape " + want + (shape.size() == 1 ? ",)" : ")") + ", got " +
                              shape_str(a));
    }
    if (!(a.flags() & py::array::c_style)) throw py::value_error(what + " must be C-contiguous");
    return static_cast<const T*>(a.data());
}

template <class T>
std::vector<T> copied(const T* p, int64_t count) {
    return std::vector<T>(p, p + count);
}

void check_index(const std::vector<int64_t>& v, int64_t stride, int64_t cols, int64_t n, const char* what) {
    for (size_t j = 0; j < v.size(); j += stride)
        for (int64_t c = 0; c < cols; ++c)
            if (v[j + c] < 0 || v[j + c] >= n)
                throw py::value_error(std::string("sgat evaluator: ") + what + " " + std::to_string(v[j + c]) +
                                      " is not an operator index (0.." + std::to_string(n - 1) + ")");
}

// The checked copy of a subgraph's arrays; reach/anc only when given (kernel_costs needs none).
Region region(const py::array& edges, const py::array& opf, const py::array& edgef, const py::array& tens,
              const py::array& tensf, const py::array* reach, const py::array* anc, const py::array& socp) {
    Region g;
    const double* o = checked<double>(opf, "opf", {-1, N_OPF});
    g.n = opf.shape(0);
    if (g.n > MAX_KERNELS)
        throw py::value_error("sgat evaluator: " + std::to_string(g.n) + " operators exceed the limit of " +
                              std::to_string(MAX_KERNELS));
    const int64_t* ep = checked<int64_t>(edges, "edges", {-1, 2});
    g.ne = edges.shape(0);
    const double* ef = checked<double>(edgef, "edgef", {g.ne, N_EDGEF});
    const int64_t* tp = checked<int64_t>(tens, "tens", {-1, 2});
    g.nt = tens.shape(0);
    const double* tf = checked<double>(tensf, "tensf", {g.nt, 2});
    const double* sp = checked<double>(socp, "socp", {N_SOCP});
    g.opf = copied(o, g.n * N_OPF);
    g.edges = copied(ep, g.ne * 2);
    g.edgef = copied(ef, g.ne * N_EDGEF);
    g.tens = copied(tp, g.nt * 2);
    g.tensf = copied(tf, g.nt * 2);
    g.socp = copied(sp, int64_t(N_SOCP));
    if (reach) g.reach = copied(checked<int64_t>(*reach, "reach", {g.n}), g.n);
    if (anc) g.anc = copied(checked<int64_t>(*anc, "anc", {g.n}), g.n);
    check_index(g.edges, 2, 2, g.n, "edge end");
    check_index(g.tens, 2, 1, g.n, "tensor producer");
    return g;
}

// Runs body() without the GIL; a division by zero leaves as Python's ZeroDivisionError.
template <class F>
void nogil(F body) {
    try {
        py::gil_scoped_release release;
        body();
    } catch (const ZeroDivision& e) {
        PyErr_SetString(PyExc_ZeroDivisionError, e.what());
        throw py::error_already_set();
    }
}

py::array_t<double> sgat_evaluate(const py::array& plans, const py::array& edges, const py::array& opf,
                                  const py::array& edgef, const py::array& tens, const py::array& tensf,
                                  const py::array& reach, const py::array& anc, const py::array& socp) {
    const Region g = region(edges, opf, edgef, tens, tensf, &reach, &anc, socp);
    const int64_t* pp = checked<int64_t>(plans, "plans", {-1, g.ne + 3});
    const int64_t count = plans.shape(0);
    py::array_t<double> out(count);
    double* op = out.mutable_data();
    nogil([&] { evaluate_plans(g, pp, count, op); });
    return out;
}

py::array_t<double> sgat_kernel_costs(const py::array& masks, int64_t split, int64_t tile, int64_t l2,
                                      const py::array& edges, const py::array& opf, const py::array& edgef,
                                      const py::array& tens, const py::array& tensf, const py::array& socp) {
    const Region g = region(edges, opf, edgef, tens, tensf, nullptr, nullptr, socp);
    if (split < 0 || split >= N_SPLITS || tile < 0 || tile >= N_TILES || l2 < 0 || l2 > 1)
        throw py::value_error("sgat evaluator: split " + std::to_string(split) + ", tile " + std::to_string(tile) +
                              ", l2 " + std::to_string(l2) + " out of range (0..1, 0..7, 0..1)");
    const int64_t* mp = checked<int64_t>(masks, "masks", {-1});
    const int64_t count = masks.shape(0);
    py::array_t<double> out(count);
    double* op = out.mutable_data();
    nogil([&] {
        for (int64_t j = 0; j < count; ++j) op[j] = kernel_cost(g, mp[j], split, tile, l2);
    });
    return out;
}

void sgat_complete(py::array plans, int64_t k, const py::array& edges, int64_t n) {
    const int64_t* ep = checked<int64_t>(edges, "edges", {-1, 2});
    const int64_t ne = edges.shape(0);
    if (n < 0 || n > MAX_KERNELS)
        throw py::value_error("sgat evaluator: n = " + std::to_string(n) + " operators, not 0.." +
                              std::to_string(MAX_KERNELS));
    const std::vector<int64_t> ev = copied(ep, ne * 2);
    check_index(ev, 2, 2, n, "edge end");
    checked<int64_t>(plans, "plans", {-1, -1});
    const int64_t width = plans.shape(1);
    if (width < ne) throw py::value_error("sgat evaluator: plans are narrower than the edge list");
    if (k < 0 || k > ne) throw py::value_error("sgat evaluator: k must be in 0.." + std::to_string(ne));
    if (!plans.writeable()) throw py::value_error("sgat evaluator: plans must be writeable");
    // short, and it writes into the caller's array: done under the GIL
    complete_plans(static_cast<int64_t*>(plans.mutable_data()), plans.shape(0), width, k, ev.data(), ne, n);
}

py::dict sgat_layout() {
    py::dict d;
    const char* opf[] = {"T", "C", "M", "R", "BYTES", "CUBE", "EMAIN", "ROW", "RED", "OUTB", "CROWS", "CRUN"};
    for (int i = 0; i < N_OPF; ++i) d[opf[i]] = i;
    const char* edgef[] = {"READB", "BARRIER", "MINTILE", "HALO"};
    for (int i = 0; i < N_EDGEF; ++i) d[edgef[i]] = i;
    const char* socp[] = {"S_LAUNCH", "S_HBM_BPUS", "S_L2_BPUS", "S_UB", "S_L0C", "S_L1", "S_L2CAP",
                          "S_TILE_US", "S_SEPARATED", "S_HANDOFF_US", "S_CUBE_CORES", "S_VEC_CORES",
                          "S_INSTR_US", "S_LAT_US"};
    for (int i = 0; i < N_SOCP; ++i) d[socp[i]] = i;
    d["N_OPF"] = int(N_OPF);
    d["N_EDGEF"] = int(N_EDGEF);
    d["N_SOCP"] = int(N_SOCP);
    d["N_SPLITS"] = N_SPLITS;
    d["N_TILES"] = N_TILES;
    d["TILE_BASE"] = TILE_BASE;
    d["MAX_KERNELS"] = MAX_KERNELS;
    d["CUBE_REF_TILE"] = CUBE_REF_TILE;
    d["UB_TMP"] = UB_TMP;
    d["DMA_OVERHEAD"] = DMA_OVERHEAD;
    d["UB_ALIGN"] = UB_ALIGN;
    return d;
}

}  // namespace

void bind_sgat(py::module_& m) {
    m.def("sgat_evaluate", &sgat_evaluate, py::arg("plans"), py::arg("edges"), py::arg("opf"), py::arg("edgef"),
          py::arg("tens"), py::arg("tensf"), py::arg("reach"), py::arg("anc"), py::arg("socp"),
          "SGAT: times (us, inf when invalid) of N fusion plans (N x (E+3) int64) of one subgraph.");
    m.def("sgat_kernel_costs", &sgat_kernel_costs, py::arg("masks"), py::arg("split"), py::arg("tile"),
          py::arg("l2"), py::arg("edges"), py::arg("opf"), py::arg("edgef"), py::arg("tens"), py::arg("tensf"),
          py::arg("socp"), "SGAT: times (us, inf when invalid) of single kernels given as op bitmasks.");
    m.def("sgat_complete", &sgat_complete, py::arg("plans"), py::arg("k"), py::arg("edges"), py::arg("n"),
          "SGAT: in place, set edges k.. of every plan fused iff its ends are already in one kernel.");
    m.def("sgat_layout", &sgat_layout, "SGAT: the evaluator's array columns and constants, by name.");
}
