"""ATen operator -> CANN operator rules used by ``convert.Converter``.

Each rule gets the converter, the FX node and its arguments bound by schema name, emits IR operators
and returns the node's value (a ``Val``, a tuple of them, or None). A rule that cannot map a particular
use raises ``NotMapped``: the node then becomes an ``Opaque`` operator named in ``graph.unsupported``.
Gradient operators follow the argument order of ``aoe.graph.training`` (and so CANN's), so a PyTorch
backward graph and a derived one price the same kernels.
"""
from __future__ import annotations

from typing import Any, Callable

from .convert import Converter, NotMapped, Val

Rule = Callable[[Converter, Any, dict], Any]
RULES: dict[str, Rule] = {}


def rule(*names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for n in names:
            RULES[n] = fn
        return fn
    return deco


def _tensor_arg(a: dict, key: str) -> Val:
    v = a.get(key)
    if not isinstance(v, Val):
        raise NotMapped(f"argument {key!r} is not a tensor")
    return v


def _axis(d: int, rank: int) -> int:
    return int(d) % max(rank, 1)


def _pairs(v: Any, n: int = 2) -> list[int]:
    v = [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    return v * n if len(v) == 1 else v


# ---- views -------------------------------------------------------------------------------------
def _view(cv: Converter, node: Any, x: Val, op_type: str, attrs: dict | None = None) -> Val:
    src = cv.mat(x)
    out = cv.out(node)
    cv.emit(node.name, op_type, [src], [out], {"view": True, "shape": list(cv.shape(out)), **(attrs or {})})
    return Val(out)


@rule("view", "_unsafe_view", "reshape", "view_as", "_reshape_alias", "flatten", "unflatten")
def r_view(cv: Converter, node: Any, a: dict) -> Any:
    x = _tensor_arg(a, "self")
    val = node.meta["val"]
    new = cv.static_shape(val.shape, node.name)
    if new == cv.shape(x):
        return x
    p = x.perm
    if p is not None and len(new) >= 2:
        n = len(p)
        swap_last = list(p[:-2]) == list(range(n - 2)) and tuple(p[-2:]) == (n - 1, n - 2)
        if swap_last and tuple(new[-2:]) == cv.shape(x)[-2:]:
            # only the batch dims of a last-two-swapped tensor change: view the base, keep the swap
            base = cv.shape(x.name)
            out = cv.new_tensor(node.name, tuple(new[:-2]) + base[-2:], cv.dtype(x))
            cv.emit(node.name, "Reshape", [x.name], [out], {"view": True, "shape": list(cv.shape(out))})
            m = len(new)
            return Val(out, tuple(range(m - 2)) + (m - 1, m - 2))
    return _view(cv, node, x, "Reshape")


@rule("squeeze")
def r_squeeze(cv: Converter, node: Any, a: dict) -> Any:
    x = _tensor_arg(a, "self")
    if cv.static_shape(node.meta["val"].shape, node.name) == cv.shape(x):
        return x
    return _view(cv, node, x, "Squeeze")


@rule("unsqueeze")
def r_unsqueeze(cv: Converter, node: Any, a: dict) -> Any:
    return _view(cv, node, _tensor_arg(a, "self"), "Unsqueeze")


@rule("alias", "detach", "lift_fresh", "lift_fresh_copy", "contiguous", "clone", "_assert_tensor_metadata")
def r_alias(cv: Converter, node: Any, a: dict) -> Any:
    x = a.get("self", a.get("a"))
    if not isinstance(x, Val):
        return None
    if node.target.__name__.startswith("clone") and x.perm is not None:
        return Val(cv.mat(x))  # a contiguous copy of a permuted view is the transpose itself
    return x


@rule("expand", "expand_as", "broadcast_to")
def r_expand(cv: Converter, node: Any, a: dict) -> Any:
    x = _tensor_arg(a, "self")
    if cv.static_shape(node.meta["val"].shape, node.name) == cv.shape(x):
        return x
    return _view(cv, node, x, "BroadcastToD")


@rule("slice", "select", "narrow", "as_strided", "diagonal", "unfold")
def r_slice(cv: Converter, node: Any, a: dict) -> Any:
    x = _tensor_arg(a, "self")
    if cv.static_shape(node.meta["val"].shape, node.name) == cv.shape(x):
        return x
    return _view(cv, node, x, "StridedSliceD")


@rule("split", "split_with_sizes", "unbind", "chunk", "tensor_split")
def r_split(cv: Converter, node: Any, a: dict) -> Any:
    x = cv.mat(_tensor_arg(a, "self"))
    outs = []
    for i, _ in enumerate(node.meta["val"]):
        o = cv.out(node, i)
        cv.emit(f"{node.name}/{i}", "StridedSliceD", [x], [o], {"view": True, "shape": list(cv.shape(o))})
        outs.append(Val(o))
    return tuple(outs)


@rule("t", "transpose", "permute", "numpy_T", "swapaxes", "movedim")
def r_permute(cv: Converter, node: Any, a: dict) -> Any:
    x = _tensor_arg(a, "self")
    n = len(cv.shape(x))
    name = node.target.__name__.split(".")[0]
    if name == "permute":
        p = [_axis(d, n) for d in a["dims"]]
    elif name in ("transpose", "swapaxes"):
        p = list(range(n))
        d0, d1 = _axis(a.get("dim0", a.get("axis0")), n), _axis(a.get("dim1", a.get("axis1")), n)
        p[d0], p[d1] = p[d1], p[d0]
    elif n < 2:
        return x
    else:
        p = list(reversed(range(n)))
    base = x.perm or tuple(range(n))
    perm = tuple(base[i] for i in p)
    return Val(x.name, None if list(perm) == list(range(n)) else perm)


@rule("_to_copy", "to", "type_as", "_autocast_to_reduced_precision", "_autocast_to_full_precision")
def r_cast(cv: Converter, node: Any, a: dict) -> Any:
    x = _tensor_arg(a, "self")
    dst = cv.ir_dtype(node.meta["val"].dtype)
    if dst == cv.dtype(x):
        return x
    src = cv.mat(x)
    out = cv.out(node)
    cv.emit(node.name, "Cast", [src], [out], {"dst_type": dst})
    return Val(out)


@rule("copy", "copy_")
def r_copy(cv: Converter, node: Any, a: dict) -> Any:
    src = _tensor_arg(a, "src")
    dst = cv.ir_dtype(node.meta["val"].dtype)
    if dst == cv.dtype(src) and cv.static_shape(node.meta["val"].shape, node.name) == cv.shape(src):
        return src  # writing a value back (functionalised in-place updates): no new computation
    out = cv.out(node)
    cv.emit(node.name, "Cast" if dst != cv.dtype(src) else "BroadcastToD", [cv.mat(src)], [out], {"dst_type": dst})
    return Val(out)


@rule("_record_function_enter", "_record_function_enter_new", "_record_function_exit")
def r_profiler(cv: Converter, node: Any, a: dict) -> Any:
    return None  # profiler markers (optimizer steps are wrapped in them): no computation


@rule("zeros", "ones", "full", "empty", "empty_strided", "empty_like", "zeros_like", "ones_like", "full_like",
      "new_zeros", "new_ones", "new_full", "new_empty", "new_empty_strided", "arange", "scalar_tensor",
      "empty_permuted", "fill", "lift_fresh_copy_")
def r_const(cv: Converter, node: Any, a: dict) -> Any:
    return cv.const(node)


# ---- matmul ------------------------------------------------------------------------------------
def _operand(cv: Converter, v: Val) -> tuple[str, bool]:
    """(tensor, transposed): a swap of the last two dims is folded into the matmul's transpose flag."""
    if v.perm is None:
        return v.name, False
    n = len(v.perm)
    if n >= 2 and list(v.perm[:-2]) == list(range(n - 2)) and tuple(v.perm[-2:]) == (n - 1, n - 2):
        return v.name, True
    return cv.mat(v), False


def _matmul(cv: Converter, node: Any, x1: Val, x2: Val, bias: Val | None = None, attrs: dict | None = None) -> Val:
    a, ta = _operand(cv, x1)
    b, tb = _operand(cv, x2)
    kind = "MatMulV2" if len(cv.shape(a)) == 2 and len(cv.shape(b)) == 2 else "BatchMatMulV2"
    out = cv.out(node)
    n = cv.shape(out)[-1]
    ins = [a, b]
    fold = bias is not None and cv.shape(bias) == (n,) and bias.perm is None
    if fold:
        ins.append(bias.name)
    if bias is not None and not fold:
        mm = cv.like(f"{node.name}/matmul", out)
        cv.emit(f"{node.name}/matmul", kind, ins, [mm],
                {"transpose_x1": ta, "transpose_x2": tb, "has_bias": False, **(attrs or {})})
        cv.emit(node.name, "Add", [mm, cv.mat(bias)], [out])
        return Val(out)
    cv.emit(node.name, kind, ins, [out], {"transpose_x1": ta, "transpose_x2": tb, "has_bias": fold, **(attrs or {})})
    return Val(out)


@rule("mm", "bmm", "matmul")
def r_mm(cv: Converter, node: Any, a: dict) -> Any:
    x2 = a.get("mat2", a.get("other"))
    return _matmul(cv, node, _tensor_arg(a, "self"), x2 if isinstance(x2, Val) else _tensor_arg(a, "mat2"))


@rule("addmm", "baddbmm")
def r_addmm(cv: Converter, node: Any, a: dict) -> Any:
    m1 = a.get("mat1", a.get("batch1"))
    m2 = a.get("mat2", a.get("batch2"))
    if not isinstance(m1, Val) or not isinstance(m2, Val):
        raise NotMapped("matmul operands are not tensors")
    extra = {k: float(a[k]) for k in ("alpha", "beta") if a.get(k) not in (None, 1)}
    return _matmul(cv, node, m1, m2, _tensor_arg(a, "self"), extra)


# ---- convolution ---------------------------------------------------------------------------------
def _conv_attrs(cv: Converter, a: dict, weight: tuple[int, ...]) -> dict:
    ph, pw = _pairs(a["padding"])[:2]
    return {"strides": _pairs(a["stride"])[:2], "pads": [ph, ph, pw, pw], "dilations": _pairs(a["dilation"])[:2],
            "groups": int(a["groups"]), "kernel": [int(weight[2]), int(weight[3])], "data_format": "NCHW"}


@rule("convolution", "_convolution")
def r_conv(cv: Converter, node: Any, a: dict) -> Any:
    x, w = _tensor_arg(a, "input"), _tensor_arg(a, "weight")
    ws = cv.shape(w)
    if len(cv.shape(x)) != 4 or len(ws) != 4:
        raise NotMapped("only 2-D convolutions map to CANN Conv2D")
    bias = a.get("bias")
    attrs = _conv_attrs(cv, a, ws)
    ins = [cv.mat(x), cv.mat(w)] + ([cv.mat(bias)] if isinstance(bias, Val) else [])
    out = cv.out(node)
    if a.get("transposed"):
        attrs["output_padding"] = _pairs(a.get("output_padding") or [0])[:2]
        cv.emit(node.name, "Conv2DTranspose", ins, [out], {**attrs, "has_bias": isinstance(bias, Val)})
    else:
        cv.emit(node.name, "Conv2D", ins, [out], {**attrs, "has_bias": isinstance(bias, Val)})
    return Val(out)


@rule("convolution_backward")
def r_conv_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy, x, w = (cv.mat(_tensor_arg(a, k)) for k in ("grad_output", "input", "weight"))
    ws = cv.shape(w)
    if len(cv.shape(x)) != 4 or len(ws) != 4:
        raise NotMapped("only 2-D convolutions map to CANN Conv2DBackprop*")
    attrs = _conv_attrs(cv, a, ws)
    mask = list(a.get("output_mask") or [True, True, True])
    res: list[Any] = [None, None, None]
    if mask[0]:
        dx = cv.out(node, 0)
        if a.get("transposed"):
            cv.emit(f"{node.name}/grad_input", "Conv2D", [dy, w], [dx], {**attrs, "has_bias": False})
        else:
            cv.emit(f"{node.name}/grad_input", "Conv2DBackpropInput", [w, dy], [dx],
                    {**attrs, "input_size": list(cv.shape(x))})
        res[0] = Val(dx)
    if mask[1]:
        dw = cv.out(node, 1)
        ins = [dy, x] if a.get("transposed") else [x, dy]
        cv.emit(f"{node.name}/grad_filter", "Conv2DBackpropFilter", ins, [dw], {**attrs, "filter_size": list(ws)})
        res[1] = Val(dw)
    if len(mask) > 2 and mask[2]:
        db = cv.out(node, 2)
        cv.emit(f"{node.name}/grad_bias", "ReduceSumD", [dy], [db], {"axes": [0, 2, 3], "keep_dims": False})
        res[2] = Val(db)
    return tuple(res)


# ---- normalisation -------------------------------------------------------------------------------
@rule("_native_batch_norm_legit_functional", "native_batch_norm", "_native_batch_norm_legit",
      "_native_batch_norm_legit_no_training")
def r_batch_norm(cv: Converter, node: Any, a: dict) -> Any:
    x, scale, offset = _tensor_arg(a, "input"), a.get("weight"), a.get("bias")
    mean, var = a.get("running_mean"), a.get("running_var")
    if not all(isinstance(v, Val) for v in (scale, offset, mean, var)):
        raise NotMapped("batch norm without affine parameters or running statistics")
    xs = cv.mat(x)
    eps = float(a.get("eps", 1e-5))
    vals = node.meta["val"]
    n_out = len(vals)
    training = bool(a.get("training", False)) and not node.target.__name__.startswith("_native_batch_norm_legit_no_training")
    if not training:
        y = cv.out(node, 0)
        cv.emit(node.name, "BNInfer", [xs, scale.name, offset.name, mean.name, var.name], [y], {"epsilon": eps})
        rest: list[Any] = [None, None]
        if n_out == 5:
            rest += [mean, var]
        return (Val(y), *rest[: n_out - 1])
    c = cv.shape(scale)
    s = cv.new_tensor(f"{node.name}/bn_sum", c, "float32")
    sq = cv.new_tensor(f"{node.name}/bn_square_sum", c, "float32")
    cv.emit(f"{node.name}/reduce", "BNTrainingReduce", [xs], [s, sq], {"data_format": cv.tensors[xs].format})
    y, bmean, bvar = cv.out(node, 0), cv.out(node, 1), cv.out(node, 2)
    if n_out == 5:
        mean_out, var_out = cv.out(node, 3), cv.out(node, 4)
    else:  # running statistics updated in place
        mean_out = cv.like(f"{node.name}/mean_out", mean.name)
        var_out = cv.like(f"{node.name}/variance_out", var.name)
    cv.emit(f"{node.name}/update", "BNTrainingUpdate", [xs, s, sq, scale.name, offset.name, mean.name, var.name],
            [y, mean_out, var_out, bmean, bvar], {"factor": float(a.get("momentum", 0.1)), "epsilon": eps})
    res = [Val(y), Val(bmean), Val(bvar), Val(mean_out), Val(var_out)]
    return tuple(res[:n_out])


@rule("native_batch_norm_backward")
def r_batch_norm_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy, x = cv.mat(_tensor_arg(a, "grad_out")), cv.mat(_tensor_arg(a, "input"))
    scale = a.get("weight")
    smean, sinv = a.get("save_mean"), a.get("save_invstd")
    if not isinstance(scale, Val):
        raise NotMapped("batch norm backward without a scale")
    eps = float(a.get("eps", 1e-5))
    mask = list(a.get("output_mask") or [True, True, True])
    c = cv.shape(scale)
    if not a.get("train"):
        var = _tensor_arg(a, "running_var")
        dx = cv.out(node, 0)
        cv.emit(node.name, "BNInferGrad", [dy, scale.name, var.name], [dx], {"epsilon": eps})
        return (Val(dx), None, None)
    if not isinstance(smean, Val) or not isinstance(sinv, Val):
        raise NotMapped("batch norm backward without saved statistics")
    ds = cv.out(node, 1) if mask[1] else cv.new_tensor(f"{node.name}/diff_scale", c, "float32")
    do = cv.out(node, 2) if mask[2] else cv.new_tensor(f"{node.name}/diff_offset", c, "float32")
    cv.emit(f"{node.name}/update_grad", "BNTrainingUpdateGrad", [dy, x, smean.name, sinv.name], [ds, do],
            {"epsilon": eps})
    dx = None
    if mask[0]:
        dx = cv.out(node, 0)
        cv.emit(f"{node.name}/reduce_grad", "BNTrainingReduceGrad",
                [dy, x, ds, do, scale.name, smean.name, sinv.name], [dx], {"epsilon": eps})
    return (Val(dx) if dx else None, Val(ds) if mask[1] else None, Val(do) if mask[2] else None)


@rule("native_layer_norm")
def r_layer_norm(cv: Converter, node: Any, a: dict) -> Any:
    x = cv.mat(_tensor_arg(a, "input"))
    axis = len(cv.shape(x)) - len(a["normalized_shape"])
    ins = [x] + [cv.mat(v) for v in (a.get("weight"), a.get("bias")) if isinstance(v, Val)]
    outs = [cv.out(node, i) for i in range(3)]
    cv.emit(node.name, "LayerNorm", ins, outs,
            {"begin_norm_axis": axis, "begin_params_axis": axis, "epsilon": float(a.get("eps", 1e-5))})
    return tuple(Val(o) for o in outs)


@rule("native_layer_norm_backward")
def r_layer_norm_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy, x = cv.mat(_tensor_arg(a, "grad_out")), cv.mat(_tensor_arg(a, "input"))
    mean, rstd, gamma = _tensor_arg(a, "mean"), _tensor_arg(a, "rstd"), a.get("weight")
    axis = len(cv.shape(x)) - len(a["normalized_shape"])
    mask = list(a.get("output_mask") or [True, True, True])
    vals = node.meta["val"]
    outs: list[str] = []
    for i in range(3):
        if mask[i] and vals[i] is not None:
            outs.append(cv.out(node, i))
        elif i == 0:
            outs.append(cv.like(f"{node.name}/dx", x))
        elif isinstance(gamma, Val):
            outs.append(cv.like(f"{node.name}/grad_{i}", gamma.name))
    ins = [dy, x, rstd.name, mean.name] + ([gamma.name] if isinstance(gamma, Val) else [])
    cv.emit(node.name, "LayerNormGrad", ins, outs, {"begin_norm_axis": axis, "begin_params_axis": axis})
    return tuple(Val(outs[i]) if i < len(outs) and mask[i] and vals[i] is not None else None for i in range(3))


# ---- softmax, activations ------------------------------------------------------------------------
@rule("_softmax", "softmax", "_safe_softmax", "_log_softmax", "log_softmax")
def r_softmax(cv: Converter, node: Any, a: dict) -> Any:
    x = cv.mat(_tensor_arg(a, "self"))
    kind = "LogSoftmaxV2" if "log" in node.target.__name__ else "SoftmaxV2"
    out = cv.out(node)
    cv.emit(node.name, kind, [x], [out], {"axes": [_axis(a["dim"], len(cv.shape(x)))]})
    return Val(out)


@rule("_softmax_backward_data", "_log_softmax_backward_data")
def r_softmax_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy, y = cv.mat(_tensor_arg(a, "grad_output")), cv.mat(_tensor_arg(a, "output"))
    kind = "LogSoftmaxGrad" if "log" in node.target.__name__ else "SoftmaxGrad"
    out = cv.out(node)
    cv.emit(node.name, kind, [y, dy], [out], {"axes": [_axis(a["dim"], len(cv.shape(y)))]})
    return Val(out)


_UNARY = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
          "rsqrt": "Rsqrt", "neg": "Neg", "abs": "Abs", "erf": "Erf", "reciprocal": "Reciprocal", "sin": "Sin",
          "cos": "Cos", "floor": "Floor", "ceil": "Ceil", "sign": "Sign", "round": "Round",
          "logical_not": "LogicalNot", "silu": "Swish", "hardswish": "HardSwish", "hardsigmoid": "HardSigmoid",
          "elu": "Elu", "softplus": "Softplus", "leaky_relu": "LeakyRelu", "isnan": "IsNan", "isinf": "IsInf",
          "relu6": "Relu6", "mish": "Mish", "log1p": "Log1p", "expm1": "Expm1", "square": "Square",
          "bitwise_not": "LogicalNot", "sgn": "Sign", "gelu": "Gelu", "hardtanh": "ClipByValue",
          "clamp": "ClipByValue", "clamp_min": "Maximum", "clamp_max": "Minimum"}
_SCALAR_ATTRS = {"negative_slope": "alpha", "alpha": "alpha", "approximate": "approximate", "min": "min",
                 "max": "max", "min_val": "min", "max_val": "max", "beta": "beta", "threshold": "threshold"}


@rule(*_UNARY)
def r_unary(cv: Converter, node: Any, a: dict) -> Any:
    name = node.target.__name__.split(".")[0]
    x = cv.mat(_tensor_arg(a, "self"))
    attrs = {}
    for k, v in a.items():
        if k in _SCALAR_ATTRS and isinstance(v, (int, float, str)) and not isinstance(v, bool):
            attrs[_SCALAR_ATTRS[k]] = v
        elif k in _SCALAR_ATTRS and isinstance(v, Val):
            raise NotMapped(f"{name} with a tensor {k}")
    out = cv.out(node)
    cv.emit(node.name, _UNARY[name], [x], [out], attrs)
    return Val(out)


# (ATen backward, CANN op, ATen argument names in CANN's input order)
_UNARY_GRAD = {
    "threshold_backward": ("ReluGrad", ("grad_output", "self")),
    "gelu_backward": ("GeluGrad", ("grad_output", "self")),
    "tanh_backward": ("TanhGrad", ("output", "grad_output")),
    "sigmoid_backward": ("SigmoidGrad", ("output", "grad_output")),
    "silu_backward": ("SwishGrad", ("grad_output", "self")),
    "leaky_relu_backward": ("LeakyReluGrad", ("grad_output", "self")),
    "hardtanh_backward": ("HardtanhGrad", ("grad_output", "self")),
    "hardswish_backward": ("HardSwishGrad", ("grad_output", "self")),
    "hardsigmoid_backward": ("HardSigmoidGrad", ("grad_output", "self")),
    "elu_backward": ("EluGrad", ("grad_output", "self_or_result")),
    "softplus_backward": ("SoftplusGrad", ("grad_output", "self")),
}


@rule(*_UNARY_GRAD)
def r_unary_grad(cv: Converter, node: Any, a: dict) -> Any:
    name = node.target.__name__.split(".")[0]
    kind, order = _UNARY_GRAD[name]
    if name == "threshold_backward" and float(a.get("threshold", 0)) != 0.0:
        raise NotMapped("threshold_backward with a non-zero threshold is not a ReluGrad")
    ins = [cv.mat(_tensor_arg(a, k)) for k in order]
    attrs = {_SCALAR_ATTRS[k]: v for k, v in a.items() if k in _SCALAR_ATTRS and isinstance(v, (int, float, str))
             and not isinstance(v, bool)}
    out = cv.out(node)
    cv.emit(node.name, kind, ins, [out], attrs)
    return Val(out)


# ---- binary elementwise ------------------------------------------------------------------------------
_BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "RealDiv", "maximum": "Maximum", "minimum": "Minimum",
           "pow": "Pow", "eq": "Equal", "ne": "NotEqual", "lt": "Less", "le": "LessEqual", "gt": "Greater",
           "ge": "GreaterEqual", "logical_and": "LogicalAnd", "logical_or": "LogicalOr", "bitwise_and": "LogicalAnd",
           "bitwise_or": "LogicalOr", "rsub": "Sub", "atan2": "Atan2", "fmod": "FloorMod", "remainder": "FloorMod",
           "floor_divide": "FloorDiv", "xlogy": "Xlogy", "max": "Maximum", "min": "Minimum"}


