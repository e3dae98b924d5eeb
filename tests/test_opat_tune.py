"""OPAT on one case: Schedule, Format and Impl, precision modes, implementation classes."""
from __future__ import annotations

import numpy as np
import pytest

from aoe import AoeError, sim
from aoe.ops import HIGH_PERFORMANCE, HIGH_PRECISION, describe
from aoe.opat import Budget, tune_op
from aoe.opat.space import space_for
from aoe.opat.tune import KINDS, _class_name, _default_impl_class, case_for, conversion_us, matmul_impl_class, tune_case
from aoe.soc import load_soc
from conftest import declared_weight, mm_op, single_ops_graph, vec_op

SOC = load_soc("Ascend910B2")


# --- the case of an operator --------------------------------------------------------------------

def test_case_for_a_descriptor_is_the_case_of_its_graph_operator():
    from_sim = case_for(sim.MatMul(m=256, n=128, k=512))
    g = single_ops_graph([mm_op(256, 512, 128, "x")])
    from_graph = describe(g, g.ops[0])
    assert from_sim.case_id == from_graph.case_id
    assert from_sim.default.sim_op == from_graph.default.sim_op
    assert case_for(from_graph) is from_graph
    relu = case_for(vec_op("Relu", (32, 512), "r"))
    assert relu.op_type == "Relu" and relu.default.sim_op.shape == (32, 512)
    with pytest.raises(AoeError, match="cannot tune"):
        case_for(42)
    with pytest.raises(AoeError, match="gradient"):
        case_for(sim.Conv2D(x=(1, 16, 8, 8), weight=(16, 16, 3, 3), op_type="Conv2DBackpropInput"))


def test_bad_kinds_and_precision_modes_are_refused():
    case = case_for(sim.MatMul(m=64, n=64, k=64))
    with pytest.raises(AoeError, match="subset of Schedule, Format, Impl"):
        tune_case(case, SOC, kinds=("Tiling",))
    with pytest.raises(AoeError, match="subset"):
        tune_case(case, SOC, kinds=())
    with pytest.raises(AoeError, match="op_select_implmode"):
        tune_case(case, SOC, implmode="fast")


# --- kinds --------------------------------------------------------------------------------------

def test_format_tuning_charges_the_transdata_it_needs():
    g = single_ops_graph([mm_op(4096, 1024, 4096, "proj")])
    g.tensors["proj:in0"].kind = "activation"
    case = describe(g, g.ops[0])
    nz_a = next(v for v in case.formats if v.label.startswith("NZ,"))
    assert nz_a.extra_ops and nz_a.extra_ops[0].op_type == "TransData"
    free_b = next(v for v in case.formats if v.label == "ND,NZ,ND")
    assert not free_b.extra_ops  # the weight can be stored in FRACTAL_NZ: no conversion
    res = tune_case(case, SOC)
    kernel_only = {v.label: sim.simulate(SOC, v.sim_op, res.strategy).time_us
                   for v in case.formats if sim.simulate(SOC, v.sim_op, res.strategy).valid}
    if res.variant.startswith("NZ,"):
        transdata = sum(sim.simulate(SOC, t).time_us for t in nz_a.extra_ops)
        assert res.after_us == pytest.approx(kernel_only[res.variant] + transdata)
    else:
        assert res.after_us == pytest.approx(kernel_only[res.variant])


def test_each_kind_reports_its_own_gain():
    # a depthwise conv on which the Vector unit's depthwise kernel beats CANN's Cube kernel (C0 channels
    # per fractal, the default): an Impl gain
    dw = sim.Conv2D(x=(8, 256, 14, 14), weight=(256, 1, 3, 3), pads=(1, 1, 1, 1), groups=256)
    res = tune_op(dw)
    gains = res.helped_kinds()
    assert "Impl" in gains and res.impl == "depthwise_vector"
    chain = [res.before_us] + [gains[k].after_us for k in ("Schedule", "Format", "Impl") if k in gains]
    assert chain == sorted(chain, reverse=True) and chain[-1] == pytest.approx(res.after_us)
    only = tune_op(dw, kinds=("Schedule",))
    assert set(only.kinds) == {"Schedule"} and only.impl != "depthwise_vector"


@pytest.mark.parametrize("kinds", [("Schedule",), ("Format",), ("Impl",), ("Schedule", "Impl"), KINDS])
def test_only_the_asked_kinds_run_and_none_makes_it_slower(kinds):
    op = sim.MatMul(m=2048, n=512, k=1024)
    res = tune_op(op, kinds=kinds, budget=Budget(evaluations=4_000))
    assert set(res.kinds) == set(kinds)
    assert res.before_us == pytest.approx(sim.simulate(SOC, op).time_us)   # the "before" is CANN's default
    assert res.after_us <= res.before_us
    for g in res.kinds.values():
        assert g.after_us <= g.before_us


