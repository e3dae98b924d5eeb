"""The matmul staging template: which L1 steps, iterate orders and ping-pong settings a block class has.

`MM_INNER` lists the small fields' combinations once, with two K steps that depend on the outer row
coded (0: the whole K panel, -1: CANN's 256-element chunks); `UP_A` / `UP_B` pair each row with its
L1 ping-pong upgrade. The native matmul expander (`aoe.opat.inner.MatmulExpander`) resolves the
codes for one K block and K-iteration count (a resolved code is kept only where it is not one of the
powers of two already; A's and B's steps must divide one another) and keeps, per block class, the
rows that are legal and not dominated.
"""
from __future__ import annotations

import itertools

import numpy as np


def _small_dims_template() -> np.ndarray:
    """Combinations of the small fields: step K (A, B), step M/N, iterate order, L1 ping-pong (A, B).

    L0 ping-pong is not enumerated: in the model (as on the hardware) it never slows a kernel down,
    so it is on whenever the base block leaves room for it (a dominance prune, not a heuristic).
    """
    steps = [1, 2, 4, 8, 16]
    rows = [r for r in itertools.product(steps, steps, [1, 2], [1, 2], [0, 1], [0, 1], [0, 1])
            if r[0] % r[1] == 0 or r[1] % r[0] == 0]
    # K steps that depend on the outer row: 0 = the whole K panel, -1 = CANN's 256-element chunks
    # (equal for A and B); and one operand's whole K panel with the other streamed in power-of-two
    # steps (A resident along K while B flows, or the reverse; one must divide the other). Only kept
    # where they are not already one of the powers of two above.
    small = list(itertools.product([1, 2], [1, 2], [0, 1], [0, 1], [0, 1]))
    rows += [(s, s, *r) for s in (0, -1) for r in small]
    rows += [p for s in steps for r in small for p in ((0, s, *r), (s, 0, *r))]
    return np.array(rows, dtype=np.int64)


MM_INNER = _small_dims_template()


def _db_upgrades(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each template row, the row with L1 ping-pong of A on (and of B on), all else equal."""
    index = {tuple(r): i for i, r in enumerate(t.tolist())}
    up_a = np.array([index[(*r[:5], 1, r[6])] for r in t.tolist()], np.int64)
    up_b = np.array([index[(*r[:6], 1)] for r in t.tolist()], np.int64)
    return up_a, up_b


# L1 ping-pong only ever hides loads (the model, as the hardware, never runs slower with it): a
# staging without it is kept only where the same staging with it does not fit L1
UP_A, UP_B = _db_upgrades(MM_INNER)