def binary(cv: Converter, node: Any, kind: str, x: Any, y: Any, alpha: Any = None, swap: bool = False) -> Val:
    """``x (kind) y`` for tensors or a tensor and a Python number (then ``Adds``/``Muls`` or a ``value`` attr)."""
    if swap:
        x, y = y, x
    out = cv.out(node)
    if isinstance(alpha, (int, float)) and alpha != 1 and isinstance(y, Val):
        scaled = cv.like(f"{node.name}/alpha", cv.mat(y), cv.shape(y))
        cv.emit(f"{node.name}/alpha", "Muls", [cv.mat(y)], [scaled], {"value": float(alpha)})
        y = Val(scaled)
    if isinstance(x, Val) and isinstance(y, Val):
        cv.emit(node.name, kind, [cv.mat(x), cv.mat(y)], [out])
    elif isinstance(x, Val) or isinstance(y, Val):
        t, s = (x, y) if isinstance(x, Val) else (y, x)
        if not isinstance(s, (int, float, bool)):
            raise NotMapped(f"{kind} with a non-number operand")
        s = float(s) * (float(alpha) if isinstance(alpha, (int, float)) and t is x else 1.0)
        if kind == "Add":
            cv.emit(node.name, "Adds", [cv.mat(t)], [out], {"value": s})
        elif kind == "Sub" and t is x:
            cv.emit(node.name, "Adds", [cv.mat(t)], [out], {"value": -s})
        elif kind == "Mul":
            cv.emit(node.name, "Muls", [cv.mat(t)], [out], {"value": s})
        elif kind == "RealDiv" and t is x and s != 0:
            cv.emit(node.name, "Muls", [cv.mat(t)], [out], {"value": 1.0 / s})
        else:
            cv.emit(node.name, kind, [cv.mat(t)], [out], {"value": s, "scalar_first": t is not x})
    else:
        raise NotMapped(f"{kind} of two numbers")
    return Val(out)


