// pybind11 bindings: the SoC description and batched evaluation (GIL released, multi-threaded).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cube.h"
#include "sim.h"

namespace py = pybind11;
using namespace aoesim;

namespace aoesim::space {
void bind(py::module_& m);  // the OPAT Schedule spaces (space_bindings.cpp)
}

namespace {

using I64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

struct Checked {
    int kind;
    const int64_t* op;
    const int64_t* st;
    int64_t n, nf;
};

Checked check_args(int kind, const I64Array& op, const I64Array& strategies) {
    if (op.ndim() != 1) throw std::invalid_argument("operator parameters must be a 1-D integer array");
    std::string msg = check_op(kind, op.data(), op.shape(0));
    if (!msg.empty()) throw std::invalid_argument(msg);
    const int64_t nf = int64_t(strategy_fields(kind).size());
    if (strategies.ndim() != 2 || strategies.shape(1) != nf)
        throw std::invalid_argument("strategies must be a 2-D integer array with " + std::to_string(nf) +
                                    " columns (one row per strategy)");
    return {kind, op.data(), strategies.data(), strategies.shape(0), nf};
}

// Evaluates many strategies of one operator; per-operator work (matmul constants) is done once.
class BatchEvaluator {
  public:
    BatchEvaluator(const SoC& soc, const Checked& c) : soc_(soc), c_(c) {
        if (c.kind == K_MATMUL) {
            prob_ = matmul_problem(c.op);
            prep_ = prepare_cube(soc, prob_);
        }
    }
    Result operator()(int64_t i) const {
        const int64_t* st = c_.st + i * c_.nf;
        if (c_.kind == K_MATMUL) return cube_eval(soc_, prob_, prep_, st);
        return evaluate(soc_, c_.kind, c_.op, st);
    }

  private:
    const SoC& soc_;
    const Checked& c_;
    CubeProblem prob_;
    CubePrep prep_;
};

// Run body(lo, hi) over [0, n) split into up to `threads` ranges, one thread each; small batches stay
// on the caller's thread.
template <class F>
void parallel_ranges(int64_t n, int threads, F body) {
    threads = std::max(1, std::min(threads, 64));
    if (threads == 1 || n < 4096) {
        body(int64_t(0), n);
        return;
    }
    std::vector<std::thread> pool;
    const int64_t chunk = (n + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
        const int64_t lo = t * chunk, hi = std::min(n, lo + chunk);
        if (lo >= hi) break;
        pool.emplace_back([lo, hi, &body] { body(lo, hi); });
    }
    for (auto& th : pool) th.join();
}

// Run body(i) for i in [0, n) on up to `threads` threads.
template <class F>
void parallel_for(int64_t n, int threads, F body) {
    parallel_ranges(n, threads, [&body](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) body(i);
    });
}

// Evaluate every strategy row without the GIL and hand each Result to `store(i, result)`.
template <class Store>
void evaluate_rows(const SoC& soc, const Checked& c, int threads, Store store) {
    py::gil_scoped_release nogil;
    const BatchEvaluator ev(soc, c);
    parallel_for(c.n, threads, [&](int64_t i) { store(i, ev(i)); });
}

py::tuple simulate_times(const SoC& soc, int kind, const I64Array& op, const I64Array& strategies,
                         int threads) {
    Checked c = check_args(kind, op, strategies);
    py::array_t<double> times(c.n);
    py::array_t<int32_t> reasons(c.n);
    double* tp = times.mutable_data();
    int32_t* rp = reasons.mutable_data();
    if (c.kind == K_MATMUL || c.kind == K_CONV) {
        {  // the hot path: one batch loop per thread, the per-operator work hoisted out of it
            py::gil_scoped_release nogil;
            const CubeProblem prob = c.kind == K_MATMUL ? matmul_problem(c.op) : CubeProblem();
            const CubePrep prep = c.kind == K_MATMUL ? prepare_cube(soc, prob) : CubePrep();
            parallel_ranges(c.n, threads, [&](int64_t lo, int64_t hi) {
                if (c.kind == K_MATMUL) matmul_times(soc, prob, prep, c.st, c.nf, lo, hi, tp, rp);
                else conv_times(soc, c.op, c.st, c.nf, lo, hi, tp, rp);
            });
        }
        return py::make_tuple(times, reasons);
    }
    evaluate_rows(soc, c, threads, [&](int64_t i, const Result& r) {
        tp[i] = r.time_us;
        rp[i] = r.reason;
    });
    return py::make_tuple(times, reasons);
}

