"""The Cython-compiled modules (pure-Python mode) give exactly what their .py files give interpreted.

Each module listed in CMakeLists.txt (`AOE_CYTHON_MODULES`) is imported twice: as aoe imports it (the
extension module built from the .py, which must really be compiled: its file ends with an extension
suffix) and interpreted, straight from the .py file beside it. Both run the same inputs: the default
strategies of every operator of the ResNet-50 and BERT-base training graphs, and every search driver
on real spaces with the simulator as the measure; the results must be identical (rows, times, counts).
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import FunctionType, ModuleType

import numpy as np
import pytest

from aoe import sim
from aoe.graph import load
from aoe.ops.catalogue import describe
from aoe.opat.space import space_for
from aoe.soc import load_soc

MODULES = ("aoe.opat.search", "aoe.sim.heuristics")
SOC = load_soc("Ascend910B2")


def _interpreted(name: str) -> ModuleType:
    """`name` run from its .py file by the interpreter (registered only while it executes: its
    dataclasses look their module up)."""
    compiled = importlib.import_module(name)
    path = Path(compiled.__file__).with_name(name.rsplit(".", 1)[1] + ".py")
    alias = name + "_interpreted"
    spec = importlib.util.spec_from_file_location(alias, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = name.rsplit(".", 1)[0]
    sys.modules[alias] = mod
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[alias]
    return mod


@pytest.fixture(scope="module", params=MODULES)
def pair(request: pytest.FixtureRequest) -> tuple[ModuleType, ModuleType]:
    return importlib.import_module(request.param), _interpreted(request.param)


def test_the_modules_are_compiled_and_the_interpreted_ones_are_not(pair) -> None:
    compiled, interpreted = pair
    assert compiled.__file__.endswith(tuple(EXTENSION_SUFFIXES)), compiled.__file__
    assert interpreted.__file__.endswith(".py")
    # a compiled function is Cython's, not a Python function; the interpreted one is
    fn = "search" if compiled.__name__.endswith("search") else "default_strategy"
    assert not isinstance(getattr(compiled, fn), FunctionType)
    assert type(getattr(compiled, fn)).__name__ == "cython_function_or_method"
    assert isinstance(getattr(interpreted, fn), FunctionType)


def _graph_ops(model: str, shape: str) -> list[sim.SimOp]:
    """Every simulator operator a tuning job of this training graph prices (each variant's kernel)."""
    g = load(model, shape, training=True)
    ops: dict[sim.SimOp, None] = {}
    for op in g.ops:
        try:
            case = describe(g, op)
        except Exception:  # operators the catalogue does not tune (the job skips them too)
            continue
        for v in (case.default, *case.formats, *case.impls):
            ops[v.sim_op] = None
            ops.update((x, None) for x in v.extra_ops)
    return list(ops)


OPS = _graph_ops("zoo:resnet50", "input:8,3,224,224") + _graph_ops("zoo:bert_base", "input_ids:2,128;attention_mask:2,128")


def test_default_strategies_are_identical() -> None:
    compiled, interpreted = importlib.import_module("aoe.sim.heuristics"), _interpreted("aoe.sim.heuristics")
    assert len(OPS) > 100
    kinds = set()
    for op in OPS:
        a, b = compiled.default_strategy(SOC, op), interpreted.default_strategy(SOC, op)
        assert a == b and [type(v) for v in a.values()] == [type(v) for v in b.values()], op
        kinds.add(type(op).__name__)
    assert kinds == {"MatMul", "Conv2D", "VectorOp"}
    # the private helpers too, on values a case cannot reach
    for args in [(7, 1, 3, 5), (48, 2, 9, 9, 2, 3), (1, 1, 1, 1)]:
        assert compiled._core_split(*args) == interpreted._core_split(*args)
    for x in range(1, 300, 7):
        assert compiled._divisor_at_most(x, 64) == interpreted._divisor_at_most(x, 64)


SEARCH_OPS = [sim.MatMul(m=2048, n=1024, k=1024), sim.MatMul(m=96, n=80, k=200, batch=3),
              sim.MatMul(m=4096, n=3072, k=768), sim.VectorOp("SoftmaxV2", (64, 1000)),
              sim.Conv2D(x=(32, 64, 56, 56), weight=(64, 64, 3, 3), pads=(1, 1, 1, 1)),
              sim.Conv2D(x=(32, 256, 14, 14), weight=(256, 256, 3, 3), pads=(1, 1, 1, 1),
                         op_type="Conv2DBackpropFilter")]


def _same(a, b) -> None:
    assert (a.driver, a.evaluations) == (b.driver, b.evaluations)
    assert a.time_us == b.time_us or (np.isnan(a.time_us) and np.isnan(b.time_us))
    assert (a.row is None) == (b.row is None)
    if a.row is not None:
        assert np.array_equal(a.row, b.row)


@pytest.mark.parametrize("op", SEARCH_OPS, ids=lambda o: f"{type(o).__name__}-{o.op_type}")
@pytest.mark.parametrize("budget", [300, 5_000, 100_000])
def test_search_drivers_are_identical(op, budget) -> None:
    compiled, interpreted = importlib.import_module("aoe.opat.search"), _interpreted("aoe.opat.search")
    space = space_for(SOC, op)
    for mod_a, mod_b in [(compiled, interpreted)]:
        # best-first and the hill climbing are the drivers of small budgets (each step a small batch)
        for name in ("search", "beam") + (("best_first", "local_search") if budget <= 5_000 else ()):
            a = getattr(mod_a, name)(space, op, mod_a.simulator_measure(SOC), mod_a.Budget(evaluations=budget), seed=3)
            b = getattr(mod_b, name)(space, op, mod_b.simulator_measure(SOC), mod_b.Budget(evaluations=budget), seed=3)
            _same(a, b)
        # an external measure: the bounds only order (no pruning)
        ext = lambda o, rows: sim.simulate_times(SOC, o, rows)[0] * 1.1  # noqa: E731
        a = mod_a.beam(space, op, mod_a.as_measure(ext), mod_a.Budget(evaluations=budget), prune=False)
        b = mod_b.beam(space, op, mod_b.as_measure(ext), mod_b.Budget(evaluations=budget), prune=False)
        _same(a, b)
    rows = space.all_rows() if space.size_at_most(50_000) else space.expand(space.outer[:64])
    a = compiled.random_search(rows, op, compiled.simulator_measure(SOC), compiled.Budget(evaluations=200), seed=5)
    b = interpreted.random_search(rows, op, interpreted.simulator_measure(SOC), interpreted.Budget(evaluations=200),
                                  seed=5)
    _same(a, b)
