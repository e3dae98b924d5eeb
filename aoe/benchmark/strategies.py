"""Search strategies under one contract: `fn(space, op, measure, budget, seed)`.

A strategy prices strategies only through `measure(op, rows) -> times_us` (the `aoe.opat.search.Measure`
protocol); the harness's measure counts, records and enforces the budget, so whatever the function
returns is ignored. Built in: the project's drivers, uniform random, and (extra `bench`) Optuna's TPE
and GP samplers and CMA-ES (the `cmaes` package). More come from the entry-point group
`aoe.search_strategies` (an entry point names a strategy function or a `Strategy`) or as callables.
"""
from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import AoeError
from ..opat.search import Budget, Measure, beam, best_first, local_search, search
from ..opat.space import FactoredSpace
from ..sim import SimOp

ENTRY_POINT_GROUP = "aoe.search_strategies"
StrategyFn = Callable[[FactoredSpace, SimOp, Measure, int, int], object]


@dataclass(frozen=True)
class Strategy:
    """A named strategy; `anytime` ones run once at the largest budget and are read at each prefix."""

    name: str
    fn: StrategyFn
    anytime: bool = False
    max_budget: int | None = None   # budgets above are not run (too slow), and the results say so
    note: str = ""


def _driver(space, op, measure, budget, seed):
    return search(space, op, measure, Budget(evaluations=budget), seed=seed)


def _beam(space, op, measure, budget, seed):
    return beam(space, op, measure, Budget(evaluations=budget), seed=seed)


def _local(space, op, measure, budget, seed):
    return local_search(space, op, measure, Budget(evaluations=budget), seed=seed)


def _best_first(space, op, measure, budget, seed):
    return best_first(space, op, measure, Budget(evaluations=budget), seed=seed)


def uniform_sample(space: FactoredSpace, k: int, seed: int) -> np.ndarray:
    """`k` strategies drawn uniformly without replacement from the whole space, in random order.

    Streams the space chunk by chunk and keeps the `k` rows of smallest random key (no full copy).
    """
    rng = np.random.default_rng(seed)
    keys = np.zeros(0)
    rows = np.zeros((0, len(space.fields)), np.int64)
    for chunk in space.chunks(256):
        keys = np.concatenate([keys, rng.random(len(chunk))])
        rows = np.concatenate([rows, chunk])
        if len(keys) > 4 * k:
            keep = np.argpartition(keys, k)[:k]
            keys, rows = keys[keep], rows[keep]
    order = np.argsort(keys, kind="stable")[:k]
    return rows[order]


def _random(space, op, measure, budget, seed):
    rows = uniform_sample(space, budget, seed)
    for i in range(0, len(rows), 256):  # batches, so an anytime prefix is cheap to read
        measure(op, rows[i:i + 256])


def field_values(space: FactoredSpace, seed: int = 0) -> list[np.ndarray]:
    """The values each field takes: every outer choice, the inner staging of 64 random ones, the seeds."""
    rng = np.random.default_rng(seed)
    parts = [space.outer]
    if len(space.outer):
        parts.append(space.expand(space.outer[rng.choice(len(space.outer), min(64, len(space.outer)), replace=False)]))
    if space.seeds is not None:
        parts.append(space.seeds)
    rows = np.concatenate([p for p in parts if len(p)]) if any(len(p) for p in parts) else np.zeros((0, len(space.fields)), np.int64)
    return [np.unique(rows[:, j]) for j in range(len(space.fields))]


class _Encoding:
    """Strategies as one index per free field (fields with a single value are fixed)."""

    def __init__(self, space: FactoredSpace) -> None:
        self.space = space
        self.values = field_values(space)
        self.free = [j for j, v in enumerate(self.values) if len(v) > 1]

    def start(self) -> np.ndarray | None:
        """CANN's default strategy as indices (where the samplers start, as the project's drivers do)."""
        if self.space.seeds is None or not len(self.space.seeds):
            return None
        return np.array([int(np.searchsorted(self.values[j], self.space.seeds[0, j])) for j in self.free])

    def rows(self, idx: np.ndarray) -> np.ndarray:
        """Index vectors (n, len(free)) -> strategy rows, dependent fields re-derived as the space does."""
        n = len(idx)
        rows = np.array([[v[0] for v in self.values]] * n, np.int64).reshape(n, len(self.values))
        for c, j in enumerate(self.free):
            rows[:, j] = self.values[j][np.clip(idx[:, c], 0, len(self.values[j]) - 1)]
        return self.space.repair(rows) if self.space.repair is not None else rows


def _optuna(space, op, measure, budget, seed, sampler_name):
    try:
        import optuna
    except ImportError as exc:
        raise AoeError("the Optuna strategies need the bench extra: pip install 'aoe[bench]'") from exc
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    enc = _Encoding(space)
    if not enc.free:
        measure(op, enc.rows(np.zeros((1, 0), np.int64)))
        return
    if sampler_name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    else:
        sampler = optuna.samplers.GPSampler(seed=seed)
    study = optuna.create_study(sampler=sampler)
    names = [space.fields[j] for j in enc.free]
    if enc.start() is not None:
        study.enqueue_trial({f: int(i) for f, i in zip(names, enc.start())})
    for _ in range(budget):
        trial = study.ask()
        idx = np.array([[trial.suggest_int(f, 0, len(enc.values[j]) - 1) for f, j in zip(names, enc.free)]])
        t = float(np.asarray(measure(op, enc.rows(idx)))[0])
        study.tell(trial, t if np.isfinite(t) else 1e12)  # an invalid strategy: a large finite penalty


