"""The beam's phase 2: outer choices in queues that take turns (by priced time, by bound), expanded a group at
a time and priced ahead in batches while the best time holds (`expand_in_turns`), with the bound
tightened to each outer choice's best untiled staging in spaces with L2 tilings (`Tightened`).

Search logic only (pricing and enumeration are the space's and the measure's, native); split from
`search.py`, whose `beam` drives it.
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .order import LazyOrder
from .space import FactoredSpace

if TYPE_CHECKING:
    from .search import _Tracker


def untiled_bounds(space: FactoredSpace, idx: np.ndarray) -> np.ndarray:
    """A bound on every strategy of each outer choice `idx`: the least `row_bound` of its untiled stagings.

    A staging's L2 tilings only add waves to its bound, so its untiled row (`space.expand_untiled`,
    about one row in a dozen) bounds them all (inf: an outer choice without any staging).
    """
    # outer rows of the same outer choice (both iterate orders) have the same stagings: bound them once
    # (an implementation class's space identifies outer choices as its parent does)
    cols = space.outer_cols
    if cols is None and space.parent is not None:
        cols = space.parent.outer_cols
    keys = space.outer[idx][:, cols] if cols is not None else space.outer[idx]
    _, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    uniq = idx[first]
    rows, starts = space.expand_untiled([space.outer[o:o + 1] for o in uniq])
    tight = np.full(len(uniq), np.inf)
    some = np.flatnonzero(np.diff(starts))
    if len(some):
        tight[some] = np.minimum.reduceat(space.row_bound(rows), starts[some])  # type: ignore[misc]
    return tight[inv.ravel()]


class Queues:
    """Phase 2's outer choices in queues that take turns, each choice expanded once, pruned by its bound."""

    STEP = 8  # outer choices expanded per group: fewer, larger batches

    def __init__(self, queues: list[np.ndarray | LazyOrder], bound: np.ndarray | None, n_outer: int) -> None:
        # plain lists: groups are formed one outer choice at a time (numpy scalars would cost more); a
        # lazily sorted queue's list grows as it is read (`_more`)
        self.lazy = [q if isinstance(q, LazyOrder) else None for q in queues]
        self.total = [len(q) for q in queues]
        self.queues: list[list[int]] = [[] if isinstance(q, LazyOrder) else q.tolist() for q in queues]
        # each queue's bounds beside it
        self.bound = bound
        self.bounds = [[] if isinstance(q, LazyOrder) else bound[q].tolist() for q in queues] \
            if bound is not None else None
        self.pos = [0] * len(queues)
        self.expanded = bytearray(n_outer)

    def _more(self, qi: int) -> None:
        """Sort queue `qi` further (the read head doubled) and append what it adds to its list."""
        q = self.queues[qi]
        new = self.lazy[qi].head(max(256, 2 * len(q)))[len(q):]  # type: ignore[union-attr]
        q.extend(new.tolist())
        if self.bounds is not None and self.bound is not None:
            self.bounds[qi].extend(self.bound[new].tolist())

    def any_left(self) -> bool:
        return any(p < t for p, t in zip(self.pos, self.total))

    def mark(self) -> list[int]:
        return list(self.pos)

    def rewind(self, mark: list[int]) -> None:
        self.pos[:] = mark

    def form(self, t: int, best: float, limit: int) -> tuple[list[int], list[tuple[int, Any, int]], int]:
        """Up to `limit` groups the queues give taking turns from turn `t` with the best time `best`: their
        outer choices one after the other, where each group ends in them with the queues' mark and the
        turn after it, and the next turn.

        The same groups as `take` called in turns (`_form_by_take`), formed in one call: a search forms
        thousands of groups of 8, so the per-group calls cost more than the groups themselves."""
        flat: list[int] = []
        plan: list[tuple[int, Any, int]] = []
        append = flat.append
        pos, total, queues, expanded, step = self.pos, self.total, self.queues, self.expanded, self.STEP
        bounds, nq = self.bounds, len(queues)
        while len(plan) < limit:
            # (one or two queues: pos[-1] is the last one's)
            if t == 0 and plan and not (pos[0] < total[0] or pos[-1] < total[-1]):
                break
            q = queues[t]
            qb = bounds[t] if bounds is not None else None
            i, end, n = pos[t], total[t], len(q)
            k = 0
            while i < end:                  # (again only when a lazily sorted queue is read further)
                if i == n:
                    self._more(t)
                    n = len(q)
                stop = n if n < end else end
                for j in range(i, stop):
                    if qb is not None and qb[j] >= best:
                        if t == 1:
                            break           # the bound queue is sorted: nothing after it can win
                        continue
                    o = q[j]
                    if expanded[o]:
                        continue
                    expanded[o] = 1
                    append(o)
                    k += 1
                    if k == step:
                        break
                else:
                    i = stop
                    continue
                i = j + 1 if k == step else end
                break
            pos[t] = i
            t = t + 1 if t + 1 < nq else 0
            if k:
                plan.append((len(flat), tuple(pos), t))
            elif t == 0 and not (pos[0] < total[0] or pos[-1] < total[-1]):
                break
        return flat, plan, t

    def _form_by_take(self, t: int, best: float, limit: int) -> tuple[list[int], list[tuple[int, Any, int]], int]:
        """`form` by one `take` per group (the turns: one per queue)."""
        flat: list[int] = []
        plan: list[tuple[int, Any, int]] = []
        nq = len(self.queues)
        while len(plan) < limit:
            if t == 0 and plan and not self.any_left():
                break
            group = self.take(t, best)
            t = (t + 1) % nq
            if group:
                flat += group
                plan.append((len(flat), self.mark(), t))
            elif t == 0 and not self.any_left():
                break
        return flat, plan, t

    def take(self, qi: int, best: float) -> list[int]:
        """The next group of queue `qi`: up to STEP outer choices not expanded yet whose bound beats `best`."""
        q, expanded, step = self.queues[qi], self.expanded, self.STEP
        qb = self.bounds[qi] if self.bounds is not None else None
        i, end = self.pos[qi], self.total[qi]
        group: list[int] = []
        while i < end:
            if i == len(q):
                self._more(qi)
            o = q[i]
            i += 1
            if qb is not None and qb[i - 1] >= best:
                if qi == 1:
                    i = end  # the bound queue is sorted: nothing after it can win
                    break
                continue
            if expanded[o]:
                continue
            expanded[o] = 1
            group.append(o)
            if len(group) == step:
                break
        self.pos[qi] = i
        return group


