"""Orders of a space's outer choices as the search drivers read them: by bound (ties by a seeded key or by
priced time), sorted only as far as they are read, and numpy's stable sorts through dense ranks.

The drivers read a short head of each order (pruning stops them where the bounds reach the best time),
so sorting tens of thousands of outer choices whole is mostly wasted; every order here equals the
full stable sort it stands for (`tests/test_opat_search.py` checks them against numpy's).
"""
from __future__ import annotations

from typing import Any

import numpy as np


def bound_queue(times_outer: np.ndarray, lb: np.ndarray, best: float | None) -> np.ndarray | LazyOrder:
    """Outer choices by bound, ties by priced time: `np.lexsort((times_outer, lb))`, or with `best` only
    its head below `best`.

    The bound queue stops at its first outer choice whose bound reaches the best time, which only
    falls: with the best time phase 2 starts from, what comes after that choice is never read.
    """
    if best is not None:
        over = lb >= best
        if over.any():       # (else the whole order: NaN bounds, sorted last, are read too)
            head = np.flatnonzero(lb < best)
            return LazyOrder(head, (times_outer[head], lb[head]))
    return lexsort((times_outer, lb))


class LazyOrder:
    """`idx[lexsort(keys)]` (keys: one value per entry of `idx`) sorted only as far as it is read (`head`).

    The head of k is the sort of the entries whose last (primary) key is at most its k-th least, which
    all come before any other (the order of `BoundOrder`, with the index as the last tie-break)."""

    def __init__(self, idx: np.ndarray, keys: tuple[np.ndarray, ...]) -> None:
        self.idx, self.keys = idx, keys
        self.order: np.ndarray | None = None   # the whole order, once sorted

    def __len__(self) -> int:
        return len(self.idx)

    def head(self, k: int) -> np.ndarray:
        """At least the first min(k, len) entries of the order."""
        if self.order is not None:
            return self.order
        p = self.keys[-1]
        if 4 * k < len(p):
            v = np.partition(p, k - 1)[k - 1]
            sel = np.flatnonzero(p <= v)
            if len(sel) >= k:               # (fewer: NaN keys, which sort last)
                return self.idx[sel[lexsort(tuple(key[sel] for key in self.keys))]]
        self.order = self.idx[lexsort(self.keys)]
        return self.order


def by_bound(lb: np.ndarray, rng: np.random.Generator) -> BoundOrder:
    """Indices in order of their bound, ties in a seeded random order (`BoundOrder`: sorted as read)."""
    return BoundOrder(lb, rng.permutation(len(lb)))


class BoundOrder:
    """The order of `np.lexsort((key, lb))` (`key`: a permutation), sorted only as far as it is read.

    The drivers read a short head of it (pruning stops them where the bounds reach the best time, a
    few thousand of tens of thousands of outer choices): the head of k is the sort of the indices
    whose bound is at most the k-th least, which all come before any other. Index or slice it like
    the array.
    """

    def __init__(self, lb: np.ndarray, key: np.ndarray) -> None:
        self.lb, self.key = lb, key
        self.head = np.zeros(0, np.int64)   # the order's first len(head) indices
        self.whole = not len(lb)
        self.by_key: np.ndarray | None = None   # the indices in the order of their keys

    def __len__(self) -> int:
        return len(self.lb)

    def __getitem__(self, at: int | slice) -> Any:
        end = (at.stop if at.stop is not None else len(self.lb)) if isinstance(at, slice) else at + 1
        if end <= 0 or (isinstance(at, slice) and (at.start or 0) < 0):
            end = len(self.lb)                # counted from the end: the whole order
        if end > len(self.head) and not self.whole:
            self._grow(end)
        return self.head[at]

    def _grow(self, k: int) -> None:
        n, lb = len(self.lb), self.lb
        k = max(k, 2 * len(self.head), 1024)  # doubling: a few partitions per search at most
        if self.by_key is None:
            self.by_key = np.empty(n, np.int64)
            self.by_key[self.key] = np.arange(n)
        # listed in the order of their keys, a stable sort by bound keeps tied ones in that order
        if 4 * k < n:
            v = np.partition(lb, k - 1)[k - 1]
            below = lb <= v
            if np.count_nonzero(below) >= k:  # (fewer: NaN bounds, which sort last)
                sel = self.by_key[below[self.by_key]]
                self.head = sel[lexsort((lb[sel],))]
                return
        # most of it: the whole order
        self.head, self.whole = self.by_key[lexsort((lb[self.by_key],))], True


def ranks(x: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's rank among the distinct values of `x` (NaN last, all NaN equal, as numpy sorts
    them), and how many there are.

    Sorting by ranks combined into one distinct integer per index (`lexsort`) gives a stable sort's
    order with numpy's unstable (vectorised) sort, several times faster than its stable ones.
    """
    o = np.argsort(x)
    s = x[o]
    new = np.empty(len(x), bool)
    new[:1] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    if len(s) and s[-1] != s[-1]:      # NaN (sorted last): one rank for them all
        new[1:] &= ~(np.isnan(s[1:]) & np.isnan(s[:-1]))
    c = np.cumsum(new)
    r = np.empty(len(x), np.int64)
    r[o] = c - 1
    return r, int(c[-1]) if len(c) else 0


def lexsort(keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """`np.lexsort(keys)` (the last key first, ties in index order), by the keys' dense ranks: as 16-bit
    integers where they fit (numpy's stable sort of those is a radix sort), else one distinct integer
    per index sorted by numpy's unstable (vectorised) sort."""
    m = len(keys[0])
    ranked = [ranks(k) for k in keys]
    if all(n_r <= 1 << 16 for _, n_r in ranked):
        return np.lexsort(tuple(r.astype(np.uint16) for r, _ in ranked))
    code, span = np.zeros(m, np.int64), 1
    for r, n_r in reversed(ranked):
        span *= max(1, n_r)
        if span * max(1, m) >= 1 << 62:
            return np.lexsort(keys)          # (would overflow: tens of millions of rows)
        code = code * max(1, n_r) + r
    return np.argsort(code * m + np.arange(m))
