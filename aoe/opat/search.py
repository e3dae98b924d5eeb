"""Search drivers over a factored Schedule space; every candidate batch is one measure call.

- `exhaustive`: every strategy of the space (used when the space fits the budget, and as the
  reference optimum in tests and benchmarks).
- `best_first`: whole strategies priced in order of a true lower bound on each one's time
  (`aoe.opat.bounds`: the kernel model's pipes with only the L2 hits of re-reads left optimistic),
  outer choices expanded lazily in order of their own bound; with the simulator it stops, proven
  optimal, when no strategy left is bounded below the best time. The driver for small budgets.
- `beam`: cost-guided. Outer choices are visited in order of their lower bound and priced with
  CANN's default staging (or, when that staging is invalid, with the space's leanest staging of
  the same choice); an outer choice whose bound cannot beat the best time found is skipped (exact
  pruning). The best `width` outer choices then have all their inner choices priced. In matmul
  spaces with L2-tiling variants the bound queue goes by each outer choice's best untiled staging,
  and only the strategies whose own bound beats the best time are priced (the simulator's pruning).
  Deterministic; `seed` only breaks ties when the budget forces sampling.
- `local_search`: iterated hill climbing (spaces without per-strategy bounds, tiny budgets).
- `random_search`: uniform sampling at a budget (a baseline for benchmarks).

A *measure* is any callable `(sim_op, rows) -> times_us` (inf = invalid): the simulator by default,
or a user's device or cost model. The drivers only ever call it with whole batches.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, ClassVar, Protocol

import numpy as np

from ..errors import AoeError
from ..sim import SimOp, simulate_times
from ..soc import Soc
from .order import LazyOrder, bound_queue, by_bound, lexsort
from .space import FactoredSpace
from .turns import Queues, Tightened, expand_in_turns


class Measure(Protocol):
    """A cost function `(op, rows) -> times_us` over a batch of strategies (inf = invalid).

    `bound_is_exact` says whether the spaces' lower bounds (the simulator's busiest-core Cube work)
    bind this measure: only then may a search prune with them; otherwise they only order.
    """

    bound_is_exact: bool

    def __call__(self, op: SimOp, rows: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class SimulatorMeasure:
    """The default measure: the native simulator, batched, on `threads` threads."""

    soc: Soc
    threads: int = 1
    bound_is_exact: ClassVar[bool] = True

    def __call__(self, op: SimOp, rows: np.ndarray) -> np.ndarray:
        times, _ = simulate_times(self.soc, op, rows, threads=self.threads)
        return times


@dataclass(frozen=True)
class _External:
    fn: Callable[[SimOp, np.ndarray], np.ndarray]
    bound_is_exact: ClassVar[bool] = False

    def __call__(self, op: SimOp, rows: np.ndarray) -> np.ndarray:
        return self.fn(op, rows)


def simulator_measure(soc: Soc, threads: int = 1) -> Measure:
    """The native simulator as a measure (its lower bounds are exact, so searches may prune)."""
    return SimulatorMeasure(soc, threads)


def as_measure(fn: Callable[[SimOp, np.ndarray], np.ndarray]) -> Measure:
    """Any `(op, rows) -> times_us` callable as a measure; without `bound_is_exact` it never prunes."""
    return fn if hasattr(fn, "bound_is_exact") else _External(fn)  # type: ignore[return-value]


@dataclass
class Budget:
    """How much a search may spend: evaluations and/or seconds (None = unbounded)."""

    evaluations: int | None = 100_000
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.evaluations is not None and self.evaluations < 1:
            raise AoeError("an evaluation budget must be at least 1")
        if self.seconds is not None and self.seconds <= 0:
            raise AoeError("a time budget must be positive")


@dataclass
class SearchResult:
    """Best strategy found by a driver."""

    row: np.ndarray | None
    time_us: float
    evaluations: int
    driver: str

    @property
    def found(self) -> bool:
        """True if any valid strategy was found."""
        return self.row is not None and np.isfinite(self.time_us)


class _Tracker:
    """Counts evaluations, enforces the budget, remembers the best row."""

    def __init__(self, op: SimOp, measure: Measure, budget: Budget) -> None:
        self.op, self.measure, self.budget = op, measure, budget
        self.evals = 0
        self.best_row: np.ndarray | None = None
        self.best = float("inf")
        self.t0 = time.perf_counter()

    def left(self) -> int:
        """Evaluations still allowed (a large number when only time is bounded)."""
        if self.budget.seconds is not None and time.perf_counter() - self.t0 >= self.budget.seconds:
            return 0
        if self.budget.evaluations is None:
            return 1 << 62
        return max(0, self.budget.evaluations - self.evals)

    def run(self, rows: np.ndarray) -> np.ndarray:
        """Measure rows (truncated to the budget); returns their times."""
        rows = rows[: self.left()]
        if not len(rows):
            return np.zeros(0)
        return self.count(rows, self.price(rows))

    def price(self, rows: np.ndarray) -> np.ndarray:
        """The measure's times of `rows`, without counting them (a speculative batch)."""
        if not len(rows):
            return np.zeros(0)
        times = np.asarray(self.measure(self.op, np.ascontiguousarray(rows)), dtype=np.float64)
        if times.shape != (len(rows),):
            raise AoeError(f"the measure function returned {times.shape} times for {len(rows)} strategies")
        return times

    def take(self, rows: np.ndarray, times: np.ndarray) -> np.ndarray:
        """Count rows priced ahead by `price` exactly as `run` would have measured them."""
        rows = rows[: self.left()]
        if not len(rows):
            return np.zeros(0)
        return self.count(rows, times[: len(rows)])

    def count(self, rows: np.ndarray, times: np.ndarray, least: float | None = None) -> np.ndarray:
        """Count priced rows, keep the best; `least`: the least of `times` (NaN set aside), when known and
        not below the best time (then `times` are neither searched nor cleaned of NaN)."""
        if least is None:
            times = np.where(np.isnan(times), np.inf, times)
        self.evals += len(rows)
        if least is None or least < self.best:
            i = int(np.argmin(times))
            if times[i] < self.best:
                self.best, self.best_row = float(times[i]), rows[i].copy()
        return times

    def result(self, driver: str) -> SearchResult:
        return SearchResult(self.best_row, self.best, self.evals, driver)


