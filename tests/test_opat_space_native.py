"""The native Schedule spaces (aoe._sim, csrc/space_*.cpp) against the numpy code they replaced.

`opat_space_reference.py` and `opat_inner_reference.py` (in tests/) are that numpy code. The native
spaces must give the same outer rows in the same order (the drivers order and break ties by it),
the same lower-bound bits and the same expansions and counts, or the tuning results would change.
"""
from __future__ import annotations

import numpy as np
import opat_inner_reference as ref_inner
import opat_space_reference as ref
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from aoe import AoeError, _sim, sim
from aoe.opat.inner import (ConvExpander, MatmulExpander, conv_shape, matmul_class_outer, matmul_impl_class,
                             matmul_shape)
from aoe.opat.space import conv_space, matmul_space, vector_space
from aoe.sim.heuristics import CONV_FIELDS, MM_FIELDS
from aoe.soc import load_soc

# the shipped SoCs and two made-up ones: small buffers and an odd core count, larger buffers
SOCS = {name: load_soc(name) for name in ("Ascend910B2", "Ascend910A", "Ascend310P3")}
SOCS["small"] = load_soc("Ascend910B2").replace(l1=262144, l0a=32768, l0b=32768, l0c=65536, cube_cores=7)
SOCS["large"] = load_soc("Ascend910A").replace(l1=2097152, l0a=131072, l0b=131072, l0c=524288, cube_cores=30)

FWD, DX, DW = "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"
CONV_OPS = [
    sim.Conv2D(x=(8, 64, 56, 56), weight=(64, 64, 3, 3), pads=(1, 1, 1, 1)),
    sim.Conv2D(x=(8, 64, 56, 56), weight=(64, 64, 3, 3), pads=(1, 1, 1, 1), op_type=DX),
    sim.Conv2D(x=(8, 64, 56, 56), weight=(64, 64, 3, 3), pads=(1, 1, 1, 1), op_type=DW),
    sim.Conv2D(x=(4, 96, 28, 28), weight=(96, 16, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1), groups=6, bias=True),
    sim.Conv2D(x=(2, 32, 30, 30), weight=(32, 1, 3, 3), pads=(1, 1, 1, 1), groups=32, op_type=DW),  # depthwise
    sim.Conv2D(x=(2, 32, 30, 30), weight=(32, 1, 3, 3), strides=(2, 2), pads=(1, 1, 1, 1), groups=32, op_type=DX),
    sim.Conv2D(x=(3, 3, 227, 227), weight=(96, 3, 11, 11), strides=(4, 4), dtype="float32"),
    sim.Conv2D(x=(5, 40, 17, 300), weight=(24, 40, 1, 1), dtype="int8", op_type=DX),  # a row wider than 256
    sim.Conv2D(x=(4, 32, 28, 28), weight=(64, 32, 3, 3), pads=(2, 2, 2, 2), dilations=(2, 2), dtype="float32",
               op_type=DW, bias=True),
    sim.Conv2D(x=(1, 17, 1, 1), weight=(33, 17, 1, 1)),
    sim.Conv2D(x=(32, 2048, 7, 7), weight=(512, 2048, 1, 1), op_type=DW),
    sim.Conv2D(x=(7, 13, 9, 11), weight=(19, 13, 2, 5), strides=(3, 2), pads=(0, 1, 2, 0), op_type=DX),
]
MM_OPS = [
    sim.MatMul(m=4096, n=3072, k=768),
    sim.MatMul(m=8192, n=8192, k=8192),                      # operands beyond L2: the L2 tilings
    sim.MatMul(m=64, n=4096, k=4096),                        # split-K
    sim.MatMul(m=96, n=80, k=200, batch=3, bias=True),
    sim.MatMul(m=300, n=70, k=1000, batch=12, batch_b=1, bias=True, a_format="FRACTAL_NZ", c_format="FRACTAL_NZ"),
    sim.MatMul(m=96, n=5000, k=3000, dtype="int8", b_format="FRACTAL_NZ"),
    sim.MatMul(m=2000, n=48, k=700, dtype="float32", trans_a=True),
    sim.MatMul(m=1, n=1, k=1),
    sim.MatMul(m=821, n=807, k=4266, trans_b=True),
]


def _pick(outer: np.ndarray, rng: np.random.Generator, n: int = 40) -> np.ndarray:
    """Some outer rows, a few of them twice (duplicates must expand as the reference expands them)."""
    idx = rng.integers(0, len(outer), size=min(n, 2 * len(outer)))
    return outer[idx]


