"""NHWC -> NCHW: TensorFlow keeps images channels-last, the IR (like CANN's ONNX route) uses NCHW.

In a graph with 2-D convolutions or pooling every 4-D activation is re-read as ``(N, C, H, W)``, every
convolution filter (TF's ``[kh, kw, Cin, Cout]``) as ``[Cout, Cin, kh, kw]``, and axis attributes of
operators on 4-D activations are moved with the same permutation. Which 4-D tensors are filters is
decided once before conversion: the filter operand of a convolution, the output of
``Conv2DBackpropFilter``, and whatever is computed elementwise from those (the optimizer's update of a
kernel) or stored in the same variable.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# axis of an NHWC tensor -> axis of its NCHW form
NHWC_TO_NCHW_AXIS = {0: 0, 1: 2, 2: 3, 3: 1}
_CONV_LIKE = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "MaxPool", "MaxPoolV2", "AvgPool",
              "MaxPoolGrad", "AvgPoolGrad", "FusedBatchNormV3", "FusedBatchNorm", "FusedBatchNormV2",
              "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"}
# elementwise ops through which "this is a filter" propagates (same shape in and out)
_ELEMENTWISE = {"Identity", "Cast", "Mul", "AddV2", "Add", "Sub", "RealDiv", "Div", "Sqrt", "Square", "Neg",
                "AddN", "Maximum", "Minimum", "Pow", "Rsqrt", "Abs", "Sign", "StopGradient", "IdentityN",
                "DivNoNan", "Reciprocal", "Snapshot"}


def is_conv_graph(ops: Iterable[Any]) -> bool:
    """True when the graph holds a 2-D convolution or pooling in NHWC (the TF default)."""
    for op in ops:
        if op.type in _CONV_LIKE:
            fmt = _attr(op, "data_format", b"NHWC")
            if fmt in (b"NHWC", "NHWC"):
                return True
    return False


def filter_tensors(ops: list[Any], var_of: dict[str, str]) -> set[str]:
    """Names of the 4-D TF tensors in filter layout (see the module docstring).

    ``var_of`` maps a resource tensor name (variable handle) to the variable's identity.
    """
    filt: set[str] = set()
    filt_vars: set[str] = set()
    for _ in range(4):  # fixed point: reads of a variable may come before the assignment that marks it
        before = len(filt) + len(filt_vars)
        def mark(x: Any) -> None:
            # the filter as read, and what it is an alias or cast of (a frozen model's Identity of a Const)
            for _ in range(8):
                filt.add(x.name)
                if x.op.type in ("Identity", "Snapshot", "StopGradient", "Cast") and x.op.inputs:
                    x = x.op.inputs[0]
                else:
                    break

        for op in ops:
            t = op.type
            if t in ("Conv2D", "Conv2DBackpropInput", "DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput") \
                    and len(op.inputs) > 1:
                mark(op.inputs[1])
            elif t in ("Conv2DBackpropFilter", "DepthwiseConv2dNativeBackpropFilter"):
                filt.add(op.outputs[0].name)
            elif t == "ReadVariableOp":
                v = var_of.get(op.inputs[0].name)
                if v is not None and v in filt_vars:
                    filt.add(op.outputs[0].name)
                elif op.outputs[0].name in filt and v is not None:
                    filt_vars.add(v)
            elif t in ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"):
                v = var_of.get(op.inputs[0].name)
                if v is not None and op.inputs[1].name in filt:
                    filt_vars.add(v)
            elif t in _ELEMENTWISE and op.outputs:
                out = op.outputs[0]
                if out.shape.rank == 4 and any(i.name in filt and i.shape == out.shape for i in op.inputs):
                    filt.add(out.name)
        if len(filt) + len(filt_vars) == before:
            break
    return filt | {f"var:{v}" for v in filt_vars}


def nchw_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """(N, H, W, C) -> (N, C, H, W)."""
    n, h, w, c = shape
    return (n, c, h, w)


def oihw_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """TF filter (kh, kw, Cin, Cout) -> (Cout, Cin, kh, kw)."""
    kh, kw, ci, co = shape
    return (co, ci, kh, kw)


def hw(values: list[int], fmt: str) -> list[int]:
    """The (H, W) entries of a 4-element TF attribute in ``fmt`` (strides, ksize, dilations)."""
    if len(values) != 4:
        return list(values)[:2] if len(values) >= 2 else [1, 1]
    return [values[1], values[2]] if fmt == "NHWC" else [values[2], values[3]]


def _attr(op: Any, key: str, default: Any) -> Any:
    try:
        return op.get_attr(key)
    except (ValueError, AttributeError):
        return default