def exhaustive(space: FactoredSpace, op: SimOp, measure: Measure, budget: Budget | None = None) -> SearchResult:
    """Price every strategy of the space (stops early only if the budget runs out)."""
    tr = _Tracker(op, measure, budget or Budget(evaluations=None))
    for chunk in space.chunks():  # the seeds come first
        if not tr.left():
            break
        tr.run(chunk)
    return tr.result("exhaustive")


def beam(space: FactoredSpace, op: SimOp, measure: Measure, budget: Budget | None = None,
         width: int | None = None, seed: int = 0, prune: bool = True) -> SearchResult:
    """Lower-bound-ordered pricing of the outer choices, then every inner choice of the best ones.

    Phase 2 expands outer choices best-first until the budget is spent (or `width` of them). The
    bound is the simulator's: with another measure (`prune=False`) it only orders, never prunes.
    With pruning, a space with L2-tiling variants (`space.tilings`) is walked by `Tightened` and
    `expand_under`: every staging there comes with up to 16 tilings, so pricing whole expansions
    reaches few outer choices, and the outer bound alone orders them poorly.
    """
    budget = budget or Budget()
    tr = _Tracker(op, measure, budget)
    _seed(tr, space)
    outer = space.outer
    if not len(outer):
        return tr.result("beam")
    rng = np.random.default_rng(seed)
    lb = space.lower_bound
    if lb is None:
        order = np.arange(len(outer))
    else:
        order = by_bound(lb, rng)
    if not prune:
        lb = None
    # Phase 1: outer choices with default staging, at most 60% of the budget.
    phase1_cap = int(0.6 * tr.left()) if budget.evaluations is not None else len(order)
    times_outer = np.full(len(outer), np.inf)
    done = 0
    batch = 4096
    n_nan = -1
    while done < len(order) and tr.evals < max(phase1_cap, 1) and tr.left():
        cap = max(0, max(phase1_cap, 1) - tr.evals)
        if lb is not None and np.isfinite(tr.best):
            # cannot beat the best: skip without measuring. The bounds are sorted (NaN last), so the
            # outer choices below the best time are the first `below` of the order: the order is
            # read (and sorted) no further
            below = int(np.count_nonzero(lb < tr.best))
            if done >= below:
                if n_nan < 0:
                    n_nan = int(np.count_nonzero(np.isnan(lb)))
                if min(done + batch, len(order)) - 1 < len(order) - n_nan:
                    break  # the batch ends on a bound at or above the best: everything after is pruned too
                idx = np.zeros(0, np.int64)
            else:
                idx = order[done:min(done + batch, below, done + cap)]
        else:
            idx = order[done:done + batch][:cap]
        if len(idx):
            t = tr.run(outer[idx])
            times_outer[idx[:len(t)]] = t
            if space.fallback is not None and len(t):
                # an outer choice whose default staging is invalid is judged by its leanest staging
                bad = idx[:len(t)][~np.isfinite(t)]
                if len(bad) and tr.left():
                    tf = tr.run(space.fallback(outer[bad]))
                    times_outer[bad[:len(tf)]] = tf
        done += batch
    # Phase 2: all inner choices of the most promising outer choices. A default staging can badly
    # misjudge an outer choice (a block whose best staging needs other K steps), so two queues take
    # turns: outer choices by their priced staging, and by their lower bound (what any staging of
    # them could reach); whichever comes first is expanded once, and pruned when its bound cannot win.
    #
    # Where each staging comes with up to 16 L2 tilings, few outer choices fit the budget and their
    # own bound orders them poorly: there the bound queue takes them best first by a bound tightened
    # to their best untiled staging's (`Tightened`; the queue by priced time skips by it too), and of
    # each expanded group only the strategies whose own bound beats the best time are priced, lowest
    # bound first (`expand_under`).
    finite = np.flatnonzero(np.isfinite(times_outer))
    tiled = lb is not None and space.expand_untiled is not None and space.tilings is not None \
        and space.row_bound is not None
    if tiled or width is not None:
        by_time = finite[lexsort((times_outer[finite],))]     # (a stable sort)
    if width is not None:
        by_time = by_time[:width]
    if tiled:
        if width is None:
            by_time = by_time[lb[by_time] < tr.best]   # (the queue skips the others)
        order = bound_queue(times_outer, lb, tr.best if width is None else None)
        if isinstance(order, LazyOrder):
            order = order.head(len(order))         # (read by chunks of its own: sorted whole)
        order = order[:width] if width is not None else order
        expand_in_turns(tr, space, Tightened(space, by_time, order, lb), [0, 1],
                        speculate=isinstance(measure, SimulatorMeasure), row_bound=space.row_bound)
        return tr.result("beam")
    bound_q: np.ndarray | LazyOrder | None = None
    if width is None:
        # phase 2 reads a few percent of the queues: each is sorted as far as it is read
        if lb is not None:
            finite = finite[~(lb[finite] >= tr.best)]   # (the queue skips the others)
        by_time = LazyOrder(finite, (times_outer[finite],))
    if space.lower_bound is not None:
        # by bound, ties broken by the priced staging (an unpriced or invalid one last)
        bound_q = bound_queue(times_outer, space.lower_bound, tr.best if lb is not None and width is None else None)
        bound_q = bound_q[:width] if width is not None else bound_q
    queues = [by_time] + ([bound_q] if bound_q is not None else [])
    turns = [0, 1][: len(queues)]  # a group by priced time, then one by bound
    expand_in_turns(tr, space, Queues(queues, lb, len(outer)), turns,
                    speculate=isinstance(measure, SimulatorMeasure))
    return tr.result("beam")


