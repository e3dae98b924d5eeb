"""What the graph compiler fuses by itself: the SGAT baseline, as a plan of the evaluator's plan space.

Without subgraph tuning, CANN's graph engine still fuses: graph-fusion passes rewrite known patterns
into one operator first (a scaled, masked Softmax; BatchNorm folded into the convolution before it;
the BNTrainingUpdate+ReluV2+Conv2D+BNTrainingReduce block on training chips), then UB fusion glues
element-wise operators to the kernel that produced their input (a Cube operator's epilogue, a chain of
element-wise operators, a reduction's epilogue). SGAT's gain is what tuning adds on top of that.

The rules below look only at the kernels' operator types, the subgraph's edges (barrier flags, who
reads each intermediate tensor) and the SoC; they are applied in topological order and give *groups*
of kernels. A group the evaluator cannot build at a tile size is cancelled as the compiler does
("fusion is abandoned when even the smallest tiling does not fit"): a graph-fusion block falls back
to its UB-fusion pieces, any other group drops its last operator, until every kernel can be built.
The compiler's tiling of its fused kernels is modelled as the best single tile size for those groups
(row split, no L2 residency). See README.md ("Default fusion") for the rules one by one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..graph.ir import Op
from .evaluator import BARRIER, EMAIN, N_TILES, evaluate, kernel_costs, unfused_plan
from .model import RegionData

MATMUL_TYPES = frozenset({"MatMul", "MatMulV2", "MatMulV3", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
CONV_TYPES = frozenset({"Conv2D", "DepthwiseConv2D", "Conv2DBackpropInput", "Conv2DTranspose"})
# element-wise (and same-shape activation-gradient) operators UB fusion can glue to a producer
ELTWISE_TYPES = frozenset({
    "Add", "AddV2", "Adds", "AddN", "BiasAdd", "Sub", "Mul", "Muls", "RealDiv", "Div", "FusedMulAdd",
    "Maximum", "Minimum", "Neg", "Abs", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Square", "Pow", "Erf",
    "Relu", "ReluV2", "Relu6", "Relu6D", "LeakyRelu", "Gelu", "FastGelu", "Sigmoid", "Tanh", "ClipByValue",
    "Cast", "Select", "SelectV2", "LogicalAnd", "LogicalOr", "Equal", "Less", "Greater",
    "ReluGrad", "ReluGradV2", "Relu6Grad", "GeluGrad", "FastGeluGrad", "TanhGrad", "SigmoidGrad",
})
BROADCAST_TYPES = frozenset({"BroadcastTo", "BroadcastToD", "TileD", "Tile", "Expand"})
TRANSPOSE_TYPES = frozenset({"Transpose", "TransposeD", "ConfusionTransposeD"})
SOFTMAX_TYPES = frozenset({"SoftmaxV2", "Softmax"})
DROPOUT_TYPES = frozenset({"DropOutDoMask", "DropOutDoMaskV3", "DropOutDoMaskV3D"})
REDUCE_EPI_TYPES = frozenset({"ReduceSumD", "ReduceMeanD", "ReduceMaxD", "ReduceSum", "ReduceMean", "ReduceMax"})
BN_INFER_TYPES = frozenset({"BNInfer", "BatchNorm", "BatchNormInference"})

EPILOGUE_MAX = {"matmul": 3, "conv": 3, "bnupdate": 2, "reduce": 2, "softmax": 1}
ELTWISE_CHAIN_MAX = 6          # operators in one element-wise chain
SOFTMAX_PROLOGUE_MAX = 2       # the scale and the mask in front of a Softmax


@dataclass(frozen=True)
class Group:
    """Kernels the compiler runs as one fused kernel, the rules that formed it, and its fallback."""

    members: tuple[int, ...]                      # local kernel indices, ascending
    rules: tuple[str, ...]                        # rule names, in the order they applied
    pieces: tuple[tuple[int, ...], ...] = ()      # a graph-fusion block's UB-fusion pieces (cancelled)


def _anchor(op: Op) -> str:
    """What kind of fusion head an operator is (which consumers it accepts as an epilogue)."""
    t = op.type
    if t in MATMUL_TYPES:
        return "matmul"
    if t in CONV_TYPES:
        return "conv"
    if t in ELTWISE_TYPES or t in BROADCAST_TYPES:
        return "eltwise"
    if t == "BNTrainingUpdate":
        return "bnupdate"
    if t in REDUCE_EPI_TYPES:
        return "reduce"
    if t in SOFTMAX_TYPES:
        return "softmax"
    return ""


def _accepts(anchor: str, op: Op) -> str:
    """The rule under which a group headed by `anchor` takes `op` as its next operator ("" = never)."""
    t = op.type
    if anchor in ("matmul", "conv") and t in ELTWISE_TYPES:
        return "cube-epilogue"
    if anchor == "matmul" and t in TRANSPOSE_TYPES:
        return "matmul-confusion-transpose"
    if anchor == "eltwise" and (t in ELTWISE_TYPES or t in BROADCAST_TYPES):
        return "eltwise-chain"
    if anchor == "bnupdate" and t in ELTWISE_TYPES:
        return "bnupdate-eltwise"
    if anchor == "reduce" and t in ELTWISE_TYPES:
        return "reduce-eltwise"
    if anchor == "softmax" and t in DROPOUT_TYPES:
        return "softmax-dropout"
    return ""


class _Builder:
    """Grows the groups of one subgraph (see the module docstring and README)."""

    def __init__(self, rd: RegionData, kernels: Sequence[Op], training_chip: bool) -> None:
        self.rd, self.kernels, self.training_chip = rd, list(kernels), training_chip
        self.n = rd.n
        self.preds: list[list[tuple[int, bool]]] = [[] for _ in range(self.n)]   # (producer, barrier)
        self.succs: list[list[int]] = [[] for _ in range(self.n)]
        for (a, b), f in zip(rd.edges.tolist(), rd.edgef.tolist()):
            self.preds[b].append((a, f[BARRIER] > 0.5))
            self.succs[a].append(b)
        # readers of each kernel's outputs inside the subgraph, and whether any output escapes (the
        # region data lists the tensors read inside the subgraph; an output read only outside it is
        # not seen here — the rules that ask this apply to single-output operators)
        self.readers = [0] * self.n
        self.escapes = [False] * self.n
        for (p, mask), (_, esc) in zip(rd.tens.tolist(), rd.tensf.tolist()):
            self.readers[p] |= mask
            self.escapes[p] = self.escapes[p] or esc > 0.5
        self.label = [-1] * self.n
        self.members: dict[int, list[int]] = {}
        self.rules: dict[int, list[str]] = {}
        self.head: dict[int, str] = {}
        self.count: dict[int, int] = {}          # epilogue operators counted against the limit
        self.pieces: dict[int, tuple[tuple[int, ...], ...]] = {}

    def only_reader(self, i: int, j: int) -> bool:
        """True when kernel j is the only reader of kernel i's outputs and nothing outside needs them."""
        return self.readers[i] == 1 << j and not self.escapes[i]

    def convex_with(self, members: list[int], j: int) -> bool:
        """True if adding j keeps the group convex (no path leaves it and comes back)."""
        mask = 0
        for i in members + [j]:
            mask |= 1 << i
        desc = anc = 0
        for i in members + [j]:
            desc |= int(self.rd.reach[i])
            anc |= int(self.rd.anc[i])
        return (desc & anc & ~mask) == 0

    def new(self, i: int, rules: list[str], head: str) -> int:
        self.label[i] = i
        self.members[i] = [i]
        self.rules[i] = list(rules)
        self.head[i] = head
        self.count[i] = 0
        return i

    def join(self, g: int, j: int, rule: str, counted: bool) -> None:
        self.label[j] = g
        self.members[g].append(j)
        if rule not in self.rules[g]:
            self.rules[g].append(rule)
        self.count[g] += int(counted)

    def fusable_edges(self, g: int, j: int) -> bool:
        """Every edge from the group into j can fuse (no barrier) and there is at least one."""
        ins = [bar for p, bar in self.preds[j] if self.label[p] == g]
        return bool(ins) and not any(ins)

    # --- graph-fusion passes (before UB fusion) ------------------------------------------------
    def softmax_prologue(self) -> None:
        """Scale / mask element-wise operators read only by a Softmax become one kernel with it."""
        for s, op in enumerate(self.kernels):
            if op.type not in SOFTMAX_TYPES or self.label[s] >= 0:
                continue
            chain, cur = [], s
            while len(chain) < SOFTMAX_PROLOGUE_MAX:
                prods = [p for p, bar in self.preds[cur] if not bar and self.label[p] < 0
                         and self.kernels[p].type in ELTWISE_TYPES and self.only_reader(p, cur)]
                if len(prods) != 1:
                    break
                chain.append(prods[0])
                cur = prods[0]
            if chain:
                g = self.new(min(chain), ["softmax-mask-scale"], "softmax")
                for p in sorted(chain)[1:] + [s]:
                    self.join(g, p, "softmax-mask-scale", False)
                self.members[g].sort()

    def bnupdate_relu_conv_bnreduce(self) -> None:
        """Training chips: BNTrainingUpdate -> ReluV2 -> Conv2D (no bias) -> BNTrainingReduce in one kernel."""
        if not self.training_chip:
            return
        for c, op in enumerate(self.kernels):
            if op.type != "Conv2D" or self.label[c] >= 0 or op.attrs.get("has_bias") or len(op.inputs) > 2:
                continue
            relu = [p for p, bar in self.preds[c] if not bar and self.kernels[p].type in ("Relu", "ReluV2")]
            red = [b for b in self.succs[c] if self.kernels[b].type == "BNTrainingReduce"]
            if len(relu) != 1 or len(red) != 1:
                continue
            r, b = relu[0], red[0]
            upd = [p for p, bar in self.preds[r] if not bar and self.kernels[p].type == "BNTrainingUpdate"]
            if len(upd) != 1 or any(self.label[x] >= 0 for x in (upd[0], r, b)):
                continue
            u = upd[0]
            members = sorted({u, r, c, b})
            if not all(self.convex_with(members[:k], members[k]) for k in range(1, len(members))):
                continue
            g = self.new(u, ["bnupdate-relu-conv-bnreduce"], "conv")
            for x in members[1:]:
                self.join(g, x, "bnupdate-relu-conv-bnreduce", False)
            self.count[g] = EPILOGUE_MAX["conv"]     # the pass's block takes no further epilogue
            self.pieces[g] = ((u, r), (c, b))

    # --- UB fusion, in topological order -------------------------------------------------------
    def ub_fusion(self) -> None:
        for j, op in enumerate(self.kernels):
            if self.label[j] >= 0:
                continue
            if self.try_join(j, op):
                continue
            self.new(j, [], _anchor(op))

    def try_join(self, j: int, op: Op) -> bool:
        """Join j to the group of one of its producers (most recent first) when a rule allows it."""
        groups = sorted({self.label[p] for p, _ in self.preds[j] if self.label[p] >= 0},
                        key=lambda g: -max(self.members[g]))
        for g in groups:
            head = self.head[g]
            if not self.fusable_edges(g, j) or not self.convex_with(self.members[g], j):
                continue
            if head == "conv" and op.type == "BNTrainingReduce" and "conv-bnreduce" not in self.rules[g] \
                    and self.kernels[g].type in ("Conv2D", "DepthwiseConv2D"):
                self.join(g, j, "conv-bnreduce", False)
                return True
            if head == "conv" and op.type in BN_INFER_TYPES and self.members[g] == [g] \
                    and self.only_reader(g, j):
                self.join(g, j, "conv-bninfer-fold", False)
                return True
            rule = _accepts(head, op)
            if not rule:
                continue
            if head in ("matmul", "conv"):
                # an epilogue works on the Cube's output tile: it may not broadcast to a larger tensor
                if self.rd.opf[j, EMAIN] > self.rd.opf[g, EMAIN] or self.count[g] >= EPILOGUE_MAX[head]:
                    continue
                if rule == "matmul-confusion-transpose" and self.count[g] > 0:
                    continue       # the transpose is the Cube's store pattern: first, and only once
            elif head == "eltwise":
                if len(self.members[g]) >= ELTWISE_CHAIN_MAX:
                    continue
            elif self.count[g] >= EPILOGUE_MAX[head]:
                continue
            self.join(g, j, rule, True)
            return True
        return False

    def groups(self) -> list[Group]:
        out = []
        for g in sorted(self.members):
            out.append(Group(tuple(sorted(self.members[g])), tuple(self.rules[g]), self.pieces.get(g, ())))
        return out