class Tightened(Queues):
    """`Queues` whose bound queue takes outer choices by a bound tightened lazily (`untiled_bounds`).

    Outer choices are tightened in order of their own bound, a chunk at a time, only while the next
    one's own bound is below the least tightened bound not expanded yet (it could come first); the
    least tightened bound below the best time is expanded next; the queue by priced time skips outer
    choices by their tightened bound too.
    """

    def __init__(self, space: FactoredSpace, by_time: np.ndarray, order: np.ndarray, bound: np.ndarray) -> None:
        super().__init__([by_time, order], bound, len(bound))  # queue 1's position: the next to tighten
        self.space, self.order, self.lb = space, order, bound
        self.tight = np.full(len(bound), np.nan)  # tightened bounds (they do not depend on the best time)
        self.chunk = 32                            # tightened at a time (doubling: fewer, larger batches)
        self.heap: list[tuple[float, int, int]] = []   # (tightened bound, rank in `order`, outer choice)

    def any_left(self) -> bool:
        return super().any_left() or bool(self.heap)

    def mark(self) -> Any:
        return list(self.pos), self.chunk, list(self.heap)

    def rewind(self, mark: Any) -> None:
        pos, self.chunk, heap = mark
        self.pos[:] = pos
        self.heap = list(heap)

    form = Queues._form_by_take

    def take(self, qi: int, best: float) -> list[int]:
        """The next group of queue `qi` (1: least tightened bound first), below `best`."""
        if qi == 0:
            return self._take_by_time(best)
        group: list[int] = []
        while len(group) < self.STEP:
            self._tighten(best)
            if not self.heap or self.heap[0][0] >= best:
                self.heap = []  # sorted: nothing left can win (the best time only falls)
                break
            _, _, o = heapq.heappop(self.heap)
            if not self.expanded[o]:
                self.expanded[o] = 1
                group.append(o)
        return group

    def _take_by_time(self, best: float) -> list[int]:
        """The next group by priced time: outer choices not expanded whose tightened bound beats `best`.

        Candidates are tightened a few dozen at a time; whether one is skipped depends only on its
        own bound and `best` (never on what was tightened before: pricing ahead changes nothing)."""
        q, pos, bounds = self.queues[0], self.pos, self.bounds
        assert bounds is not None
        bound = bounds[0]
        group: list[int] = []
        while len(group) < self.STEP and pos[0] < len(q):
            at, i = [], pos[0]        # positions in the queue of the next candidates
            while i < len(q) and len(at) < 4 * self.STEP:
                if bound[i] < best and not self.expanded[q[i]]:
                    at.append(i)
                i += 1
            pos[0] = i
            if not at:
                break
            c = np.array([q[j] for j in at])
            todo = c[np.isnan(self.tight[c])]
            if len(todo):
                self.tight[todo] = np.maximum(self.lb[todo], untiled_bounds(self.space, todo))
            for j, o, b in zip(at, c.tolist(), self.tight[c].tolist()):
                if b < best and not self.expanded[o]:
                    self.expanded[o] = 1
                    group.append(o)
                    if len(group) == self.STEP:
                        pos[0] = j + 1  # the candidates after it come back in the next group
                        break
        return group

    def _tighten(self, best: float) -> None:
        order, bounds, pos = self.order, self.bounds, self.pos
        assert bounds is not None
        bound = bounds[1]
        while pos[1] < len(order) and (not self.heap or bound[pos[1]] < self.heap[0][0]):
            if bound[pos[1]] >= best:
                pos[1] = len(order)  # sorted by their own bound: none after it can win
                return
            end = min(len(order), pos[1] + self.chunk)
            idx = order[pos[1]:end]
            todo = idx[np.isnan(self.tight[idx])]  # (groups priced ahead and discarded tightened them)
            if len(todo):
                self.tight[todo] = np.maximum(self.lb[todo], untiled_bounds(self.space, todo))
            for rank, (o, b) in enumerate(zip(idx.tolist(), self.tight[idx].tolist()), pos[1]):
                if b < best:
                    heapq.heappush(self.heap, (b, rank, o))
            pos[1], self.chunk = end, min(2 * self.chunk, 512)