def test_the_tuned_strategy_prices_as_reported():
    op = sim.MatMul(m=1024, n=4096, k=1024)
    res = tune_op(op, kinds=("Schedule",), budget=Budget(evaluations=5_000))
    assert res.improved and res.variant == "ND,ND,ND"
    assert sim.simulate(SOC, op, res.strategy).time_us == pytest.approx(res.after_us)
    assert {k: res.knowledge[k] for k in res.strategy} == res.strategy   # the bank gets the same tiling


# --- precision modes and implementation classes ---------------------------------------------------

@pytest.mark.parametrize("op", [sim.VectorOp("ReduceSumD", (4096, 1024), axes=(0, 1)),
                                sim.VectorOp("ReduceMeanD", (16, 65536), axes=(1,)),
                                sim.MatMul(m=4, n=8192, k=4096)])
def test_no_impl_violates_high_precision(op):
    case = case_for(op)
    res = tune_case(case, SOC, implmode=HIGH_PRECISION)
    if isinstance(op, sim.VectorOp):
        assert res.strategy["impl"] != 1  # atomic multi-core accumulation is high_performance only
    chosen = [v for v in case.impls if v.label == res.impl or v.knowledge.get("impl") == res.strategy.get("impl")]
    for v in chosen:
        assert HIGH_PRECISION in v.modes
    assert res.impl != "vector_gemv"


def test_high_precision_never_splits_k_across_cores():
    # Split-K adds partial sums of several cores in an order that changes the rounding, like the
    # atomic reductions the catalogue allows under high_performance only.
    op = sim.MatMul(m=64, n=64, k=16384)        # a long K with a tiny output: split-K wins when allowed
    case = case_for(op)
    fast = tune_case(case, SOC, implmode=HIGH_PERFORMANCE)
    assert fast.impl == "split_k"
    careful = tune_case(case, SOC, implmode=HIGH_PRECISION)
    assert careful.impl != "split_k"
    row = np.array([[careful.strategy[f] for f in sim.strategy_fields(careful.sim_op)]], dtype=np.int64)
    assert matmul_impl_class(careful.sim_op, row)[0] != 3


def test_matmul_impl_classes_partition_the_space():
    op = sim.MatMul(m=1024, n=1024, k=1024)
    rows = space_for(SOC, op).all_rows()
    classes = matmul_impl_class(op, rows)
    assert set(np.unique(classes)) == {0, 1, 2, 3}
    f = sim.strategy_fields(op)
    split = rows[:, f.index("singleCoreK")] < op.k
    assert (classes[split] == 3).all() and (classes[~split] != 3).all()


# --- Format of a vector operator between Cube operators ------------------------------------------

def test_softmax_between_matmuls_drops_its_transdata_on_a_coupled_soc():
    from test_ops_catalogue import attention
    g = attention(b=8)
    c = describe(g, g.ops[1])
    nd, nz = c.formats
    coupled, separated = load_soc("Ascend910A"), SOC
    assert coupled.coupled and not separated.coupled
    kernel = {s.name: {v.label: sim.simulate(s, v.sim_op).time_us for v in c.formats} for s in (coupled, separated)}
    cache: dict = {}
    # Atlas A2: the Cube reads and writes ND itself, no TransData by default
    assert conversion_us(separated, nd, cache) == 0.0
    # Ascend910A: the Cube side stays NZ, the ND default pays a TransData on each edge
    tds = sum(sim.simulate(coupled, e.transdata).time_us for e in nd.cube_edges)
    # the neighbours are charged what NZ costs them, per edge, never credited what it saves them
    delta = sum(max(0.0, sum(sim.simulate(coupled, z).time_us - sim.simulate(coupled, d).time_us
                             for d, z in zip(e.cube_nd, e.cube_nz))) for e in nd.cube_edges)
    assert conversion_us(coupled, nd, {}) == pytest.approx(tds + delta)
    assert conversion_us(coupled, nz, {}) == pytest.approx(delta)
    res = tune_case(c, coupled, budget=Budget(evaluations=2_000))
    assert res.before_us == pytest.approx(kernel["Ascend910A"]["ND"] + tds + delta)
    assert res.variant == "NZ" and "Format" in res.steps and res.knowledge["formats"] == ["FRACTAL_NZ"]
    assert res.after_us < res.before_us - 0.9 * tds + kernel["Ascend910A"]["NZ"] - kernel["Ascend910A"]["ND"] + 1e-6


# --- the steps of the final strategy -------------------------------------------------------------

def _prod_of_ratios(steps):
    return float(np.prod([g.before_us / g.after_us for g in steps.values()])) if steps else 1.0


@pytest.mark.parametrize("op", [sim.MatMul(m=4096, n=768, k=768), sim.MatMul(m=4096, n=3072, k=768),
                                sim.MatMul(m=4096, n=768, k=3072), sim.MatMul(m=128, n=128, k=64, batch=384),
                                sim.MatMul(m=64, n=64, k=16384),
                                sim.Conv2D(x=(8, 64, 28, 28), weight=(64, 1, 3, 3), pads=(1, 1, 1, 1), groups=64)])
