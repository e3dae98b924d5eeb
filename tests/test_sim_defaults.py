"""The CANN-like default strategies are plausible tilings: valid, never thinner than one unit of work
per core, not slower on the bigger chip of a family, depthwise convolutions on CANN's own kernel."""
from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aoe.graph
from aoe import sim
from aoe.opat import Budget
from aoe.opat.tune import tune_case
from aoe.ops import Unsupported, describe
from aoe.sim.ops import DTYPE_BYTES
from aoe.soc import load_soc

SOCS = ("Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend310P3")
MODELS = ("zoo:resnet50", "zoo:mobilenet_v2", "zoo:bert_base", "zoo:gpt2")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def zoo_cases():
    """Distinct operator cases of the zoo models, inference and training."""
    seen = {}
    for model in MODELS:
        for training in (False, True):
            g = aoe.graph.load(model, training=training)
            for op in g.ops:
                try:
                    case = describe(g, op)
                except Unsupported:
                    continue
                seen.setdefault(case.case_id, case)
    return list(seen.values())


@pytest.fixture(scope="module")
def default_times(zoo_cases):
    """(SoC, case index) -> the default kernel's time."""
    return {(s, i): sim.simulate(s, c.default.sim_op).time_us for s in SOCS for i, c in enumerate(zoo_cases)}


