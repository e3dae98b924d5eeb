"""Property tests of the simulator's invariants (hypothesis): roofline, monotonicity, batch == single."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from aoe import sim
from aoe.sim.heuristics import MM_FIELDS
from aoe.soc import load_soc

SOCS = ["Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend310P3"]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@st.composite
def matmul_case(draw):
    """A random matmul and a random strategy built to satisfy the structural rules (may still overflow)."""
    soc = load_soc(draw(st.sampled_from(SOCS)))
    dtype = draw(st.sampled_from(["float16", "bfloat16", "float32", "int8"]))
    m = draw(st.integers(1, 3000))
    n = draw(st.integers(1, 3000))
    k = draw(st.integers(1, 3000))
    batch = draw(st.sampled_from([1, 1, 2, 7]))
    op = sim.MatMul(m=m, n=n, k=k, batch=batch, dtype=dtype,
                    a_format=draw(st.sampled_from(["ND", "FRACTAL_NZ"])),
                    b_format=draw(st.sampled_from(["ND", "FRACTAL_NZ"])),
                    c_format=draw(st.sampled_from(["ND", "FRACTAL_NZ"])),
                    trans_a=draw(st.booleans()), trans_b=draw(st.booleans()), bias=draw(st.booleans()))
    ea = {"float16": 2, "bfloat16": 2, "float32": 4, "int8": 1}[dtype]
    k0 = 32 // ea
    bm = min(draw(st.sampled_from([16, 32, 64, 128, 256])), _align(m, 16))
    bn = min(draw(st.sampled_from([16, 32, 64, 128, 256])), _align(n, 16))
    bk = min(draw(st.sampled_from([1, 2, 4, 8])) * k0, _align(k, k0))
    sm = min(bm * draw(st.integers(1, 8)), _align(m, 16))
    sn = min(bn * draw(st.integers(1, 8)), _align(n, 16))
    sk = k if draw(st.booleans()) else min(_align(k, k0), bk * draw(st.integers(1, 8)))
    tm, tn, tk = min(sm, m), min(sn, n), min(sk, k)
    m_iter, n_iter, k_iter = _cdiv(tm, bm), _cdiv(tn, bn), _cdiv(tk, bk)
    assume(bm <= _align(tm, 16) and bn <= _align(tn, 16) and bk <= _align(tk, k0))
    step_m = draw(st.integers(1, m_iter))
    step_n = draw(st.integers(1, n_iter))
    step_ka = draw(st.sampled_from([s for s in (1, 2, 4, 8) if s <= k_iter] or [1]))
    step_kb = draw(st.sampled_from([s for s in (1, 2, 4, 8) if s <= k_iter] or [1]))
    tasks = batch * _cdiv(m, sm) * _cdiv(n, sn) * _cdiv(k, sk)
    used = draw(st.integers(1, min(tasks, soc.cube_cores)))
    mb, nb = _cdiv(m, sm), _cdiv(n, sn)
    l2_m, l2_n = draw(st.integers(1, mb)), draw(st.integers(1, nb))
    strat = {
        "usedCoreNum": used, "singleCoreM": sm, "singleCoreN": sn, "singleCoreK": sk,
        "baseM": bm, "baseN": bn, "baseK": bk,
        "depthA1": step_m * step_ka * draw(st.sampled_from([1, 2])),
        "depthB1": step_n * step_kb * draw(st.sampled_from([1, 2])),
        "stepM": step_m, "stepN": step_n, "iterateOrder": draw(st.sampled_from([0, 1])),
        "stepKa": step_ka, "stepKb": step_kb,
        "dbL0A": draw(st.sampled_from([0, 1])), "dbL0B": draw(st.sampled_from([0, 1])),
        "dbL0C": draw(st.sampled_from([0, 1])),
        "l2MTileCnt": _cdiv(mb, l2_m), "l2NTileCnt": _cdiv(nb, l2_n), "l2MTileBlock": l2_m, "l2NTileBlock": l2_n,
        "l2IterateOrder": draw(st.sampled_from([0, 1])), "tilingEnable": draw(st.sampled_from([0, 1])),
    }
    return soc, op, strat


@st.composite
def vector_case(draw):
    """A random vector kernel and strategy."""
    soc = load_soc(draw(st.sampled_from(SOCS)))
    name = draw(st.sampled_from(["Add", "Mul", "Relu", "Gelu", "Cast", "SoftmaxV2", "LayerNorm", "ReduceSumD",
                                 "ReduceMeanD", "Transpose", "AvgPool", "MaxPool", "ApplyAdamD", "RealDiv"]))
    dtype = draw(st.sampled_from(["float16", "float32"]))
    if name in ("AvgPool", "MaxPool"):
        shape = (draw(st.integers(1, 8)), draw(st.integers(1, 64)), draw(st.integers(3, 64)), draw(st.integers(3, 64)))
        op = sim.VectorOp(name, shape, dtype=dtype, ksize=(3, 3), strides=(draw(st.integers(1, 2)),) * 2)
    else:
        rank = draw(st.integers(1, 4))
        shape = tuple(draw(st.integers(1, 300)) for _ in range(rank))
        axes = tuple(sorted(set(draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank)))))
        kwargs = {}
        if name.startswith("Reduce"):
            kwargs["axes"] = axes
        if name == "Transpose":
            kwargs["perm"] = tuple(draw(st.permutations(range(rank))))
        if name == "Cast":
            kwargs["out_dtype"] = "float32" if dtype == "float16" else "float16"
        op = sim.VectorOp(name, shape, dtype=dtype, **kwargs)
    ea = 2 if dtype == "float16" else 4
    strat = {"blockDim": draw(st.integers(1, soc.vector_cores)),
             "tileLen": (32 // ea) * draw(st.integers(1, 4096)),
             "doubleBuffer": draw(st.sampled_from([0, 1])), "impl": draw(st.integers(0, op.impls - 1))}
    return soc, op, strat


@st.composite
def conv_case(draw):
    """A random convolution (any direction) and a default-derived or perturbed strategy."""
    soc = load_soc(draw(st.sampled_from(SOCS)))
    groups = draw(st.sampled_from([1, 1, 2, 4]))
    c = groups * draw(st.integers(1, 48))
    cout = groups * draw(st.integers(1, 48))
    kh, kw = draw(st.sampled_from([1, 3, 5])), draw(st.sampled_from([1, 3]))
    h, w = draw(st.integers(kh, 40)), draw(st.integers(kw, 40))
    op = sim.Conv2D(x=(draw(st.integers(1, 8)), c, h, w), weight=(cout, c // groups, kh, kw),
                    strides=(draw(st.integers(1, 2)), draw(st.integers(1, 2))),
                    pads=(kh // 2, kh // 2, kw // 2, kw // 2), groups=groups,
                    dtype=draw(st.sampled_from(["float16", "float32"])),
                    op_type=draw(st.sampled_from(["Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"])))
    strat = sim.default_strategy(soc, op)
    field = draw(st.sampled_from(list(strat)))
    strat = dict(strat)
    if draw(st.booleans()):
        strat[field] = max(1, strat[field] * draw(st.sampled_from([1, 2])) // draw(st.sampled_from([1, 2])))
    return soc, op, strat


def _roofline_holds(soc, op, strat) -> bool:
    r = sim.simulate(soc, op, strat)
    if not r.valid:
        return True
    b = sim.simulate_batch(soc, op, [strat])
    peak = soc.peak_flops[getattr(op, "dtype", "float16")]
    floor_compute = float(b.flops[0]) / peak * 1e6 if not isinstance(op, sim.VectorOp) else 0.0
    floor_memory = float(b.bytes[0]) / soc.hbm_bytes_per_s * 1e6
    assert r.time_us >= floor_compute * (1 - 1e-9), (r.time_us, floor_compute)
    assert r.time_us >= floor_memory * (1 - 1e-9), (r.time_us, floor_memory)
    assert float(b.hbm_bytes[0]) >= float(b.bytes[0]) * (1 - 1e-9)
    return True


@SETTINGS
@given(matmul_case())
def test_matmul_roofline(case):
    assert _roofline_holds(*case)


@SETTINGS
@given(vector_case())
def test_vector_roofline(case):
    assert _roofline_holds(*case)


@SETTINGS
@given(conv_case())
def test_conv_roofline(case):
    assert _roofline_holds(*case)


@SETTINGS
@given(st.one_of(matmul_case(), vector_case(), conv_case()), st.sampled_from([1.25, 2.0, 8.0]))
def test_more_bandwidth_never_slower(case, factor):
    soc, op, strat = case
    base = sim.simulate(soc, op, strat)
    more = sim.simulate(soc.replace(hbm_gbps=soc.hbm_gbps * factor, ddr_rate=soc.ddr_rate * factor,
                                    l2_gbps=soc.l2_gbps * factor), op, strat)
    assert base.valid == more.valid
    if base.valid:
        assert more.time_us <= base.time_us * (1 + 1e-12)


@SETTINGS
@given(st.one_of(matmul_case(), vector_case(), conv_case()), st.integers(1, 64))
def test_more_cores_never_slower(case, extra):
    soc, op, strat = case
    base = sim.simulate(soc, op, strat)
    more = sim.simulate(soc.replace(cube_cores=soc.cube_cores + extra, vector_cores=soc.vector_cores + extra),
                        op, strat)
    assert base.valid <= more.valid  # a strategy valid on fewer cores stays valid
    if base.valid:
        assert more.time_us <= base.time_us * (1 + 1e-12)


@SETTINGS
@given(st.one_of(matmul_case(), vector_case(), conv_case()))
def test_batch_equals_single(case):
    soc, op, strat = case
    single = sim.simulate(soc, op, strat)
    fields = sim.strategy_fields(op)
    row = [strat[f] for f in fields]
    rows = np.array([row, row, row], dtype=np.int64)
    times, reasons = sim.simulate_times(soc, op, rows, threads=2)
    batch = sim.simulate_batch(soc, op, rows)
    assert sim.REASONS[int(reasons[1])] == single.reason
    if single.valid:
        assert times[2] == single.time_us
        assert batch.time_us[0] == single.time_us
        assert dict(zip(sim.PIPES, batch.busy_us[1])) == single.busy_us
    else:
        assert np.isinf(times).all()


def test_large_batch_threads_agree():
    """Multi-threaded evaluation of a big batch gives bit-identical results to one thread."""
    soc = load_soc("Ascend910B2")
    op = sim.MatMul(m=1024, n=768, k=3072)
    from aoe.opat.space import space_for

    space = np.concatenate(list(space_for(soc, op).chunks()))[:50000]
    t1, r1 = sim.simulate_times(soc, op, space, threads=1)
    t2, r2 = sim.simulate_times(soc, op, space, threads=2)
    assert np.array_equal(r1, r2)
    assert np.array_equal(t1, t2)
    assert len(MM_FIELDS) == space.shape[1]
