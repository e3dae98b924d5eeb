"""Constant folding: nodes whose inputs are all constants are evaluated with numpy (up to VALUE_CAP elements).

Exporters compute shapes at run time (Shape -> Gather -> Concat -> Reshape); folding those chains turns
them back into the static constants the shape rules need. Weights are never read, so a node that
depends on a parameter is never folded.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ...errors import AoeError
from ..shapes import check_shape
from .geometry import reduce_axes, slice_params, split_sizes
from .node import Node, TooBig, Unsupported, guard_size, is_static, np_to_dtype
from .tables import NP_DTYPES, ONNX_DTYPES, VALUE_CAP

if TYPE_CHECKING:
    from .importer import _Importer


def fold_node(imp: _Importer, node: Node, outs: list[str]) -> None:
    """Evaluate a node whose inputs are all constant; its outputs become constants."""
    results = None
    ev = EVALUATORS.get(node.op_type)
    if ev is not None:
        ins = [imp.value(i) if i else None for i in node.inputs]
        if node.op_type in ("Shape", "Size") or all(v is not None for i, v in zip(node.inputs, ins) if i):
            try:
                with np.errstate(all="ignore"):  # x/0 in a constant is the model's business
                    results = ev(imp, node, ins)
            except TooBig:
                results = None
            except AoeError:
                raise
            except Exception as exc:
                raise AoeError(f"model {imp.name!r}: constant node {node.name!r} ({node.op_type}) cannot be "
                               f"evaluated ({type(exc).__name__}: {str(exc)[:120]}); the model is invalid") from None
    if results is not None:
        for o, r in zip(node.outputs, results):
            if not o:
                continue
            r = np.asarray(r)
            dtype = np_to_dtype(r.dtype)
            imp.shape[o] = check_shape(r.shape, f"constant {o!r}")
            imp.dtype[o] = dtype
            imp.kind[o] = "const"
            imp.values[o] = r
        return
    # too big or not evaluable: the outputs are constants of known shape (folded at compile time)
    try:
        shapes = imp.infer(node)
    except Unsupported:
        shapes = imp.onnx_shapes(node)
    for o, (shape, dtype) in zip(node.outputs, shapes):
        if o:
            imp.shape[o] = shape
            imp.dtype[o] = dtype
            imp.kind[o] = "const"
    if any(not is_static(s) for s, _ in shapes):
        imp.note_unsupported(node, node.name or node.op_type, "constant of unknown shape")


def _constant_value(node: Node) -> np.ndarray:
    from onnx import numpy_helper

    a = node.attrs
    if "value" in a and hasattr(a["value"], "dims"):
        t = a["value"]
        n = math.prod(check_shape(t.dims, f"constant {node.name!r}"))
        if n > VALUE_CAP or t.data_location == 1:
            raise TooBig()
        arr = numpy_helper.to_array(t)
        if tuple(arr.shape) != tuple(t.dims):
            raise ValueError("constant data does not match its dims")
        return arr
    if "value_float" in a:
        return np.array(a["value_float"], np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], np.float32)
    if "value_int" in a:
        return np.array(a["value_int"], np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], np.int64)
    raise Unsupported("Constant without a supported value attribute")


def _ev_constant(imp, node, ins):
    return [_constant_value(node)]


def _ev_shape(imp, node, ins):
    x = imp.shape[node.inputs[0]]
    if not is_static(x):
        raise TooBig()
    start = node.attr_int("start", 0)
    end = node.attr_int("end", len(x))
    return [np.array(x[start:end], np.int64)]


def _ev_size(imp, node, ins):
    return [np.array(math.prod(imp.shape[node.inputs[0]]), np.int64)]


def _ev_infer_then(fn):
    """Evaluate only when the rule-inferred output is small enough."""
    def ev(imp, node, ins):
        for s, _ in imp.infer(node):
            guard_size(s)
        return fn(imp, node, ins)
    return ev


def _np_binary(f):
    def ev(imp, node, ins):
        a, b = ins[0], ins[1]
        guard_size(np.broadcast_shapes(a.shape, b.shape))
        return [np.asarray(f(a, b))]
    return ev


def _div(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(np.true_divide(a, np.where(b == 0, 1, b))).astype(np.result_type(a, b))
    return np.true_divide(a, b)


def _ev_cast(imp, node, ins):
    to = ONNX_DTYPES.get(node.attr_int("to", 1))
    if to not in NP_DTYPES:
        raise TooBig()
    return [ins[0].astype(to)]


def _ev_gather(imp, node, ins):
    axis = node.attr_int("axis", 0)
    idx = ins[1].astype(np.int64)
    dim = ins[0].shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise AoeError(f"node {node.name!r} (Gather): constant index out of range")
    return [np.take(ins[0], np.where(idx < 0, idx + dim, idx), axis=axis)]


def _ev_reshape_like(imp, node, ins):
    (shape, _), = imp.infer(node)[:1]
    return [ins[0].reshape(shape)]


def _ev_concat(imp, node, ins):
    return [np.concatenate([v for v in ins if v is not None], axis=node.attr_int("axis", 0))]


def _ev_slice(imp, node, ins):
    begin, end, stride, _ = slice_params(imp, node, tuple(ins[0].shape))
    sl = tuple(slice(b, (None if e < 0 and st < 0 else e), st) for b, e, st in zip(begin, end, stride))
    return [ins[0][sl]]


def _ev_constant_of_shape(imp, node, ins):
    shape = [int(x) for x in ins[0].reshape(-1)]
    guard_size(shape)
    v = node.attrs.get("value")
    fill = np.zeros(1, np.float32)
    if v is not None and hasattr(v, "dims"):
        from onnx import numpy_helper

        fill = numpy_helper.to_array(v).reshape(-1)[:1]
    return [np.full(shape, fill[0] if fill.size else 0, dtype=fill.dtype)]


def _ev_range(imp, node, ins):
    (shape, _), = imp.infer(node)
    guard_size(shape)
    s, l, d = (v.reshape(-1)[0] for v in ins[:3])
    return [np.arange(s, l, d, dtype=ins[0].dtype)]


def _ev_expand(imp, node, ins):
    (shape, _), = imp.infer(node)
    guard_size(shape)
    return [np.broadcast_to(ins[0], shape).copy()]


def _ev_tile(imp, node, ins):
    (shape, _), = imp.infer(node)
    guard_size(shape)
    return [np.tile(ins[0], [int(r) for r in ins[1].reshape(-1)])]


def _ev_where(imp, node, ins):
    guard_size(np.broadcast_shapes(*(v.shape for v in ins)))
    return [np.where(ins[0], ins[1], ins[2])]


def _ev_transpose(imp, node, ins):
    return [np.transpose(ins[0], node.attr_ints("perm"))]


def _ev_reduce(f):
    def ev(imp, node, ins):
        (shape, _), = imp.infer(node)
        axes = reduce_axes(imp, node, ins[0].ndim)
        if axes == [] and node.attr_int("noop_with_empty_axes", 0):
            return [ins[0]]
        res = f(ins[0], axis=tuple(axes) if axes else None, keepdims=bool(node.attr_int("keepdims", 1)))
        return [np.asarray(res).astype(ins[0].dtype).reshape(shape)]
    return ev


def _ev_split(imp, node, ins):
    axis, sizes = split_sizes(imp, node, tuple(ins[0].shape))
    return np.split(ins[0], np.cumsum(sizes)[:-1], axis=axis)


def _ev_trilu(imp, node, ins):
    k = int(ins[1].reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None else 0
    return [np.triu(ins[0], k) if node.attr_int("upper", 1) else np.tril(ins[0], k)]


def _ev_unary(f):
    return lambda imp, node, ins: [np.asarray(f(ins[0]))]


# ONNX operator -> its numpy evaluator; constant nodes without one keep only their shapes
EVALUATORS: dict[str, Callable[[Any, Node, list], list]] = {
    "Constant": _ev_constant, "Shape": _ev_shape, "Size": _ev_size,
    "Add": _np_binary(np.add), "Sub": _np_binary(np.subtract), "Mul": _np_binary(np.multiply),
    "Div": _np_binary(_div), "Equal": _np_binary(np.equal), "Less": _np_binary(np.less),
    "Greater": _np_binary(np.greater), "LessOrEqual": _np_binary(np.less_equal),
    "GreaterOrEqual": _np_binary(np.greater_equal), "And": _np_binary(np.logical_and),
    "Or": _np_binary(np.logical_or), "Max": _np_binary(np.maximum), "Min": _np_binary(np.minimum),
    "Pow": _np_binary(np.power), "Mod": _np_binary(np.mod),
    "Not": _ev_unary(np.logical_not), "Neg": _ev_unary(np.negative), "Abs": _ev_unary(np.abs),
    "Sqrt": _ev_unary(np.sqrt), "Floor": _ev_unary(np.floor), "Ceil": _ev_unary(np.ceil),
    "Reciprocal": _ev_unary(np.reciprocal), "Exp": _ev_unary(np.exp), "Identity": _ev_unary(np.array),
    "Cast": _ev_cast, "Gather": _ev_infer_then(_ev_gather),
    "Reshape": _ev_reshape_like, "Flatten": _ev_reshape_like, "Squeeze": _ev_reshape_like,
    "Unsqueeze": _ev_reshape_like, "Concat": _ev_infer_then(_ev_concat), "Slice": _ev_slice,
    "ConstantOfShape": _ev_constant_of_shape, "Range": _ev_range, "Expand": _ev_expand, "Tile": _ev_tile,
    "Where": _ev_where, "Transpose": _ev_transpose, "ReduceProd": _ev_reduce(np.prod),
    "ReduceSum": _ev_reduce(np.sum), "ReduceMax": _ev_reduce(np.max), "ReduceMin": _ev_reduce(np.min),
    "Split": _ev_split, "Trilu": _ev_trilu,
}