def expand_in_turns(tr: _Tracker, space: FactoredSpace, queues: Queues | Tightened, turns: list[int],
                    speculate: bool, row_bound: Callable[[np.ndarray], np.ndarray] | None = None) -> None:
    """Expand groups of outer choices, the queues taking turns, until the budget or the queues run out.

    Which group comes next depends on the best time so far (the bound prunes), so groups are priced
    one after the other. With the simulator as the measure (cheap, pure), the groups the queues would
    form next if the best time stayed as it is are formed ahead and priced in one call; they are taken
    in order while the best time does stay, and when a group moves it the queues are rewound to just
    after that group. The outcome (rows counted, best row, evaluations) is the one group-by-group
    pricing gives; only the number of measure calls drops. With `row_bound`, a group's strategies are
    those `expand_under` keeps (with the best time the group was formed with).
    """
    outer = space.outer
    t = 0              # whose turn it is
    depth = 4          # groups formed ahead, doubled while the best time holds
    rows_seen = groups_seen = 0
    while True:
        if t == 0 and not (tr.left() and queues.any_left()):
            return
        if not speculate:
            group = queues.take(turns[t], tr.best)
            t = (t + 1) % len(turns)
            if group and tr.left():
                tr.run(space.expand(outer[group]) if row_bound is None else
                       expand_under(space, [outer[group]], row_bound, tr.best)[0])
            continue
        best = tr.best
        # look no further ahead than the budget can take (from the rows groups gave so far)
        fits = max(1, int(tr.left() * groups_seen / rows_seen)) if rows_seen else depth
        # the groups' outer choices, and for each group: where it ends in them, the queues' mark, next turn
        flat, plan, t = queues.form(t, best, min(depth, fits))
        if not plan:
            continue
        # every group's outer rows in one gather, then a view of each
        picked = outer[flat]
        starts = [0] + [e for e, _, _ in plan]
        groups = [picked[a:b] for a, b in zip(starts, starts[1:])]
        rows, bounds = space.expand_groups(groups) if row_bound is None else \
            expand_under(space, groups, row_bound, best)
        rows_seen, groups_seen = rows_seen + len(rows), groups_seen + len(plan)
        times = tr.price(rows)
        # each group's least time, for all groups at once: a group is counted as `take` would count it
        # (its rows, and its best row if it beats the best time) without a numpy call per group. `fmin`
        # passes over NaN (an invalid price): a group's least is NaN only if all its times are, and a
        # NaN least, like an inf one, never beats the best time
        at = bounds.tolist()
        some = np.flatnonzero(np.diff(bounds))
        least = np.full(len(plan), np.inf)
        if len(some):
            least[some] = np.fmin.reduceat(times, bounds[some])
        least_l = least.tolist()
        # the budget left, counted down here (asked of the tracker per group only under a time budget)
        timed = tr.budget.seconds is not None
        left = tr.left()
        # the groups before the first that moves the best time or reaches the end of the budget are
        # counted in one call (what counting them one by one gives: none of them changes the best row)
        first = 0
        if not timed:
            moves = np.flatnonzero(least < best)
            first = min(int(moves[0]) if len(moves) else len(plan), int(np.searchsorted(bounds[1:], left)))
            if at[first]:
                tr.count(rows[:at[first]], times[:at[first]], float(least[:first].min()))
                left -= at[first]
        for i in range(first, len(plan)):
            _, pos, turn = plan[i]
            if timed:
                left = tr.left()
            if not left:
                return
            lo, hi = at[i], at[i + 1]
            if hi - lo > left:                # the budget ends inside this group: count its head only
                tr.take(rows[lo:hi], times[lo:hi])
                left = tr.left()
            elif lo < hi:                     # (a group may hold nothing of the space: skip the bookkeeping)
                # (a group that beats the best time: `count` finds its best row, NaN set aside)
                tr.count(rows[lo:hi], times[lo:hi], None if least_l[i] < tr.best else least_l[i])
                left -= hi - lo
            if tr.best != best and i + 1 < len(plan):
                # the groups after this one were formed with a best time that no longer holds
                queues.rewind(pos)
                for o in flat[starts[i + 1]:]:
                    queues.expanded[o] = 0
                t, depth = turn, 4
                break
        else:
            depth = min(64, 2 * depth)