def _tpe(space, op, measure, budget, seed):
    _optuna(space, op, measure, budget, seed, "tpe")


def _gp(space, op, measure, budget, seed):
    _optuna(space, op, measure, budget, seed, "gp")


def _cmaes(space, op, measure, budget, seed):
    try:
        import cmaes
    except ImportError as exc:
        raise AoeError("the CMA-ES strategy needs the bench extra: pip install 'aoe[bench]'") from exc
    enc = _Encoding(space)
    if not enc.free:
        measure(op, enc.rows(np.zeros((1, 0), np.int64)))
        return
    hi = np.array([len(enc.values[j]) - 1 for j in enc.free], float)
    rng = np.random.default_rng(seed)
    start = enc.start()
    spent = 0
    if start is not None:  # CANN's default first, as the project's drivers do
        measure(op, enc.rows(start[None]))
        spent = 1
    restart = 0
    while spent < budget:
        # the first run is centred on CANN's default, step ~1 index; IPOP restarts from random points.
        # No bounds in CMA itself (its rejection sampling is slow): indices are clipped instead.
        first = restart == 0 and start is not None
        pop = None if restart == 0 else (4 + int(3 * np.log(len(hi)))) * 2 ** min(restart, 6)
        opt = cmaes.CMA(mean=start.astype(float) if first else rng.uniform(0, hi),
                        sigma=1.0 if first else max(1.0, float(hi.mean()) / 3),
                        seed=int(rng.integers(1 << 31)), population_size=pop)
        while spent < budget and not opt.should_stop():
            xs = [opt.ask() for _ in range(opt.population_size)]
            idx = np.clip(np.rint(np.array(xs)), 0, hi).astype(np.int64)
            t = np.asarray(measure(op, enc.rows(idx)), float)
            spent += len(xs)
            # out-of-range coordinates pay their distance, so the mean drifts back inside
            pen = np.abs(np.array(xs) - np.clip(np.array(xs), 0, hi)).sum(axis=1)
            opt.tell([(x, (float(v) if np.isfinite(v) else 1e12) * (1 + p)) for x, v, p in zip(xs, t, pen)])
        restart += 1


BUILTIN: dict[str, Strategy] = {s.name: s for s in [
    Strategy("aoe", _driver, note="aoe.opat.search.search: exhaustive if it fits, else best-first "
             "(up to 20,000 evaluations) or beam"),
    Strategy("aoe-best-first", _best_first, note="aoe.opat.search.best_first alone"),
    Strategy("aoe-beam", _beam, note="aoe.opat.search.beam alone"),
    Strategy("aoe-local", _local, note="aoe.opat.search.local_search alone"),
    Strategy("random", _random, anytime=True, note="uniform sampling without replacement over the space"),
    Strategy("tpe", _tpe, anytime=True, max_budget=200,
             note="Optuna TPESampler over one index per field; ~50 ms per trial, so capped at 200"),
    Strategy("cmaes", _cmaes, anytime=True, note="cmaes.CMA (IPOP restarts) over one index per field, batched"),
    Strategy("gp", _gp, anytime=True, max_budget=50,
             note="Optuna GPSampler (needs torch and scipy); several seconds per trial, capped at 50"),
]}
DEFAULT = ["aoe", "aoe-best-first", "aoe-beam", "aoe-local", "random", "tpe", "cmaes"]


def registered() -> dict[str, Strategy]:
    """Strategies of the entry-point group `aoe.search_strategies` (a function or a `Strategy` each)."""
    found: dict[str, Strategy] = {}
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            raise AoeError(f"search strategy entry point {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
        found[ep.name] = as_strategy(obj, ep.name)
    return found


def as_strategy(obj: object, name: str | None = None) -> Strategy:
    """A `Strategy`, or a callable `fn(space, op, measure, budget, seed)` named after itself."""
    if isinstance(obj, Strategy):
        return obj
    if callable(obj):
        return Strategy(name or getattr(obj, "__name__", "user"), obj)  # type: ignore[arg-type]
    raise AoeError(f"strategy {name or obj!r} is neither a Strategy nor a callable fn(space, op, measure, budget, seed)")


def resolve(items: list[str | Strategy | Callable] | None) -> list[Strategy]:
    """Names (built in or registered), `Strategy` objects or callables -> strategies, in order."""
    items = list(DEFAULT if items is None else items)
    plugins: dict[str, Strategy] | None = None
    out: list[Strategy] = []
    for it in items:
        if isinstance(it, str):
            if it in BUILTIN:
                out.append(BUILTIN[it])
                continue
            if plugins is None:
                plugins = registered()
            if it not in plugins:
                known = sorted(BUILTIN) + sorted(plugins)
                raise AoeError(f"unknown search strategy {it!r}; known: {', '.join(known)} "
                               f"(register more under the entry-point group {ENTRY_POINT_GROUP!r})")
            out.append(plugins[it])
        else:
            out.append(as_strategy(it))
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise AoeError(f"strategy names must be distinct, got {names}")
    return out
