"""Graph handling grows linearly with the graph: counted operator visits and index builds, never time.

Every pass is run on synthetic chains and wide graphs of N and 2N operators (bench/scale_bench.py's
generators) whose ``ops`` and ``outputs`` lists count every element handed out (iteration, indexing,
membership tests). A pass that walks the whole graph once per operator (the catalogue rebuilding its
producer/consumer index for each described operator, ``set(graph.outputs)`` per operator of a training
graph with thousands of outputs) visits 4x as much at 2N; a linear one 2x.
"""
from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from aoe.errors import AoeError
from aoe.graph import Graph
from aoe.graph.ir import TrackedList
from aoe.graph.training import derive_training
from aoe.opat import OpatConfig, tune_graph
from aoe.opat.apply import operator_cases
from aoe.opat.search import Budget
from aoe.ops import describe
from aoe.sgat.tune import prepare
from aoe.soc import load_soc

GEN = runpy.run_path(str(Path(__file__).resolve().parents[1] / "bench" / "scale_bench.py"), run_name="scale_gen")
N = 240                 # operators of the smaller graph; the larger has 2N
SLACK = 2.2             # visits(2N) <= SLACK * visits(N): linear with a little room for fixed costs


class Counts:
    """Operator-list visits and per-graph index builds of one pass."""

    def __init__(self) -> None:
        self.visits = 0
        self.index_builds = 0


class CountingList(TrackedList):
    """A TrackedList that adds every element it hands out to `counts.visits`."""

    __slots__ = ("counts",)

    def __init__(self, items: Any, counts: Counts) -> None:
        super().__init__(items)
        self.counts = counts

    def __iter__(self) -> Iterator[Any]:
        for x in list.__iter__(self):
            self.counts.visits += 1
            yield x

    def __reversed__(self) -> Iterator[Any]:
        for x in list.__reversed__(self):
            self.counts.visits += 1
            yield x

    def __getitem__(self, i: Any) -> Any:
        got = list.__getitem__(self, i)
        self.counts.visits += len(got) if isinstance(i, slice) else 1
        return got

    def __contains__(self, x: Any) -> bool:
        self.counts.visits += len(self)  # a list membership test reads the list
        return list.__contains__(self, x)

    def index(self, *args: Any) -> int:
        self.counts.visits += len(self)
        return list.index(self, *args)


def counted(graph: Graph, counts: Counts) -> Graph:
    """`graph` with counting ``ops`` and ``outputs`` lists."""
    graph.ops = CountingList(list.__iter__(graph.ops), counts)
    graph.outputs = CountingList(list.__iter__(graph.outputs), counts)
    return graph


@pytest.fixture
def index_builds(monkeypatch: pytest.MonkeyPatch) -> list[Counts]:
    """Counts ``Graph.producers()`` / ``consumers()`` calls into the Counts at the end of the returned list."""
    current: list[Counts] = []
    for name in ("producers", "consumers"):
        orig = getattr(Graph, name)

        def wrapped(self: Graph, _orig: Callable[..., Any] = orig) -> Any:
            if current:
                current[-1].index_builds += 1
            return _orig(self)

        monkeypatch.setattr(Graph, name, wrapped)
    return current


def _describe_all(g: Graph) -> None:
    for op in list.__iter__(g.ops):     # the driver's own loop is linear: count what describe() reads
        try:
            describe(g, op)
        except AoeError:
            pass


def _opat(g: Graph) -> None:
    tune_graph(g, "Ascend910B2", None, OpatConfig(budget=Budget(evaluations=50), builtin=False))


PASSES: dict[str, Callable[[Graph], Any]] = {
    "describe": _describe_all,
    "operator_cases": operator_cases,
    "training": derive_training,
    "sgat_prepare": lambda g: prepare(g, load_soc("Ascend910A")),
    "opat": _opat,
}


def _measure(make: Callable[[int], Graph], n: int, run: Callable[[Graph], Any], training: bool,
             builds: list[Counts]) -> Counts:
    g = make(n)
    if training:
        g = derive_training(g)
    counts = Counts()
    counted(g, counts)
    builds.append(counts)
    try:
        run(g)
    finally:
        builds.pop()
    return counts


