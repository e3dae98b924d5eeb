"""The matmul staging template: which L1 steps, iterate orders and ping-pong settings a block class has.

`MM_INNER` lists the small fields' combinations once; `k_stagings` resolves it for one K block and
K-iteration count (the whole-panel and 256-element codes become real steps); `aoe.opat.inner`'s
matmul expander keeps, per block class, the rows that are legal and not dominated.
"""
from __future__ import annotations

import functools
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
STEP_MAX = int(MM_INNER[:, 2:4].max())     # the largest M/N step of the template


def _db_upgrades(t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each template row, the row with L1 ping-pong of A on (and of B on), all else equal."""
    index = {tuple(r): i for i, r in enumerate(t.tolist())}
    up_a = np.array([index[(*r[:5], 1, r[6])] for r in t.tolist()], np.int64)
    up_b = np.array([index[(*r[:6], 1)] for r in t.tolist()], np.int64)
    return up_a, up_b


# L1 ping-pong only ever hides loads (the model, as the hardware, never runs slower with it): a
# staging without it is kept only where the same staging with it does not fit L1
UP_A, UP_B = _db_upgrades(MM_INNER)


@functools.lru_cache(maxsize=4096)
def k_stagings(bk: int, k_iter: int) -> tuple[np.ndarray, np.ndarray]:
    """The `MM_INNER` template for one K block and K-iteration count: the staging fields of every
    template row (columns as `_MM_STAGING`) and which rows are legal on the K side alone."""
    t = MM_INNER  # stepKa, stepKb, stepM, stepN, order, L1 db A, L1 db B
    chunk = max(1, min(k_iter, max(1, 256 // bk)))
    ska = np.where(t[:, 0] == 0, k_iter, np.where(t[:, 0] == -1, chunk, t[:, 0]))
    skb = np.where(t[:, 1] == 0, k_iter, np.where(t[:, 1] == -1, chunk, t[:, 1]))
    def fresh(code: np.ndarray, step: np.ndarray) -> np.ndarray:
        # the whole-panel and 256-chunk steps only where they are not one of the powers of two already
        pow2 = (step & (step - 1)) == 0
        return (code > 0) | ((~pow2 | (step > 16)) & ((code == 0) | (step != k_iter)))

    table = np.stack([ska, skb, t[:, 2], t[:, 3], t[:, 4], t[:, 2] * ska * (1 + t[:, 5]),
                      t[:, 3] * skb * (1 + t[:, 6])], axis=1)
    legal = (ska <= k_iter) & (skb <= k_iter) & fresh(t[:, 0], ska) & fresh(t[:, 1], skb) \
        & ((ska % skb == 0) | (skb % ska == 0))
    table.setflags(write=False)
    legal.setflags(write=False)
    return table, legal