def _seed(tr: _Tracker, space: FactoredSpace) -> None:
    """Price CANN's default strategy (the space's seeds) first: no search ends worse than it."""
    if space.seeds is not None and len(space.seeds) and tr.left():
        tr.run(space.seeds)


def local_search(space: FactoredSpace, op: SimOp, measure: Measure, budget: Budget | None = None,
                 seed: int = 0, prune: bool = True) -> SearchResult:
    """Iterated hill climbing for budgets too small to price every outer choice.

    Starts from the seeds (CANN's default strategy), moves to the best neighbour (one field one
    step up or down the values it takes in the space, outer choices kept inside the space) while
    that improves, then restarts from the best-bounded outer choices and from random members of the
    space. Candidates that break a hard constraint are dropped before measuring (they would not
    compile), so the budget buys real runs.
    """
    budget = budget or Budget()
    tr = _Tracker(op, measure, budget)
    rng = np.random.default_rng(seed)
    outer = space.outer
    nf = len(space.fields)
    if not len(outer) and space.seeds is None:
        return tr.result("local")
    sample = [outer[: min(len(outer), 256)], space.expand(outer[: min(len(outer), 8)])]
    if space.seeds is not None:
        sample.append(space.seeds)
    sample_rows = np.concatenate([x for x in sample if len(x)])
    values = [np.unique(sample_rows[:, j]) for j in range(nf)]
    seen: set[bytes] = set()

    def fresh(rows: np.ndarray) -> np.ndarray:
        if not len(rows):
            return rows.reshape(0, nf)
        if space.repair is not None:
            rows = space.repair(rows)
        keep = [i for i, r in enumerate(rows) if r.tobytes() not in seen]
        rows = rows[keep]
        seen.update(r.tobytes() for r in rows)
        if len(rows):
            rows = rows[space.member(rows)]  # stay inside the space (its outer choices)
        if space.valid is not None and len(rows):
            rows = rows[space.valid(rows)]
        return rows

    def climb(start: np.ndarray) -> None:
        rows = fresh(start.reshape(1, nf))
        if not len(rows):
            return
        t = tr.run(rows)
        cur, cur_t = rows[0], (float(t[0]) if len(t) else np.inf)
        while tr.left() and np.isfinite(cur_t):
            neigh = []
            for j, vals in enumerate(values):
                k = int(np.searchsorted(vals, cur[j]))
                for nk in (k - 1, k + 1 if k < len(vals) and vals[k] == cur[j] else k):
                    if 0 <= nk < len(vals):
                        r = cur.copy()
                        r[j] = vals[nk]
                        neigh.append(r)
            cand = fresh(np.array(neigh, dtype=np.int64))
            if not len(cand):
                return
            t = tr.run(cand)
            if not len(t) or t.min() >= cur_t:
                return
            i = int(np.argmin(t))
            cur, cur_t = cand[i], float(t[i])

    for s in (space.seeds if space.seeds is not None else []):
        climb(s)
    if len(outer) and tr.left():
        # price the best-bounded outer choices with their default staging (40% of what is left),
        # then climb from the three best of them
        lb = space.lower_bound
        order = by_bound(lb, rng) if lb is not None else rng.permutation(len(outer))
        probe = fresh(outer[order[: max(1, int(0.4 * tr.left()))]])
        if len(probe):
            t = tr.run(probe)
            for i in np.argsort(t, kind="stable")[:3]:
                if tr.left() and np.isfinite(t[i]):
                    seen.discard(probe[i].tobytes())
                    climb(probe[i])
    idle = 0  # restarts that found nothing new to measure: the reachable space is used up
    while tr.left() and len(outer) and idle < 64:
        spent = tr.evals
        pick = space.expand(outer[rng.integers(len(outer), size=1)])  # a random member of the space
        if len(pick):
            climb(pick[rng.integers(len(pick))])
        idle = idle + 1 if tr.evals == spent else 0
    return tr.result("local")