@rule(*_BINARY)
def r_binary(cv: Converter, node: Any, a: dict) -> Any:
    name = node.target.__name__.split(".")[0]
    if name in ("max", "min") and "other" not in a:
        raise NotMapped(f"{name} as a reduction")
    x = a.get("self", a.get("input"))
    y = a.get("other", a.get("exponent"))
    if name == "div" and a.get("rounding_mode") not in (None, "true"):
        return binary(cv, node, "FloorDiv", x, y)
    return binary(cv, node, _BINARY[name], x, y, a.get("alpha"), swap=name == "rsub")


@rule("where")
def r_where(cv: Converter, node: Any, a: dict) -> Any:
    cond, x, y = a.get("condition"), a.get("self"), a.get("other")
    if not isinstance(cond, Val):
        raise NotMapped("where without a condition tensor")
    out = cv.out(node)
    ins = [cv.mat(cond)] + [cv.mat(v) for v in (x, y) if isinstance(v, Val)]
    attrs = {k: float(v) for k, v in (("x1", x), ("x2", y)) if isinstance(v, (int, float))}
    cv.emit(node.name, "Select", ins, [out], attrs)
    return Val(out)


@rule("masked_fill")
def r_masked_fill(cv: Converter, node: Any, a: dict) -> Any:
    x, mask, value = _tensor_arg(a, "self"), _tensor_arg(a, "mask"), a.get("value")
    out = cv.out(node)
    ins = [cv.mat(x), cv.mat(mask)] + ([cv.mat(value)] if isinstance(value, Val) else [])
    cv.emit(node.name, "MaskedFill", ins, [out], {"value": float(value)} if isinstance(value, (int, float)) else {})
    return Val(out)