py::dict simulate_batch(const SoC& soc, int kind, const I64Array& op, const I64Array& strategies,
                        int threads) {
    Checked c = check_args(kind, op, strategies);
    py::array_t<double> times(c.n), hbm(c.n), l2(c.n), flops(c.n), bytes(c.n);
    py::array_t<int32_t> reasons(c.n), bound(c.n);
    py::array_t<double> busy({c.n, int64_t(P_COUNT)});
    double *tp = times.mutable_data(), *hp = hbm.mutable_data(), *lp = l2.mutable_data();
    double *fp = flops.mutable_data(), *bp = bytes.mutable_data(), *busyp = busy.mutable_data();
    int32_t *rp = reasons.mutable_data(), *bdp = bound.mutable_data();
    evaluate_rows(soc, c, threads, [&](int64_t i, const Result& r) {
        tp[i] = r.time_us;
        rp[i] = r.reason;
        hp[i] = r.hbm_bytes;
        lp[i] = r.l2_bytes;
        fp[i] = r.flops;
        bp[i] = r.bytes;
        bdp[i] = r.bound;
        for (int p = 0; p < P_COUNT; ++p) busyp[i * P_COUNT + p] = r.busy_us[p];
    });
    py::dict d;
    d["time_us"] = times;
    d["reason"] = reasons;
    d["busy_us"] = busy;
    d["hbm_bytes"] = hbm;
    d["l2_bytes"] = l2;
    d["bound"] = bound;
    d["flops"] = flops;
    d["bytes"] = bytes;
    return d;
}

// Times and reasons from one named Cube kernel set, through its batch loop or (full=true) its one-row
// full result: lets the tests hold every set the CPU runs to the same bits.
py::tuple times_with(const std::string& isa, const SoC& soc, int kind, const I64Array& op,
                     const I64Array& strategies, bool full) {
    const CubeKernels* k = cube_kernels_named(isa);
    if (!k) throw std::invalid_argument("no kernel set '" + isa + "' runs here");
    if (kind != K_MATMUL && kind != K_CONV) throw std::invalid_argument("only the Cube kinds have kernel sets");
    Checked c = check_args(kind, op, strategies);
    py::array_t<double> times(c.n);
    py::array_t<int32_t> reasons(c.n);
    double* tp = times.mutable_data();
    int32_t* rp = reasons.mutable_data();
    {
        py::gil_scoped_release nogil;
        const CubeProblem prob = kind == K_MATMUL ? matmul_problem(c.op) : CubeProblem();
        const CubePrep prep = kind == K_MATMUL ? prepare_cube(soc, prob) : CubePrep();
        const ConvCtx x = kind == K_CONV ? conv_setup(soc, c.op) : ConvCtx();
        if (!full && kind == K_MATMUL) k->matmul_times(soc, prob, prep, c.st, c.nf, 0, c.n, tp, rp);
        if (!full && kind == K_CONV) k->conv_times(soc, x, c.st, c.nf, 0, c.n, tp, rp);
        for (int64_t i = 0; full && i < c.n; ++i) {
            const int64_t* st = c.st + i * c.nf;
            const Result r = kind == K_MATMUL ? k->matmul(soc, prob, prep, st) : k->conv(soc, x, st);
            tp[i] = r.time_us;
            rp[i] = r.reason;
        }
    }
    return py::make_tuple(times, reasons);
}

}  // namespace

void register_bank_scan(py::module_& m);  // csrc/bank_lookup.cpp: the operator bank's native lookup

