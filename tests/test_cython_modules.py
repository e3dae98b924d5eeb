"""The Cython-compiled modules (pure-Python mode) give exactly what their .py files give interpreted.

Each module listed in CMakeLists.txt (`AOE_CYTHON_MODULES`) is imported twice: as aoe imports it (the
extension module built from the .py, which must really be compiled: its file ends with an extension
suffix) and interpreted, straight from the .py file beside it. Both run the same inputs (the default
strategies of every kernel of the ResNet-50 and BERT-base training graphs, the private helpers on
values a case cannot reach) and must give identical results, value types included.
"""
from __future__ import annotations

import importlib
import importlib.util
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from types import FunctionType, ModuleType

import pytest

from aoe import sim
from aoe.graph import load
from aoe.ops.catalogue import describe
from aoe.soc import load_soc

MODULES = ("aoe.sim.heuristics",)  # CMakeLists.txt: AOE_CYTHON_MODULES
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
    fn = "default_strategy"
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
        assert list(a.items()) == list(b.items()) and [type(v) for v in a.values()] == [type(v) for v in b.values()], op
        kinds.add(type(op).__name__)
    assert kinds == {"MatMul", "Conv2D", "VectorOp"}
    # the private helpers too, on values a case cannot reach (integers past 64 bits must not wrap)
    for args in [(7, 1, 3, 5), (48, 2, 9, 9, 2, 3), (1, 1, 1, 1), (24, 10**30, 3**40, 7, 16, 2**70)]:
        assert compiled._core_split(*args) == interpreted._core_split(*args)
    for a, b in [(10**30, 7), (-5, 3), (2**63, 2**62 + 1)]:
        assert compiled._cdiv(a, b) == interpreted._cdiv(a, b) and compiled._align(a, b) == interpreted._align(a, b)
    for x in range(1, 300, 7):
        assert compiled._divisor_at_most(x, 64) == interpreted._divisor_at_most(x, 64)