# ---- reductions ------------------------------------------------------------------------------------
_REDUCE = {"sum": "ReduceSumD", "mean": "ReduceMeanD", "amax": "ReduceMaxD", "amin": "ReduceMinD",
           "prod": "ReduceProdD", "any": "ReduceAny", "all": "ReduceAll", "logsumexp": "ReduceLogSumExp"}


@rule(*_REDUCE)
def r_reduce(cv: Converter, node: Any, a: dict) -> Any:
    name = node.target.__name__.split(".")[0]
    x = cv.mat(_tensor_arg(a, "self"))
    rank = len(cv.shape(x))
    dims = a.get("dim")
    if dims is None or dims == [] or dims == ():
        axes = list(range(rank))
    else:
        axes = sorted({_axis(d, rank) for d in (dims if isinstance(dims, (list, tuple)) else [dims])})
    out = cv.out(node)
    cv.emit(node.name, _REDUCE[name], [x], [out], {"axes": axes, "keep_dims": bool(a.get("keepdim", False))})
    return Val(out)


# ---- pooling ---------------------------------------------------------------------------------------
def _pool_attrs(a: dict) -> dict:
    k = _pairs(a["kernel_size"])[:2]
    s = _pairs(a.get("stride") or k)[:2]
    ph, pw = _pairs(a.get("padding") or [0])[:2]
    return {"ksize": k, "strides": s, "pads": [ph, ph, pw, pw], "ceil_mode": bool(a.get("ceil_mode", False)),
            "data_format": "NCHW"}


