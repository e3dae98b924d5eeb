"""Cut a graph into tunable subgraphs around natural fusion regions.

The rule (deterministic, one pass over the operators in topological order):

- Views (`op.is_view`) cost nothing and are transparent: an edge through a chain of views connects
  the kernel that produced the data with the kernel that reads it. A view belongs to the subgraph of
  the kernel that produced its input, else (a view of a graph input) to the subgraph of its first
  reader, else to a subgraph of its own.
- Operators the simulator cannot price (`Opaque`, unmodelled types, dynamic shapes) are subgraphs of
  their own: nothing fuses into or out of them, they are carried along at zero cost.
- Every other operator (a *kernel*) either starts a new subgraph or joins the subgraph of one of its
  producers. It may join subgraph R when
    * it is a Vector operator (an epilogue, an elementwise/reduction chain, a Softmax or a
      normalisation block), or a Cube operator whose activation input comes from a Vector operator
      of R while R holds exactly one Cube operator (a conv chain / the attention BMM-Softmax-BMM);
    * R has fewer than `MAX_OPS` kernels;
    * every *other* subgraph it reads from ended before R started (largest topological index of
      that subgraph < smallest of R). Subgraphs only grow at their end, so every edge between
      subgraphs then runs from an earlier-started to a later-started subgraph: the subgraph graph
      stays acyclic and each subgraph can run as a unit.
  Candidates are tried from the most recently started producer subgraph backwards.

A Cube operator with its epilogue (MatMul + Add + Gelu, Conv2D + BNTrainingReduce/Update + Relu),
the attention score region (BMM + Mul + Add + Softmax [+ BMM]), residual Add + LayerNorm, and
elementwise/reduction chains come out as subgraphs this way.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..graph.ir import Graph, Op
from ..ops import Unsupported, describe

MAX_OPS = 8          # kernels per subgraph: keeps plan spaces small enough to search well
MAX_CUBE = 2         # Cube operators per subgraph

CUBE_TYPES = frozenset({"MatMul", "MatMulV2", "MatMulV3", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3",
                        "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "DepthwiseConv2D",
                        "Conv2DTranspose"})


@dataclass
class Subgraph:
    """One subgraph: all its operators (graph order) and the kernels among them."""

    index: int
    ops: list[Op] = field(default_factory=list)          # every operator, views included
    kernels: list[Op] = field(default_factory=list)      # priced operators, topological order
    unsupported: bool = False                            # a lone operator the simulator cannot price

    @property
    def op_names(self) -> list[str]:
        """Names of all operators of the subgraph, in graph order."""
        return [op.name for op in self.ops]

    @property
    def tunable(self) -> bool:
        """True when there is a fusion decision to make (two or more kernels)."""
        return len(self.kernels) >= 2


def is_cube(op: Op) -> bool:
    """True for operators that run on the Cube unit."""
    return op.type in CUBE_TYPES


def _priceable(graph: Graph, op: Op) -> bool:
    try:
        describe(graph, op)
    except Unsupported:
        return False
    return True


def partition(graph: Graph, priceable: Callable[[Graph, Op], bool] | None = None) -> list[Subgraph]:
    """Split `graph` into subgraphs (see the module docstring); every operator is in exactly one."""
    priceable = priceable or _priceable
    producer, readers, _ = graph.links()
    order = {op.name: i for i, op in enumerate(graph.ops)}
    view_src: dict[str, str] = {}                      # view output tensor -> underlying tensor

    def source(t: str) -> str:
        path = []
        while t in view_src:
            path.append(t)
            t = view_src[t]
        for v in path:  # path compression: a long run of views is walked once, not once per reader
            view_src[v] = t
        return t

    region_of: dict[str, int] = {}                     # kernel op name -> subgraph index
    subs: list[Subgraph] = []
    first: list[int] = []                              # smallest topological index per subgraph
    last: list[int] = []                               # largest
    ncube: list[int] = []
    kind: dict[str, str] = {}                          # op name -> "view" | "kernel" | "unsupported"

    for op in graph.ops:
        pos = order[op.name]
        if op.is_view:
            kind[op.name] = "view"
            if op.inputs:
                for t in op.outputs:
                    view_src[t] = op.inputs[0]
            continue
        if not priceable(graph, op):
            kind[op.name] = "unsupported"
            subs.append(Subgraph(len(subs), unsupported=True))
            first.append(pos), last.append(pos), ncube.append(0)
            region_of[op.name] = len(subs) - 1
            continue
        kind[op.name] = "kernel"
        cube = is_cube(op)
        # producers (through views) that are kernels, with the tensors read from them
        prods: list[Op] = []
        for t in op.inputs:
            p = producer.get(source(t))
            if p is not None and kind.get(p.name) in ("kernel", "unsupported") and p not in prods:
                prods.append(p)
        prod_regions = sorted({region_of[p.name] for p in prods}, key=lambda r: -first[r])
        chosen = -1
        for r in prod_regions:
            if subs[r].unsupported or len(subs[r].kernels) >= MAX_OPS:
                continue
            if cube:
                act = [producer.get(source(t)) for t in op.inputs if graph.tensors[t].kind == "activation"]
                if ncube[r] != 1 or not any(p is not None and region_of.get(p.name) == r and not is_cube(p)
                                            for p in act):
                    continue
            if all(last[o] < first[r] for o in prod_regions if o != r):
                chosen = r
                break
        if chosen < 0:
            subs.append(Subgraph(len(subs)))
            first.append(pos), last.append(pos), ncube.append(0)
            chosen = len(subs) - 1
        subs[chosen].kernels.append(op)
        last[chosen] = pos
        ncube[chosen] += int(cube)
        region_of[op.name] = chosen

    # place every operator (views included) in graph order
    def view_home(op: Op) -> int | None:
        if op.inputs:
            p = producer.get(source(op.inputs[0]))
            if p is not None and p.name in region_of:
                return region_of[p.name]
        # a view of a graph input: the subgraph of its first kernel reader
        stack, seen = list(op.outputs), set()
        while stack:
            t = stack.pop(0)
            if t in seen:
                continue
            seen.add(t)
            for r in readers.get(t, []):
                if r.name in region_of:
                    return region_of[r.name]
                stack.extend(r.outputs)
        return None

    for op in graph.ops:
        if kind[op.name] == "view":
            home = view_home(op)
            if home is None:
                subs.append(Subgraph(len(subs)))
                home = len(subs) - 1
            region_of[op.name] = home
        subs[region_of[op.name]].ops.append(op)
    return subs
