"""The CANN-like default strategies are plausible tilings: valid, never thinner than one unit of work
per core, not slower on the bigger chip of a family, depthwise convolutions on CANN's own kernel."""
from __future__ import annotations

import math
import random

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
        r = tune_case(c, load_soc(soc), budget=Budget(evaluations=2000))
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
    """Ascend910B2 is Ascend910B3 with 24 instead of 20 AIC (48 vs 40 AIV): its default is never slower
    (rules M4, C5, V4: the fastest of the rules' tilings over every core budget up to the SoC's)."""
    ratios = [default_times[("Ascend910B2", i)] / default_times[("Ascend910B3", i)] for i in range(len(zoo_cases))]
    worst = max(range(len(ratios)), key=ratios.__getitem__)
    assert ratios[worst] <= 1 + 1e-9, (ratios[worst], zoo_cases[worst].op_type, zoo_cases[worst].default.sim_op)


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


def _random_op(rng: random.Random) -> sim.SimOp:
    """A random operator: elementwise (optimizer updates over weights too), reductions and rows, matmul, conv."""
    def log_int(lo: int, hi: int) -> int:
        return max(lo, min(hi, int(round(lo * (hi / lo) ** rng.random()))))
    fam, dtype = rng.random(), rng.choice(("float16", "float32"))
    if fam < 0.25:
        shape = (log_int(1, 50000), rng.choice((64, 768, 1024, 4096, 11008))) if rng.random() < 0.6 \
            else tuple(log_int(1, 512) for _ in range(rng.randint(1, 4)))
        return sim.VectorOp(rng.choice(("ApplyAdamD", "Add", "Gelu", "Cast", "Relu")), shape, dtype=dtype)
    if fam < 0.5:
        shape = tuple(log_int(1, 4096) for _ in range(rng.randint(2, 3)))
        kind = rng.choice(("ReduceSumD", "ReduceMeanD", "SoftmaxV2", "LayerNorm"))
        axes = (0,) if kind.startswith("Reduce") and rng.random() < 0.4 else (len(shape) - 1,)
        return sim.VectorOp(kind, shape, dtype=dtype, axes=axes)
    if fam < 0.75:
        return sim.MatMul(m=log_int(1, 16384), n=log_int(1, 16384), k=log_int(1, 16384),
                          batch=rng.choice((1, 1, 4, 32)), dtype=rng.choice(("float16", "bfloat16", "float32")),
                          trans_a=rng.random() < 0.3, trans_b=rng.random() < 0.5)
    k = rng.choice((1, 3, 5, 7))
    hw, c = log_int(max(k, 4), 224), rng.choice((3, 16, 64, 256, 1024))
    return sim.Conv2D(x=(rng.choice((1, 8, 32, 64)), c, hw, hw),
                      weight=(rng.choice((16, 64, 256, 1024)), c, k, k), strides=(rng.choice((1, 2)),) * 2,
                      pads=(k // 2,) * 4,
                      op_type=rng.choice(("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")))


@pytest.mark.parametrize("small, factor", [("Ascend910B3", 1.2), ("Ascend910B3", 1.5), ("Ascend310P3", 1.5)])
def test_more_cores_never_slower(small, factor):
    """The same chip with more cores (AIC and AIV; clocks, buffers and HBM equal) never runs the default
    slower: CANN picks blockDim from the cores and the work, so a core more never hurts (issue 22).

    A seeded sample of 200 random operators; 1.2x of Ascend910B3 is Ascend910B2's 24 / 48 cores.
    """
    base = load_soc(small)
    big = base.replace(name=f"{small}x{factor}", cube_cores=int(base.cube_cores * factor),
                       vector_cores=int(base.vector_cores * factor))
    rng = random.Random(22)
    slower = []
    for _ in range(200):
        op = _random_op(rng)
        t_small, t_big = sim.simulate(base, op).time_us, sim.simulate(big, op).time_us
        if t_big > t_small * (1 + 1e-9):
            slower.append((round(t_big / t_small, 4), op))
    assert not slower, (len(slower), sorted(slower, key=lambda x: -x[0])[:3])


def test_vector_default_lists_every_core_budget_in_one_pass(zoo_cases, monkeypatch):
    """Rule V4 prices every core budget's candidates: they are listed for all budgets at once (counted:
    `_vector_cands`, one call per budget, is not called), the rows it would list, in its order."""
    import numpy as np

    from aoe.sim import heuristics as h

    ops = [v.sim_op for c in zoo_cases for v in c.formats + c.impls if isinstance(v.sim_op, sim.VectorOp)]
    ops += [sim.VectorOp("SoftmaxV2", (8, 12, 128, 128), axes=(3,)), sim.VectorOp("ReduceSumD", (3, 40000), axes=(1,)),
            sim.VectorOp("ReduceMeanD", (7, 3, 1000), axes=(1, 2), dtype="float32", out_dtype="float32")]
    for name in SOCS:
        soc = load_soc(name)
        for op in ops:
            shape = h._vector_rows(op)
            splits = list(dict.fromkeys(h._vector_split(op, shape, k, None) for k in range(soc.vector_cores, 0, -1)))
            want = [h._vector_cands(soc, op, shape, impl, block, None) for impl, block in splits]
            rows, counts = h._vector_split_rows(soc, op, shape, splits)
            assert counts.tolist() == [len(w) for w in want]
            assert np.array_equal(rows, np.array([c for w in want for c in w], np.int64).reshape(-1, 4))
    calls = []
    real = h._vector_cands
    monkeypatch.setattr(h, "_vector_cands", lambda *a: calls.append(a) or real(*a))
    op = sim.VectorOp("Relu", (32, 256, 56, 56))
    h.default_vector(load_soc("Ascend910B2"), op)
    assert calls == []
    h.default_vector(load_soc("Ascend910B2"), op, {0})      # a restricted implementation: the per-budget lists
    assert len(calls) > 1
