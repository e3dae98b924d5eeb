"""The Cube kernel sets agree bit for bit: SIMD batch loop, one-row full result, every instruction set.

The native module builds the matmul/conv model once per instruction set ("base", "x86-64-v3",
"x86-64-v4": 8 rows per AVX-512 step, "x86-64-v3": 4 per AVX2 step) and picks the widest the CPU runs. Every set the CPU runs is held
here to the same times and reasons, over valid rows of the search space, perturbed rows (each rejection
rule, mixed reasons within one SIMD step, overflowing fields) and row counts that leave a scalar tail.
"base" on x86-64 has no fused multiply-add, so its times may differ in the last bits only.
"""
from __future__ import annotations

import numpy as np
import pytest

from aoe import _sim, sim
from aoe.opat.space import space_for
from aoe.soc import load_soc

ISAS = ["base", "x86-64-v3", "x86-64-v4"]


def _runs(isa: str) -> bool:
    try:
        _sim._times_with(isa, load_soc("Ascend910B2").native, _sim.K_MATMUL, sim.MatMul(m=16, n=16, k=16).params(),
                         np.ones((1, len(_sim.strategy_fields(_sim.K_MATMUL))), np.int64))
    except ValueError:
        return False
    return True


RUNNABLE = [isa for isa in ISAS if _runs(isa)]

CASES = [
    ("Ascend910B2", sim.MatMul(m=4096, n=3072, k=768)),
    ("Ascend910B2", sim.MatMul(m=77, n=33, k=4000, batch=3, batch_b=1, trans_a=True, bias=True)),
    ("Ascend910A", sim.MatMul(m=1000, n=777, k=5000, a_format="FRACTAL_NZ", b_format="FRACTAL_NZ",
                              c_format="FRACTAL_NZ", trans_b=True, dtype="int8")),
    ("Ascend310P3", sim.MatMul(m=8192, n=8192, k=4096, batch=4, dtype="float32")),  # beyond L2: L2 tiling
    ("Ascend910B3", sim.MatMul(m=64, n=64, k=65536, dtype="bfloat16")),  # split-K
    ("Ascend910B2", sim.Conv2D(x=(32, 64, 56, 56), weight=(64, 64, 3, 3), pads=(1, 1, 1, 1), bias=True)),
    ("Ascend910B2", sim.Conv2D(x=(8, 96, 28, 28), weight=(96, 1, 3, 3), pads=(1, 1, 1, 1), groups=96,
                               op_type="Conv2DBackpropInput", strides=(2, 2))),
    ("Ascend910A", sim.Conv2D(x=(2, 64, 30, 30), weight=(128, 16, 3, 3), groups=4, dilations=(2, 2),
                              op_type="Conv2DBackpropFilter", dtype="float32")),
    ("Ascend310P3", sim.Conv2D(x=(4, 3, 224, 224), weight=(64, 3, 7, 7), strides=(2, 2), pads=(3, 3, 3, 3),
                               dtype="int8")),
]


