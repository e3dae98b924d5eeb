"""aoe.benchmark: the search harness on a tiny suite (shape of the JSON, curves, plug-in strategies)."""
from __future__ import annotations

import importlib.metadata
import itertools
import json

import numpy as np
import pytest

from aoe import sim
from aoe.benchmark import Case, Results, Strategy, run_search_bench
from aoe.benchmark import strategies as strat_mod
from aoe.cli import main as cli_main
from aoe.errors import AoeError

CASES = [Case("mm", sim.MatMul(m=96, n=160, k=64)),
         Case("conv", sim.Conv2D(x=(1, 16, 14, 14), weight=(32, 16, 3, 3), pads=(1, 1, 1, 1)))]
BUDGETS = [50, 200]


def first_rows(space, op, measure, budget, seed):
    """A user strategy: the space in enumeration order, one batch of 64 at a time, past the budget."""
    for chunk in space.chunks():
        for i in range(0, len(chunk), 64):
            measure(op, chunk[i:i + 64])


@pytest.fixture(scope="module")
def results():
    return run_search_bench(CASES, ["aoe", "random", first_rows], BUDGETS)


def test_json_shape(results):
    doc = json.loads(json.dumps(results.to_json()))  # plain JSON all the way down
    assert doc["budgets"] == BUDGETS and [s["name"] for s in doc["strategies"]] == ["aoe", "random", "first_rows"]
    assert len(doc["cases"]) == 2
    for case in doc["cases"]:
        assert case["reference"] == "exhaustive" and case["reference_us"] > 0
        for name in ("aoe", "random", "first_rows"):
            for b in BUDGETS:
                run = case["runs"][name][str(b)]
                assert 0 < run["evaluations"] <= b
                assert run["gap"] >= 0 and run["best_us"] >= case["reference_us"]
                assert len(run["curve_evals"]) == len(run["curve_gap"]) and run["curve_evals"][-1] == b
    for name, per in doc["summary"].items():
        for b in BUDGETS:
            s = per[str(b)]
            assert s["cases"] == 2 and 0 <= s["within_1pct"] <= 1 and s["q1_gap"] <= s["median_gap"] <= s["q3_gap"]
    assert "within1%" in results.table()
    assert Results.from_json(doc).summary() == results.summary()  # a saved run reads back (to plot again)


def test_curves_are_monotone(results):
    for case in results.cases:
        for per in case["runs"].values():
            for run in per.values():
                g = [np.inf if x is None else x for x in run["curve_gap"]]
                assert all(a >= b for a, b in itertools.pairwise(g))
                assert g[-1] == pytest.approx(run["gap"])
    for per in results.summary().values():
        for s in per.values():
            med = [np.inf if x is None else x for x in s["curve"]["median"]]
            assert all(a >= b for a, b in itertools.pairwise(med))


def test_budget_is_enforced_and_anytime_prefix(results):
    # the user strategy asks for the whole space; only `budget` rows are run
    for case in results.cases:
        assert case["runs"]["first_rows"]["200"]["evaluations"] == 200
        # random is anytime: its 50-evaluation run is the prefix of the 200 one
        r50, r200 = case["runs"]["random"]["50"], case["runs"]["random"]["200"]
        assert r200["curve_gap"][-1] <= r50["gap"]
        at50 = r200["curve_evals"].index(50)
        assert r200["curve_gap"][at50] == r50["gap"]


class _FakeEntryPoint:
    """What `importlib.metadata.entry_points(group=...)` yields for an installed plug-in."""

    def __init__(self, name, value, obj):
        self.name, self.value, self._obj = name, value, obj

    def load(self):
        return self._obj


def test_entry_point_strategy(monkeypatch):
    seen = []

    def plug(space, op, measure, budget, seed):
        seen.append(budget)
        measure(op, space.seeds)  # CANN's default only: its gap is the default's

    real = importlib.metadata.entry_points

    def fake(**kw):
        if kw.get("group") == strat_mod.ENTRY_POINT_GROUP:
            return [_FakeEntryPoint("mine", "my_package.strategies:plug", Strategy("mine", plug))]
        return real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", fake)
    res = run_search_bench(CASES[:1], ["mine"], [50])
    assert seen == [50]
    run = res.cases[0]["runs"]["mine"]["50"]
    assert run["evaluations"] == 1
    assert run["best_us"] == pytest.approx(res.cases[0]["default_us"], rel=1e-9)
    with pytest.raises(AoeError, match="unknown search strategy 'nope'.*mine"):
        run_search_bench(CASES[:1], ["nope"], [50])


@pytest.mark.parametrize("plots", [False, pytest.param(True, marks=pytest.mark.extra("bench"))])
def test_cli_json_suite(tmp_path, capsys, plots):
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps([{"op_type": "MatMulV2", "shapes": [[64, 96], [96, 128]], "name": "small"}]))
    argv = ["bench", "search", "--suite", str(suite), "--budgets", "50", "--strategies", "aoe,random",
            "-o", str(tmp_path / "out"), "-q"]
    if not plots:                       # the plots need matplotlib (the bench extra)
        argv.append("--no-plots")
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "aoe" in out and "random" in out
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    assert doc["cases"][0]["name"] == "small" and set(doc["summary"]) == {"aoe", "random"}
    if "--no-plots" not in argv:
        assert (tmp_path / "out" / "anytime.png").stat().st_size > 1000
    suite.write_text("[{\"op_type\": \"Relu\", \"shapes\": [[8]]}]")
    assert cli_main(["bench", "search", "--suite", str(suite), "--budgets", "50", "-o", str(tmp_path)]) == 2
    assert "vector operator" in capsys.readouterr().err


@pytest.mark.extra("bench")
def test_black_box_samplers():
    res = run_search_bench(CASES[:1], ["tpe", "cmaes"], [50])
    case = res.cases[0]
    for name in ("tpe", "cmaes"):
        run = case["runs"][name]["50"]
        assert run["evaluations"] == 50 and run["gap"] is not None and run["gap"] >= 0
        # both start from CANN's default, so they are never worse than it
        assert run["best_us"] <= case["default_us"] * (1 + 1e-9)


@pytest.mark.extra("bench", "torch")
def test_the_gp_sampler_runs_past_its_random_start():
    """Optuna's GP sampler (bench extra + torch): trials after its 10 random ones are GP-guided."""
    res = run_search_bench(CASES[:1], ["gp"], [12])
    run = res.cases[0]["runs"]["gp"]["12"]
    assert run["evaluations"] == 12 and run["gap"] is not None and run["gap"] >= 0
