"""The harness: strategies x cases x budgets, every evaluation recorded, gaps to a reference optimum."""
from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import sim
from ..durable import atomic_replace
from ..errors import AoeError
from ..opat.search import exhaustive, simulator_measure
from ..opat.space import space_for
from ..soc import Soc, load_soc
from .strategies import Strategy, resolve
from .suites import Case, load_suite

EXHAUSTIVE_LIMIT = 20_000_000   # spaces up to this many strategies get a brute-force reference
WITHIN = 0.01                   # "within 1%" of the reference


class _Recorder:
    """The measure a strategy sees: the simulator, counted and cut at the budget, every row logged."""

    bound_is_exact = True  # it is the simulator: the spaces' lower bounds bind it

    def __init__(self, soc: Soc, budget: int) -> None:
        self.inner = simulator_measure(soc)
        self.budget = budget
        self.evals = 0
        self.times: list[np.ndarray] = []
        self.clock: list[tuple[int, float, float]] = []  # (evaluations after a call, wall s, cpu s)
        self.t0, self.c0 = time.perf_counter(), time.process_time()

    def __call__(self, op: sim.SimOp, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.int64).reshape(len(rows), -1)
        n = max(0, min(len(rows), self.budget - self.evals))
        out = np.full(len(rows), np.inf)  # beyond the budget: not run, reported invalid
        if n:
            t = np.asarray(self.inner(op, np.ascontiguousarray(rows[:n])), float)
            out[:n] = np.where(np.isnan(t), np.inf, t)
            self.times.append(out[:n].copy())
            self.evals += n
            self.clock.append((self.evals, time.perf_counter() - self.t0, time.process_time() - self.c0))
        return out

    def trace(self) -> _Trace:
        """Best time after each evaluation, and the clock."""
        t = np.concatenate(self.times) if self.times else np.zeros(0)
        return _Trace(np.minimum.accumulate(t) if len(t) else t, self.clock)


@dataclass
class _Trace:
    best: np.ndarray                       # best time after evaluation i+1
    clock: list[tuple[int, float, float]]

    def at(self, budget: int) -> tuple[float, int, float, float]:
        """Best time, evaluations, wall and CPU seconds of the first `budget` evaluations."""
        evals = min(budget, len(self.best))
        best = float(self.best[evals - 1]) if evals else math.inf
        wall = cpu = 0.0
        for e, w, c in self.clock:  # the clock of the call that reached `evals`
            wall, cpu = w, c
            if e >= evals:
                break
        return best, evals, wall, cpu

    def curve(self, grid: np.ndarray) -> list[float]:
        """Best time after each grid count of evaluations (inf before the first valid one)."""
        if not len(self.best):
            return [math.inf] * len(grid)
        return [float(self.best[min(int(g), len(self.best)) - 1]) for g in grid]


def _checkpoints(budget: int, smaller: Sequence[int] = (), n: int = 40) -> np.ndarray:
    """A log-spaced grid of evaluation counts from 1 to `budget`, with the smaller budgets on it."""
    grid = np.rint(np.geomspace(1, budget, n)).astype(np.int64)
    return np.unique(np.concatenate([grid, [b for b in smaller if b <= budget]]).astype(np.int64))


def _gap(best: float, ref: float) -> float:
    return best / ref - 1.0 if math.isfinite(best) else math.inf


def _json_num(x: float, nd: int = 6) -> float | None:
    return round(float(x), nd) if math.isfinite(x) else None


