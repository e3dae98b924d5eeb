"""TF op -> CANN operator, as CANN's TensorFlow adapter does (it keeps TF's names where CANN has them).

Notable mappings: ``MatMul`` -> ``MatMulV2`` (``transpose_a/b`` -> ``transpose_x1/x2``), ``BiasAdd`` folded
into the MatMul/Conv2D it follows (``has_bias``), ``BiasAddGrad`` -> ``ReduceSumD`` over all but the
channel axis (what CANN's BiasAddGrad computes), ``Softmax`` -> ``SoftmaxV2``, ``Sum/Mean/Max`` ->
``ReduceSumD/ReduceMeanD/ReduceMaxD``, ``FusedBatchNormV3`` (training) -> ``BNTrainingReduce`` +
``BNTrainingUpdate``, ``ResourceApplyAdam`` -> ``ApplyAdamD``; Keras 3 optimizers are elementwise ops plus
``AssignAdd``/``AssignSub``/``Assign`` (what the graph really holds).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from . import layout
from .convert import Converter
from .recurrent import emit_rnn
from .scopes import Region

UNARY = {
    "Relu": "Relu", "Relu6": "Relu6", "Elu": "Elu", "Selu": "Selu", "Sigmoid": "Sigmoid", "Tanh": "Tanh",
    "Exp": "Exp", "Log": "Log", "Sqrt": "Sqrt", "Rsqrt": "Rsqrt", "Square": "Square", "Neg": "Neg",
    "Abs": "Abs", "Erf": "Erf", "Erfc": "Erfc", "Reciprocal": "Reciprocal", "Inv": "Reciprocal",
    "Floor": "Floor", "Ceil": "Ceil", "Sign": "Sign", "Softplus": "Softplus", "Softsign": "Softsign",
    "LeakyRelu": "LeakyRelu", "OnesLike": "OnesLike", "ZerosLike": "ZerosLike", "LogicalNot": "LogicalNot",
    "Round": "Round", "IsNan": "IsNan", "Sin": "Sin", "Cos": "Cos", "Log1p": "Log1p", "Expm1": "Expm1",
}
BINARY = {
    "AddV2": "Add", "Add": "Add", "Sub": "Sub", "Mul": "Mul", "RealDiv": "RealDiv", "Div": "RealDiv",
    "Maximum": "Maximum", "Minimum": "Minimum", "Pow": "Pow", "SquaredDifference": "SquaredDifference",
    "FloorDiv": "FloorDiv", "FloorMod": "FloorMod", "Equal": "Equal", "NotEqual": "NotEqual", "Less": "Less",
    "LessEqual": "LessEqual", "Greater": "Greater", "GreaterEqual": "GreaterEqual", "LogicalAnd": "LogicalAnd",
    "LogicalOr": "LogicalOr", "DivNoNan": "DivNoNan", "MulNoNan": "MulNoNan",
}
# TF gradient kernels with CANN namesakes; inputs keep TF's order (the adapter keeps it too)
GRADS = {"ReluGrad": "ReluGrad", "Relu6Grad": "Relu6Grad", "SigmoidGrad": "SigmoidGrad", "TanhGrad": "TanhGrad",
         "RsqrtGrad": "RsqrtGrad", "SqrtGrad": "SqrtGrad", "EluGrad": "EluGrad", "SeluGrad": "SeluGrad",
         "SoftplusGrad": "SoftplusGrad", "LeakyReluGrad": "LeakyReluGrad", "ReciprocalGrad": "ReciprocalGrad",
         "InvGrad": "ReciprocalGrad"}
REDUCE = {"Sum": "ReduceSumD", "Mean": "ReduceMeanD", "Max": "ReduceMaxD", "Min": "ReduceMinD",
          "Prod": "ReduceProdD", "All": "ReduceAllD", "Any": "ReduceAnyD"}
ASSIGN = {"AssignVariableOp": "Assign", "AssignAddVariableOp": "AssignAdd", "AssignSubVariableOp": "AssignSub"}
# legacy optimizer kernels: (CANN operator, number of resource inputs)
APPLY = {"ResourceApplyAdam": ("ApplyAdamD", 3), "ResourceApplyAdamWithAmsgrad": ("ApplyAdamWithAmsgradD", 4),
         "ResourceApplyKerasMomentum": ("ApplyKerasMomentumD", 2), "ResourceApplyMomentum": ("ApplyMomentumD", 2),
         "ResourceApplyGradientDescent": ("ApplyGradientDescent", 1), "ResourceApplyRMSProp": ("ApplyRMSPropD", 3),
         "ResourceApplyAdagradV2": ("ApplyAdagradV2D", 2)}
_FLOAT = {"float16", "float32", "float64", "bfloat16"}
# outputs no mapping reads, left out of the unknown-rank check: FusedBatchNormV3's reserve_space_3 is a
# kernel workspace TF gives no shape (CANN's BN operators have no such tensor; its gradient ignores it)
WORKSPACE = {"FusedBatchNormV3": (5,)}


def _attr(op: Any, key: str, default: Any = None) -> Any:
    try:
        v = op.get_attr(key)
    except (ValueError, AttributeError):
        return default
    return v.decode() if isinstance(v, bytes) else v


def convert_op(cv: Converter, op: Any) -> None:
    """Emit the IR operators for one live TF op."""
    t = op.type
    if t in ("Identity", "StopGradient", "Snapshot", "PreventGradient", "EnsureShape", "CheckNumerics",
             "CheckNumericsV2", "IdentityN", "ReadVariableOp", "Placeholder", "NoOp", "Assert", "PrintV2",
             "Print", "VarHandleOp", "VarIsInitializedOp"):
        return  # aliases, resolved when read
    handler = _HANDLERS.get(t) or next((h for family, h in _FAMILIES if t in family), None)
    if handler is None:
        cv.opaque(op, "no CANN mapping for this TensorFlow operator")
        return
    if any(i.dtype.name == "variant" for i in op.inputs):
        # a TensorList (or other variant) of a loop kept opaque: nothing here reads one
        cv.opaque(op, "reads a TensorList of a loop that is not converted")
        return
    skip = WORKSPACE.get(t, ())
    if any(o.shape.rank is None for i, o in enumerate(op.outputs)
           if i not in skip and o.dtype.name not in ("resource", "variant")):
        cv.opaque(op, "output of unknown rank")
        return
    handler(cv, op)


def _data(cv: Converter, op: Any, idx: list[int] | None = None) -> list[str]:
    ins = op.inputs if idx is None else [op.inputs[i] for i in idx]
    return [cv.inp(t) for t in ins]


def h_unary(cv: Converter, op: Any) -> None:
    attrs = {}
    if op.type == "LeakyRelu":
        attrs["alpha"] = float(_attr(op, "alpha", 0.2))
    cv.emit(op, UNARY[op.type], _data(cv, op, [0]), attrs)


def h_binary(cv: Converter, op: Any) -> None:
    cv.emit(op, BINARY[op.type], _data(cv, op, [0, 1]))


def h_grad(cv: Converter, op: Any) -> None:
    attrs = {}
    if op.type == "LeakyReluGrad":
        attrs["alpha"] = float(_attr(op, "alpha", 0.2))
    cv.emit(op, GRADS[op.type], _data(cv, op, [0, 1]), attrs)


def h_addn(cv: Converter, op: Any) -> None:
    ins: list[str] = []
    for t in op.inputs:
        ir = cv.inp(t)
        # the pieces of one fused gradient (e.g. a batch norm's three dx terms) are one tensor now
        if ir in cv.fused_alias and ir in ins:
            continue
        ins.append(ir)
    if len(ins) == 1:
        cv.alias[op.outputs[0].name] = ins[0]
        return
    cv.emit(op, "AddN", ins, {"N": len(ins)})


def h_cast(cv: Converter, op: Any) -> None:
    src, dst = cv.ir_dtype(op.inputs[0].dtype), cv.ir_dtype(op.outputs[0].dtype)
    attrs: dict[str, Any] = {"dst_type": dst}
    if src == dst:
        attrs["view"] = True
    cv.emit(op, "Cast", _data(cv, op, [0]), attrs)


def h_view(cv: Converter, op: Any) -> None:
    kind = {"ExpandDims": "Unsqueeze"}.get(op.type, op.type)
    out = op.outputs[0]
    cv.emit(op, kind, _data(cv, op, [0]), {"view": True, "shape": list(cv.ir_shape(out))})


def _pads(in_hw: tuple[int, int], k: list[int], s: list[int], d: list[int], padding: str,
          explicit: list[int] | None) -> list[int]:
    """[top, bottom, left, right] of a TF convolution/pooling."""
    if padding == "VALID":
        return [0, 0, 0, 0]
    if padding == "EXPLICIT" and explicit:
        return [int(x) for x in explicit[2:6]] if len(explicit) >= 6 else [0, 0, 0, 0]
    out = []
    for i in range(2):
        o = math.ceil(in_hw[i] / s[i])
        total = max((o - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_hw[i], 0)
        out += [total // 2, total - total // 2]
    return out


def _conv_attrs(cv: Converter, op: Any, x_nhwc: tuple[int, ...], filt_hwio: tuple[int, ...]) -> dict[str, Any]:
    fmt = _attr(op, "data_format", "NHWC")
    strides = layout.hw(list(_attr(op, "strides", [1, 1, 1, 1])), fmt)
    dil = layout.hw(list(_attr(op, "dilations", [1, 1, 1, 1])), fmt)
    if fmt == "NHWC":
        hw_in = (x_nhwc[1], x_nhwc[2])
    else:
        hw_in = (x_nhwc[2], x_nhwc[3])
    k = [filt_hwio[0], filt_hwio[1]]
    explicit = list(_attr(op, "explicit_paddings", []) or [])
    if fmt == "NCHW" and len(explicit) == 8:
        explicit = explicit[:2] + explicit[4:8] + explicit[2:4]
    pads = _pads(hw_in, k, strides, dil, _attr(op, "padding", "VALID"), explicit)
    return {"strides": strides, "pads": pads, "dilations": dil, "groups": 1, "kernel": k, "has_bias": False,
            "data_format": "NCHW"}


def h_conv2d(cv: Converter, op: Any) -> None:
    x, w = op.inputs[0], op.inputs[1]
    cv.emit(op, "Conv2D", _data(cv, op, [0, 1]), _conv_attrs(cv, op, cv.tf_shape(x), cv.tf_shape(w)))


def h_conv_bp_input(cv: Converter, op: Any) -> None:
    w, dy = op.inputs[1], op.inputs[2]
    xs = cv.tf_shape(op.outputs[0])
    attrs = _conv_attrs(cv, op, xs, cv.tf_shape(w))
    attrs.pop("has_bias")
    attrs["input_size"] = list(cv.ir_shape(op.outputs[0]))
    cv.emit(op, "Conv2DBackpropInput", [cv.inp(w), cv.inp(dy)], attrs)


def h_conv_bp_filter(cv: Converter, op: Any) -> None:
    x, dy = op.inputs[0], op.inputs[2]
    attrs = _conv_attrs(cv, op, cv.tf_shape(x), cv.tf_shape(op.outputs[0]))
    attrs.pop("has_bias")
    attrs["filter_size"] = list(cv.ir_shape(op.outputs[0]))
    cv.emit(op, "Conv2DBackpropFilter", [cv.inp(x), cv.inp(dy)], attrs)


def _depthwise_filter(cv: Converter, op: Any, w: Any) -> str:
    """TF's depthwise filter [kh, kw, Cin, mult] as the IR's grouped weight [Cin*mult, 1, kh, kw] (a view)."""
    ws = cv.tf_shape(w)
    wt = cv.inp(w)
    want = (ws[2] * ws[3], 1, ws[0], ws[1])
    if cv.tensors[wt].shape == want:
        return wt
    view = cv.new_tensor(f"{wt}/grouped", want, cv.tensors[wt].dtype)
    cv.emit(op, "Reshape", [wt], {"view": True, "shape": list(want)}, outputs=[view], name=f"{op.name}/filter")
    return view


def h_depthwise(cv: Converter, op: Any) -> None:
    x, w = op.inputs[0], op.inputs[1]
    ws = cv.tf_shape(w)  # kh, kw, Cin, multiplier
    attrs = _conv_attrs(cv, op, cv.tf_shape(x), ws)
    attrs["groups"] = ws[2]
    cv.emit(op, "Conv2D", [cv.inp(x), _depthwise_filter(cv, op, w)], attrs)


def h_depthwise_bp_input(cv: Converter, op: Any) -> None:
    w, dy = op.inputs[1], op.inputs[2]
    ws = cv.tf_shape(w)
    attrs = _conv_attrs(cv, op, cv.tf_shape(op.outputs[0]), ws)
    attrs.pop("has_bias")
    attrs.update(groups=ws[2], input_size=list(cv.ir_shape(op.outputs[0])))
    cv.emit(op, "Conv2DBackpropInput", [_depthwise_filter(cv, op, w), cv.inp(dy)], attrs)


def h_depthwise_bp_filter(cv: Converter, op: Any) -> None:
    x, dy, out = op.inputs[0], op.inputs[2], op.outputs[0]
    ws = cv.tf_shape(out)
    attrs = _conv_attrs(cv, op, cv.tf_shape(x), ws)
    attrs.pop("has_bias")
    grouped = (ws[2] * ws[3], 1, ws[0], ws[1])
    attrs.update(groups=ws[2], filter_size=list(grouped))
    g = cv.new_tensor(f"{op.name}/grouped", grouped, cv.ir_dtype(out.dtype))
    cv.emit(op, "Conv2DBackpropFilter", [cv.inp(x), cv.inp(dy)], attrs, outputs=[g])
    cv.emit(op, "Reshape", [g], {"view": True, "shape": list(cv.ir_shape(out))}, outputs=[cv.out(out)],
            name=f"{op.name}/as_variable")


def h_matmul(cv: Converter, op: Any) -> None:
    a, b = op.inputs[0], op.inputs[1]
    if op.type == "MatMul":
        ta, tb = bool(_attr(op, "transpose_a", False)), bool(_attr(op, "transpose_b", False))
    else:
        ta, tb = bool(_attr(op, "adj_x", False)), bool(_attr(op, "adj_y", False))
    kind = "MatMulV2" if a.shape.rank == 2 and b.shape.rank == 2 else "BatchMatMulV2"
    cv.emit(op, kind, _data(cv, op, [0, 1]), {"transpose_x1": ta, "transpose_x2": tb, "has_bias": False})


def h_bias_add(cv: Converter, op: Any) -> None:
    x, bias = op.inputs[0], op.inputs[1]
    producer = next((o for o in reversed(cv.ops) if cv.alias.get(x.name) in o.outputs), None)
    only_use = len(cv.consumers.get(x.name, [])) == 1
    if producer is not None and only_use and producer.type in ("MatMulV2", "BatchMatMulV2", "Conv2D") \
            and not producer.attrs.get("has_bias") and len(producer.outputs) == 1:
        # MatMul/Conv + BiasAdd is one CANN operator with a bias input
        producer.inputs.append(cv.inp(_peel(bias)))
        producer.attrs["has_bias"] = True
        cv.alias[op.outputs[0].name] = producer.outputs[0]
        return
    cv.emit(op, "Add", _data(cv, op, [0, 1]))


def h_bias_add_grad(cv: Converter, op: Any) -> None:
    dy = op.inputs[0]
    rank = dy.shape.rank
    fmt = _attr(op, "data_format", "NHWC")
    ch = rank - 1 if fmt == "NHWC" else 1
    axes = sorted(cv.axis(dy, a) for a in range(rank) if a != ch)
    cv.emit(op, "ReduceSumD", [cv.inp(dy)], {"axes": axes, "keep_dims": False})


def h_reduce(cv: Converter, op: Any) -> None:
    x = op.inputs[0]
    rank = x.shape.rank
    keep = bool(_attr(op, "keep_dims", False))
    axes = cv.ints(op.inputs[1], "reduction axes")
    if axes is None:
        xs, ys = cv.tf_shape(x), cv.tf_shape(op.outputs[0])
        axes = [i for i in range(rank) if keep and ys[i] == 1 and xs[i] != 1] if keep else list(range(rank))
    axes = sorted({cv.axis(x, a) for a in axes}) if axes else list(range(rank))
    cv.emit(op, REDUCE[op.type], [cv.inp(x)], {"axes": axes, "keep_dims": keep})


def h_softmax(cv: Converter, op: Any) -> None:
    x = op.inputs[0]
    kind = "SoftmaxV2" if op.type == "Softmax" else "LogSoftmaxV2"
    cv.emit(op, kind, [cv.inp(x)], {"axes": [cv.axis(x, -1)]})


def h_transpose(cv: Converter, op: Any) -> None:
    x = op.inputs[0]
    perm = cv.ints(op.inputs[1], "perm") or list(range(x.shape.rank))[::-1]
    if cv.is_act4(x) and cv.is_act4(op.outputs[0]):
        m = layout.NHWC_TO_NCHW_AXIS
        inv = {v: k for k, v in m.items()}
        perm = [m[perm[inv[j]]] for j in range(4)]
    cv.emit(op, "Transpose", [cv.inp(x)], {"perm": perm})


def h_concat(cv: Converter, op: Any) -> None:
    ins = list(op.inputs[:-1])
    axis = cv.ints(op.inputs[-1], "axis")
    a = cv.axis(ins[0], axis[0]) if axis else 0
    cv.emit(op, "Concat", [cv.inp(t) for t in ins], {"axis": a, "N": len(ins)})


def h_pack(cv: Converter, op: Any) -> None:
    cv.emit(op, "Pack", [cv.inp(t) for t in op.inputs], {"axis": int(_attr(op, "axis", 0)), "N": len(op.inputs)})


def h_split(cv: Converter, op: Any) -> None:
    if op.type == "Split":
        x, axis = op.inputs[1], cv.ints(op.inputs[0], "axis")
    else:
        x, axis = op.inputs[0], cv.ints(op.inputs[2], "axis")
    a = cv.axis(x, axis[0]) if axis else 0
    sizes = [cv.ir_shape(o)[a] for o in op.outputs]
    cv.emit(op, "SplitV", [cv.inp(x)], {"split_dim": a, "size_splits": sizes, "num_split": len(sizes)})


def h_slice(cv: Converter, op: Any) -> None:
    x = op.inputs[0]
    begin = cv.ints(op.inputs[1], "begin") or []
    if op.type == "StridedSlice":
        end = cv.ints(op.inputs[2], "end") or []
        strides = cv.ints(op.inputs[3], "strides") or []
        attrs = {"begin": begin, "end": end, "strides": strides,
                 **{k: int(_attr(op, k, 0)) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                                      "shrink_axis_mask")}}
    else:
        size = cv.ints(op.inputs[2], "size") or []
        attrs = {"begin": begin, "end": [b + s if s >= 0 else -1 for b, s in zip(begin, size)],
                 "strides": [1] * len(begin)}
    if cv.tf_shape(x) == cv.tf_shape(op.outputs[0]):
        attrs["view"] = True
    cv.emit(op, "StridedSliceD", [cv.inp(x)], attrs)


def h_strided_slice_grad(cv: Converter, op: Any) -> None:
    cv.emit(op, "StridedSliceGrad", [cv.inp(op.inputs[4])], {"shape": list(cv.ir_shape(op.outputs[0]))})


def h_pad(cv: Converter, op: Any) -> None:
    x = op.inputs[0]
    pads = cv.value(op.inputs[1])
    rank = x.shape.rank
    pairs = [[int(a), int(b)] for a, b in pads.reshape(rank, 2).tolist()] if pads is not None else [[0, 0]] * rank
    if cv.is_act4(x):
        inv = {v: k for k, v in layout.NHWC_TO_NCHW_AXIS.items()}
        pairs = [pairs[inv[j]] for j in range(4)]
    mode = "constant" if op.type in ("Pad", "PadV2") else str(_attr(op, "mode", "REFLECT")).lower()
    cv.emit(op, "Pad", [cv.inp(x)], {"paddings": pairs, "mode": mode})


def h_tile(cv: Converter, op: Any) -> None:
    x = op.inputs[0]
    mult = cv.ints(op.inputs[1], "multiples")
    if mult is not None and cv.is_act4(x):
        inv = {v: k for k, v in layout.NHWC_TO_NCHW_AXIS.items()}
        mult = [mult[inv[j]] for j in range(4)]
    cv.emit(op, "Tile", [cv.inp(x)], {"multiples": mult or []})


def h_broadcast_to(cv: Converter, op: Any) -> None:
    x, out = op.inputs[0], op.outputs[0]
    if cv.tf_shape(x) == cv.tf_shape(out):
        cv.alias[out.name] = cv.inp(x)
        return
    cv.emit(op, "BroadcastToD", [cv.inp(x)], {"shape": list(cv.ir_shape(out))})


def h_fill(cv: Converter, op: Any) -> None:
    out = op.outputs[0]
    # a tensor filled with one value: a constant buffer, no kernel worth tuning
    cv.alias[out.name] = cv.new_tensor(out.name.split(":")[0], cv.ir_shape(out), cv.ir_dtype(out.dtype), "const")


def _pool_attrs(cv: Converter, op: Any, x_nhwc: tuple[int, ...]) -> dict[str, Any]:
    fmt = _attr(op, "data_format", "NHWC")
    k = layout.hw(list(_attr(op, "ksize", [1, 1, 1, 1])), fmt)
    s = layout.hw(list(_attr(op, "strides", [1, 1, 1, 1])), fmt)
    hw_in = (x_nhwc[1], x_nhwc[2]) if fmt == "NHWC" else (x_nhwc[2], x_nhwc[3])
    pads = _pads(hw_in, k, s, [1, 1], _attr(op, "padding", "VALID"), None)
    return {"ksize": k, "strides": s, "pads": pads, "ceil_mode": False, "data_format": "NCHW"}


def h_pool(cv: Converter, op: Any) -> None:
    x = op.inputs[0]
    kind = "MaxPool" if op.type.startswith("MaxPool") else "AvgPool"
    attrs = _pool_attrs(cv, op, cv.tf_shape(x))
    if kind == "AvgPool":
        attrs["count_include_pad"] = False
    cv.emit(op, kind, [cv.inp(x)], attrs)


def h_max_pool_grad(cv: Converter, op: Any) -> None:
    x = op.inputs[0]
    cv.emit(op, "MaxPoolGrad", _data(cv, op, [0, 1, 2]), _pool_attrs(cv, op, cv.tf_shape(x)))


def h_avg_pool_grad(cv: Converter, op: Any) -> None:
    out = op.outputs[0]
    attrs = _pool_attrs(cv, op, cv.tf_shape(out))
    attrs["orig_input_shape"] = list(cv.ir_shape(out))
    cv.emit(op, "AvgPoolGrad", [cv.inp(op.inputs[1])], attrs)


def h_gather(cv: Converter, op: Any) -> None:
    params, idx = op.inputs[0], op.inputs[1]
    if op.type == "GatherV2":
        axis = cv.ints(op.inputs[2], "axis") or [0]
        a = cv.axis(params, axis[0])
        data = cv.inp(params)
    else:  # ResourceGather: the variable itself
        a = 0
        data = cv.variable(params, None)
    cv.emit(op, "Gather", [data, cv.inp(idx)], {"axis": a})


def h_segment_sum(cv: Converter, op: Any) -> None:
    n = cv.ints(op.inputs[2], "num_segments") or [cv.tf_shape(op.outputs[0])[0]]
    cv.emit(op, "UnsortedSegmentSum", _data(cv, op, [0, 1]), {"axis": 0, "num_segments": n[0]})


def h_select(cv: Converter, op: Any) -> None:
    cv.emit(op, "Select", _data(cv, op, [0, 1, 2]))


def h_xent(cv: Converter, op: Any) -> None:
    cv.emit(op, op.type, _data(cv, op, [0, 1]))


def h_fused_bn(cv: Converter, op: Any) -> None:
    x, scale = op.inputs[:2]
    eps = float(_attr(op, "epsilon", 1e-3))
    outs = op.outputs
    if not bool(_attr(op, "is_training", True)):
        cv.emit(op, "BNInfer", _data(cv, op, [0, 1, 2, 3, 4]), {"epsilon": eps}, outputs=[cv.out(outs[0])])
        return
    c = cv.tf_shape(scale)
    s = cv.new_tensor(f"{op.name}/bn_sum", c, "float32")
    sq = cv.new_tensor(f"{op.name}/bn_square_sum", c, "float32")
    xi = cv.inp(x)
    cv.emit(op, "BNTrainingReduce", [xi], {"data_format": cv.tensors[xi].format}, outputs=[s, sq],
            name=f"{op.name}/reduce")
    bm, bv = cv.out(outs[1]), cv.out(outs[2])
    cv.alias[outs[3].name], cv.alias[outs[4].name] = bm, bv
    mo = cv.new_tensor(f"{op.name}/mean_out", c, "float32")
    vo = cv.new_tensor(f"{op.name}/variance_out", c, "float32")
    cv.extra_outputs += [mo, vo]
    factor = float(_attr(op, "exponential_avg_factor", 1.0))
    cv.emit(op, "BNTrainingUpdate", [xi, s, sq] + _data(cv, op, [1, 2, 3, 4]), {"factor": factor, "epsilon": eps},
            outputs=[cv.out(outs[0]), mo, vo, bm, bv], name=f"{op.name}/update")


def h_fused_bn_grad(cv: Converter, op: Any) -> None:
    dy, x, scale, r1, r2 = op.inputs[:5]
    eps = float(_attr(op, "epsilon", 1e-3))
    dx, ds, do = op.outputs[:3]
    dyi, xi, m, v = cv.inp(dy), cv.inp(x), cv.inp(r1), cv.inp(r2)
    cv.emit(op, "BNTrainingUpdateGrad", [dyi, xi, m, v], {"epsilon": eps}, outputs=[cv.out(ds), cv.out(do)],
            name=f"{op.name}/update_grad")
    cv.emit(op, "BNTrainingReduceGrad", [dyi, xi, cv.out(ds), cv.out(do), cv.inp(scale), m, v], {"epsilon": eps},
            outputs=[cv.out(dx)], name=f"{op.name}/reduce_grad")


def h_assign(cv: Converter, op: Any) -> None:
    handle, value = op.inputs[0], op.inputs[1]
    var = cv.variable(handle, None)
    cv.emit(op, ASSIGN[op.type], [var, cv.inp(value)], outputs=[cv.updated(handle)])


def h_apply(cv: Converter, op: Any) -> None:
    kind, n_res = APPLY[op.type]
    handles = list(op.inputs[:n_res])
    ins = [cv.variable(h, None) for h in handles] + [cv.inp(t) for t in op.inputs[n_res:]]
    outs = [cv.updated(h) for h in handles]
    attrs = {"use_locking": bool(_attr(op, "use_locking", False))}
    if op.type in ("ResourceApplyAdam", "ResourceApplyKerasMomentum", "ResourceApplyMomentum"):
        attrs["use_nesterov"] = bool(_attr(op, "use_nesterov", False))
    cv.emit(op, kind, ins, attrs, outputs=outs)


def h_iterator(cv: Converter, op: Any) -> None:
    for t in op.outputs:
        cv.inputs_ir.append(cv._register(t, kind="input"))


# families of TF operators that share one handler (looked up after the named handlers)
_FAMILIES: tuple[tuple[Any, Callable[[Converter, Any], None]], ...] = (
    (UNARY, h_unary), (BINARY, h_binary), (GRADS, h_grad), (REDUCE, h_reduce), (ASSIGN, h_assign), (APPLY, h_apply))

_HANDLERS: dict[str, Callable[[Converter, Any], None]] = {
    "AddN": h_addn, "Cast": h_cast, "Reshape": h_view, "Squeeze": h_view, "ExpandDims": h_view,
    "Conv2D": h_conv2d, "Conv2DBackpropInput": h_conv_bp_input, "Conv2DBackpropFilter": h_conv_bp_filter,
    "DepthwiseConv2dNative": h_depthwise, "DepthwiseConv2dNativeBackpropInput": h_depthwise_bp_input,
    "DepthwiseConv2dNativeBackpropFilter": h_depthwise_bp_filter,
    "MatMul": h_matmul, "BatchMatMul": h_matmul, "BatchMatMulV2": h_matmul, "BatchMatMulV3": h_matmul,
    "BiasAdd": h_bias_add, "BiasAddV1": h_bias_add, "BiasAddGrad": h_bias_add_grad,
    "Softmax": h_softmax, "LogSoftmax": h_softmax, "Transpose": h_transpose, "ConcatV2": h_concat,
    "Pack": h_pack, "Split": h_split, "SplitV": h_split, "StridedSlice": h_slice, "Slice": h_slice,
    "StridedSliceGrad": h_strided_slice_grad, "Pad": h_pad, "PadV2": h_pad, "MirrorPad": h_pad, "Tile": h_tile,
    "BroadcastTo": h_broadcast_to, "Fill": h_fill, "MaxPool": h_pool, "MaxPoolV2": h_pool, "AvgPool": h_pool,
    "MaxPoolGrad": h_max_pool_grad, "AvgPoolGrad": h_avg_pool_grad, "GatherV2": h_gather,
    "ResourceGather": h_gather, "UnsortedSegmentSum": h_segment_sum, "Select": h_select, "SelectV2": h_select,
    "SparseSoftmaxCrossEntropyWithLogits": h_xent, "SoftmaxCrossEntropyWithLogits": h_xent,
    "FusedBatchNormV3": h_fused_bn, "FusedBatchNorm": h_fused_bn, "FusedBatchNormV2": h_fused_bn,
    "FusedBatchNormGradV3": h_fused_bn_grad, "FusedBatchNormGrad": h_fused_bn_grad,
    "FusedBatchNormGradV2": h_fused_bn_grad, "IteratorGetNext": h_iterator,
}


# ---- fused regions (scopes.py) -------------------------------------------------------------------
def emit_region(cv: Converter, reg: Region) -> None:
    """The CANN operators of one fused name-scope region."""
    {"batchnorm": _emit_bn, "batchnorm_infer": _emit_bn_infer, "layernorm": _emit_ln, "gelu": _emit_gelu,
     "softmax_grad": _emit_softmax_grad, "rnn": emit_rnn}[reg.kind](cv, reg)


def _fixed_affine(cv: Converter, reg: Region, role: str, c: tuple[int, ...]) -> str:
    """The constant ones (gamma) / zeros (beta) CANN's batch norm reads where Keras has no variable
    (``scale=False`` / ``center=False``)."""
    return cv.new_tensor(f"{reg.scope}/{role}_fixed", c, "float32", "const")


def _emit_bn(cv: Converter, reg: Region) -> None:
    x, y = reg.roles["x"], reg.roles["y"]
    xi = cv.inp(x)
    mean, var = cv.variable_by_id(reg.roles["moving_mean"]), cv.variable_by_id(reg.roles["moving_variance"])
    c = cv.tensors[mean].shape
    gamma, beta = (cv.variable_by_id(reg.roles[k]) if k in reg.roles else _fixed_affine(cv, reg, k, c)
                   for k in ("gamma", "beta"))
    eps = reg.attrs.get("epsilon", 1e-3)
    s = cv.new_tensor(f"{reg.scope}/bn_sum", c, "float32")
    sq = cv.new_tensor(f"{reg.scope}/bn_square_sum", c, "float32")
    cv.emit(None, "BNTrainingReduce", [xi], {"data_format": cv.tensors[xi].format}, outputs=[s, sq],
            name=f"{reg.scope}/reduce")
    outs = [cv.alias[y.name]] + [cv.new_tensor(f"{reg.scope}/{k}", c, "float32")
                                 for k in ("mean_out", "variance_out", "batch_mean", "batch_variance")]
    cv.extra_outputs += outs[1:3]
    cv.emit(None, "BNTrainingUpdate", [xi, s, sq, gamma, beta, mean, var],
            {"factor": 0.01, "epsilon": eps}, outputs=outs, name=f"{reg.scope}/update")
    if not reg.has_grad:
        return
    dy = cv.inp(reg.roles["dy"])
    dt = cv.tensors[gamma].dtype
    ds = cv.region_grad(reg, "dgamma", c, dt)
    do = cv.region_grad(reg, "dbeta", c, dt)
    cv.emit(None, "BNTrainingUpdateGrad", [dy, xi, outs[3], outs[4]], {"epsilon": eps}, outputs=[ds, do],
            name=f"{reg.scope}/update_grad")
    dx = cv.region_grad(reg, "dx", cv.tensors[xi].shape, cv.tensors[xi].dtype)
    cv.emit(None, "BNTrainingReduceGrad", [dy, xi, ds, do, gamma, outs[3], outs[4]], {"epsilon": eps}, outputs=[dx],
            name=f"{reg.scope}/reduce_grad")


def _peel(t: Any) -> Any:
    """The tensor behind reshapes of a per-channel parameter (Keras reshapes them to broadcast)."""
    n = t.shape.num_elements()
    while t.op.type in ("Reshape", "Squeeze", "ExpandDims", "Identity", "Cast") and t.op.inputs \
            and t.op.inputs[0].shape.num_elements() == n and t.op.inputs[0].dtype == t.dtype:
        t = t.op.inputs[0]
    return t


def _emit_bn_infer(cv: Converter, reg: Region) -> None:
    r = reg.roles
    mean = cv.inp(_peel(r["mean"]))
    c = cv.tensors[mean].shape
    gamma, beta = (cv.inp(_peel(r[k])) if r.get(k) is not None else _fixed_affine(cv, reg, k, c)
                   for k in ("gamma", "beta"))
    ins = [cv.inp(r["x"]), gamma, beta, mean, cv.inp(_peel(r["variance"]))]
    cv.emit(None, "BNInfer", ins, {"epsilon": reg.attrs.get("epsilon", 1e-3)}, outputs=[cv.alias[r["y"].name]],
            name=f"{reg.scope}/batchnorm")


def _emit_ln(cv: Converter, reg: Region) -> None:
    x, y = reg.roles["x"], reg.roles["y"]
    xi = cv.inp(x)
    gamma, beta = (cv.variable_by_id(r) if isinstance(r, str) else cv.inp(_peel(r))
                   for r in (reg.roles["gamma"], reg.roles["beta"]))
    axis = int(reg.attrs["begin_norm_axis"])
    xs = cv.tensors[xi].shape
    stat = xs[:axis] + (1,) * (len(xs) - axis)
    dt = cv.tensors[xi].dtype
    mean = cv.new_tensor(f"{reg.scope}/mean", stat, dt)
    var = cv.new_tensor(f"{reg.scope}/variance", stat, dt)
    cv.emit(None, "LayerNorm", [xi, gamma, beta], {"begin_norm_axis": axis, "begin_params_axis": axis,
                                                    "epsilon": reg.attrs.get("epsilon", 1e-3)},
            outputs=[cv.alias[y.name], mean, var], name=f"{reg.scope}/layer_norm")
    if not reg.has_grad:
        return
    dy = cv.inp(reg.roles["dy"])
    dx = cv.region_grad(reg, "dx", xs, dt)
    dg = cv.region_grad(reg, "dgamma", cv.tensors[gamma].shape, cv.tensors[gamma].dtype)
    db = cv.region_grad(reg, "dbeta", cv.tensors[beta].shape, cv.tensors[beta].dtype)
    cv.emit(None, "LayerNormGrad", [dy, xi, var, mean, gamma], {"begin_norm_axis": axis, "begin_params_axis": axis},
            outputs=[dx, dg, db], name=f"{reg.scope}/layer_norm_grad")


def _emit_gelu(cv: Converter, reg: Region) -> None:
    x, y = reg.roles["x"], reg.roles["y"]
    xi, yi = cv.inp(x), cv.alias[y.name]
    cv.emit(None, "Gelu", [xi], {"approximate": reg.attrs["approximate"]}, outputs=[yi], name=f"{reg.scope}")
    if reg.has_grad:
        dx = cv.region_grad(reg, "dx", cv.tensors[xi].shape, cv.tensors[xi].dtype)
        cv.emit(None, "GeluGrad", [cv.inp(reg.roles["dy"]), xi, yi], {"approximate": reg.attrs["approximate"]},
                outputs=[dx], name=f"{reg.scope}/grad")


def _emit_softmax_grad(cv: Converter, reg: Region) -> None:
    y = reg.roles["y"]
    yi = cv.inp(y)
    dx = cv.region_grad(reg, "dx", cv.tensors[yi].shape, cv.tensors[yi].dtype)
    axes = [len(cv.tensors[yi].shape) - 1]
    cv.emit(None, "SoftmaxGrad", [yi, cv.inp(reg.roles["dy"])], {"axes": axes}, outputs=[dx],
            name=f"{reg.scope}/grad")


# ---- Einsum (Keras MultiHeadAttention / EinsumDense) -----------------------------------------------
def _einsum_terms(eq: str, ranks: list[int]) -> tuple[list[str], str] | None:
    """Operand and output index strings with '...' expanded to capital letters (None: not parseable)."""
    eq = eq.replace(" ", "")
    if "->" not in eq:
        return None
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        return None
    ell = max((r - (len(t) - 3) if "..." in t else 0) for t, r in zip(terms, ranks))
    fill = "".join(chr(ord("A") + i) for i in range(ell))
    res = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            n = r - (len(t) - 3)
            t = t.replace("...", fill[ell - n:])
        res.append(t)
    out = out.replace("...", fill)
    if any(len(t) != r or not t.isalpha() or len(set(t)) != len(t) for t, r in zip(res, ranks)):
        return None
    return res, out


def h_einsum(cv: Converter, op: Any) -> None:
    """Two-operand Einsum as CANN does it: transposes/views around one (Batch)MatMul."""
    if len(op.inputs) != 2:
        cv.opaque(op, "Einsum with one or three+ operands")
        return
    a, b = op.inputs
    parsed = _einsum_terms(str(_attr(op, "equation", "")), [a.shape.rank or 0, b.shape.rank or 0])
    if parsed is None:
        cv.opaque(op, "Einsum equation not understood")
        return
    (ta, tb), to = parsed
    sa, sb = cv.tf_shape(a), cv.tf_shape(b)
    size = {**dict(zip(ta, sa)), **dict(zip(tb, sb))}
    batch = [c for c in to if c in ta and c in tb]
    contract = [c for c in ta if c in tb and c not in to]
    m = [c for c in ta if c not in tb and c in to]
    n = [c for c in tb if c not in ta and c in to]
    if (set(ta) - set(batch) - set(contract) - set(m)) or (set(tb) - set(batch) - set(contract) - set(n)) \
            or sorted(to) != sorted(batch + m + n):
        cv.opaque(op, "Einsum that sums an index of one operand only")
        return

    def prod(ix: list[str]) -> int:
        p = 1
        for c in ix:
            p *= size[c]
        return p

    def operand(t: Any, term: str, first: list[str], second: list[str], tag: str) -> tuple[str, bool]:
        ir = cv.inp(t)
        want = batch + first + second
        swapped = batch + second + first
        trans = False
        if list(term) == want:
            order = want
        elif list(term) == swapped:
            order, trans = swapped, True
        else:
            order = want
            perm = [term.index(c) for c in want]
            shape = tuple(size[c] for c in want)
            out = cv.new_tensor(f"{op.name}/{tag}_transposed", shape, cv.tensors[ir].dtype)
            cv.emit(op, "Transpose", [ir], {"perm": perm}, outputs=[out], name=f"{op.name}/{tag}_transpose")
            ir = out
        g1, g2 = (second, first) if trans else (first, second)
        shape3 = ((prod(batch),) if batch else ()) + (prod(g1), prod(g2))
        if cv.tensors[ir].shape != shape3:
            v = cv.new_tensor(f"{op.name}/{tag}_3d", shape3, cv.tensors[ir].dtype)
            cv.emit(op, "Reshape", [ir], {"view": True, "shape": list(shape3)}, outputs=[v], name=f"{op.name}/{tag}_view")
            ir = v
        del order
        return ir, trans

    xa, t1 = operand(a, ta, m, contract, "x1")
    xb, t2 = operand(b, tb, contract, n, "x2")
    mm_shape = ((prod(batch),) if batch else ()) + (prod(m), prod(n))
    kind = "BatchMatMulV2" if batch else "MatMulV2"
    res = cv.new_tensor(f"{op.name}/matmul", mm_shape, cv.ir_dtype(op.outputs[0].dtype))
    cv.emit(op, kind, [xa, xb], {"transpose_x1": t1, "transpose_x2": t2, "has_bias": False, "equation":
                                 str(_attr(op, "equation", ""))}, outputs=[res], name=op.name)
    natural = batch + m + n
    nat_shape = tuple(size[c] for c in natural)
    final = cv.out(op.outputs[0])
    if natural == list(to):
        cv.emit(op, "Reshape", [res], {"view": True, "shape": list(cv.tensors[final].shape)}, outputs=[final],
                name=f"{op.name}/out_view")
        return
    v = cv.new_tensor(f"{op.name}/unflat", nat_shape, cv.tensors[res].dtype)
    cv.emit(op, "Reshape", [res], {"view": True, "shape": list(nat_shape)}, outputs=[v], name=f"{op.name}/out_view")
    cv.emit(op, "Transpose", [v], {"perm": [natural.index(c) for c in to]}, outputs=[final],
            name=f"{op.name}/out_transpose")


_HANDLERS["Einsum"] = h_einsum