@pytest.mark.parametrize("shape", ["chain", "wide"])
@pytest.mark.parametrize("name", sorted(PASSES))
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_pass_visits_grow_linearly(shape: str, name: str, training: bool, index_builds: list[Counts]) -> None:
    if name == "training" and training:
        pytest.skip("a training graph is not derived again")
    make = GEN[shape]
    small = _measure(make, N, PASSES[name], training, index_builds)
    big = _measure(make, 2 * N, PASSES[name], training, index_builds)
    assert small.visits > 0
    assert big.visits <= SLACK * small.visits, (
        f"{name} on a {shape} graph visits {small.visits} operator-list entries at {N} operators and "
        f"{big.visits} at {2 * N}: a whole-graph pass per operator has come back")
    # the per-graph index is built a fixed number of times, however many operators ask for it
    assert big.index_builds == small.index_builds <= 4


def test_counting_catches_a_per_operator_rebuild() -> None:
    """The counter sees a pass that re-reads the whole operator list per operator (the old memo check)."""
    def quadratic(g: Graph) -> None:
        for _ in list.__iter__(g.ops):
            tuple(map(id, g.ops))

    visits = []
    for n in (N, 2 * N):
        counts = Counts()
        quadratic(counted(GEN["chain"](n), counts))
        visits.append(counts.visits)
    assert visits[1] > 3.5 * visits[0]


def test_links_follow_graph_changes() -> None:
    """The memoised index is rebuilt when the operator or output list changes, and only then."""
    g = GEN["chain"](16)
    first = g.links()
    assert g.links() is first
    last = g.ops[-1]
    g.ops.pop()
    assert last.outputs[0] not in g.links().producers
    g.ops.append(last)
    assert g.links().producers[last.outputs[0]] is last
    g.outputs = [g.ops[3].outputs[0]]
    assert g.links().outputs == frozenset({g.ops[3].outputs[0]})
    g.outputs.append(g.ops[4].outputs[0])
    assert g.ops[4].outputs[0] in g.links().outputs


@pytest.fixture
def case_builds(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """Counts, per operator (by id), how often the catalogue works out its case (the matmul, conv and vector
    builders describe() dispatches to), however it was asked."""
    from aoe.ops import catalogue

    builds: dict[int, int] = {}
    for name in ("_matmul_case", "_conv_case", "_vector_case"):
        orig = getattr(catalogue, name)

        def wrapped(graph: Graph, op: Any, _orig: Callable[..., Any] = orig) -> Any:
            builds[id(op)] = builds.get(id(op), 0) + 1
            return _orig(graph, op)

        monkeypatch.setattr(catalogue, name, wrapped)
    return builds


@pytest.mark.parametrize("shape", ["chain", "wide"])
@pytest.mark.parametrize("name", ["describe", "operator_cases", "sgat_prepare", "opat"])
@pytest.mark.parametrize("training", [False, True], ids=["inference", "training"])
def test_each_case_is_worked_out_once(shape: str, name: str, training: bool, case_builds: dict[int, int]) -> None:
    """describe() works an operator's case out once per graph however many passes ask (SGAT's partition,
    pricing and keys, the Format of a vector operator's Cube neighbours): a pass asking again pays a lookup."""
    g = GEN[shape](N)
    if training:
        g = derive_training(g)
    ops = list.__iter__(g.ops)
    kernels = [op for op in ops if not op.is_view]
    PASSES[name](g)
    PASSES[name](g)   # a second pass over the same graph finds every case already worked out
    assert kernels and max(case_builds.values()) == 1, (
        f"{name} worked out one operator's case {max(case_builds.values())} times")
    assert len(case_builds) <= len(kernels)


def test_a_changed_graph_is_described_again(case_builds: dict[int, int]) -> None:
    """The cases are kept per revision of the graph: an operator list that changed is described afresh."""
    g = GEN["chain"](16)
    op = g.ops[4]  # the MatMulV2 of the first block
    first = describe(g, op)
    assert describe(g, op) is first and case_builds[id(op)] == 1
    g.ops.append(g.ops.pop())   # a change to the list, even one that restores it
    assert describe(g, op) == first and case_builds[id(op)] == 2