def expand_under(space: FactoredSpace, groups: list[np.ndarray], row_bound: Callable[[np.ndarray], np.ndarray],
                 best: float) -> tuple[np.ndarray, np.ndarray]:
    """The strategies of each group of outer rows whose bound is below `best`, each group's in order of
    bound, and where each group starts (+ the end).

    The untiled stagings (`space.expand_untiled`) are bounded first, and only those below `best` have
    their L2 tilings (`space.tilings`) built and bounded: a tiling's bound is never below its staging's.
    """
    assert space.expand_untiled is not None and space.tilings is not None
    rows, starts = space.expand_untiled(groups)
    gid = np.repeat(np.arange(len(groups)), np.diff(starts))
    b = row_bound(rows) if len(rows) else np.zeros(0)
    keep = b < best
    rows, b, gid = rows[keep], b[keep], gid[keep]
    tiled, owner = space.tilings(rows)
    if len(tiled):
        rows, b = np.concatenate([rows, tiled]), np.concatenate([b, row_bound(tiled)])
        gid = np.concatenate([gid, gid[owner]])
    keep = np.flatnonzero(b < best)
    keep = keep[np.lexsort((b[keep], gid[keep]))]
    return rows[keep], np.searchsorted(gid[keep], np.arange(len(groups) + 1))