def test_steps_describe_the_stored_strategy_and_multiply_to_the_total(op):
    case = case_for(op)
    if isinstance(op, sim.MatMul):      # an activation operand: NZ layouts pay their TransData
        g = single_ops_graph([mm_op(op.m, op.k, op.n, "mm")]) if op.batch == 1 else None
        if g is not None:
            g.tensors["mm:in0"].kind = "activation"
            case = describe(g, g.ops[0])
    res = tune_case(case, SOC, budget=Budget(evaluations=3_000))
    steps = res.helped_kinds()
    assert _prod_of_ratios(steps) == pytest.approx(res.before_us / res.after_us, rel=1e-9)
    chain = [res.before_us] + [g.after_us for g in steps.values()]
    assert all(g.before_us == pytest.approx(prev) for g, prev in zip(steps.values(), chain))
    assert list(steps) == [k for k in KINDS if k in steps]                    # in the order the stages ran
    assert ("Format" in steps) == bool(res.knowledge.get("formats"))         # only a stored layout is a Format gain
    # another implementation than CANN's default's own class (which may itself be a resident one)
    own = _class_name(op, _default_impl_class(op, sim.default_strategy(SOC, op)))
    uses_other_impl = res.impl not in ("default", "standard", "img2col_cube", own) and not res.impl.startswith("impl")
    assert ("Impl" in steps) == uses_other_impl
    if "Impl" in steps:                 # another kernel or class: the Schedule/Format steps it replaced are gone
        assert list(steps) == ["Impl"] and steps["Impl"].before_us == res.before_us


def test_a_stage_winner_that_is_replaced_leaves_no_trace():
    # a 1024-wide projection of 4096 tokens: Format finds an NZ weight, then Impl (B resident in L1, ND)
    # beats it; the stored strategy has no NZ operand, so no Format gain may be reported
    g = single_ops_graph([mm_op(4096, 1024, 1024, "ffn")])
    g.tensors["ffn:in0"].kind = "activation"
    res = tune_case(describe(g, g.ops[0]), SOC, budget=Budget(evaluations=3_000))
    assert res.kinds["Format"].helped and res.impl == "b_resident_l1"      # the stages as they ran
    assert "formats" not in res.knowledge and list(res.steps) == ["Impl"]    # what is stored and reported
    assert res.steps["Impl"].before_us == res.before_us and res.steps["Impl"].after_us == res.after_us


def test_a_layout_variant_is_searched_with_its_own_bounds():
    # A 2048-token projection whose weight does best in NZ. The layout variant shares the default's
    # tilings but not its bounds: an NZ operand skips the ND2NZ conversion, so the ND twin's bounds
    # lie above some of its strategies' times. Pruned with them, the Format search stopped at 12.570
    # us; with its own it reaches the variant's optimum (11.877 us) within the same budget.
    from aoe.opat.search import exhaustive, simulator_measure

    g = single_ops_graph([mm_op(2048, 768, 768, "ffn")])
    g.tensors["ffn:in0"].kind = "activation"
    case = describe(g, g.ops[0])
    res = tune_case(case, SOC, kinds=("Schedule", "Format"), budget=Budget(evaluations=3_000))
    variant = next(v for v in case.formats if v.label == res.variant)
    assert variant.sim_op.b_format == "FRACTAL_NZ" and variant.sim_op.a_format == "ND"
    opt = exhaustive(space_for(SOC, variant.sim_op), variant.sim_op, simulator_measure(SOC)).time_us
    assert res.kinds["Format"].after_us == pytest.approx(opt + conversion_us(SOC, variant, {}), rel=1e-9)


@pytest.mark.parametrize("soc", ["Ascend910A", "Ascend310P3"])
def test_a_vector_op_between_large_matmuls_never_prices_below_zero(soc, tmp_path):
    """Its Format choice may remove TransData, but the matmuls' own NZ speed-up is not its time to claim."""
    import onnx
    from onnx import TensorProto, helper

    import aoe.graph

    m, k, n = 4096, 4096, 11008                       # a Llama-7B SwiGLU at 4096 tokens
    w = {name: declared_weight(name, shape) for name, shape in (("w1", [k, n]), ("w3", [k, n]), ("w2", [n, k]))}
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="up"),
             helper.make_node("MatMul", ["x", "w3"], ["b"], name="gate"),
             helper.make_node("Mul", ["a", "b"], ["c"], name="mul"),
             helper.make_node("MatMul", ["c", "w2"], ["y"], name="down")]
    graph = helper.make_graph(nodes, "swiglu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, k])], list(w.values()))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "swiglu.onnx")
    g = aoe.graph.load(tmp_path / "swiglu.onnx")
    mul = next(op for op in g.ops if op.type == "Mul")
    r = tune_case(describe(g, mul), load_soc(soc), budget=Budget(evaluations=2000))
    assert 0 < r.after_us <= r.before_us