def _rows(soc, op, n: int = 3000) -> np.ndarray:
    """Valid rows of the space, the same rows perturbed (one to three fields each), and noise."""
    rng = np.random.default_rng(7)
    parts, got = [], 0
    for chunk in space_for(soc, op).chunks(16):
        parts.append(chunk)
        got += len(chunk)
        if got >= n:
            break
    valid = np.concatenate(parts)[:n]
    bent = valid[rng.integers(0, len(valid), n)].copy()
    nf = valid.shape[1]
    for row in bent:
        for f in rng.integers(0, nf, rng.integers(1, 4)):
            row[f] = rng.choice([-1, 0, 1, 2, row[f] * 2, row[f] // 2, row[f] + 1, 1 << 20, 1 << 40])
    noise = rng.choice(np.array([0, 1, 2, 16, 32, 64, 128, 256, 1024]), (n // 4, nf))
    rows = np.concatenate([valid, bent, noise])
    rows = rows[rng.permutation(len(rows))]
    return np.ascontiguousarray(rows[: len(rows) - 5])  # not a whole number of SIMD steps


@pytest.mark.parametrize("soc_name,op", CASES, ids=[f"{s}-{type(o).__name__}{i}" for i, (s, o) in enumerate(CASES)])
def test_every_kernel_set_gives_the_same_bits(soc_name, op):
    soc = load_soc(soc_name)
    rows = _rows(soc, op)
    times, reasons = sim.simulate_times(soc, op, rows)
    batch = sim.simulate_batch(soc, op, rows)
    assert np.array_equal(batch.reason, reasons) and np.array_equal(batch.time_us, times)
    assert 0.2 < np.mean(reasons == 0) < 0.9 and len(np.unique(reasons)) >= 4  # a real mix
    for isa in RUNNABLE:
        for full in (False, True):
            t, r = _sim._times_with(isa, soc.native, op.kind, op.params(), rows, full)
            assert np.array_equal(r, reasons), (isa, full)
            if isa == "base" and _sim.CUBE_KERNELS != "base":
                ok = r == 0
                np.testing.assert_allclose(t[ok], times[ok], rtol=1e-14)
                assert np.isinf(t[~ok]).all()
            else:
                assert np.array_equal(t, times), (isa, full)


def test_the_widest_set_the_cpu_runs_is_the_one_in_use():
    assert _sim.CUBE_KERNELS == RUNNABLE[-1]
    assert _sim.CUBE_LANES == {"x86-64-v4": 8, "x86-64-v3": 4}.get(_sim.CUBE_KERNELS, 1)
    with pytest.raises(ValueError):
        _sim._times_with("no-such-set", load_soc("Ascend910B2").native, _sim.K_MATMUL,
                         sim.MatMul(m=16, n=16, k=16).params(), np.ones((1, 23), np.int64))


@pytest.mark.parametrize("soc_name,op", CASES[:2] + CASES[5:7], ids=lambda x: getattr(x, "name", str(x))[:20])
def test_huge_fields_take_the_exact_path_of_every_set(soc_name, op):
    # The AVX2 set converts through the mantissa only below 2^51 and divides without fdiv's correction
    # steps only for small operands; fields near and beyond those limits (and products that wrap) must
    # still give the one-row bits.
    soc = load_soc(soc_name)
    rng = np.random.default_rng(11)
    rows = _rows(soc, op, 1000)
    huge = np.array([1 << 50, (1 << 51) - 1, 1 << 51, (1 << 51) + 1, 1 << 52, (1 << 53) + 1, 1 << 62, -(1 << 62),
                     (1 << 63) - 1, -(1 << 63)], np.int64)
    for row in rows[::2]:
        row[rng.integers(0, rows.shape[1])] = rng.choice(huge)
    ref_t, ref_r = _sim._times_with(RUNNABLE[-1], soc.native, op.kind, op.params(), rows, True)  # one row
    assert 0 < np.mean(ref_r == 0) < 0.9
    for isa in RUNNABLE:
        for full in (False, True):
            t, r = _sim._times_with(isa, soc.native, op.kind, op.params(), rows, full)
            assert np.array_equal(r, ref_r), (isa, full)
            if isa == "base" and RUNNABLE[-1] != "base":  # no fused multiply-add (see the top)
                ok = r == 0
                np.testing.assert_allclose(t[ok], ref_t[ok], rtol=1e-14)
            else:
                assert np.array_equal(t, ref_t), (isa, full)


def test_step_ka_kb_rule_fires_exactly_when_neither_divides_the_other():
    # The SIMD sets test the stepKa/stepKb rule as "larger mod smaller != 0" (one modulo, not two); the
    # rule is: the steps differ and neither is a multiple of the other. Valid rows get every pair of
    # steps up to the K iterations (depths kept consistent), on every set, SIMD and one-row.
    soc = load_soc("Ascend910B2")
    op = sim.MatMul(m=4096, n=3072, k=768)
    F = {name: i for i, name in enumerate(_sim.strategy_fields(_sim.K_MATMUL))}
    valid = np.concatenate([c for _, c in zip(range(40), space_for(soc, op).chunks(16))])
    rows, fires = [], []
    for row in valid[::7]:
        k_iter = -(-min(row[F["singleCoreK"]], 768) // row[F["baseK"]])
        for a in range(1, k_iter + 1):
            for b in range(1, k_iter + 1):
                r = row.copy()
                r[F["stepKa"]], r[F["stepKb"]] = a, b
                r[F["depthA1"]], r[F["depthB1"]] = r[F["stepM"]] * a, r[F["stepN"]] * b
                rows.append(r)
                fires.append(a != b and a % b != 0 and b % a != 0)
    rows, fires = np.ascontiguousarray(np.array(rows)), np.array(fires)
    assert 0.1 < fires.mean() < 0.9
    for isa in RUNNABLE:
        for full in (False, True):
            _, r = _sim._times_with(isa, soc.native, op.kind, op.params(), rows, full)
            assert np.array_equal(r == 9, fires), (isa, full)  # 9: RS_INCONSISTENT
            assert np.isin(r[~fires], [0, 7]).all()  # otherwise valid, or over L1 with the deeper buffers