def _seeds(soc, op, outer: np.ndarray, fields: list[str], order_col: int) -> list[np.ndarray]:
    """CANN's default strategy, and an outer row of the space with other inner fields and order."""
    d = sim.default_strategy(soc, op)
    seeds = [np.array([d[f] for f in fields], np.int64)]
    if len(outer):
        other = outer[len(outer) // 2].copy()
        other[order_col] = 1 - other[order_col]
        other[fields.index("pBufferFlag" if "pBufferFlag" in fields else "depthA1")] += 1
        seeds.append(other)
    return seeds


def _check_seeded(space_fn, soc, op, r_outer, r_lb, fields, cols, order_col) -> None:
    for seed in _seeds(soc, op, r_outer, fields, order_col):
        space = space_fn(soc, op, seed)
        outer, lb = ref.add_seed_outer(soc, r_outer, r_lb, seed, cols, order_col)
        assert np.array_equal(space.outer, outer) and space.lower_bound.tobytes() == lb.tobytes()


def _check_conv(soc, op, rng) -> None:
    space = conv_space(soc, op)
    r_outer, r_lb, r_exp = ref.conv_space(soc, op)
    assert space.outer.dtype == np.int64 and np.array_equal(space.outer, r_outer)
    assert space.lower_bound.dtype == np.float64 and space.lower_bound.tobytes() == r_lb.tobytes()
    _check_seeded(conv_space, soc, op, r_outer, r_lb, list(CONV_FIELDS), [0, 1, 2, 3, 8, 9, 10, 11], 13)
    exp = space.expand
    assert exp.count(space.outer) == r_exp.count(r_outer)
    if not len(r_outer):
        return
    pick = _pick(r_outer, rng)
    assert np.array_equal(exp(pick), r_exp(pick))
    groups = [pick[:7], pick[7:8], pick[8:8], pick[8:]]
    rows, bounds = exp.many(groups)
    r_rows, r_bounds = r_exp.many(groups)
    assert np.array_equal(rows, r_rows) and np.array_equal(bounds, r_bounds)
    # the L1 bytes of every ping-pong combination of some classes' stagings, to the bit
    for key in {tuple(int(v) for v in k) for k in exp.keys(pick[:6])}:
        base = np.unique(r_exp._stagings(key)[:, :3], axis=0)
        st = np.array([(*b, da, db) for b in base for da in (0, 1) for db in (0, 1)], np.int64).reshape(-1, 5)
        assert exp.l1_bytes(key, st).tobytes() == ref_inner.conv_l1_bytes(op, key, st).tobytes()
        assert np.array_equal(exp.stagings(key), r_exp._stagings(key))


def _check_matmul(soc, op, rng) -> None:
    space = matmul_space(soc, op)
    r_outer, r_lb, r_exp = ref.matmul_space(soc, op)
    assert space.outer.dtype == np.int64 and np.array_equal(space.outer, r_outer)
    assert space.lower_bound.tobytes() == r_lb.tobytes()
    _check_seeded(matmul_space, soc, op, r_outer, r_lb, list(MM_FIELDS), list(range(7)), 11)
    exp = space.expand
    for limit in (None, 0, 100, 5000, 10**9):
        assert exp.count(space.outer, limit) == r_exp.count(r_outer, limit)
    pick = _pick(r_outer, rng)
    full = r_exp(pick)
    assert np.array_equal(matmul_impl_class(op, full), ref_inner.matmul_impl_class(op, full))
    for cls in range(4):
        restaged = ref_inner._mm_restage(op, soc, cls, r_outer)
        mask = ref_inner.matmul_impl_class(op, restaged) == cls
        rows, got_mask = matmul_class_outer(soc, op, cls, r_outer)
        assert np.array_equal(got_mask, mask) and np.array_equal(rows, restaged[mask])
    groups = [pick[:9], pick[9:10], pick[10:10], pick[10:]]
    for impl in (None, 0, 1, 2, 3):
        ours, theirs = (exp, r_exp) if impl is None else (exp.only(impl), r_exp.only(impl))
        assert np.array_equal(ours(pick), theirs(pick))
        rows, bounds = ours.many(groups)
        r_rows, r_bounds = theirs.many(groups)
        assert np.array_equal(rows, r_rows) and np.array_equal(bounds, r_bounds)


@pytest.mark.parametrize("soc", sorted(SOCS))
@pytest.mark.parametrize("op", CONV_OPS, ids=lambda op: f"{op.op_type}-{op.x}-{op.weight}-g{op.groups}")
def test_conv_space_is_the_numpy_one(op, soc):
    _check_conv(SOCS[soc], op, np.random.default_rng(0))


@pytest.mark.parametrize("soc", sorted(SOCS))
@pytest.mark.parametrize("op", MM_OPS, ids=lambda op: f"{op.m}x{op.n}x{op.k}-b{op.batch}-{op.dtype}")
def test_matmul_space_is_the_numpy_one(op, soc):
    _check_matmul(SOCS[soc], op, np.random.default_rng(0))


@st.composite
def conv_ops(draw) -> sim.Conv2D:
    g = draw(st.sampled_from([1, 1, 1, 2, 3, 4]))
    cin, cout = g * draw(st.integers(1, 40)), g * draw(st.integers(1, 40))
    if draw(st.booleans()) and g == 1:   # depthwise
        g = cin = cout = draw(st.integers(2, 64))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    try:
        return sim.Conv2D(x=(draw(st.integers(1, 40)), cin, draw(st.integers(1, 60)), draw(st.integers(1, 60))),
                          weight=(cout, cin // g, kh, kw), strides=(draw(st.integers(1, 3)), draw(st.integers(1, 3))),
                          pads=tuple(draw(st.integers(0, 2)) for _ in range(4)),
                          dilations=(draw(st.integers(1, 2)), draw(st.integers(1, 2))), groups=g,
                          dtype=draw(st.sampled_from(["float16", "float32", "int8", "bfloat16"])),
                          bias=draw(st.booleans()), op_type=draw(st.sampled_from([FWD, DX, DW])))
    except AoeError:     # no output pixel, or a shape the kernel model refuses
        assume(False)
        raise


@st.composite
def matmul_ops(draw) -> sim.MatMul:
    batch = draw(st.sampled_from([1, 1, 2, 5]))
    return sim.MatMul(m=draw(st.integers(1, 6000)), n=draw(st.integers(1, 6000)), k=draw(st.integers(1, 9000)),
                      batch=batch, batch_b=draw(st.sampled_from([None, 1, batch])),
                      dtype=draw(st.sampled_from(["float16", "float32", "int8"])), bias=draw(st.booleans()),
                      a_format=draw(st.sampled_from(["ND", "FRACTAL_NZ"])),
                      b_format=draw(st.sampled_from(["ND", "FRACTAL_NZ"])),
                      trans_a=draw(st.booleans()), trans_b=draw(st.booleans()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=conv_ops(), soc=st.sampled_from(sorted(SOCS)), seed=st.integers(0, 1000))
def test_random_conv_spaces_are_the_numpy_ones(op, soc, seed):
    _check_conv(SOCS[soc], op, np.random.default_rng(seed))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=matmul_ops(), soc=st.sampled_from(sorted(SOCS)), seed=st.integers(0, 1000))
def test_random_matmul_spaces_are_the_numpy_ones(op, soc, seed):
    _check_matmul(SOCS[soc], op, np.random.default_rng(seed))


@pytest.mark.parametrize("soc", sorted(SOCS))
def test_vector_spaces_are_the_numpy_ones(soc):
    for op in (sim.VectorOp("Relu", (64, 4096)), sim.VectorOp("SoftmaxV2", (64, 1000), dtype="float32"),
               sim.VectorOp("LayerNorm", (32, 128, 768)), sim.VectorOp("Add", (3,), dtype="int8")):
        got, want = vector_space(SOCS[soc], op), ref.vector_space(SOCS[soc], op)
        assert got.dtype == want.dtype == np.int64 and np.array_equal(got, want)


def test_conv_splits_are_the_numpy_ones():
    for cores in (1, 7, 8, 24, 32, 40):
        for dims in ((1, 1, 1, 1), (2, 3, 7, 5), (1, 32, 56, 4), (6, 4, 28, 16), (1, 1, 300, 2)):
            assert np.array_equal(_sim.conv_splits(cores, *dims), ref._conv_splits(cores, *dims))


def test_bad_shapes_and_rows_are_refused():
    soc = SOCS["Ascend910B2"]
    op = CONV_OPS[0]
    with pytest.raises(ValueError):
        _sim.conv_space(soc.native, conv_shape(op)[:5])
    bad = conv_shape(op)
    bad[1] = 0
    with pytest.raises(ValueError):
        _sim.conv_space(soc.native, bad)
    with pytest.raises(ValueError):
        ConvExpander(soc, op)(np.zeros((3, 5), np.int64))
    mm = MM_OPS[0]
    with pytest.raises(ValueError):
        _sim.MatmulStagings(matmul_shape(soc, mm), soc.l1, np.zeros((3, 7), np.int64), np.zeros(2, np.int64),
                            np.zeros(3, np.int64))
    with pytest.raises(ValueError):
        MatmulExpander(soc, mm).count(np.zeros((2, 22), np.int64))
    assert len(ConvExpander(soc, op)(np.zeros((0, 14), np.int64))) == 0