def training_chip(soc_name: str) -> bool:
    """Atlas training series (Ascend910A-class, coupled): the chips with the BN+ReLU+Conv+BN block pass."""
    return soc_name.startswith("Ascend910") and not soc_name.startswith(("Ascend910B", "Ascend910_93"))


def default_groups(rd: RegionData, kernels: Sequence[Op], soc_name: str) -> list[Group]:
    """The compiler's fusion groups of one subgraph before any cancellation (every kernel in one group)."""
    if len(kernels) != rd.n:
        raise ValueError(f"{len(kernels)} kernels for a subgraph of {rd.n}")
    b = _Builder(rd, kernels, training_chip(soc_name))
    b.softmax_prologue()
    b.bnupdate_relu_conv_bnreduce()
    b.ub_fusion()
    return b.groups()


def _mask(members: Sequence[int]) -> int:
    m = 0
    for i in members:
        m |= 1 << i
    return m


def _cancel(rd: RegionData, groups: list[Group], tile: int) -> list[tuple[int, ...]]:
    """The groups that can be built at `tile` (row split, no L2): invalid ones split up as the compiler does."""
    todo = [(g.members, g.pieces) for g in groups]
    kept: list[tuple[int, ...]] = []
    while todo:
        members, pieces = todo.pop()
        if len(members) == 1:
            kept.append(members)
            continue
        t = kernel_costs(rd, np.array([_mask(members)]), 0, tile, 0)[0]
        if np.isfinite(t):
            kept.append(members)
        elif pieces:
            todo.extend((p, ()) for p in pieces)
        else:
            todo.append((members[:-1], ()))
            todo.append((members[-1:], ()))
    return sorted(kept)


