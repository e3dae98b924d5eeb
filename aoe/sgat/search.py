"""Plan search for one subgraph: exact DP on chains, exhaustive when small, beam + local search else.

All three call the same evaluator (`evaluator.py`), so they agree on what a plan costs:
- `dp_chain`: kernels 0 -> 1 -> ... -> n-1. Every kernel is a contiguous segment and its cost
  depends only on the segment, the tile index and the L2 flag (the L2 capacity rule becomes a rule
  on each segment boundary), so a shortest path over segment boundaries per (tile, L2) is exact.
- `exhaustive`: every plan, in batches (used up to `EXHAUSTIVE_LIMIT` plans).
- `beam`: decides the edges in order, keeping the `width` best partial plans per step (undecided
  edges completed consistently: fused when their ends are already in one kernel), starting from every
  (tile, L2) pair; then best-improvement local search from the six best finals until none helps.
Ties are broken by the plan's position in lexicographic order, so every search is deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .evaluator import S_L2CAP, complete, evaluate, kernel_costs, unfused_plan
from .model import N_SPLITS, N_TILES, RegionData

EXHAUSTIVE_LIMIT = 65536
BATCH = 65536


@dataclass(frozen=True)
class SearchResult:
    """The best plan found for one subgraph."""

    plan: np.ndarray
    time_us: float
    method: str          # dp | exhaustive | beam | baseline
    evaluated: int       # plans (or kernels, for dp) priced


def _best(plans: np.ndarray, times: np.ndarray) -> int:
    """Index of the fastest plan; ties go to the lexicographically smallest plan."""
    t = times.min()
    idx = np.flatnonzero(times == t)
    if len(idx) == 1:
        return int(idx[0])
    sub = plans[idx]
    order = np.lexsort(sub.T[::-1])
    return int(idx[order[0]])


def all_plans(rd: RegionData, start: int = 0, stop: int | None = None) -> np.ndarray:
    """Plans number start..stop-1 of the whole space (edge bits fastest, then split, tile, L2)."""
    e = rd.n_edges
    stop = rd.n_plans if stop is None else min(stop, rd.n_plans)
    k = np.arange(start, stop, dtype=np.int64)
    out = np.empty((len(k), e + 3), dtype=np.int64)
    if e:
        out[:, :e] = (k[:, None] >> np.arange(e, dtype=np.int64)) & 1
    rest = k >> e
    out[:, e] = rest % N_SPLITS
    out[:, e + 1] = (rest // N_SPLITS) % N_TILES
    out[:, e + 2] = rest // (N_SPLITS * N_TILES)
    return out


def exhaustive(rd: RegionData) -> SearchResult:
    """The optimum over every plan."""
    best_plan, best_t = unfused_plan(rd), float("inf")
    for s in range(0, rd.n_plans, BATCH):
        plans = all_plans(rd, s, s + BATCH)
        t = evaluate(rd, plans)
        i = _best(plans, t)
        if t[i] < best_t:
            best_plan, best_t = plans[i].copy(), float(t[i])
    return SearchResult(best_plan, best_t, "exhaustive", rd.n_plans)


def dp_chain(rd: RegionData) -> SearchResult:
    """Exact optimum of a chain subgraph by dynamic programming over segment boundaries."""
    if not rd.is_chain:
        raise ValueError("dp_chain needs a chain subgraph (edges i -> i+1 only)")
    n = rd.n
    segs = [(a, b) for a in range(n) for b in range(a, n)]
    masks = np.array([((1 << (b + 1)) - 1) ^ ((1 << a) - 1) for a, b in segs], dtype=np.int64)
    # bytes handed from op a-1 to later kernels across the boundary before op a
    handoff = np.zeros(n + 1)
    for t in range(rd.tens.shape[0]):
        p, readers = int(rd.tens[t, 0]), int(rd.tens[t, 1])
        if readers:
            handoff[p + 1] += rd.tensf[t, 0]
    cap = rd.socp[S_L2CAP]
    best: tuple[float, tuple[int, ...], int, int, int] | None = None
    evaluated = 0
    for l2, tile, split in ((a, b, c) for a in (0, 1) for b in range(N_TILES) for c in range(N_SPLITS)):
        cost = kernel_costs(rd, masks, split, tile, l2)
        evaluated += len(masks)
        seg_cost = {s: float(c) for s, c in zip(segs, cost)}
        # f[b] = best time of ops 0..b-1, with its segment ends (lexicographically smallest on ties)
        f: list[tuple[float, tuple[int, ...]]] = [(0.0, ())] + [(float("inf"), ())] * n
        for b in range(1, n + 1):
            for a in range(b):
                if l2 and a > 0 and handoff[a] > cap:
                    continue
                v = f[a][0] + seg_cost[(a, b - 1)]
                cand = (v, f[a][1] + (b - 1,))
                if cand[0] < f[b][0] or (cand[0] == f[b][0] and cand[1] < f[b][1]):
                    f[b] = cand
        cand_best = (f[n][0], f[n][1], split, tile, l2)
        if best is None or cand_best[0] < best[0]:
            best = cand_best
    assert best is not None
    _, ends, split, tile, l2 = best
    plan = np.zeros(rd.plan_width, dtype=np.int64)
    ends_set = set(ends)
    for i in range(n - 1):
        plan[i] = 0 if i in ends_set else 1
    plan[n - 1] = split
    plan[n] = tile
    plan[n + 1] = l2
    t = float(evaluate(rd, plan[None])[0])
    return SearchResult(plan, t, "dp", evaluated)


def _complete(plans: np.ndarray, k: int, edges: np.ndarray, n: int) -> np.ndarray:
    """Fill edges k.. of each plan: fused iff its ends are already in one kernel (compiled, in place when
    `plans` already is a C-contiguous int64 array); returns the plans."""
    return complete(plans, k, edges, n)


def beam(rd: RegionData, width: int = 32) -> SearchResult:
    """Deterministic beam search over the edges per (split, tile, L2), then local search."""
    e = rd.n_edges
    w = rd.plan_width
    combos = [(sp, tl, l2) for l2 in (0, 1) for tl in range(N_TILES) for sp in range(N_SPLITS)]
    evaluated = 0
    finals: list[tuple[float, np.ndarray]] = []
    # one beam per (split, tile, L2): which edges may fuse depends on them (barriers, row ops), so
    # partial plans of different combinations are not comparable early on
    for combo in combos:
        states = np.zeros((1, w), dtype=np.int64)
        states[0, e:] = combo
        for k in range(e):
            cand = np.repeat(states, 2, axis=0)
            cand[:, k] = np.tile([0, 1], len(states))
            cand = _complete(cand, k + 1, rd.edges, rd.n)
            cand = np.unique(cand, axis=0)          # sorted rows: deterministic order
            t = evaluate(rd, cand)
            evaluated += len(cand)
            order = np.argsort(t, kind="stable")[:width]
            states = cand[order]
        t = evaluate(rd, states)
        evaluated += len(states)
        i = _best(states, t)
        finals.append((float(t[i]), states[i].copy()))
    finals.sort(key=lambda x: (x[0], tuple(x[1])))
    best_t, plan = finals[0][0], finals[0][1]
    for t0, p0 in finals[:6]:
        if not np.isfinite(t0):
            continue
        q, tq, n_ls = local_search(rd, p0, t0)
        evaluated += n_ls
        if tq < best_t or (tq == best_t and tuple(q) < tuple(plan)):
            plan, best_t = q, tq
    base = unfused_plan(rd)
    base_t = float(evaluate(rd, base[None])[0])
    if not base_t >= best_t:
        plan, best_t = base, base_t
    return SearchResult(plan, best_t, "beam", evaluated + 1)


def neighbours(rd: RegionData, plan: np.ndarray) -> np.ndarray:
    """Plans one change away: an edge flipped (alone, or fused with every edge its merge closes), a
    fused and an unfused edge swapped, the split axis, another tile index, the L2 flag."""
    e = rd.n_edges
    rows = []
    for k in range(e):
        q = plan.copy()
        q[k] ^= 1
        rows.append(q)
        if q[k] == 1:
            # fuse edge k and every edge whose ends the merge puts in one kernel
            c = np.zeros((1, len(q)), dtype=np.int64)
            c[0] = q
            fused = c[0, :e].copy()
            order = np.argsort(-fused, kind="stable")   # fused edges first, then complete
            perm = np.concatenate([order, np.arange(e, len(q))])
            inv = np.argsort(perm)
            cp = c[:, perm]
            cp = _complete(cp, int(fused.sum()), rd.edges[order], rd.n)
            rows.append(cp[0, inv])
    for k in range(e):
        for j in range(k + 1, e):
            # two edges at once: moves a kernel boundary (unfuse one edge, fuse another)
            if plan[k] != plan[j]:
                q = plan.copy()
                q[k] ^= 1
                q[j] ^= 1
                rows.append(q)
    for sp in range(N_SPLITS):
        if sp != plan[e]:
            q = plan.copy()
            q[e] = sp
            rows.append(q)
    for tl in range(N_TILES):
        if tl != plan[e + 1]:
            q = plan.copy()
            q[e + 1] = tl
            rows.append(q)
    q = plan.copy()
    q[e + 2] ^= 1
    rows.append(q)
    return np.array(rows, dtype=np.int64)


def local_search(rd: RegionData, plan: np.ndarray, t: float, max_rounds: int = 100) -> tuple[np.ndarray, float, int]:
    """Move to the best improving neighbour until none improves."""
    evaluated = 0
    for _ in range(max_rounds):
        nb = neighbours(rd, plan)
        tv = evaluate(rd, nb)
        evaluated += len(nb)
        i = _best(nb, tv)
        if not tv[i] < t:
            break
        plan, t = nb[i].copy(), float(tv[i])
    return plan, t, evaluated


def search(rd: RegionData, method: str = "auto") -> SearchResult:
    """Best plan of one subgraph: `auto` = dp on chains, exhaustive when small, beam otherwise."""
    if rd.n_edges == 0:
        p = unfused_plan(rd)
        return SearchResult(p, float(evaluate(rd, p[None])[0]), "baseline", 1)
    if method == "auto":
        method = "dp" if rd.is_chain else ("exhaustive" if rd.n_plans <= EXHAUSTIVE_LIMIT else "beam")
    if method == "dp":
        return dp_chain(rd)
    if method == "exhaustive":
        return exhaustive(rd)
    if method == "beam":
        return beam(rd)
    raise ValueError(f"unknown search method {method!r}; use auto, dp, exhaustive or beam")
