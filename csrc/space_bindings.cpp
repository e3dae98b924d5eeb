// pybind11 bindings of the native Schedule spaces (space.h): the outer rows of a conv or matmul space
// with their lower bounds, and the stateful staging expanders (each class of outer rows derived once).
// The expanders keep a cache and run with the GIL held, so one object is never used by two threads at
// once; building a space (pure) releases the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>

#include "space.h"

namespace py = pybind11;

namespace aoesim {
namespace space {

namespace {

using I64 = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// A numpy array that owns `v` (no copy).
template <class T>
py::array_t<T> give(std::vector<T>&& v, std::vector<py::ssize_t> shape) {
    if (v.empty()) return py::array_t<T>(shape);
    auto* heap = new std::vector<T>(std::move(v));
    py::capsule owner(heap, [](void* p) { delete static_cast<std::vector<T>*>(p); });
    return py::array_t<T>(shape, heap->data(), owner);
}

// Rows of a 2-D array of `nf` columns (an empty array of any shape is no rows).
int64_t rows_of(const I64& a, int nf, const char* what) {
    if (a.size() == 0) return 0;
    if (a.ndim() != 2 || a.shape(1) != nf)
        throw std::invalid_argument(std::string(what) + " must be a 2-D integer array with " + std::to_string(nf) +
                                    " columns");
    return a.shape(0);
}

const int64_t* vec_of(const I64& a, int64_t len, const char* what) {
    if (a.ndim() != 1 || a.shape(0) != len)
        throw std::invalid_argument(std::string(what) + " must be a 1-D integer array of " + std::to_string(len) +
                                    " values");
    return a.data();
}

std::vector<int64_t> to_vector(const I64& a) { return {a.data(), a.data() + a.size()}; }

// A space's outer rows and bounds as numpy arrays (numpy's allocator: large ones get huge pages),
// built without the GIL; `seed`: an empty array, or CANN's default strategy (`nf` fields).
template <class Build>
py::tuple outer_space(Build build, int nf, const I64& seed) {
    if (seed.size() && (seed.ndim() != 1 || seed.shape(0) != nf))
        throw std::invalid_argument("a seed is one strategy of " + std::to_string(nf) + " fields");
    py::array_t<int64_t> rows;
    py::array_t<double> bound;
    const OuterAlloc alloc = [&](int64_t n, int64_t*& r, double*& b) {
        py::gil_scoped_acquire gil;
        rows = py::array_t<int64_t>({py::ssize_t(n), py::ssize_t(nf)});
        bound = py::array_t<double>(py::ssize_t(n));
        r = rows.mutable_data();
        b = bound.mutable_data();
    };
    {
        py::gil_scoped_release nogil;
        build(seed.size() ? seed.data() : nullptr, alloc);
    }
    return py::make_tuple(rows, bound);
}

// The `keys` and `stagings` methods every staging expander has: the class key of each of `nf`-field
// outer rows (`S::Key`), and one class's stagings (`S::NS` values each).
template <class S>
void bind_classes(py::class_<S>& c, int nf, const char* keys_doc, const char* stagings_doc) {
    c.def(
         "keys",
         [nf](const S& self, const I64& outer) {
             const int64_t n = rows_of(outer, nf, "outer rows");
             std::vector<int64_t> out;
             for (int64_t i = 0; i < n; ++i) {
                 const auto k = self.key(outer.data() + i * nf);
                 out.insert(out.end(), k.begin(), k.end());
             }
             return give(std::move(out), {py::ssize_t(n), py::ssize_t(std::tuple_size<typename S::Key>::value)});
         },
         py::arg("outer"), keys_doc)
        .def(
            "stagings",
            [](S& self, const typename S::Key& key) {
                self.check(key);
                std::vector<int64_t> v = self.stagings(key);
                const auto k = py::ssize_t(v.size() / S::NS);
                return give(std::move(v), {k, S::NS});
            },
            py::arg("key"), stagings_doc);
}

py::array_t<int64_t> group_bounds(const std::vector<int64_t>& rows_per_group) {
    std::vector<int64_t> b(rows_per_group.size() + 1, 0);
    for (size_t i = 0; i < rows_per_group.size(); ++i) b[i + 1] = b[i] + rows_per_group[i];
    const auto n = py::ssize_t(b.size());
    return give(std::move(b), {n});
}

}  // namespace

void bind(py::module_& m) {
    m.def(
        "conv_space",
        [](const SoC& soc, const I64& shape, const I64& seed) {
            const ConvShape d = conv_shape(vec_of(shape, CONV_SHAPE_LEN, "a conv shape"), CONV_SHAPE_LEN);
            return outer_space([&](const int64_t* sd, const OuterAlloc& a) { conv_outer(soc, d, sd, a); }, CONV_NF,
                               seed);
        },
        py::arg("soc"), py::arg("shape"), py::arg("seed") = py::array_t<int64_t>(0),
        "The outer rows of a conv Schedule space (core split x L0 block, in lexicographic order), each "
        "with its default staging in both iterate orders, and each row's lower bound (µs); the seed's "
        "outer choice (CANN's default strategy) added at the end when it is not one of them.");
    m.def(
        "matmul_space",
        [](const SoC& soc, const I64& shape, const I64& seed) {
            const MmShape d = mm_shape(vec_of(shape, MM_SHAPE_LEN, "a matmul shape"), MM_SHAPE_LEN);
            return outer_space([&](const int64_t* sd, const OuterAlloc& a) { matmul_outer(soc, d, sd, a); }, MM_NF,
                               seed);
        },
        py::arg("soc"), py::arg("shape"), py::arg("seed") = py::array_t<int64_t>(0),
        "The outer rows of a matmul Schedule space (base block x per-core block, split-K), each with "
        "CANN's staging in both iterate orders, and each row's lower bound (µs); the seed's outer "
        "choice added at the end when it is not one of them.");
    m.def(
        "matmul_outer_bound",
        [](const SoC& soc, const I64& shape, const I64& outer) {
            const MmShape d = mm_shape(vec_of(shape, MM_SHAPE_LEN, "a matmul shape"), MM_SHAPE_LEN);
            const int64_t n = rows_of(outer, MM_NF, "matmul outer rows");
            const CubeProb prob = matmul_prob(d);
            py::array_t<double> out(n);
            for (int64_t i = 0; i < n; ++i) {
                const int64_t* o = outer.data() + i * MM_NF;
                for (int f = 0; f < 7; ++f)
                    if (o[f] < 1) throw std::invalid_argument("matmul outer rows need positive cores and blocks");
                const CubeSplit c = cube_split(soc, prob, o[0], o[1], o[2], o[3]);
                out.mutable_data()[i] = cube_block_bound(soc, prob, c, o[4], o[5], o[6]);
            }
            return out;
        },
        py::arg("soc"), py::arg("shape"), py::arg("outer"),
        "The lower bound (µs) of each matmul outer row for this matmul's layouts (as `matmul_space` bounds "
        "its own rows): another layout of the same shapes reuses a space's rows, not its bounds.");
    m.def(
        "conv_splits",
        [](int cores, int64_t g, int64_t n, int64_t out_h, int64_t n_units) {
            if (cores < 1 || g < 1 || n < 1 || out_h < 1 || n_units < 1)
                throw std::invalid_argument("core count and dimensions must be positive");
            std::vector<int64_t> v = conv_splits(cores, g, n, out_h, n_units);
            const auto rows = py::ssize_t(v.size() / 4);
            return give(std::move(v), {rows, 4});
        },
        py::arg("cores"), py::arg("g"), py::arg("n"), py::arg("out_h"), py::arg("n_units"),
        "Distinct effective conv core splits (g, batch, rows, channel units) within 2x the least work.");

    m.def(
        "matmul_impl_class",
        [](const I64& mnk, const I64& rows) {
            const int64_t* d = vec_of(mnk, 3, "M, N, K");
            const int64_t n = rows_of(rows, MM_NF, "matmul strategies");
            py::array_t<int64_t> out(n);
            for (int64_t i = 0; i < n; ++i) out.mutable_data()[i] = matmul_impl_class(d, rows.data() + i * MM_NF);
            return out;
        },
        py::arg("mnk"), py::arg("rows"),
        "Implementation class of each matmul strategy: 0 standard, 1 A resident in L1, 2 B resident, 3 split-K.");
    m.def(
        "matmul_class_outer",
        [](const I64& mnk, int64_t ea, int64_t l1, int cls, const I64& outer) {
            const int64_t* d = vec_of(mnk, 3, "M, N, K");
            const int64_t n = rows_of(outer, MM_NF, "matmul outer rows");
            const int64_t* in = outer.data();
            py::array_t<bool> mask(n);
            int64_t kept = 0;
            for (int64_t i = 0; i < n; ++i) {  // restaged, the row's class decides
                const bool in_class = matmul_restaged_class(d, cls, in + i * MM_NF) == cls;
                mask.mutable_data()[i] = in_class;
                kept += in_class;
            }
            py::array_t<int64_t> rows({py::ssize_t(kept), py::ssize_t(MM_NF)});
            int64_t* w = rows.mutable_data();
            for (int64_t i = 0; i < n; ++i)
                if (mask.data()[i]) {
                    std::copy(in + i * MM_NF, in + (i + 1) * MM_NF, w);
                    matmul_restage(d, ea, l1, cls, w);
                    w += MM_NF;
                }
            return py::make_tuple(rows, mask);
        },
        py::arg("mnk"), py::arg("ea"), py::arg("l1"), py::arg("cls"), py::arg("outer"),
        "(the matmul outer rows of implementation class `cls` once their default staging is moved into it, "
        "which rows they are)");

    py::class_<ConvStagings> conv(m, "ConvStagings",
                             "Every legal, undominated L1 staging of conv outer rows (each class derived once).");
    conv.def(py::init([](const I64& shape, int64_t l1) {
                 return new ConvStagings(conv_shape(vec_of(shape, CONV_SHAPE_LEN, "a conv shape"), CONV_SHAPE_LEN),
                                         l1);
             }),
             py::arg("shape"), py::arg("l1"))
        .def(
            "expand",
            [](ConvStagings& self, const I64& outer) {
                const int64_t n = rows_of(outer, CONV_NF, "outer rows");
                std::vector<const Table*> plan;
                const int64_t total = self.plan(outer.data(), n, plan);
                py::array_t<int64_t> rows({py::ssize_t(total), py::ssize_t(CONV_NF)});
                ConvStagings::write(outer.data(), n, plan.data(), rows.mutable_data());
                py::array_t<int64_t> counts(n);
                for (int64_t i = 0; i < n; ++i) counts.mutable_data()[i] = int64_t(plan[size_t(i)]->size() / ConvStagings::NS);
                return py::make_tuple(rows, counts);
            },
            py::arg("outer"), "(every staging of each outer row, row after row; how many each row has)")
        .def(
            "expand_groups",
            [](ConvStagings& self, const std::vector<I64>& groups) {
                std::vector<const Table*> plan;
                std::vector<int64_t> per(groups.size());
                int64_t total = 0;
                for (size_t g = 0; g < groups.size(); ++g) {
                    per[g] = self.plan(groups[g].data(), rows_of(groups[g], CONV_NF, "outer rows"), plan);
                    total += per[g];
                }
                py::array_t<int64_t> rows({py::ssize_t(total), py::ssize_t(CONV_NF)});
                int64_t* out = rows.mutable_data();
                size_t at = 0;
                for (const I64& g : groups) {
                    const int64_t n = g.size() ? g.shape(0) : 0;
                    ConvStagings::write(g.data(), n, plan.data() + at, out);
                    for (int64_t i = 0; i < n; ++i) out += int64_t(plan[at + size_t(i)]->size() / ConvStagings::NS) * CONV_NF;
                    at += size_t(n);
                }
                return py::make_tuple(rows, group_bounds(per));
            },
            py::arg("groups"), "(the expansion of every group, group after group; where each group starts + the end)")
        .def(
            "count",
            [](ConvStagings& self, const I64& outer) {
                std::vector<const Table*> plan;
                return self.plan(outer.data(), rows_of(outer, CONV_NF, "outer rows"), plan);
            },
            py::arg("outer"), "How many stagings the outer rows have in all.")
        .def(
            "l1_bytes",
            [](const ConvStagings& self, const ConvStagings::Key& key, const I64& st) {
                self.check(key);
                const int64_t n = rows_of(st, 5, "stagings");
                std::vector<double> out(static_cast<size_t>(n));
                for (int64_t i = 0; i < n; ++i) {
                    const int64_t* r = st.data() + 5 * i;
                    out[size_t(i)] = self.l1_a(key, r[0], r[1], r[3]) + self.l1_b(key, r[0], r[2], r[4]) +
                                     self.l1_bias(key, r[2]);
                }
                return give(std::move(out), {py::ssize_t(n)});
            },
            py::arg("key"), py::arg("stagings"),
            "L1 bytes of a class's stagings (hoL1, kAL1, kBL1, L1 ping-pong of A, of B) as the simulator counts them.");
    bind_classes(conv, CONV_NF,
                 "The class key of each outer row: hoL0, rows per core, kL0, nDim (dW) or 0, woL0, nL0.",
                 "A class's stagings: hoL1, kAL1, kBL1, pBufferFlag, iterateMNOrder.");

    py::class_<MmStagings> mm(m, "MatmulStagings",
                           "Every legal, undominated staging (and L2 tiling) of matmul outer rows, from the staging "
                           "template (each class derived once); `impl` >= 0 keeps one implementation class.");
    mm.def(py::init([](const I64& shape, int64_t l1, const I64& tmpl, const I64& up_a, const I64& up_b, int impl) {
                 return new MmStagings(mm_shape(vec_of(shape, MM_SHAPE_LEN, "a matmul shape"), MM_SHAPE_LEN), l1,
                                       to_vector(tmpl), to_vector(up_a), to_vector(up_b), impl);
             }),
             py::arg("shape"), py::arg("l1"), py::arg("template"), py::arg("up_a"), py::arg("up_b"),
             py::arg("impl") = -1)
        .def(
            "expand",
            [](MmStagings& self, const I64& outer) {
                const MmStagings::Plan p = self.plan(outer.data(), rows_of(outer, MM_NF, "outer rows"));
                py::array_t<int64_t> rows({py::ssize_t(p.rows), py::ssize_t(MM_NF)});
                self.write(outer.data(), p, rows.mutable_data());
                return rows;
            },
            py::arg("outer"), "Every variant of each distinct outer shape: the plain rows, then the L2 tilings.")
        .def(
            "expand_groups",
            [](MmStagings& self, const std::vector<I64>& groups, bool tiled) {
                std::vector<MmStagings::Plan> plans;
                std::vector<int64_t> per;
                int64_t total = 0;
                for (const I64& g : groups) {
                    plans.push_back(self.plan(g.data(), rows_of(g, MM_NF, "outer rows"), tiled));
                    per.push_back(plans.back().rows);
                    total += plans.back().rows;
                }
                py::array_t<int64_t> rows({py::ssize_t(total), py::ssize_t(MM_NF)});
                int64_t* out = rows.mutable_data();
                for (size_t g = 0; g < groups.size(); ++g) {
                    self.write(groups[g].data(), plans[g], out);
                    out += plans[g].rows * MM_NF;
                }
                return py::make_tuple(rows, group_bounds(per));
            },
            py::arg("groups"), py::arg("tiled") = true,
            "(`expand` of every group, group after group; where each group starts + the end); "
            "`tiled=False`: without the L2 tiling variants")
        .def(
            "tilings",
            [](const MmStagings& self, const I64& rows) {
                std::vector<int64_t> out, owner;
                self.tilings(rows.data(), rows_of(rows, MM_NF, "untiled rows"), out, owner);
                const auto n = py::ssize_t(owner.size());
                return py::make_tuple(give(std::move(out), {n, py::ssize_t(MM_NF)}), give(std::move(owner), {n}));
            },
            py::arg("rows"), "The L2 tiling variants of untiled rows (cut by cut, order by order) and the row each comes from.")
        .def(
            "count",
            [](MmStagings& self, const I64& outer, int64_t limit) {
                return self.count(outer.data(), rows_of(outer, MM_NF, "outer rows"), limit);
            },
            py::arg("outer"), py::arg("limit") = -1,
            "Size of `expand(outer)`; with a limit >= 0 it stops after the 2048 distinct rows that pass it.");
    bind_classes(mm, MM_NF, "The class key of each outer row: baseM/N/K, mIter, nIter (capped), kIter, split-K.",
                 "A class's stagings: stepKa, stepKb, stepM, stepN, iterateOrder, depthA1, depthB1.");
}

}  // namespace space
}  // namespace aoesim