def _spatial_share(op: sim.Conv2D, strat: dict[str, int]) -> tuple[int, int]:
    """(cores the feature map is split over, pixels of it per core)."""
    out_h, out_w = (op.x[2], op.x[3]) if op.op_type.endswith("BackpropInput") else op.out_hw
    hd = strat["hoDim"]
    return hd, -(-out_h // hd) * out_w


def test_zoo_defaults_valid_on_every_soc(zoo_cases, default_times):
    assert len(zoo_cases) > 300
    bad = [(s, zoo_cases[i].op_type) for (s, i), t in default_times.items() if not math.isfinite(t)]
    assert not bad


def test_depthwise_default_is_the_depthwise_kernel(zoo_cases):
    """A depthwise conv runs CANN's depthwise kernel: C0 channels per Cube fractal, not a group per channel."""
    dws = [c for c in zoo_cases if c.op_type.startswith("Conv2D") and c.key["groups"] > 1
           and c.key["groups"] == c.key["a_shape_c"] == c.key["b_shape_n"]]
    assert len(dws) >= 10
    for c in dws:
        op = c.default.sim_op
        c0 = 32 // DTYPE_BYTES[op.dtype]
        assert isinstance(op, sim.Conv2D) and op.groups == -(-c.key["groups"] // c0)
        assert op.x[1] // op.groups == c0 and op.weight[1] == c0
        assert op.out_hw == (c.key["c_shape_h"], c.key["c_shape_w"])


@pytest.mark.parametrize("soc", ["Ascend910B2", "Ascend310P3"])
def test_depthwise_default_is_no_outlier(zoo_cases, soc):
    """Tuning (Schedule, Impl: the vector depthwise kernel too) gains less than 3x over the default."""
    fwd = [c for c in zoo_cases if c.op_type == "Conv2D" and c.key["groups"] > 1][:6]
    assert fwd
    for c in fwd:
        r = tune_case(c, soc, budget=Budget(evaluations=2000))
        assert r.before_us / r.after_us < 3, (c.key, r.impl)


def test_no_spatial_split_thinner_than_a_fractal(zoo_cases):
    """A conv split over the feature map leaves every core whole rows and at least 16 pixels."""
    convs = [c for c in zoo_cases if isinstance(c.default.sim_op, sim.Conv2D)]
    for s in SOCS:
        for c in convs:
            hd, pixels = _spatial_share(c.default.sim_op, sim.default_strategy(s, c.default.sim_op))
            assert hd == 1 or pixels >= 16, (s, c.op_type, c.default.sim_op)


def test_filter_gradient_of_a_7x7_map_is_not_split_over_its_rows():
    op = sim.Conv2D(x=(1, 512, 7, 7), weight=(512, 512, 3, 3), pads=(1, 1, 1, 1), op_type="Conv2DBackpropFilter")
    for s in SOCS:
        strat = sim.default_strategy(s, op)
        assert strat["hoDim"] == 1 and strat["nDim"] > 1, (s, strat)


def test_bigger_chip_not_slower(zoo_cases, default_times):
    """Ascend910B2 is Ascend910B3 with 24 instead of 20 AIC (48 vs 40 AIV): its default is not slower.

    Tolerance: a different core count changes how shares round into tiles and how many cores share
    the HBM, which the simulator charges per busiest core; we allow 10% on any case and 5% on 95% of
    them (measured: bench/default_sanity.py).
    """
    ratios = [default_times[("Ascend910B2", i)] / default_times[("Ascend910B3", i)] for i in range(len(zoo_cases))]
    worst = max(range(len(ratios)), key=ratios.__getitem__)
    assert ratios[worst] <= 1.10, (zoo_cases[worst].op_type, zoo_cases[worst].default.sim_op)
    assert sum(r > 1.05 for r in ratios) <= 0.05 * len(ratios)


@st.composite
def matmuls(draw):
    return sim.MatMul(m=draw(st.integers(1, 5000)), n=draw(st.integers(1, 5000)), k=draw(st.integers(1, 5000)),
                      batch=draw(st.sampled_from([1, 1, 3, 12, 40])),
                      dtype=draw(st.sampled_from(["float16", "bfloat16", "float32", "int8"])),
                      trans_a=draw(st.booleans()), trans_b=draw(st.booleans()))


@st.composite
def convs(draw):
    k = draw(st.sampled_from([1, 3, 5, 7]))
    s = draw(st.sampled_from([1, 2]))
    hw = draw(st.integers(max(k, 2), 64))
    c = draw(st.sampled_from([3, 16, 32, 64, 96, 256, 512]))
    dw = draw(st.booleans()) and c % 16 == 0
    g = c // 16 if dw else 1
    cin_g = 16 if dw else c
    cout = c if dw else draw(st.sampled_from([16, 64, 128, 512]))
    return sim.Conv2D(x=(draw(st.sampled_from([1, 2, 8, 32])), c, hw, hw), weight=(cout, cin_g, k, k),
                      strides=(s, s), pads=(k // 2,) * 4, groups=g,
                      op_type=draw(st.sampled_from(["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"])))


@st.composite
def vectors(draw):
    shape = tuple(draw(st.lists(st.integers(1, 300), min_size=1, max_size=4)))
    kind = draw(st.sampled_from(["Add", "Gelu", "ReduceSumD", "SoftmaxV2", "LayerNorm"]))
    axes = () if kind in ("Add", "Gelu") else (len(shape) - 1,) if kind != "ReduceSumD" or draw(st.booleans()) \
        else (0,)
    return sim.VectorOp(kind, shape, dtype=draw(st.sampled_from(["float16", "float32"])), axes=axes)


def _work_units(op: sim.SimOp) -> int:
    """How many pieces the op's work splits into at most (output blocks, rows, 32 B blocks)."""
    if isinstance(op, sim.MatMul):
        return max(op.batch, op.batch_b or 1) * -(-op.m // 16) * -(-op.n // 16)
    if isinstance(op, sim.Conv2D):
        n, c, h, _ = op.x
        g = op.groups
        c0 = 32 // DTYPE_BYTES[op.dtype]
        rows = h if op.op_type.endswith("BackpropInput") else op.out_hw[0]
        return g * n * rows * max(-(-op.weight[0] // g // 16), -(-c // g // c0), -(-c // g // 16))
    if op.axes:
        row_len = math.prod(op.shape[a] for a in op.axes) * math.prod(op.shape[max(op.axes) + 1:])
        return op.elements // row_len
    return -(-op.elements // (32 // DTYPE_BYTES[op.dtype]))


def _cores(op: sim.SimOp, strat: dict[str, int]) -> int:
    if isinstance(op, sim.MatMul):
        return strat["usedCoreNum"]
    if isinstance(op, sim.Conv2D):
        return strat["batchDim"] * strat["hoDim"] * strat["nDim"] * strat["groupDim"]
    return strat["blockDim"]


@SETTINGS
@given(op=st.one_of(matmuls(), convs(), vectors()), soc=st.sampled_from(SOCS))
def test_default_property(op, soc):
    """Any shape: the default is valid, uses at most the SoC's cores and no more cores than work units."""
    s = load_soc(soc)
    r = sim.simulate(s, op)
    assert r.valid and math.isfinite(r.time_us)
    cores = _cores(op, r.strategy)
    limit = s.vector_cores if isinstance(op, sim.VectorOp) else s.cube_cores
    assert 1 <= cores <= limit
    if isinstance(op, sim.VectorOp) and op.axes and r.strategy["impl"] == 1:
        return  # a reduction of few long rows splits a row over cores (checked by the simulator)
    assert cores <= _work_units(op)
    if isinstance(op, sim.Conv2D):
        hd, pixels = _spatial_share(op, r.strategy)
        assert hd == 1 or pixels >= 16