def plan_of(rd: RegionData, groups: Sequence[Sequence[int]], tile: int) -> np.ndarray:
    """The plan that runs each group as one kernel: edge bit 1 inside a group, row split, no L2."""
    label = [0] * rd.n
    for k, members in enumerate(groups):
        for i in members:
            label[i] = k
    plan = unfused_plan(rd)
    for e, (a, b) in enumerate(rd.edges.tolist()):
        plan[e] = int(label[a] == label[b])
    plan[rd.n_edges + 1] = tile
    return plan


def default_plan(rd: RegionData, kernels: Sequence[Op], soc_name: str) -> np.ndarray:
    """The compiler's default-fusion plan of a subgraph: a valid plan (finite time), deterministic.

    The rule groups, cancelled where they cannot be built, at the tile size that makes them fastest
    (ties: the smallest tile). Falls back to the unfused plan if nothing else is valid.
    """
    groups = default_groups(rd, kernels, soc_name)
    if all(len(g.members) == 1 for g in groups):
        return unfused_plan(rd)
    plans = np.array([plan_of(rd, _cancel(rd, groups, t), t) for t in range(N_TILES)])
    times = evaluate(rd, plans)
    best = int(np.argmin(times))
    if not np.isfinite(times[best]):
        return unfused_plan(rd)
    return plans[best]


__all__ = ["Group", "default_groups", "default_plan", "plan_of", "training_chip"]