def best_first(space: FactoredSpace, op: SimOp, measure: Measure, budget: Budget | None = None,
               seed: int = 0, prune: bool = True) -> SearchResult:
    """Whole strategies priced in order of their lower bound (`space.row_bound`), best first.

    Outer choices are expanded in order of their own bound, only as far as one of them could still
    hold a strategy whose bound is below the best unpriced one's; strategies are then priced a few at
    a time, lowest bound first. With the simulator's bounds (`prune`) a strategy whose bound cannot
    beat the best time is never priced, and the search stops, proven optimal, when nothing left can.
    With another measure the bounds only order. Needs `space.row_bound`; `seed` only breaks ties.
    """
    budget = budget or Budget()
    tr = _Tracker(op, measure, budget)
    _seed(tr, space)
    outer, lb = space.outer, space.lower_bound
    if not len(outer) or space.row_bound is None or lb is None:
        return tr.result("best-first")
    rng = np.random.default_rng(seed)
    order = by_bound(lb, rng)
    nf = len(space.fields)
    pool, pool_b = np.zeros((0, nf), np.int64), np.zeros(0)
    pos, step = 0, 16  # outer choices expanded at a time (doubling: fewer, larger batches)
    while tr.left():
        # expand while the next outer choice could hold a strategy below the best unpriced one
        while pos < len(order) and (not len(pool_b) or pool_b[0] >= lb[order[pos]]):
            if prune and lb[order[pos]] >= tr.best:
                pos = len(order)  # sorted: no outer choice left can win
                break
            idx = order[pos:pos + step]
            pos, step = pos + len(idx), min(2 * step, 512)
            rows, starts = space.expand_groups([outer[i:i + 1] for i in idx])
            if not len(rows):
                continue
            # a strategy is no faster than its outer choice's bound either (the seeds' outer rows
            # carry the launch time: their strategies keep their own bounds)
            b = np.maximum(space.row_bound(rows), np.repeat(lb[idx], np.diff(starts)))
            if prune:
                keep = b < tr.best
                rows, b = rows[keep], b[keep]
            pool, pool_b = np.concatenate([pool, rows]), np.concatenate([pool_b, b])
            # no more than the budget can price: the rest would come after all of those
            o = np.argsort(pool_b, kind="stable")[: tr.left()]
            pool, pool_b = pool[o], pool_b[o]
        if len(pool_b) and prune and pool_b[0] >= tr.best:
            pool, pool_b = pool[:0], pool_b[:0]  # nothing pooled can win any more
        if not len(pool_b):
            if pos >= len(order):
                break  # every strategy left is bounded above the best: it is the optimum
            continue
        # the next few strategies, none bounded above an outer choice not expanded yet; batches grow
        # with the evaluations spent (a few at first, where each price moves the pruning most)
        limit = lb[order[pos]] if pos < len(order) else np.inf
        n = max(1, min(max(8, tr.evals // 8), int(np.searchsorted(pool_b, limit, side="right"))))
        tr.run(pool[:n])
        pool, pool_b = pool[n:], pool_b[n:]
        if prune and np.isfinite(tr.best):
            keep = pool_b < tr.best
            pool, pool_b = pool[keep], pool_b[keep]
    return tr.result("best-first")


def random_search(rows: np.ndarray, op: SimOp, measure: Measure, budget: Budget, seed: int = 0) -> SearchResult:
    """Uniform sampling (without replacement) of an enumerated space, at a budget."""
    tr = _Tracker(op, measure, budget)
    rng = np.random.default_rng(seed)
    n = min(len(rows), budget.evaluations or len(rows))
    if n:
        tr.run(rows[rng.choice(len(rows), size=n, replace=False)])
    return tr.result("random")


# Budgets up to this use `best_first` (where the space has per-strategy bounds); above it the beam,
# whose CPU cost per evaluation is far lower (a job tunes hundreds of cases at 100,000 each)
BEST_FIRST_MAX = 20_000


def search(space: FactoredSpace, op: SimOp, measure: Measure, budget: Budget | None = None,
           seed: int = 0, prune: bool = True) -> SearchResult:
    """Pick the driver: exhaustive when the whole space fits the budget; else best-first up to
    `BEST_FIRST_MAX` evaluations (spaces with per-strategy bounds), the beam search above it.

    Without per-strategy bounds (vector spaces) a budget that cannot price every outer choice once
    climbs from CANN's default (`local_search`). `prune=False` when `measure` is not the simulator
    (its lower bounds would not bind it: they only order).
    """
    budget = budget or Budget()
    limit = budget.evaluations if budget.evaluations is not None else 1 << 62
    # Exhaustive when the space surely fits (outer rows expand to a few dozen strategies each, so
    # only a small outer set is worth counting exactly)
    if len(space.outer) * 8 <= limit and space.size_at_most(limit):
        return exhaustive(space, op, measure, budget)
    if space.row_bound is not None and space.lower_bound is not None and limit <= BEST_FIRST_MAX:
        return best_first(space, op, measure, budget, seed=seed, prune=prune)
    if limit < len(space.outer):
        return local_search(space, op, measure, budget, seed=seed, prune=prune)
    return beam(space, op, measure, budget, seed=seed, prune=prune)
