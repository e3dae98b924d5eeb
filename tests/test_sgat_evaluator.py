"""The SGAT fusion-plan evaluator on hand-made subgraphs: costs worked out by hand from the formulas of
aoe/sgat/evaluator.py, each rule that makes a plan invalid on its own, and the evaluator's argument checks.

tests/test_sgat.py covers the evaluator on the zoo's real subgraphs (unfused plans, inconsistent and
non-convex plans, barriers under the row split, a tiny UB, separated SoCs, batch = one by one).
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

from aoe.sgat.evaluator import evaluate, evaluate_arrays, kernel_costs
from aoe.sgat.model import (
    BARRIER, BYTES, CROWS, CUBE, MINTILE, N_EDGEF, N_OPF, N_SOCP, READB, ROW, S_CUBE_CORES, S_HANDOFF_US,
    S_HBM_BPUS, S_INSTR_US, S_L0C, S_L1, S_L2_BPUS, S_L2CAP, S_LAT_US, S_LAUNCH, S_SEPARATED, S_TILE_US, S_UB,
    S_VEC_CORES, RegionData)
from aoe.sgat.search import _complete

# Two Vector operators a -> b over a 1024 x 2 fp16 tensor (2048 elements, 4096 bytes): a reads x and
# writes t (read only by b), b reads t and writes y. Columns: T, C, M, R, BYTES, CUBE, EMAIN, ROW,
# RED, OUTB, CROWS, CRUN.
OP_A = [10.0, 3.0, 6.0, 1.0, 8192.0, 0.0, 2048.0, 0.0, 0.0, 4096.0, 1024.0, 2.0]
OP_B = [8.0, 2.0, 4.0, 0.5, 8192.0, 0.0, 2048.0, 0.0, 0.0, 4096.0, 1024.0, 2.0]


def _socp(**over: float) -> np.ndarray:
    p = np.zeros(N_SOCP)
    p[[S_LAUNCH, S_HBM_BPUS, S_L2_BPUS, S_UB, S_L0C, S_L1, S_L2CAP]] = [2.0, 1000.0, 4000.0, 1e6, 1e6, 1e6, 1e9]
    p[[S_TILE_US, S_SEPARATED, S_HANDOFF_US, S_CUBE_CORES, S_VEC_CORES, S_INSTR_US, S_LAT_US]] = \
        [0.01, 0.0, 0.5, 4.0, 8.0, 0.001, 0.1]
    names = {"ub": S_UB, "l0c": S_L0C, "l1": S_L1, "l2cap": S_L2CAP}
    for k, v in over.items():
        p[names[k]] = v
    return p


def _pair(a: list[float] = OP_A, b: list[float] = OP_B, barrier: float = 0.0, mintile: float = 0.0,
          **socp: float) -> RegionData:
    """The subgraph a -> b with the edge reading 4096 bytes and t (4096 bytes) handed from a to b."""
    edgef = np.zeros((1, N_EDGEF))
    edgef[0, READB], edgef[0, BARRIER], edgef[0, MINTILE] = 4096.0, barrier, mintile
    return RegionData(2, np.array([[0, 1]], dtype=np.int64), np.array([a, b], dtype=np.float64), edgef,
                      np.array([[0, 0b10]], dtype=np.int64), np.array([[4096.0, 0.0]]),
                      np.array([0b11, 0b10], dtype=np.int64), np.array([0b01, 0b11], dtype=np.int64),
                      _socp(**socp))


def _t(rd: RegionData, fused: int, split: int, tile: int, l2: int) -> float:
    return float(evaluate(rd, np.array([[fused, split, tile, l2]]))[0])


def _with(row: list[float], col: int, value: float) -> list[float]:
    out = list(row)
    out[col] = value
    return out


def test_costs_worked_out_by_hand() -> None:
    rd = _pair()
    assert _t(rd, 0, 0, 0, 0) == 18.0                     # unfused: the default times, 10 + 8
    # fused, rows, 512-element tiles: 4 of 8 cores busy (compute x 2), one tile per core; t is neither
    # read from nor written to HBM (half of each op's bytes): memory (6 + 4) / 2 = 5 < compute (3 + 2) x 2;
    # launch 2 + max(10, 5, set-up 0.012) + largest rest 1 + a quarter of the other 0.5
    assert _t(rd, 1, 0, 0, 0) == pytest.approx(13.125, rel=1e-12)
    # 2048-element tiles: one core does everything
    assert _t(rd, 1, 0, 2, 0) == pytest.approx(2 + 5 * 8 + 1 + 0.125, rel=1e-12)
    # live tiles 512 x (4 + 4) elements' bytes x 1.25 = 5120: UB of 6000 holds them once, not twice, so
    # compute, memory, set-up and one GM latency per tile add up
    assert _t(_pair(ub=6000.0), 1, 0, 0, 0) == pytest.approx(2 + (10 + 5 + 0.012 + 0.1) + 1 + 0.125, rel=1e-12)
    assert _t(_pair(ub=5000.0), 1, 0, 0, 0) == np.inf       # not even single-buffered
    # L2 flag, unfused: b reads t from L2 at 1/4 of the HBM time, 3072 of its 8192 bytes saved:
    # 8 - (max(2, 4) - max(2, 4 x 0.625))
    assert _t(rd, 0, 0, 0, 1) == pytest.approx(10 + 6.5, rel=1e-12)
    assert list(kernel_costs(rd, np.array([0b01, 0b10, 0b11]), 0, 0, 1)) == pytest.approx([10, 6.5, 13.125])


def test_each_rule_that_makes_a_plan_invalid() -> None:
    rd = _pair()
    for bad in ([2, 0, 0, 0], [0, 2, 0, 0], [0, 0, 8, 0], [0, 0, -1, 0], [0, 0, 0, 2], [-1, 0, 0, 0]):
        assert _t(rd, *bad) == np.inf, bad                  # a value out of range
    # a barrier edge (b needs a whole-tensor result of a) never fuses under the row split; under the
    # column split a tile holds whole columns and the reduction finishes inside it
    barrier = _pair(barrier=1.0)
    assert _t(barrier, 1, 0, 5, 0) == np.inf and np.isfinite(_t(barrier, 1, 1, 5, 0))
    assert _t(barrier, 0, 0, 5, 0) == 18.0
    # column split: a 1024-element column needs a 1024-element tile; a column block (tile / column
    # length whole columns x 2 bytes) needs 32 bytes: 16 columns, 16384-element tiles (t = 5)
    assert _t(rd, 1, 1, 0, 0) == np.inf                     # tile < one column
    assert _t(rd, 1, 1, 4, 0) == np.inf                     # 8 columns: 16-byte blocks
    assert np.isfinite(_t(rd, 1, 1, 5, 0))
    assert _t(_pair(a=_with(OP_A, CROWS, 4096.0)), 1, 1, 5, 0) == np.inf   # a longer column of a
    # a Softmax / LayerNorm row of 1024 elements: whole rows in a tile under the row split, never
    # under the column split
    row = _pair(b=_with(OP_B, ROW, 1024.0))
    assert _t(row, 1, 0, 0, 0) == np.inf and np.isfinite(_t(row, 1, 0, 1, 0))
    assert _t(row, 1, 1, 5, 0) == np.inf and np.isfinite(_t(row, 0, 1, 5, 0))
    # a Vector -> Cube edge kept on chip: the Cube needs a whole K panel (1000 elements) in the tile,
    # the operand tile (1024 x 4096 / 2048 x 2 = 4096 bytes) in L1, its accumulator tile (x 4 bytes) in L0C
    cube = _with(OP_B, CUBE, 1.0)
    assert _t(_pair(b=cube, mintile=1000.0), 1, 0, 0, 0) == np.inf
    assert np.isfinite(_t(_pair(b=cube, mintile=1000.0), 1, 0, 1, 0))
    assert _t(_pair(b=cube, mintile=1000.0, l1=4000.0), 1, 0, 1, 0) == np.inf
    assert _t(_pair(b=cube, mintile=1000.0, l0c=4000.0), 1, 0, 1, 0) == np.inf
    assert np.isfinite(_t(_pair(b=cube, mintile=1000.0, l1=4096.0, l0c=4096.0), 1, 0, 1, 0))
    # L2 residency: t (4096 bytes) is live between the two kernels
    assert _t(_pair(l2cap=4000.0), 0, 0, 0, 1) == np.inf
    assert _t(_pair(l2cap=4000.0), 0, 0, 0, 0) == 18.0 and _t(_pair(l2cap=4096.0), 0, 0, 0, 1) == 16.5


def test_the_evaluator_checks_its_arrays() -> None:
    rd = _pair()
    args = list(rd.arrays())
    plans = np.zeros((3, rd.plan_width), dtype=np.int64)
    with pytest.raises(TypeError, match="plans must be a numpy array of int64, got float64"):
        evaluate_arrays(plans.astype(np.float64), *args)
    with pytest.raises(ValueError, match=r"plans must have shape \(\?, 4\)"):
        evaluate_arrays(np.zeros((3, 5), dtype=np.int64), *args)
    for i, name in enumerate(("edges", "opf", "edgef", "tens", "tensf", "reach", "anc", "socp")):
        bad = list(args)
        bad[i] = args[i][..., :-1]                          # one column (or entry) short
        with pytest.raises(ValueError, match=name):
            evaluate_arrays(plans, *bad)
    bad = list(args)
    bad[1] = np.asfortranarray(rd.opf)
    with pytest.raises(ValueError, match="opf must be C-contiguous"):
        evaluate_arrays(plans, *bad)
    for i, value, what in ((0, 2, "edge end 2"), (3, -1, "tensor producer -1")):
        bad = list(args)
        bad[i] = args[i].copy()
        bad[i][0, 0] = value
        with pytest.raises(ValueError, match=what):
            evaluate_arrays(plans, *bad)
    big = RegionData(17, np.zeros((0, 2), dtype=np.int64), np.ones((17, N_OPF)), np.zeros((0, N_EDGEF)),
                     np.zeros((0, 2), dtype=np.int64), np.zeros((0, 2)), np.ones(17, dtype=np.int64),
                     np.ones(17, dtype=np.int64), rd.socp)
    with pytest.raises(ValueError, match="17 operators exceed the limit of 16"):
        evaluate(big, np.zeros((1, 3), dtype=np.int64))
    with pytest.raises(ValueError, match="out of range"):
        kernel_costs(rd, np.array([3]), 0, 8, 0)
    # a zero byte count is a division by zero, as in Python
    with pytest.raises(ZeroDivisionError):
        evaluate(_pair(a=_with(OP_A, BYTES, 0.0)), np.array([[1, 0, 0, 0]]))
    # reach / anc that contradict the edges (a <-> b): an error, never an endless loop
    loop = RegionData(2, np.array([[0, 1], [1, 0]], dtype=np.int64), rd.opf, np.zeros((2, N_EDGEF)),
                      rd.tens, rd.tensf, np.array([1, 2], dtype=np.int64), np.array([1, 2], dtype=np.int64),
                      rd.socp)
    with pytest.raises(ValueError, match="cycle"):
        evaluate(loop, np.array([[0, 0, 0, 0, 1]]))
    with pytest.raises(ValueError, match="k must be in 0..1"):
        _complete(np.zeros((1, 4), dtype=np.int64), 2, rd.edges, 2)


def _complete_reference(plan: list[int], k: int, edges: list[tuple[int, int]], n: int) -> list[int]:
    comp = list(range(n))
    for e in range(k):
        if plan[e] == 1:
            a, b = comp[edges[e][0]], comp[edges[e][1]]
            comp = [min(a, b) if c in (a, b) else c for c in comp]
    return plan[:k] + [int(comp[a] == comp[b]) for a, b in edges[k:]] + plan[len(edges):]


def test_plan_completion_matches_a_reference() -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        n = int(rng.integers(2, 9))
        pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
        edges = sorted(pairs[i] for i in rng.choice(len(pairs), int(rng.integers(1, min(12, len(pairs)) + 1)),
                                                    replace=False))
        e = len(edges)
        plans = np.concatenate([rng.integers(0, 2, (20, e)), rng.integers(0, 8, (20, 3))], axis=1)
        k = int(rng.integers(0, e + 1))
        got = _complete(plans.copy(), k, np.array(edges, dtype=np.int64), n)
        want = [_complete_reference(p, k, edges, n) for p in plans.tolist()]
        assert got.tolist() == want


def test_threads_share_the_evaluator() -> None:
    # the GIL is released while pricing: concurrent calls must neither share state nor disturb each other
    rd = _pair()
    plans = np.array([[f, s, t, l2] for f in (0, 1) for s in (0, 1) for t in range(8) for l2 in (0, 1)] * 2000)
    want = evaluate(rd, plans)
    got: list[np.ndarray] = []

    def work() -> None:
        for _ in range(5):
            got.append(evaluate(rd, plans))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert len(got) == 20 and all(np.array_equal(g, want) for g in got)
