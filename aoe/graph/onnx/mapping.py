"""The mapping of ONNX nodes to CANN operators: one handler per ONNX operator type.

A handler emits IR operators through the importer (``imp.emit``) with CANN names and attributes
chosen here, never taken from the model file; it raises Unsupported to keep a node opaque.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ...errors import AoeError
from .geometry import conv_geometry, pads_of, reduce_axes, slice_params, split_sizes
from .node import Node, Unsupported, norm_axis
from .tables import BINARY, REDUCE, UNARY, VIEWS

if TYPE_CHECKING:
    from .importer import _Importer


Handler = Callable[["_Importer", Node], None]


def _data_inputs(node: Node) -> list[str]:
    return [i for i in node.inputs if i]


def _h_unary(imp: _Importer, node: Node) -> None:
    attrs = {k: v for k, v in node.attrs.items() if isinstance(v, (int, float, str, bytes))}
    if node.op_type == "Gelu":
        attrs = {"approximate": node.attr_str("approximate", "none")}
    imp.emit(node, UNARY[node.op_type], [node.inputs[0]], attrs)


def _h_binary(imp: _Importer, node: Node) -> None:
    ins = _data_inputs(node)
    if len(ins) != 2:
        if node.op_type in ("Max", "Min") and len(ins) > 2:
            raise Unsupported(f"{node.op_type} with {len(ins)} inputs")
        if len(ins) == 1:
            imp.emit(node, "Identity", ins, {"view": True})
            return
        raise AoeError(f"node {node.name!r} ({node.op_type}) needs two inputs")
    imp.emit(node, BINARY[node.op_type], ins, {})


def _h_sum(imp: _Importer, node: Node) -> None:
    ins = _data_inputs(node)
    imp.emit(node, "AddN" if len(ins) > 1 else "Identity", ins,
             {"N": len(ins)} if len(ins) > 1 else {"view": True})


def _h_where(imp: _Importer, node: Node) -> None:
    imp.emit(node, "Select", _data_inputs(node), {})


def _h_matmul(imp: _Importer, node: Node) -> None:
    a, b = imp.shape[node.inputs[0]], imp.shape[node.inputs[1]]
    kind = "MatMulV2" if len(a) == 2 and len(b) == 2 else "BatchMatMulV2"
    imp.emit(node, kind, node.inputs[:2], {"transpose_x1": False, "transpose_x2": False, "has_bias": False})


def _h_gemm(imp: _Importer, node: Node) -> None:
    ins = _data_inputs(node)
    attrs: dict[str, Any] = {"transpose_x1": bool(node.attr_int("transA", 0)),
                             "transpose_x2": bool(node.attr_int("transB", 0)), "has_bias": len(ins) > 2}
    alpha, beta = node.attr_float("alpha", 1.0), node.attr_float("beta", 1.0)
    if alpha != 1.0:
        attrs["alpha"] = alpha
    if beta != 1.0 and len(ins) > 2:
        attrs["beta"] = beta
    imp.emit(node, "MatMulV2", ins, attrs)


def _h_conv(imp: _Importer, node: Node) -> None:
    x, w = imp.shape[node.inputs[0]], imp.shape[node.inputs[1]]
    if len(x) != 4:
        (shape, _), = imp.infer(node)  # validates even if we then keep it opaque
        raise Unsupported(f"{len(x) - 2}-D convolution (only 2-D is mapped)")
    transpose = node.op_type == "ConvTranspose"
    kernel = node.attr_ints("kernel_shape") or list(w[2:])
    strides, dil, pads, _ = conv_geometry(imp, node, x, kernel, transpose)
    ins = _data_inputs(node)
    attrs = {"strides": strides, "pads": [pads[0], pads[2], pads[1], pads[3]], "dilations": dil,
             "groups": node.attr_int("group", 1), "kernel": kernel, "has_bias": len(ins) > 2,
             "data_format": "NCHW"}
    if transpose:
        attrs["output_padding"] = node.attr_ints("output_padding", [0, 0])
    imp.has_conv = True
    imp.emit(node, "Conv2DTranspose" if transpose else "Conv2D", ins, attrs)


def _h_pool(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    if len(x) != 4 or node.op_type == "LpPool":
        raise Unsupported("only 2-D max/average pooling is mapped")
    kernel = node.attr_ints("kernel_shape") or []
    strides, dil, pads, _ = conv_geometry(imp, node, x, kernel, False)
    attrs: dict[str, Any] = {"ksize": kernel, "strides": strides, "pads": [pads[0], pads[2], pads[1], pads[3]],
                             "ceil_mode": bool(node.attr_int("ceil_mode", 0)), "data_format": "NCHW"}
    if node.op_type == "MaxPool":
        if dil != [1, 1]:
            attrs["dilations"] = dil
        if len([o for o in node.outputs if o]) > 1:
            raise Unsupported("MaxPool with indices output")
    else:
        attrs["count_include_pad"] = bool(node.attr_int("count_include_pad", 0))
    imp.has_conv = True
    imp.emit(node, "MaxPool" if node.op_type == "MaxPool" else "AvgPool", [node.inputs[0]], attrs)


def _h_global_pool(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    imp.has_conv = True
    kind = "ReduceMeanD" if node.op_type == "GlobalAveragePool" else "ReduceMaxD"
    imp.emit(node, kind, [node.inputs[0]], {"axes": list(range(2, len(x))), "keep_dims": True})


def _h_batchnorm(imp: _Importer, node: Node) -> None:
    if node.attr_int("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        raise Unsupported("BatchNormalization in training mode (export the model in eval mode)")
    ins = _data_inputs(node)
    if len(ins) != 5:
        raise AoeError(f"node {node.name!r} (BatchNormalization) needs 5 inputs")
    # running statistics are buffers, not trained parameters
    for t in ins[3:5]:
        if imp.kind.get(t) == "param":
            imp.kind[t] = "const"
    imp.has_conv = imp.has_conv or len(imp.shape[ins[0]]) == 4
    imp.emit(node, "BNInfer", ins, {"epsilon": node.attr_float("epsilon", 1e-5),
                                    "momentum": node.attr_float("momentum", 0.9)})


def _h_lrn(imp: _Importer, node: Node) -> None:
    size = node.attr_int("size", 0)
    if size < 1:
        raise AoeError(f"node {node.name!r} (LRN) needs a positive size attribute")
    # CANN's LRN takes the window as a radius; an even ONNX size is rounded up to the odd window
    imp.emit(node, "LRN", [node.inputs[0]], {"depth_radius": size // 2, "size": size,
                                             "alpha": node.attr_float("alpha", 1e-4),
                                             "beta": node.attr_float("beta", 0.75),
                                             "bias": node.attr_float("bias", 1.0)})


def _h_instancenorm(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    if len(x) < 3:
        raise AoeError(f"node {node.name!r} (InstanceNormalization) needs an input of rank >= 3")
    imp.has_conv = imp.has_conv or len(x) == 4
    imp.emit(node, "InstanceNorm", _data_inputs(node), {"epsilon": node.attr_float("epsilon", 1e-5)})


def _h_groupnorm(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    groups = node.attr_int("num_groups", 0)
    if len(x) < 3 or groups < 1 or x[1] % groups:
        raise AoeError(f"node {node.name!r} (GroupNormalization) needs rank >= 3 and channels divisible by "
                       f"num_groups, got {list(x)} and {groups}")
    imp.has_conv = imp.has_conv or len(x) == 4
    imp.emit(node, "GroupNorm", _data_inputs(node), {"num_groups": groups,
                                                    "epsilon": node.attr_float("epsilon", 1e-5)})


def _h_depth_space(imp: _Importer, node: Node) -> None:
    attrs: dict[str, Any] = {"block_size": node.attr_int("blocksize", 0)}
    if node.op_type == "DepthToSpace":
        attrs["mode"] = node.attr_str("mode", "DCR")
        if attrs["mode"] not in ("DCR", "CRD"):
            raise AoeError(f"node {node.name!r} (DepthToSpace): mode must be DCR or CRD")
    imp.has_conv = True
    imp.emit(node, node.op_type, [node.inputs[0]], attrs)


def _h_resize(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    (shape, _), = imp.infer(node)
    mode = node.attr_str("mode", "nearest")
    if len(x) != 4 or shape[:2] != x[:2]:
        raise Unsupported(f"{node.op_type} other than over H and W of an NCHW tensor")
    if mode not in ("nearest", "linear"):
        raise Unsupported(f"{node.op_type} mode {mode!r} (nearest and linear are mapped)")
    if shape == x:
        imp.emit(node, "Identity", [node.inputs[0]], {"view": True})
        return
    attrs: dict[str, Any] = {"size": [int(shape[2]), int(shape[3])], "mode": mode,
                             "coordinate_transformation_mode": node.attr_str("coordinate_transformation_mode",
                                                                             "half_pixel")}
    imp.emit(node, "ResizeNearestNeighborV2" if mode == "nearest" else "ResizeBilinearV2",
             [node.inputs[0]], attrs)


def _h_layernorm(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    axis = norm_axis(node.attr_int("axis", -1), len(x), node)
    ins = _data_inputs(node)
    imp.emit(node, "LayerNorm", ins, {"begin_norm_axis": axis, "begin_params_axis": axis,
                                      "epsilon": node.attr_float("epsilon", 1e-5)})


def _h_softmax(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    default = -1 if imp.opset >= 13 else 1
    axis = norm_axis(node.attr_int("axis", default), len(x), node)
    # before opset 13 softmax ran over the flattened trailing dims
    axes = [axis] if imp.opset >= 13 else list(range(axis, len(x)))
    kind = {"Softmax": "SoftmaxV2", "LogSoftmax": "LogSoftmaxV2"}[node.op_type]
    imp.emit(node, kind, [node.inputs[0]], {"axes": axes})


def _h_reduce(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    axes = reduce_axes(imp, node, len(x))
    if axes == [] and node.attr_int("noop_with_empty_axes", 0):
        imp.emit(node, "Identity", [node.inputs[0]], {"view": True})
        return
    if not axes:
        axes = list(range(len(x)))
    imp.emit(node, REDUCE[node.op_type], [node.inputs[0]],
             {"axes": axes, "keep_dims": bool(node.attr_int("keepdims", 1))})


def _h_argreduce(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    imp.emit(node, "ArgMaxV2" if node.op_type == "ArgMax" else "ArgMin", [node.inputs[0]],
             {"dimension": norm_axis(node.attr_int("axis", 0), len(x), node),
              "keep_dims": bool(node.attr_int("keepdims", 1))})


def _h_transpose(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    perm = node.attr_ints("perm") or list(range(len(x)))[::-1]
    imp.emit(node, "Transpose", [node.inputs[0]], {"perm": perm})


def _h_view(imp: _Importer, node: Node) -> None:
    (shape, dtype), *rest = imp.infer(node)
    kind = {"Dropout": "Identity"}.get(node.op_type, node.op_type)
    attrs: dict[str, Any] = {"view": True, "shape": list(shape)}
    if node.op_type in ("Squeeze", "Unsqueeze"):
        x = imp.shape[node.inputs[0]]
        rank = len(shape) if node.op_type == "Unsqueeze" else len(x)
        axes = imp.ints_of(node, 1, "axes", "axes", required=False)
        attrs["axes"] = sorted(norm_axis(a, rank, node) for a in axes) if axes is not None else \
            [i for i, d in enumerate(x) if d == 1]
    if node.op_type == "Flatten":
        attrs["axis"] = node.attr_int("axis", 1)
    outs = [(node.outputs[0], shape, dtype)]
    imp.emit(node, kind, [node.inputs[0]], attrs, outs)
    # Dropout's mask (inference: all true) is a constant
    for o, (s, d) in zip(node.outputs[1:], rest):
        if o:
            imp.shape[o], imp.dtype[o], imp.kind[o] = s, d, "const"


def _h_concat(imp: _Importer, node: Node) -> None:
    ins = _data_inputs(node)
    rank = len(imp.shape[ins[0]])
    imp.emit(node, "Concat", ins, {"axis": norm_axis(node.attr_int("axis", 0), rank, node), "N": len(ins)})


def _h_split(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    axis, sizes = split_sizes(imp, node, x)
    imp.emit(node, "SplitV", [node.inputs[0]], {"split_dim": axis, "size_splits": sizes, "num_split": len(sizes)})


def _h_slice(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    begin, end, stride, out = slice_params(imp, node, x)
    if out == x:
        imp.emit(node, "Identity", [node.inputs[0]], {"view": True})
        return
    imp.emit(node, "StridedSliceD", [node.inputs[0]], {"begin": begin, "end": end, "strides": stride})


def _h_gather(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    imp.emit(node, "Gather", node.inputs[:2], {"axis": norm_axis(node.attr_int("axis", 0), len(x), node)})


def _h_pad(imp: _Importer, node: Node) -> None:
    x = imp.shape[node.inputs[0]]
    pads = pads_of(imp, node, len(x))
    attrs: dict[str, Any] = {"paddings": [[pads[i], pads[i + len(x)]] for i in range(len(x))],
                             "mode": node.attr_str("mode", "constant")}
    if len(node.inputs) > 2 and node.inputs[2]:
        v = imp.value(node.inputs[2])
        if v is None:
            raise Unsupported("non-constant pad value")
        attrs["constant_value"] = float(v.reshape(-1)[0]) if v.size else 0.0
    imp.emit(node, "Pad", [node.inputs[0]], attrs)


def _h_cast(imp: _Importer, node: Node) -> None:
    (shape, to), = imp.infer(node)
    src = imp.dtype[node.inputs[0]]
    attrs: dict[str, Any] = {"dst_type": imp.ir_dtype(to)}
    if imp.ir_dtype(src) == imp.ir_dtype(to):
        attrs["view"] = True  # a no-op once fp32 runs as fp16
    imp.emit(node, "Cast", [node.inputs[0]], attrs)


def _h_expand(imp: _Importer, node: Node) -> None:
    (shape, _), = imp.infer(node)
    if shape == imp.shape[node.inputs[0]]:
        imp.emit(node, "Identity", [node.inputs[0]], {"view": True})
        return
    imp.emit(node, "BroadcastToD", [node.inputs[0]], {"shape": list(shape)})


def _h_tile(imp: _Importer, node: Node) -> None:
    reps = imp.ints_of(node, 1, "", "tile repeats")
    imp.emit(node, "Tile", [node.inputs[0]], {"multiples": reps})


def _h_clip(imp: _Importer, node: Node) -> None:
    lo: float | None = None
    hi: float | None = None
    if "min" in node.attrs or "max" in node.attrs:
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
    else:
        for idx in (1, 2):
            if idx < len(node.inputs) and node.inputs[idx]:
                v = imp.value(node.inputs[idx])
                if v is None or v.size != 1:
                    raise Unsupported("non-constant clip bounds")
                if idx == 1:
                    lo = float(v.reshape(-1)[0])
                else:
                    hi = float(v.reshape(-1)[0])
    if lo == 0.0 and hi == 6.0:
        imp.emit(node, "Relu6", [node.inputs[0]], {})
        return
    if lo == 0.0 and hi is None:
        imp.emit(node, "Relu", [node.inputs[0]], {})
        return
    imp.emit(node, "ClipByValue", [node.inputs[0]],
             {"min": float("-inf") if lo is None else lo, "max": float("inf") if hi is None else hi})


# ONNX operator -> its handler; operators without one import as Opaque
HANDLERS: dict[str, Handler] = {
    **{k: _h_unary for k in UNARY}, **{k: _h_binary for k in BINARY}, "Sum": _h_sum, "Where": _h_where,
    "MatMul": _h_matmul, "Gemm": _h_gemm, "Conv": _h_conv, "ConvTranspose": _h_conv,
    "MaxPool": _h_pool, "AveragePool": _h_pool, "GlobalAveragePool": _h_global_pool,
    "GlobalMaxPool": _h_global_pool, "BatchNormalization": _h_batchnorm,
    "LayerNormalization": _h_layernorm, "LRN": _h_lrn, "InstanceNormalization": _h_instancenorm,
    "Resize": _h_resize, "Upsample": _h_resize, "GroupNormalization": _h_groupnorm,
    "DepthToSpace": _h_depth_space, "SpaceToDepth": _h_depth_space, "Softmax": _h_softmax, "LogSoftmax": _h_softmax,
    **{k: _h_reduce for k in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")},
    "ArgMax": _h_argreduce, "ArgMin": _h_argreduce, "Transpose": _h_transpose,
    **{k: _h_view for k in VIEWS}, "Concat": _h_concat, "Split": _h_split, "Slice": _h_slice,
    "Gather": _h_gather, "Pad": _h_pad, "Cast": _h_cast, "Expand": _h_expand, "Tile": _h_tile,
    "Clip": _h_clip,
}
