"""OPAT beam phase 2 (aoe.opat.turns): groups formed in one call per batch, equal to one `take` per group."""
from __future__ import annotations

import numpy as np
import pytest

from aoe import sim
from aoe.opat import search as search_mod
from aoe.opat.order import LazyOrder
from aoe.opat.search import Budget, SimulatorMeasure, beam, simulator_measure
from aoe.opat.space import space_for
from aoe.opat.turns import Queues
from aoe.soc import load_soc

SOC = load_soc("Ascend910B2")


def _queues(rng: np.random.Generator, n: int, lazy: bool, two: bool) -> Queues:
    bound = rng.integers(0, 40, n).astype(np.float64)          # ties, as real bounds have
    bound[rng.random(n) < 0.05] = np.nan
    by_time = rng.permutation(n)[: int(0.8 * n)]
    q0 = LazyOrder(by_time, (rng.random(len(by_time)),)) if lazy else by_time
    queues = [q0]
    if two:
        queues.append(np.argsort(bound, kind="stable"))
    q = Queues(queues, bound if rng.random() < 0.8 else None, n)
    for o in rng.choice(n, n // 10, replace=False):            # some already expanded
        q.expanded[o] = 1
    return q


@pytest.mark.parametrize("seed", range(12))
def test_form_gives_the_groups_of_one_take_per_turn(seed):
    """`Queues.form` (the take loop inlined) against `_form_by_take` on twin queues: the same groups, marks,
    turns and expanded outer choices, batch after batch with a falling best time, rewinds included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 3000))
    lazy, two = bool(seed % 2), seed % 3 != 0
    a, b = _queues(np.random.default_rng(seed), n, lazy, two), _queues(np.random.default_rng(seed), n, lazy, two)
    t_a = t_b = 0
    formed = 0
    best = 30.0                                                  # bounds run to 39: some are pruned
    for _ in range(400):
        limit = int(rng.integers(1, 64))
        flat_a, plan_a, t_a = a.form(t_a, best, limit)
        flat_b, plan_b, t_b = b._form_by_take(t_b, best, limit)
        assert flat_a == flat_b
        assert [(e, list(m), t) for e, m, t in plan_a] == [(e, list(m), t) for e, m, t in plan_b]
        assert (t_a, a.pos, bytes(a.expanded)) == (t_b, b.pos, bytes(b.expanded))
        formed += len(plan_a)
        if plan_a and rng.random() < 0.3:                         # the best time moved inside the batch
            i = int(rng.integers(len(plan_a)))
            for q, plan in ((a, plan_a), (b, plan_b)):
                q.rewind(plan[i][1])
                for o in flat_a[plan[i][0]:]:
                    q.expanded[o] = 0
            t_a = t_b = plan_a[i][2]
            best -= float(rng.random() * 3)
        if not plan_a and not a.any_left():
            break
    assert formed >= 5


def test_phase_two_forms_its_groups_in_one_call_per_priced_batch(monkeypatch):
    """The per-group calls are gone: no `take` with the simulator as the measure, one `form` per measure
    call of phase 2, each forming many groups (a call count, so it does not depend on the machine)."""
    calls = {"take": 0, "form": 0, "groups": 0, "measure": 0}
    real_form, real_take = Queues.form, Queues.take

    def form(self, *args):
        flat, plan, t = real_form(self, *args)
        calls["form"] += 1
        calls["groups"] += len(plan)
        return flat, plan, t

    def take(self, *args):
        calls["take"] += 1
        return real_take(self, *args)

    monkeypatch.setattr(Queues, "form", form)
    monkeypatch.setattr(Queues, "take", take)
    measure = simulator_measure(SOC)
    real_price = search_mod._Tracker.price
    monkeypatch.setattr(search_mod._Tracker, "price",
                        lambda self, rows: calls.__setitem__("measure", calls["measure"] + 1) or real_price(self, rows))
    op = sim.MatMul(m=4096, n=768, k=3072)
    res = beam(space_for(SOC, op), op, measure, Budget(evaluations=100_000))
    assert res.found and res.evaluations > 10_000
    assert calls["take"] == 0
    assert calls["groups"] > 50
    assert calls["form"] <= calls["measure"] + 1
    assert calls["groups"] >= 4 * calls["form"]


@pytest.mark.parametrize("evaluations", [3_001, 20_000, 100_000])
@pytest.mark.parametrize("op", [sim.MatMul(m=4096, n=768, k=3072),
                                sim.Conv2D(x=(32, 64, 56, 56), weight=(256, 64, 1, 1))])
@pytest.mark.parametrize("nan", [False, True])
def test_pricing_ahead_counts_what_group_by_group_pricing_counts(op, evaluations, nan):
    """The simulator as the measure (groups priced ahead, counted in runs) against the same simulator as a
    plain measure (one group priced at a time): the same rows counted in the same order, at budgets
    that end inside phase 2; `nan`: a measure that prices some strategies NaN (never the best)."""
    def price(o, rows):
        t = SimulatorMeasure(SOC)(o, rows)
        return np.where(rows.sum(axis=1) % 5 == 0, np.nan, t) if nan else t

    class Ahead(SimulatorMeasure):
        def __call__(self, o, rows):
            return price(o, rows)

    class Plain:
        bound_is_exact = True

        def __call__(self, o, rows):
            return price(o, rows)

    counted: list[list[int]] = []
    real_count = search_mod._Tracker.count
    runs = []
    for measure in (Ahead(SOC), Plain()):
        counted.clear()
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(search_mod._Tracker, "count", lambda self, rows, t, *least:
                       counted.append([hash(r.tobytes()) for r in rows]) or real_count(self, rows, t, *least))
            res = beam(space_for(SOC, op), op, measure, Budget(evaluations=evaluations))
        runs.append(([r for batch in counted for r in batch], res.time_us, res.evaluations, res.row.tolist()))
    assert runs[0] == runs[1]
    assert len(runs[0][0]) == runs[0][2] <= evaluations and runs[0][2] > 1000