@dataclass
class Results:
    """Everything a run measured; `to_json()` is the file, `table()` the console view."""

    soc: str
    suite: str
    budgets: list[int]
    seed: int
    strategies: list[dict]
    cases: list[dict] = field(default_factory=list)

    def summary(self) -> dict[str, dict[str, dict]]:
        """Per strategy and budget: within-1% fraction, gap quartiles, times, and the anytime curve."""
        out: dict[str, dict[str, dict]] = {}
        for s in self.strategies:
            per: dict[str, dict] = {}
            for b in self.budgets:
                runs = [c["runs"][s["name"]][str(b)] for c in self.cases if str(b) in c["runs"].get(s["name"], {})]
                runs = [r for r in runs if r is not None]
                if not runs:
                    continue
                gaps = np.array([math.inf if r["gap"] is None else r["gap"] for r in runs])
                grid = runs[0]["curve_evals"]
                curves = np.array([[math.inf if g is None else g for g in r["curve_gap"]] for r in runs])
                q = lambda a, p: [_json_num(v) for v in np.quantile(a, p, axis=0, method="higher")]
                per[str(b)] = {
                    "cases": len(runs),
                    "within_1pct": round(float(np.mean(gaps <= WITHIN)), 4),
                    "median_gap": _json_num(float(np.quantile(gaps, 0.5, method="higher"))),
                    "q1_gap": _json_num(float(np.quantile(gaps, 0.25, method="higher"))),
                    "q3_gap": _json_num(float(np.quantile(gaps, 0.75, method="higher"))),
                    "mean_gap": _json_num(float(np.mean(gaps))),
                    "max_gap": _json_num(float(gaps.max())),
                    "evaluations_mean": round(float(np.mean([r["evaluations"] for r in runs])), 1),
                    "wall_s_median": round(float(np.median([r["wall_s"] for r in runs])), 4),
                    "wall_s_total": round(float(np.sum([r["wall_s"] for r in runs])), 3),
                    "cpu_s_total": round(float(np.sum([r["cpu_s"] for r in runs])), 3),
                    "curve": {"evals": grid, "median": q(curves, 0.5), "q1": q(curves, 0.25), "q3": q(curves, 0.75)},
                }
            out[s["name"]] = per
        return out

    def to_json(self) -> dict:
        """The whole run as a JSON-ready dict (gaps are fractions: 0.01 = 1% slower than the reference)."""
        return {"bench": "search", "soc": self.soc, "suite": self.suite, "budgets": self.budgets,
                "seed": self.seed, "within": WITHIN, "strategies": self.strategies,
                "summary": self.summary(), "cases": self.cases}

    def table(self) -> str:
        """Fraction within 1% and median gap per strategy and budget, plus where the first strategy leads."""
        summ = self.summary()
        names = [s["name"] for s in self.strategies]
        w = max(len(n) for n in names + ["strategy"])
        head = f"{'strategy':<{w}}" + "".join(f" | {('budget ' + str(b)):>27}" for b in self.budgets)
        sub = f"{'':<{w}}" + "".join(f" | {'within1%':>8} {'med gap':>8} {'wall/case':>9}" for _ in self.budgets)
        lines = [f"{len(self.cases)} cases ({self.suite}) on {self.soc}; gap = best / reference - 1", head, sub,
                 "-" * len(sub)]
        for n in names:
            cells = []
            for b in self.budgets:
                r = summ[n].get(str(b))
                if r is None:
                    cells.append(f" | {'not run':>27}")
                else:
                    med = "inf" if r["median_gap"] is None else f"{100 * r['median_gap']:.2f}%"
                    cells.append(f" | {100 * r['within_1pct']:>7.1f}% {med:>8} {r['wall_s_median']:>8.3f}s")
            lines.append(f"{n:<{w}}" + "".join(cells))
        lines.append("reference: " + "; ".join(f"{v} {k}" for k, v in self.reference_kinds().items()))
        for s in self.strategies:
            if s.get("skipped"):
                lines.append(f"{s['name']}: skipped ({s['skipped']})")
        return "\n".join(lines)

    def reference_kinds(self) -> dict[str, int]:
        """How many cases had which kind of reference optimum."""
        kinds: dict[str, int] = {}
        for c in self.cases:
            kinds[c["reference"]] = kinds.get(c["reference"], 0) + 1
        return kinds

    @classmethod
    def from_json(cls, doc: dict) -> Results:
        """Results read back from `to_json()` (e.g. to plot a saved run again)."""
        try:
            return cls(doc["soc"], doc["suite"], list(doc["budgets"]), int(doc["seed"]), list(doc["strategies"]),
                       list(doc["cases"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise AoeError(f"not a search benchmark results file: {exc}") from exc

    def save(self, path: str) -> None:
        """Write `to_json()` to a file."""
        try:  # aoe's one writer rule: a regular file or nothing (never a link, device or FIFO)
            atomic_replace(path, json.dumps(self.to_json(), indent=1).encode("utf-8"))
        except OSError as exc:
            raise AoeError(f"cannot write {path}: {exc.strerror or exc}") from None


def run_search_bench(suite: str | Sequence[Case], strategies: Sequence[str | Strategy | Callable] | None = None,
                     budgets: Sequence[int] = (200, 2000, 20000), soc: str | Soc = "Ascend910B2", seed: int = 0,
                     exhaustive_limit: int = EXHAUSTIVE_LIMIT,
                     progress: Callable[[str], None] | None = None) -> Results:
    """Run every strategy on every case at every budget (anytime strategies once, read at each prefix)."""
    budgets = sorted({int(b) for b in budgets})
    if not budgets or budgets[0] < 1:
        raise AoeError("budgets must be positive evaluation counts, e.g. 200,2000,20000")
    soc_obj = soc if isinstance(soc, Soc) else load_soc(soc)
    cases = load_suite(suite) if isinstance(suite, str) else list(suite)
    strats = resolve(list(strategies) if strategies is not None else None)
    meta = [{"name": s.name, "anytime": s.anytime, "max_budget": s.max_budget, "note": s.note, "skipped": None}
            for s in strats]
    res = Results(soc_obj.name, suite if isinstance(suite, str) else "user cases", budgets, seed, meta)
    grids = {b: _checkpoints(b, budgets) for b in budgets}
    for ci, case in enumerate(cases):
        space = space_for(soc_obj, case.op)
        entry: dict = {"name": case.name, "op": repr(case.op), "runs": {}}
        default_us = float(sim.simulate(soc_obj, case.op).time_us)
        logs: dict[str, dict[int, _Trace]] = {}
        for s, m in zip(strats, meta):
            if m["skipped"]:
                continue
            runs_at = [b for b in budgets if s.max_budget is None or b <= s.max_budget]
            logs[s.name] = {}
            try:
                for b in ([max(runs_at)] if s.anytime and runs_at else runs_at):
                    rec = _Recorder(soc_obj, b)
                    s.fn(space, case.op, rec, b, seed)
                    for bb in (runs_at if s.anytime else [b]):
                        logs[s.name][bb] = rec.trace()
            except ImportError as exc:  # an optional sampler's own dependency (e.g. GP needs torch)
                m["skipped"] = f"{type(exc).__name__}: {exc}"
                logs.pop(s.name)
        # the reference: brute force when the space is small enough, else the best anyone found
        bests = {n: float(tr.best[-1]) for n, per in logs.items() for tr in per.values() if len(tr.best)}
        found_by = min(bests, key=lambda n: bests[n]) if bests else None
        found = bests[found_by] if found_by else math.inf
        t0 = time.perf_counter()
        opt = math.inf
        if space.size_at_most(exhaustive_limit):
            # a black-box sampler may combine field values into a valid strategy the space does not
            # enumerate; then that strategy is the reference, and the case says so
            opt = exhaustive(space, case.op, simulator_measure(soc_obj, threads=2)).time_us
            kind = "exhaustive" if opt <= found else "exhaustive, beaten outside the space"
            ref = min(opt, found)
        else:
            ref, kind = found, "best found"
        entry.update(reference=kind, reference_us=_json_num(ref), exhaustive_us=_json_num(opt),
                     reference_by=found_by if ref < opt else "exhaustive", default_us=_json_num(default_us),
                     reference_s=round(time.perf_counter() - t0, 3))
        if not math.isfinite(ref):
            entry["runs"] = {}
            res.cases.append(entry)
            continue
        for s in strats:
            per = {}
            for b, tr in logs.get(s.name, {}).items():
                best, evals, wall, cpu = tr.at(b)
                per[str(b)] = {"best_us": _json_num(best), "gap": _json_num(_gap(best, ref)), "evaluations": evals,
                               "wall_s": round(wall, 4), "cpu_s": round(cpu, 4),
                               "curve_evals": grids[b].tolist(),
                               "curve_gap": [_json_num(_gap(x, ref)) for x in tr.curve(grids[b])]}
            entry["runs"][s.name] = per
        res.cases.append(entry)
        if progress is not None:
            progress(f"[{ci + 1}/{len(cases)}] {case.name}: reference {ref:.3f} us ({kind})")
    return res