@rule("max_pool2d_with_indices")
def r_maxpool(cv: Converter, node: Any, a: dict) -> Any:
    x = cv.mat(_tensor_arg(a, "self"))
    if len(cv.shape(x)) != 4:
        raise NotMapped("only 4-D pooling maps to CANN MaxPool")
    y, argmax = cv.out(node, 0), cv.out(node, 1)
    # MaxPool with its argmax output (CANN's MaxPoolWithArgmax): the backward reads the indices
    cv.emit(node.name, "MaxPool", [x], [y, argmax], {**_pool_attrs(a), "argmax": True})
    return (Val(y), Val(argmax))


@rule("max_pool2d_with_indices_backward")
def r_maxpool_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy, x, idx = (cv.mat(_tensor_arg(a, k)) for k in ("grad_output", "self", "indices"))
    dx = cv.out(node)
    cv.emit(node.name, "MaxPoolGrad", [x, idx, dy], [dx], {**_pool_attrs(a), "argmax": True})
    return Val(dx)


@rule("avg_pool2d")
def r_avgpool(cv: Converter, node: Any, a: dict) -> Any:
    x = cv.mat(_tensor_arg(a, "self"))
    if len(cv.shape(x)) != 4:
        raise NotMapped("only 4-D pooling maps to CANN AvgPool")
    y = cv.out(node)
    cv.emit(node.name, "AvgPool", [x], [y], _pool_attrs(a))
    return Val(y)


