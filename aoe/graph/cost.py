"""Operator cost figures for summaries: multiply-accumulates, FLOPs and bytes moved.

Convention (printed with every summary): MACs count only Cube work (matrix multiplies and
convolutions, forward and backward); Cube FLOPs = 2 x MACs. Vector operators add FLOPs = elements
produced (or read, for reductions) x a small per-element factor and no MACs. Bytes = bytes of the
distinct input tensors read + output tensors written, in their IR dtypes; views cost nothing.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .ir import Graph, Op

CONVENTION = ("MACs = Cube multiply-accumulates (MatMul/Conv, forward and backward); "
              "FLOPs = 2*MACs for Cube ops + per-element counts for Vector ops; "
              "bytes = distinct inputs read + outputs written")

CUBE_MATMUL = {"MatMulV2", "BatchMatMulV2", "MatMulV3", "BatchMatMulV3"}
CUBE_CONV = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv2DTranspose"}
CUBE_OPS = CUBE_MATMUL | CUBE_CONV

# FLOPs per output element of Vector operators (why: transcendental and normalising ops do several
# vector instructions per element; the factors follow the usual decompositions)
_PER_ELEMENT = {
    "SoftmaxV2": 5, "LogSoftmaxV2": 6, "SoftmaxGrad": 4,
    "LayerNorm": 8, "LayerNormGrad": 12,
    "Gelu": 8, "GeluGrad": 12, "Sigmoid": 4, "SigmoidGrad": 3, "Tanh": 4, "TanhGrad": 3,
    "BNInfer": 2, "BNTrainingUpdate": 6, "BNTrainingUpdateGrad": 4, "BNTrainingReduceGrad": 6,
    "ApplyAdamD": 12, "Pow": 2, "Erf": 6, "Exp": 2, "Log": 2, "Sqrt": 2, "Rsqrt": 2, "SqrtGrad": 2,
    "Elu": 3, "HardSigmoid": 3, "Softplus": 4, "ClipByValue": 2, "Relu6": 2,
}
# reductions: FLOPs per *input* element
_REDUCE = {"ReduceSumD", "ReduceMeanD", "ReduceMaxD", "ReduceMinD", "ReduceProdD",
           "BNTrainingReduce", "GlobalAveragePool", "GlobalMaxPool"}
# no arithmetic: data movement only
_MOVE = {"Transpose", "Concat", "SplitV", "StridedSliceD", "Gather", "Pad", "Cast", "BroadcastToD",
         "TransData", "EmbeddingDenseGrad", "Tile", "Select", "StridedSliceGrad"}


def _shape(graph: "Graph", name: str) -> tuple[int, ...]:
    return graph.tensors[name].shape


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        if d < 0:
            return 0
        n *= d
    return n


def op_macs(graph: "Graph", op: "Op") -> int:
    """Cube multiply-accumulates of one operator (0 for Vector ops and for unknown shapes)."""
    if op.type in CUBE_MATMUL:
        a = _shape(graph, op.inputs[0])
        out = _shape(graph, op.outputs[0])
        if not a:
            return 0
        k = a[-2] if op.attrs.get("transpose_x1") and len(a) >= 2 else a[-1]
        return _numel(out) * max(k, 0)
    if op.type in CUBE_CONV:
        if op.type == "Conv2D":
            # weight [Cout, Cin/g, kh, kw]; every output element needs Cin/g*kh*kw MACs
            w = _shape(graph, op.inputs[1])
            return _numel(_shape(graph, op.outputs[0])) * _numel(w[1:]) if len(w) == 4 else 0
        if op.type == "Conv2DBackpropInput":
            # inputs (filter, out_backprop) as in CANN: same work as the forward conv producing out_backprop
            w = _shape(graph, op.inputs[0])
            return _numel(_shape(graph, op.inputs[1])) * _numel(w[1:]) if len(w) == 4 else 0
        if op.type == "Conv2DBackpropFilter":
            # inputs (x, out_backprop), output the filter gradient [Cout, Cin/g, kh, kw]
            w = _shape(graph, op.outputs[0])
            return _numel(_shape(graph, op.inputs[1])) * _numel(w[1:]) if len(w) == 4 else 0
        if op.type == "Conv2DTranspose":
            # weight [Cin, Cout/g, kh, kw]: every *input* element scatters into Cout/g*kh*kw outputs
            w = _shape(graph, op.inputs[1])
            return _numel(_shape(graph, op.inputs[0])) * _numel(w[1:]) if len(w) == 4 else 0
    return 0


def op_flops(graph: "Graph", op: "Op", macs: int | None = None) -> int:
    """FLOPs of one operator under ``CONVENTION``."""
    if op.is_view or op.type == "Opaque":
        return 0
    if op.type in CUBE_OPS:
        m = op_macs(graph, op) if macs is None else macs
        extra = _numel(_shape(graph, op.outputs[0])) if op.attrs.get("has_bias") else 0
        return 2 * m + extra
    if op.type in _MOVE:
        return 0
    if op.type in _REDUCE:
        return _numel(_shape(graph, op.inputs[0])) if op.inputs else 0
    if op.type in ("MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad"):
        k = op.attrs.get("ksize", [1, 1])
        window = _numel(tuple(int(x) for x in k)) if isinstance(k, list) else 1
        return _numel(_shape(graph, op.outputs[0])) * window
    out = sum(_numel(_shape(graph, t)) for t in op.outputs[:1])
    return out * _PER_ELEMENT.get(op.type, 1)


def op_bytes(graph: "Graph", op: "Op") -> int:
    """Bytes read (distinct inputs) plus bytes written; 0 for views."""
    if op.is_view:
        return 0
    if op.type == "Gather" and len(op.inputs) >= 2:
        # an embedding lookup reads only the gathered rows, not the whole table
        out = sum(graph.tensors[n].nbytes for n in op.outputs)
        return graph.tensors[op.inputs[1]].nbytes + 2 * out
    names = list(dict.fromkeys(op.inputs)) + list(dict.fromkeys(op.outputs))
    return sum(graph.tensors[n].nbytes for n in names)


def summarize(graph: "Graph") -> dict[str, Any]:
    """Whole-graph summary: counts by type, per-op figures, totals, and the convention used."""
    per_op = []
    total_macs = total_flops = total_bytes = 0
    by_type: dict[str, dict[str, int]] = {}
    for op in graph.ops:
        try:
            macs = op_macs(graph, op)
            flops = op_flops(graph, op, macs)
        except (IndexError, TypeError, ValueError):
            # a hand-written JSON graph may give an operator too few inputs or odd attributes
            macs = flops = 0
        nbytes = op_bytes(graph, op)
        per_op.append({"name": op.name, "type": op.type, "macs": macs, "flops": flops, "bytes": nbytes})
        total_macs += macs
        total_flops += flops
        total_bytes += nbytes
        agg = by_type.setdefault(op.type, {"count": 0, "macs": 0, "flops": 0, "bytes": 0})
        agg["count"] += 1
        agg["macs"] += macs
        agg["flops"] += flops
        agg["bytes"] += nbytes
    by_type = dict(sorted(by_type.items(), key=lambda kv: (-kv[1]["flops"], -kv[1]["count"], kv[0])))
    return {
        "name": graph.name,
        "batch_size": graph.batch_size,
        "compute_dtype": graph.compute_dtype,
        "training": graph.training,
        "num_ops": len(graph.ops),
        "op_counts": graph.op_counts(),
        "by_type": by_type,
        "total_macs": total_macs,
        "total_flops": total_flops,
        "total_bytes": total_bytes,
        "cube_flops": 2 * total_macs,
        "convention": CONVENTION,
        "unsupported": list(graph.unsupported),
        "ops": per_op,
    }