PYBIND11_MODULE(_sim, m) {
    m.doc() = "Native cost model of the Ascend AI Core (batched, GIL-free).";

    py::class_<SoC>(m, "SoC", "Hardware description of one SoC (filled by aoe.soc from an .ini file).")
        .def(py::init<>())
        .def_readwrite("name", &SoC::name)
        .def_readwrite("cube_cores", &SoC::cube_cores)
        .def_readwrite("vector_cores", &SoC::vector_cores)
        .def_readwrite("separated", &SoC::separated)
        .def_readwrite("freq_mhz", &SoC::freq_mhz)
        .def_readwrite("vec_freq_mhz", &SoC::vec_freq_mhz)
        .def_readwrite("l0a", &SoC::l0a)
        .def_readwrite("l0b", &SoC::l0b)
        .def_readwrite("l0c", &SoC::l0c)
        .def_readwrite("l1", &SoC::l1)
        .def_readwrite("ub", &SoC::ub)
        .def_readwrite("l2", &SoC::l2)
        .def_readwrite("ub_reserved", &SoC::ub_reserved)
        .def_readwrite("cube_m", &SoC::cube_m)
        .def_readwrite("cube_n", &SoC::cube_n)
        .def_readwrite("cube_k", &SoC::cube_k)
        .def_readwrite("vec_bytes_per_cycle", &SoC::vec_bytes_per_cycle)
        .def_readwrite("hbm_gbps", &SoC::hbm_gbps)
        .def_readwrite("hbm_efficiency", &SoC::hbm_efficiency)
        .def_readwrite("l2_gbps", &SoC::l2_gbps)
        .def_readwrite("ddr_rate", &SoC::ddr_rate)
        .def_readwrite("l2_rate", &SoC::l2_rate)
        .def_readwrite("l1_to_l0a_rate", &SoC::l1_to_l0a_rate)
        .def_readwrite("l1_to_l0b_rate", &SoC::l1_to_l0b_rate)
        .def_readwrite("fixpipe_rate", &SoC::fixpipe_rate)
        .def_readwrite("ub_to_gm_rate", &SoC::ub_to_gm_rate)
        .def_readwrite("gm_to_ub_rate", &SoC::gm_to_ub_rate)
        .def_readwrite("l1_to_ub_rate", &SoC::l1_to_ub_rate)
        .def_readwrite("l2_usable", &SoC::l2_usable)
        .def_readwrite("dma_overhead_bytes", &SoC::dma_overhead_bytes)
        .def_readwrite("nd2nz_efficiency", &SoC::nd2nz_efficiency)
        .def_readwrite("dma_latency_cycles", &SoC::dma_latency_cycles)
        .def_readwrite("mmad_overhead_cycles", &SoC::mmad_overhead_cycles)
        .def_readwrite("vec_instr_overhead_cycles", &SoC::vec_instr_overhead_cycles)
        .def_readwrite("scalar_iter_cycles", &SoC::scalar_iter_cycles)
        .def_readwrite("scalar_chunk_cycles", &SoC::scalar_chunk_cycles)
        .def_readwrite("scalar_task_cycles", &SoC::scalar_task_cycles)
        .def_readwrite("launch_us", &SoC::launch_us)
        .def_readwrite("cv_handoff_us", &SoC::cv_handoff_us);

    m.attr("K_MATMUL") = int(K_MATMUL);
    m.attr("K_VECTOR") = int(K_VECTOR);
    m.attr("K_CONV") = int(K_CONV);
    m.attr("PIPES") = std::vector<std::string>{"MTE2", "MTE1", "Cube", "Vector", "FixPipe/MTE3", "Scalar",
                                               "Overhead"};
    m.attr("REASONS") = std::vector<std::string>{
        "ok", "bad_value", "too_many_cores", "misaligned", "l0a_overflow", "l0b_overflow", "l0c_overflow",
        "l1_overflow", "ub_overflow", "inconsistent", "exceeds_shape", "unsupported"};

    m.def(
        "vector_ops",
        [] {
            std::vector<std::pair<std::string, int>> out;
            for (int i = 0; i < vector_op_count(); ++i) out.emplace_back(vector_op_name(i), vector_op_impls(i));
            return out;
        },
        "Vector operators as (name, number of implementations); the list index is the `vop` code.");
    m.def("op_fields", &op_fields, py::arg("kind"), "Names of the operator parameter vector of a kind.");
    m.def("strategy_fields", &strategy_fields, py::arg("kind"), "Names of the strategy vector of a kind.");
    m.def(
        "check_op",
        [](int kind, const I64Array& op) {
            if (op.ndim() != 1) return std::string("operator parameters must be a 1-D integer array");
            return check_op(kind, op.data(), op.shape(0));
        },
        py::arg("kind"), py::arg("op"), "Return '' when the operator parameters are valid, else why not.");
    m.def("simulate_times", &simulate_times, py::arg("soc"), py::arg("kind"), py::arg("op"),
          py::arg("strategies"), py::arg("threads") = 1,
          "Time (us, inf when invalid) and reason code of every strategy row: the tuning hot path.");
    m.attr("CUBE_KERNELS") = std::string(cube_kernels().isa);
    m.attr("CUBE_LANES") = cube_kernels().lanes;
    m.def("_times_with", &times_with, py::arg("isa"), py::arg("soc"), py::arg("kind"), py::arg("op"),
          py::arg("strategies"), py::arg("full") = false,
          "Times and reasons from the named Cube kernel set ('base', 'x86-64-v3', 'x86-64-v4'), for tests.");
    m.def("simulate_batch", &simulate_batch, py::arg("soc"), py::arg("kind"), py::arg("op"),
          py::arg("strategies"), py::arg("threads") = 1,
          "Full result (time, reason, busy per pipe, HBM/L2 bytes, bound unit) of every strategy row.");
    register_bank_scan(m);
    aoesim::space::bind(m);
}
