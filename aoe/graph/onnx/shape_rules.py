"""Shape inference: one rule per ONNX operator giving each output's static shape and dtype.

A rule raises AoeError when the model is invalid (mismatched shapes, bad attributes) and Unsupported
when it cannot tell (e.g. a shape input that is not a constant); the node is then kept opaque.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

from ...errors import AoeError
from ..shapes import broadcast
from .geometry import conv_geometry, pads_of, reduce_axes, slice_params, split_sizes
from .node import Node, Unsupported, norm_axis
from .tables import BINARY, BOOL_OUT, ONNX_DTYPES, REDUCE, UNARY, VIEWS

if TYPE_CHECKING:
    from .importer import _Importer


Rule = Callable[["_Importer", Node], list[tuple[tuple[int, ...], str]]]


def _in(imp: _Importer, node: Node, i: int) -> tuple[int, ...]:
    if i >= len(node.inputs) or not node.inputs[i]:
        raise AoeError(f"node {node.name!r} ({node.op_type}) is missing input {i}")
    return imp.shape[node.inputs[i]]


def _dt(imp: _Importer, node: Node, i: int = 0) -> str:
    return imp.dtype[node.inputs[i]] if i < len(node.inputs) and node.inputs[i] else "float32"


def _r_same(imp: _Importer, node: Node):
    s, d = _in(imp, node, 0), _dt(imp, node)
    return [(s, "bool" if node.op_type in BOOL_OUT else d)] + [(s, "bool")] * (len(node.outputs) - 1)


def _r_broadcast(imp: _Importer, node: Node):
    shapes = [imp.shape[i] for i in node.inputs if i]
    if not shapes:
        raise AoeError(f"node {node.name!r} ({node.op_type}) has no inputs")
    out = shapes[0]
    for s in shapes[1:]:
        out = broadcast(out, s, f"node {node.name!r} ({node.op_type})")
    if node.op_type == "Where":
        return [(out, _dt(imp, node, 1))]
    return [(out, "bool" if node.op_type in BOOL_OUT else _dt(imp, node))]


def _r_matmul(imp: _Importer, node: Node):
    a, b = _in(imp, node, 0), _in(imp, node, 1)
    what = f"node {node.name!r} (MatMul)"
    if not a or not b:
        raise AoeError(f"{what}: operands must have rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise AoeError(f"{what}: inner dimensions differ ({list(a)} x {list(b)})")
    batch = broadcast(a2[:-2], b2[:-2], what)
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [(out, _dt(imp, node))]


def _r_gemm(imp: _Importer, node: Node):
    a, b = _in(imp, node, 0), _in(imp, node, 1)
    if len(a) != 2 or len(b) != 2:
        raise AoeError(f"node {node.name!r} (Gemm): A and B must be matrices, got {list(a)} and {list(b)}")
    m, k = (a[1], a[0]) if node.attr_int("transA", 0) else a
    k2, n = (b[1], b[0]) if node.attr_int("transB", 0) else b
    if k != k2:
        raise AoeError(f"node {node.name!r} (Gemm): inner dimensions differ ({list(a)} x {list(b)})")
    return [((m, n), _dt(imp, node))]


def _r_conv(imp: _Importer, node: Node):
    x, w = _in(imp, node, 0), _in(imp, node, 1)
    if len(x) < 3 or len(w) != len(x):
        raise AoeError(f"node {node.name!r} (Conv): input {list(x)} and weight {list(w)} ranks do not match")
    groups = node.attr_int("group", 1)
    if groups < 1 or w[0] % groups or x[1] != w[1] * groups:
        raise AoeError(f"node {node.name!r} (Conv): input channels {x[1]} do not match weight {list(w)} "
                       f"with groups={groups}")
    kernel = node.attr_ints("kernel_shape") or list(w[2:])
    _, _, _, out = conv_geometry(imp, node, x, kernel, False)
    return [((x[0], w[0], *out), _dt(imp, node))]


def _r_conv_transpose(imp: _Importer, node: Node):
    x, w = _in(imp, node, 0), _in(imp, node, 1)
    if len(x) < 3 or len(w) != len(x):
        raise AoeError(f"node {node.name!r} (ConvTranspose): input {list(x)} and weight {list(w)} ranks do not match")
    groups = node.attr_int("group", 1)
    if groups < 1 or x[1] != w[0]:
        raise AoeError(f"node {node.name!r} (ConvTranspose): input channels {x[1]} do not match weight {list(w)}")
    kernel = node.attr_ints("kernel_shape") or list(w[2:])
    _, _, _, out = conv_geometry(imp, node, x, kernel, True)
    return [((x[0], w[1] * groups, *out), _dt(imp, node))]


def _r_pool(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    kernel = node.attr_ints("kernel_shape")
    if kernel is None or len(x) != len(kernel) + 2:
        raise AoeError(f"node {node.name!r} ({node.op_type}): kernel_shape does not match input {list(x)}")
    _, _, _, out = conv_geometry(imp, node, x, kernel, False)
    shape = (x[0], x[1], *out)
    return [(shape, _dt(imp, node))] + [(shape, "int64")] * (len(node.outputs) - 1)


def _r_global_pool(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    if len(x) < 3:
        raise AoeError(f"node {node.name!r} ({node.op_type}): input {list(x)} has no spatial dims")
    return [((x[0], x[1]) + (1,) * (len(x) - 2), _dt(imp, node))]


def _r_batchnorm(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    if len(x) < 2:
        raise AoeError(f"node {node.name!r} (BatchNormalization): input {list(x)} has no channel dim")
    for i in range(1, min(5, len(node.inputs))):
        if node.inputs[i] and imp.shape[node.inputs[i]] != (x[1],):
            raise AoeError(f"node {node.name!r} (BatchNormalization): input {i} must have shape [{x[1]}]")
    return [(x, _dt(imp, node))] + [((x[1],), _dt(imp, node))] * (len(node.outputs) - 1)


def _r_layernorm(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    axis = norm_axis(node.attr_int("axis", -1), len(x), node)
    stat = x[:axis] + (1,) * (len(x) - axis)
    return [(x, _dt(imp, node))] + [(stat, "float32")] * (len(node.outputs) - 1)


def _r_reduce(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    axes = reduce_axes(imp, node, len(x))
    keep = node.attr_int("keepdims", 1)
    if axes is None or (not axes and not node.attr_int("noop_with_empty_axes", 0)):
        if axes == [] and node.attr_int("noop_with_empty_axes", 0):
            return [(x, _dt(imp, node))]
        axes = list(range(len(x)))
    if not axes and node.attr_int("noop_with_empty_axes", 0):
        return [(x, _dt(imp, node))]
    out = tuple(1 if i in axes else d for i, d in enumerate(x) if keep or i not in axes)
    return [(out, _dt(imp, node))]


def _r_argreduce(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    axis = norm_axis(node.attr_int("axis", 0), len(x), node)
    keep = node.attr_int("keepdims", 1)
    out = tuple(1 if i == axis else d for i, d in enumerate(x) if keep or i != axis)
    return [(out, "int64")]


def _r_transpose(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    perm = node.attr_ints("perm") or list(range(len(x)))[::-1]
    if sorted(perm) != list(range(len(x))):
        raise AoeError(f"node {node.name!r} (Transpose): perm {perm} is not a permutation of rank {len(x)}")
    return [(tuple(x[p] for p in perm), _dt(imp, node))]


def _reshape_target(imp: _Importer, node: Node, x: tuple[int, ...], target: list[int]) -> tuple[int, ...]:
    allowzero = node.attr_int("allowzero", 0)
    out = []
    infer_at = -1
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(x):
                raise AoeError(f"node {node.name!r} (Reshape): 0 at position {i} but input has rank {len(x)}")
            out.append(x[i])
        elif d == -1:
            if infer_at >= 0:
                raise AoeError(f"node {node.name!r} (Reshape): more than one -1 in target shape {target}")
            infer_at = i
            out.append(1)
        elif d < 0:
            raise AoeError(f"node {node.name!r} (Reshape): invalid target dimension {d}")
        else:
            out.append(d)
    n_in, n_out = math.prod(x), math.prod(out)
    if infer_at >= 0:
        if n_out == 0 or n_in % n_out:
            raise AoeError(f"node {node.name!r} (Reshape): cannot reshape {list(x)} to {target}")
        out[infer_at] = n_in // n_out
    elif n_in != n_out:
        raise AoeError(f"node {node.name!r} (Reshape): cannot reshape {list(x)} ({n_in} elements) to {target}; "
                       "check --input_shape")
    return tuple(out)


def _r_reshape(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    if node.op_type == "Reshape":
        target = imp.ints_of(node, 1, "shape", "target shape")
        return [(_reshape_target(imp, node, x, target), _dt(imp, node))]
    if node.op_type == "Flatten":
        axis = node.attr_int("axis", 1)
        axis = axis % len(x) if axis < 0 else axis
        if axis > len(x):
            raise AoeError(f"node {node.name!r} (Flatten): axis {axis} out of range for rank {len(x)}")
        return [((math.prod(x[:axis]), math.prod(x[axis:])), _dt(imp, node))]
    if node.op_type == "Squeeze":
        axes = imp.ints_of(node, 1, "axes", "squeeze axes", required=False)
        if axes is None:
            return [(tuple(d for d in x if d != 1), _dt(imp, node))]
        axes_n = {norm_axis(a, len(x), node) for a in axes}
        for a in axes_n:
            if x[a] != 1:
                raise AoeError(f"node {node.name!r} (Squeeze): dimension {a} of {list(x)} is not 1")
        return [(tuple(d for i, d in enumerate(x) if i not in axes_n), _dt(imp, node))]
    if node.op_type == "Unsqueeze":
        axes = imp.ints_of(node, 1, "axes", "unsqueeze axes")
        rank = len(x) + len(axes)
        axes_n = {norm_axis(a, rank, node) for a in axes}
        if len(axes_n) != len(axes):
            raise AoeError(f"node {node.name!r} (Unsqueeze): repeated axes {axes}")
        it = iter(x)
        return [(tuple(1 if i in axes_n else next(it) for i in range(rank)), _dt(imp, node))]
    # Identity, Dropout (mask output is bool)
    return [(x, _dt(imp, node))] + [(x, "bool")] * (len(node.outputs) - 1)


def _r_concat(imp: _Importer, node: Node):
    shapes = [imp.shape[i] for i in node.inputs if i]
    if not shapes or not shapes[0]:
        raise AoeError(f"node {node.name!r} (Concat) needs inputs of rank >= 1")
    rank = len(shapes[0])
    axis = norm_axis(node.attr_int("axis", 0), rank, node)
    total = 0
    for s in shapes:
        if len(s) != rank or any(s[i] != shapes[0][i] for i in range(rank) if i != axis):
            raise AoeError(f"node {node.name!r} (Concat): inputs {[list(s) for s in shapes]} do not match off axis {axis}")
        total += s[axis]
    out = list(shapes[0])
    out[axis] = total
    return [(tuple(out), _dt(imp, node))]


def _r_split(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    axis, sizes = split_sizes(imp, node, x)
    return [(x[:axis] + (s,) + x[axis + 1:], _dt(imp, node)) for s in sizes]


def _r_slice(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    return [(slice_params(imp, node, x)[3], _dt(imp, node))]


def _r_gather(imp: _Importer, node: Node):
    x, idx = _in(imp, node, 0), _in(imp, node, 1)
    axis = norm_axis(node.attr_int("axis", 0), len(x), node)
    return [(x[:axis] + idx + x[axis + 1:], _dt(imp, node))]


def _r_gather_elements(imp: _Importer, node: Node):
    return [(_in(imp, node, 1), _dt(imp, node))]


def _r_pad(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    pads = pads_of(imp, node, len(x))
    out = tuple(d + pads[i] + pads[i + len(x)] for i, d in enumerate(x))
    if min(out + (0,)) < 0:
        raise AoeError(f"node {node.name!r} (Pad): negative output size")
    return [(out, _dt(imp, node))]


def _r_cast(imp: _Importer, node: Node):
    to = ONNX_DTYPES.get(node.attr_int("to", 1))
    if to is None:
        raise AoeError(f"node {node.name!r} (Cast): unknown target type")
    return [(_in(imp, node, 0), to)]


def _r_castlike(imp: _Importer, node: Node):
    return [(_in(imp, node, 0), _dt(imp, node, 1))]


def _r_expand(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    shape = imp.ints_of(node, 1, "", "expand shape")
    if min(shape + [0]) < 0:
        raise AoeError(f"node {node.name!r} (Expand): negative target shape {shape}")
    return [(broadcast(x, tuple(shape), f"node {node.name!r} (Expand)"), _dt(imp, node))]


def _r_tile(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    reps = imp.ints_of(node, 1, "", "tile repeats")
    if len(reps) != len(x) or min(reps + [0]) < 0:
        raise AoeError(f"node {node.name!r} (Tile): repeats {reps} do not match rank {len(x)}")
    return [(tuple(d * r for d, r in zip(x, reps)), _dt(imp, node))]


def _r_shape(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    start = node.attr_int("start", 0)
    end = node.attr_int("end", len(x))
    return [((len(range(len(x))[start:end]),), "int64")]


def _r_constant_of_shape(imp: _Importer, node: Node):
    shape = imp.ints_of(node, 0, "", "ConstantOfShape shape")
    v = node.attrs.get("value")
    dtype = ONNX_DTYPES.get(int(v.data_type), "float32") if v is not None and hasattr(v, "data_type") else "float32"
    return [(tuple(shape), dtype)]


def _r_range(imp: _Importer, node: Node):
    vals = [imp.need_value(node, node.inputs[i], "range bound") if i < len(node.inputs) else None for i in range(3)]
    if any(v is None or v.size != 1 for v in vals):
        raise Unsupported("range bounds must be scalars")
    s, l, d = (float(v.reshape(-1)[0]) for v in vals)  # type: ignore[union-attr]
    if d == 0 or not all(math.isfinite(v) for v in (s, l, d)):
        raise AoeError(f"node {node.name!r} (Range): invalid delta or bounds")
    n = max(math.ceil((l - s) / d), 0)
    return [((n,), _dt(imp, node))]


def _r_constant(imp: _Importer, node: Node):
    a = node.attrs
    if "value" in a and hasattr(a["value"], "dims"):
        t = a["value"]
        return [(tuple(t.dims), ONNX_DTYPES.get(int(t.data_type), "float32"))]
    for key, shape, dtype in (("value_float", (), "float32"), ("value_int", (), "int64")):
        if key in a:
            return [(shape, dtype)]
    for key, dtype in (("value_floats", "float32"), ("value_ints", "int64")):
        if key in a and isinstance(a[key], list):
            return [((len(a[key]),), dtype)]
    raise Unsupported("Constant without a supported value attribute")


def _r_topk(imp: _Importer, node: Node):
    x = _in(imp, node, 0)
    axis = norm_axis(node.attr_int("axis", -1), len(x), node)
    k = imp.ints_of(node, 1, "k", "TopK k")[0]
    out = x[:axis] + (k,) + x[axis + 1:]
    return [(out, _dt(imp, node)), (out, "int64")]


def _r_resize(imp: _Importer, node: Node):
    """Resize (sizes at input 3, else scales at input 2) and the older Upsample (scales at input 1)."""
    x = _in(imp, node, 0)
    what = f"node {node.name!r} ({node.op_type})"
    if node.op_type == "Resize" and len(node.inputs) > 3 and node.inputs[3]:
        sizes = imp.ints_of(node, 3, "", "Resize sizes") or []
        if node.attr_ints("axes") is not None or len(sizes) != len(x):
            raise Unsupported("Resize with axes or sizes of another rank")
        out = tuple(int(v) for v in sizes)
    else:
        idx = 1 if node.op_type == "Upsample" else 2
        scales = node.attrs.get("scales") if node.op_type == "Upsample" else None
        if scales is None:
            if idx >= len(node.inputs) or not node.inputs[idx]:
                raise Unsupported(f"{node.op_type} without scales or sizes")
            scales = [float(v) for v in imp.need_value(node, node.inputs[idx], "scales").reshape(-1).tolist()]
        if node.attr_ints("axes") is not None or len(scales) != len(x):
            raise Unsupported(f"{node.op_type} with axes or scales of another rank")
        out = tuple(int(math.floor(d * float(f))) for d, f in zip(x, scales))
    if any(d < 1 for d in out):
        raise AoeError(f"{what}: output shape {list(out)} has an empty dimension")
    return [(out, _dt(imp, node))]


def _r_depth_space(imp: _Importer, node: Node):
    """DepthToSpace: [N, C, H, W] -> [N, C/b^2, H*b, W*b]; SpaceToDepth the inverse."""
    x = _in(imp, node, 0)
    b = node.attr_int("blocksize", 0)
    what = f"node {node.name!r} ({node.op_type})"
    if len(x) != 4 or b < 1:
        raise AoeError(f"{what}: needs a rank-4 input and a positive blocksize")
    n, c, h, w = x
    if node.op_type == "DepthToSpace":
        if c % (b * b):
            raise AoeError(f"{what}: channels {c} are not a multiple of blocksize^2 = {b * b}")
        return [((n, c // (b * b), h * b, w * b), _dt(imp, node))]
    if h % b or w % b:
        raise AoeError(f"{what}: height {h} and width {w} must be multiples of blocksize {b}")
    return [((n, c * b * b, h // b, w // b), _dt(imp, node))]


def _r_size(imp: _Importer, node: Node):
    return [((), "int64")]


def _r_clip(imp: _Importer, node: Node):
    return [(_in(imp, node, 0), _dt(imp, node))]


# ONNX operator -> its shape rule (operators without one keep ONNX's inferred shapes, if any)
SHAPE_RULES: dict[str, Rule] = {
    **{k: _r_same for k in UNARY},
    **{k: _r_broadcast for k in BINARY}, "Sum": _r_broadcast, "Mean": _r_broadcast, "Where": _r_broadcast,
    "MatMul": _r_matmul, "Gemm": _r_gemm, "Conv": _r_conv, "ConvTranspose": _r_conv_transpose,
    "MaxPool": _r_pool, "AveragePool": _r_pool, "LpPool": _r_pool,
    "GlobalAveragePool": _r_global_pool, "GlobalMaxPool": _r_global_pool,
    "BatchNormalization": _r_batchnorm, "LayerNormalization": _r_layernorm,
    "InstanceNormalization": _r_same, "LRN": _r_same, "Softmax": _r_same, "LogSoftmax": _r_same,
    "Hardmax": _r_same, "Clip": _r_clip, "CumSum": _r_same, "Trilu": _r_same,
    **{k: _r_reduce for k in REDUCE}, "ReduceL1": _r_reduce, "ReduceLogSum": _r_reduce,
    "ArgMax": _r_argreduce, "ArgMin": _r_argreduce,
    "Transpose": _r_transpose, **{k: _r_reshape for k in VIEWS},
    "Concat": _r_concat, "Split": _r_split, "Slice": _r_slice, "Gather": _r_gather,
    "GatherElements": _r_gather_elements, "Pad": _r_pad, "Cast": _r_cast, "CastLike": _r_castlike,
    "Expand": _r_expand, "Tile": _r_tile, "Shape": _r_shape, "Size": _r_size,
    "ConstantOfShape": _r_constant_of_shape, "Range": _r_range, "Constant": _r_constant, "TopK": _r_topk,
    "Resize": _r_resize, "Upsample": _r_resize, "DepthToSpace": _r_depth_space, "SpaceToDepth": _r_depth_space,
    "GroupNormalization": _r_same,
}