@rule("avg_pool2d_backward")
def r_avgpool_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy, x = cv.mat(_tensor_arg(a, "grad_output")), _tensor_arg(a, "self")
    dx = cv.out(node)
    cv.emit(node.name, "AvgPoolGrad", [dy], [dx], {**_pool_attrs(a), "orig_input_shape": list(cv.shape(x))})
    return Val(dx)


@rule("_adaptive_avg_pool2d", "adaptive_avg_pool2d")
def r_adaptive_pool(cv: Converter, node: Any, a: dict) -> Any:
    x = cv.mat(_tensor_arg(a, "self"))
    xs = cv.shape(x)
    oh, ow = _pairs(a["output_size"])[:2]
    y = cv.out(node)
    if (oh, ow) == (1, 1):
        cv.emit(node.name, "ReduceMeanD", [x], [y], {"axes": [len(xs) - 2, len(xs) - 1], "keep_dims": True})
    elif xs[-2] % oh == 0 and xs[-1] % ow == 0:
        k = [xs[-2] // oh, xs[-1] // ow]
        cv.emit(node.name, "AvgPool", [x], [y], {"ksize": k, "strides": k, "pads": [0, 0, 0, 0], "ceil_mode": False,
                                                 "data_format": "NCHW"})
    else:
        raise NotMapped("adaptive pooling with uneven windows")
    return Val(y)


@rule("_adaptive_avg_pool2d_backward")
def r_adaptive_pool_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy, x = cv.mat(_tensor_arg(a, "grad_output")), _tensor_arg(a, "self")
    xs, ds = cv.shape(x), cv.shape(dy)
    dx = cv.out(node)
    if ds[-2:] != (1, 1):
        cv.emit(node.name, "AvgPoolGrad", [dy], [dx], {"orig_input_shape": list(xs), "data_format": "NCHW"})
        return Val(dx)
    # gradient of a mean: scale, then broadcast back (as the derived training graph does)
    scaled = cv.like(f"{node.name}/scaled", dy)
    cv.emit(f"{node.name}/scale", "Muls", [dy], [scaled], {"value": 1.0 / max(1, xs[-1] * xs[-2])})
    cv.emit(node.name, "BroadcastToD", [scaled], [dx], {"shape": list(xs)})
    return Val(dx)


# ---- indexing, embedding, concat -------------------------------------------------------------------
@rule("embedding")
def r_embedding(cv: Converter, node: Any, a: dict) -> Any:
    w, idx = cv.mat(_tensor_arg(a, "weight")), cv.mat(_tensor_arg(a, "indices"))
    out = cv.out(node)
    cv.emit(node.name, "Gather", [w, idx], [out], {"axis": 0})
    return Val(out)


@rule("embedding_dense_backward")
def r_embedding_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy, idx = cv.mat(_tensor_arg(a, "grad_output")), cv.mat(_tensor_arg(a, "indices"))
    out = cv.out(node)
    cv.emit(node.name, "EmbeddingDenseGrad", [dy, idx], [out],
            {"num_weights": int(a["num_weights"]), "padding_idx": int(a["padding_idx"]),
             "scale_grad_by_freq": bool(a.get("scale_grad_by_freq", False))})
    return Val(out)


@rule("index_select", "gather")
def r_index_select(cv: Converter, node: Any, a: dict) -> Any:
    # index_select picks whole slices (Gather); gather picks single elements (GatherElements)
    x, idx = cv.mat(_tensor_arg(a, "self")), cv.mat(_tensor_arg(a, "index"))
    out = cv.out(node)
    op_type = "Gather" if node.target.__name__.split(".")[0] == "index_select" else "GatherElements"
    cv.emit(node.name, op_type, [x, idx], [out], {"axis": _axis(a["dim"], len(cv.shape(x)))})
    return Val(out)


@rule("cat", "concat", "stack")
def r_cat(cv: Converter, node: Any, a: dict) -> Any:
    parts = [v for v in a["tensors"] if isinstance(v, Val) and 0 not in cv.shape(v)]
    out = cv.out(node)
    rank = len(cv.shape(out))
    ins = [cv.mat(v) for v in parts]
    if node.target.__name__.startswith("stack"):
        axis = _axis(a.get("dim", 0), rank)
        ins2 = []
        for t in ins:
            s = list(cv.shape(t))
            s.insert(axis, 1)
            u = cv.like(f"{t}/unsqueeze", t, tuple(s))
            cv.emit(f"{node.name}/unsqueeze", "Unsqueeze", [t], [u], {"view": True, "shape": s})
            ins2.append(u)
        ins = ins2
    cv.emit(node.name, "Concat", ins, [out], {"axis": _axis(a.get("dim", 0), rank), "N": len(ins)})
    return Val(out)


@rule("select_backward", "slice_backward")
def r_slice_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy = cv.mat(_tensor_arg(a, "grad_output"))
    out = cv.out(node)
    cv.emit(node.name, "StridedSliceGrad", [dy], [out], {"shape": list(cv.shape(out))})
    return Val(out)


@rule("constant_pad_nd")
def r_pad(cv: Converter, node: Any, a: dict) -> Any:
    x = cv.mat(_tensor_arg(a, "self"))
    pad = [int(p) for p in a["pad"]]
    rank = len(cv.shape(x))
    paddings = [[0, 0] for _ in range(rank)]
    for i in range(len(pad) // 2):  # torch pads from the last dim backwards
        paddings[rank - 1 - i] = [pad[2 * i], pad[2 * i + 1]]
    out = cv.out(node)
    cv.emit(node.name, "Pad", [x], [out], {"paddings": paddings, "mode": "constant"})
    return Val(out)


# ---- dropout, losses -------------------------------------------------------------------------------
@rule("native_dropout")
def r_dropout(cv: Converter, node: Any, a: dict) -> Any:
    x = _tensor_arg(a, "input")
    p = float(a.get("p", 0.0))
    if not a.get("train", True) or p == 0.0:
        return (x, cv.const(node, 1))
    y, mask = cv.out(node, 0), cv.out(node, 1)
    cv.emit(node.name, "DropOutDoMask", [cv.mat(x)], [y, mask], {"keep_prob": 1.0 - p})
    return (Val(y), Val(mask))


@rule("native_dropout_backward")
def r_dropout_bw(cv: Converter, node: Any, a: dict) -> Any:
    dy, mask = cv.mat(_tensor_arg(a, "grad_output")), cv.mat(_tensor_arg(a, "mask"))
    out = cv.out(node)
    cv.emit(node.name, "DropOutDoMask", [dy, mask], [out], {"scale": float(a.get("scale", 1.0))})
    return Val(out)


@rule("nll_loss_forward")
def r_nll(cv: Converter, node: Any, a: dict) -> Any:
    x, t = cv.mat(_tensor_arg(a, "self")), cv.mat(_tensor_arg(a, "target"))
    outs = [cv.out(node, 0), cv.out(node, 1)]
    cv.emit(node.name, "NLLLoss", [x, t], outs, {"reduction": int(a.get("reduction", 1)),
                                                 "ignore_index": int(a.get("ignore_index", -100))})
    return tuple(Val(o) for o in outs)


@rule("nll_loss_backward")
def r_nll_bw(cv: Converter, node: Any, a: dict) -> Any:
    ins = [cv.mat(_tensor_arg(a, k)) for k in ("self", "grad_output", "target", "total_weight")]
    out = cv.out(node)
    cv.emit(node.name, "NLLLossGrad", ins, [out], {"reduction": int(a.get("reduction", 1)),
                                                   "ignore_index": int(a.get("ignore_index", -100))})
    return Val(out)


@rule("mse_loss")
def r_mse(cv: Converter, node: Any, a: dict) -> Any:
    ins = [cv.mat(_tensor_arg(a, k)) for k in ("self", "target")]
    out = cv.out(node)
    cv.emit(node.name, "MseLoss", ins, [out], {"reduction": int(a.get("reduction", 1))})
    return Val(out)


@rule("mse_loss_backward")
def r_mse_bw(cv: Converter, node: Any, a: dict) -> Any:
    ins = [cv.mat(_tensor_arg(a, k)) for k in ("self", "target", "grad_output")]
    out = cv.out(node)
    cv.emit(node.name, "MseLossGrad", ins, [out], {"reduction": int(a.get("reduction", 1))})
    return Val(out)


from . import attention as _attention  # noqa: E402,F401  (registers the attention rules)
from . import foreach as _foreach  # noqa: E402,F401  (registers the _foreach_* rule)
from . import recurrent as _recurrent  # noqa: E402,F401  (registers aoe's recurrent custom operators)
from . import optim as _optim  # noqa: E402,F401  (registers lerp / addcmul / addcdiv / fma)
from . import scatter as _scatter  # noqa: E402,F401  (registers masks, tril/triu, scatters, slice writes)
