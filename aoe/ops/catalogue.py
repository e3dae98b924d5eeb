"""Operator catalogue: a graph operator -> its tuning case (kernel model, bank key, Format and Impl choices).

`describe(graph, op)` is the one place that knows how a CANN operator of the IR is priced:

- which simulator kernel models it and with which shapes;
- its knowledge-bank key (`info_dict`, the schemas of `aoe.bank.schema`);
- its **Format** alternatives: the layouts its kernel can run in, each with the `TransData`
  conversions it needs at the boundaries (charged to the operator, like CANN inserts them);
- its **Impl** alternatives: other kernels for the same maths, each tagged with the precision
  modes (`op_select_implmode`) it is allowed under.

Operators the simulator has no model for raise `Unsupported` with a reason; tuning skips and reports them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, TypeVar

from ..bank.schema import schema_for
from ..errors import AoeError
from ..graph import Graph, Op
from ..sim import Conv2D, MatMul, SimOp, VectorOp
from ..sim.ops import DTYPE_BYTES, VECTOR_ALIASES, VECTOR_OPS

HIGH_PERFORMANCE = "high_performance"
HIGH_PRECISION = "high_precision"
IMPL_MODES = (HIGH_PERFORMANCE, HIGH_PRECISION)
BOTH = frozenset(IMPL_MODES)
PERF_ONLY = frozenset({HIGH_PERFORMANCE})

# IR operators priced like another vector kernel.
_VECTOR_AS = {
    "AddN": "Add", "Muls": "Mul", "Adds": "Add", "BroadcastToD": "Tile", "EmbeddingDenseGrad": "Gather",
    "UnsortedSegmentSum": "Gather", "LogicalAnd": "Mul", "LogicalOr": "Add", "Equal": "Sub", "Less": "Sub",
    "Greater": "Sub", "SquareSumV1": "ReduceSumD", "Square": "Mul", "OnesLike": "Cast", "ZerosLike": "Cast",
    "ClipByValue": "ClipByValue", "Pow": "Pow", "SplitV": "Split", "StridedSliceD": "Slice",
    "Relu6": "ClipByValue", "Relu6Grad": "ReluGrad", "Relu6D": "ClipByValue",
    # same instruction count per repeat as the kernel named (see aoe/ops/README.md)
    "LessEqual": "Sub", "GreaterEqual": "Sub", "NotEqual": "Sub", "LogicalXor": "Sub", "LogicalNot": "Abs",
    "IsNan": "LeakyRelu", "IsInf": "LeakyRelu", "Selu": "Elu", "ReduceMinD": "ReduceMaxD",
    "ReduceProdD": "ReduceMaxD", "ReduceSumSquare": "ReduceSumD", "ReduceL2": "ReduceSumD",
    "LogSoftmaxV2": "SoftmaxV2", "InstanceNorm": "LayerNorm", "GroupNorm": "LayerNorm", "StridedSliceGrad": "Pad",
    "DepthToSpace": "Transpose", "SpaceToDepth": "Transpose", "InstanceNormGrad": "LayerNormGrad",
    "GroupNormGrad": "LayerNormGrad",
    # data movement priced by what moves: GatherElements' output (one picked element each), NLLLoss
    # one 32-byte block per row of its input (the target's element: MTE2's granularity), summed; Pack
    # is a Concat along a new axis
    "GatherElements": "Gather", "NLLLoss": "ReduceSumD", "Pack": "Concat",
    # the gradient of a resize sums each input pixel's share of dy: a pooling window of dy per input pixel
    "ResizeNearestNeighborV2Grad": "AvgPool", "ResizeBilinearV2Grad": "AvgPool",
    "ClipByValueGrad": "AbsGrad", "ReciprocalGrad": "SigmoidGrad", "RsqrtGrad": "SigmoidGrad", "CosGrad": "SinGrad",
    "SeluGrad": "EluGrad", "LogSoftmaxGrad": "SoftmaxGrad", "BNInferGrad": "Mul", "SwishGrad": "SoftplusGrad",
    "HardtanhGrad": "AbsGrad", "Expm1": "Exp", "Log1p": "Log", "FloorDiv": "FloorMod", "MaskedFill": "Select",
    "ReduceAllD": "ReduceMaxD", "ReduceAnyD": "ReduceMaxD", "ReduceAll": "ReduceMaxD", "ReduceAny": "ReduceMaxD",
    # var, accum, grad in; var, accum out; accum = accum*momentum + grad, var -= lr*accum: 4 repeats, as PReluGrad
    "ApplyMomentum": "PReluGrad",
    # a mask drawn per element (in, mask out: one repeat), a triangle kept by an index compare and select
    # (2 repeats), scatters as the gather they invert, a slice written into a copy of a tensor as Pad
    "DropOutGenMask": "Cast", "Tril": "ClipByValue", "Triu": "ClipByValue", "ScatterElements": "Gather",
    "StridedSliceAssignD": "Pad",
}
_RESIZE_OPS = ("ResizeNearestNeighborV2", "ResizeBilinearV2")
_ROW_OPS = ("SoftmaxV2", "SoftmaxGrad", "LayerNorm", "LayerNormGrad", "ReduceSumD", "ReduceMeanD",
            "ReduceMaxD", "BNTrainingReduce", "BNTrainingUpdateGrad", "ArgMaxV2",
            "SparseSoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogits")


class Unsupported(AoeError):
    """The operator cannot be tuned (no kernel model, dynamic shape, view): skipped and reported."""


@dataclass(frozen=True)
class CubeEdge:
    """A tensor between a vector operator and Cube (matmul) operators, in the layout a variant gives it.

    The Cube side is priced by the tuner per SoC (`aoe.opat.tune.conversion_us`): the neighbours'
    kernel time with this side in FRACTAL_NZ minus their time as their own cases price them (ND), and
    on a coupled SoC, where the Cube side stays FRACTAL_NZ, the `transdata` an ND layout needs.
    """

    layout: str                               # the vector operator's side: ND | FRACTAL_NZ
    cube_nd: tuple[MatMul, ...]               # the Cube neighbours as their own cases price them
    cube_nz: tuple[MatMul, ...]               # the same kernels with this side in FRACTAL_NZ
    transdata: VectorOp                       # NZ<->ND conversion of this tensor


@dataclass(frozen=True)
class Variant:
    """One way to run the operator: a kernel model plus the fixed extra cost around it."""

    label: str
    sim_op: SimOp
    extra_us: float = 0.0                     # TransData kernels this choice needs (Format tuning)
    extra_ops: tuple[SimOp, ...] = ()         # those conversion kernels, priced with their defaults
    modes: frozenset[str] = BOTH              # op_select_implmode values that allow it
    knowledge: dict[str, Any] = field(default_factory=dict)  # what to store besides the tiling
    cube_edges: tuple[CubeEdge, ...] = ()     # tensors shared with Cube operators (Format of vector ops)


@dataclass(frozen=True)
class OpCase:
    """A tunable operator of a graph."""

    op_name: str
    op_type: str
    family: str                               # matmul | conv | vector
    key: dict[str, Any]                       # bank info_dict (canonical)
    default: Variant                          # formats and kernel a CANN compile uses
    formats: tuple[Variant, ...]              # Format alternatives (default first)
    impls: tuple[Variant, ...]                # Impl alternatives (default first)

    @property
    def case_id(self) -> tuple[str, str]:
        """Identity for de-duplication: identical cases are tuned once."""
        return self.op_type, repr(sorted(self.key.items()))


def _shape(graph: Graph, name: str) -> tuple[int, ...]:
    t = graph.tensors[name]
    if not t.is_static:
        raise Unsupported(f"tensor {name!r} has a dynamic shape {list(t.shape)}")
    return t.shape


def _prod(dims: Any) -> int:
    return int(math.prod(int(d) for d in dims)) if dims else 1


def _sim_dtype(dtype: str) -> str:
    return dtype if dtype in ("float16", "bfloat16", "float32", "int8", "int32") else "float16"


_S = TypeVar("_S")


def _made(graph: Graph, cls: Callable[..., _S], *args: Any, **kwargs: Any) -> _S:
    """`cls(*args, **kwargs)` built once per graph: the simulator's kernel descriptions are frozen values
    (each checked by the native model when built), and a graph of repeated layers needs a few distinct ones
    for thousands of operators."""
    memo = graph.memo("ops.sim")
    ident = (cls, args, *kwargs.items())
    try:
        found = memo.get(ident)
    except TypeError:  # an unhashable argument: built as it is
        return cls(*args, **kwargs)
    if found is None:
        found = memo[ident] = cls(*args, **kwargs)
    return found


def _canonical(graph: Graph, op_type: str, ident: Any, raw: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The bank key of `op_type` from the fields `raw()` gives, worked out once per graph for each distinct
    `ident` (a hashable form of those fields). The key is shared: never changed in place."""
    memo = graph.memo("ops.key")
    ident = (op_type, ident)
    found = memo.get(ident)
    if found is None:
        found = memo[ident] = schema_for(op_type).canonical_key(op_type, raw())
    return found


def describe(graph: Graph, op: Op) -> OpCase:
    """The tuning case of `op` in `graph` (raises Unsupported for operators that cannot be tuned).

    Worked out once per operator and graph revision (`Graph.memo`): the tuners, the partitioner and the
    Format of a vector operator's Cube neighbours all ask for the same operators again.
    """
    memo = graph.memo("ops.describe")
    found = memo.get(id(op))
    if found is not None and found[0] is op:   # the operator itself is kept: an id is never reused
        if isinstance(found[1], str):
            raise Unsupported(found[1])
        return found[1]
    try:
        case = _describe(graph, op)
    except Unsupported as exc:
        memo[id(op)] = (op, str(exc))
        raise
    memo[id(op)] = (op, case)
    return case


def _describe(graph: Graph, op: Op) -> OpCase:
    if getattr(op, "is_view", False) or op.attrs.get("view"):
        raise Unsupported("view: no kernel")
    if op.type == "Opaque":
        raise Unsupported(f"operator type {op.attrs.get('onnx_type', '?')!r} is not supported")
    for name in list(op.inputs) + list(op.outputs):
        _shape(graph, name)
    if op.type in ("MatMulV2", "MatMulV3", "BatchMatMulV2", "BatchMatMulV3", "MatMul", "BatchMatMul"):
        return _matmul_case(graph, op)
    if op.type in ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "DepthwiseConv2D", "Conv2DTranspose"):
        return _conv_case(graph, op)
    if op.type in ("DynamicRNN", "DynamicRNNGrad", "DynamicGRUV2", "DynamicGRUV2Grad"):
        from .recurrent import recurrent_case  # the time loop of CANN's recurrent kernels (aoe/ops/recurrent.py)

        return recurrent_case(graph, op)
    return _vector_case(graph, op)


# --- matmul ------------------------------------------------------------------------------------

def _matmul_case(graph: Graph, op: Op) -> OpCase:
    a_name, b_name = op.inputs[0], op.inputs[1]
    a, b = _shape(graph, a_name), _shape(graph, b_name)
    ta, tb = bool(op.attrs.get("transpose_x1")), bool(op.attrs.get("transpose_x2"))
    bias = bool(op.attrs.get("has_bias")) and len(op.inputs) > 2
    dtype = _sim_dtype(graph.tensors[a_name].dtype)
    if len(a) < 2 or len(b) < 2:
        raise Unsupported(f"matmul inputs of rank {len(a)} and {len(b)}")
    m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
    kb, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
    if k != kb:
        raise Unsupported(f"matmul K mismatch {k} vs {kb}")
    batch_a, batch_b = _prod(a[:-2]), _prod(b[:-2])
    if batch_b == 1 and batch_a > 1 and not ta:
        # [B, S, K] x [K, N]: a plain matmul of (B*S) rows, as CANN folds it
        m, batch_a = m * batch_a, 1
    if batch_a != batch_b and 1 not in (batch_a, batch_b):
        raise Unsupported(f"batch dims {a[:-2]} and {b[:-2]} do not broadcast")

    def mm(fa: str = "ND", fb: str = "ND", fc: str = "ND") -> MatMul:
        return _made(graph, MatMul, m=m, n=n, k=k, batch=batch_a, batch_b=batch_b, dtype=dtype, a_format=fa,
                     b_format=fb, c_format=fc, trans_a=ta, trans_b=tb, bias=bias, op_type=op.type)

    base = mm()
    ba = [int(d) for d in a[:-2]][-4:]
    bb = [int(d) for d in b[:-2]][-4:]
    key = _canonical(graph, op.type, (m, k, n, tuple(ba), tuple(bb), dtype, base.out_dtype, ta, tb, bias), lambda: {
        "m": m, "k": k, "n": n,
        **{f"batch_a{i + 1}": v for i, v in enumerate((ba + [1, 1, 1, 1])[:4])},
        **{f"batch_b{i + 1}": v for i, v in enumerate((bb + [1, 1, 1, 1])[:4])},
        "a_dtype": dtype, "b_dtype": dtype, "out_dtype": base.out_dtype,
        "a_format": "ND", "b_format": "ND", "out_format": "ND",
        "trans_a_flag": ta, "trans_b_flag": tb, "bias_flag": bias,
        "m_align_flag": m % 16 == 0, "k_align_flag": k % 16 == 0, "n_align_flag": n % 16 == 0,
    })
    default = Variant("ND,ND,ND", base)
    # Format: FRACTAL_NZ operands. A weight (param/const) can be kept in NZ for free; an activation
    # or a graph input needs a TransData ND->NZ before the kernel, an NZ result one NZ->ND after it.
    formats = [default]
    # a side shared with a vector operator that chooses its layout (a Cube edge) is that operator's choice
    owned = _vector_owned_sides(graph, op)
    for fa in ("ND", "FRACTAL_NZ"):
        for fb in ("ND", "FRACTAL_NZ"):
            for fc in ("ND", "FRACTAL_NZ"):
                if (fa, fb, fc) == ("ND", "ND", "ND"):
                    continue
                if any(f == "FRACTAL_NZ" and side in owned for f, side in ((fa, "a"), (fb, "b"), (fc, "c"))):
                    continue
                extra: list[SimOp] = []
                if fa == "FRACTAL_NZ" and graph.tensors[a_name].kind in ("activation", "input"):
                    extra.append(_transdata(graph, a, dtype, "ND", "FRACTAL_NZ"))
                if fb == "FRACTAL_NZ" and graph.tensors[b_name].kind in ("activation", "input"):
                    extra.append(_transdata(graph, b, dtype, "ND", "FRACTAL_NZ"))
                if fc == "FRACTAL_NZ":
                    extra.append(_transdata(graph, _shape(graph, op.outputs[0]), base.out_dtype, "FRACTAL_NZ", "ND"))
                formats.append(Variant(f"{_short(fa)},{_short(fb)},{_short(fc)}", mm(fa, fb, fc),
                                       extra_ops=tuple(extra),
                                       knowledge={"formats": [fa, fb, fc]}))
    impls = [Variant("cube", base, knowledge={"impl": "cube"})]
    if m <= 16 and batch_a == 1 and batch_b == 1 and not tb:
        gemv = _made(graph, VectorOp, "Gemv", (k, n), dtype=dtype, axes=(0,), ksize=(m, 1))
        impls.append(Variant("vector_gemv", gemv, modes=PERF_ONLY, knowledge={"impl": "vector_gemv"}))
    return OpCase(op.name, op.type, "matmul", key, default, tuple(formats), tuple(impls))


def _short(fmt: str) -> str:
    return "NZ" if fmt == "FRACTAL_NZ" else fmt


def _transdata(graph: Graph, shape: tuple[int, ...], dtype: str, src: str, dst: str) -> VectorOp:
    """The TransData kernel converting a tensor of `shape` from layout `src` to `dst`."""
    if len(shape) < 2:
        shape = (1, *shape)
    return _made(graph, VectorOp, "TransData", tuple(shape), dtype=_sim_dtype(dtype), src_format=src, dst_format=dst)


# --- conv --------------------------------------------------------------------------------------

def _conv_case(graph: Graph, op: Op) -> OpCase:
    attrs = op.attrs
    strides = tuple(int(v) for v in attrs.get("strides", (1, 1)))
    pads = tuple(int(v) for v in attrs.get("pads", (0, 0, 0, 0)))
    dil = tuple(int(v) for v in attrs.get("dilations", (1, 1)))
    groups = int(attrs.get("groups", 1))
    if op.type == "Conv2D" or op.type == "DepthwiseConv2D":
        x, w = _shape(graph, op.inputs[0]), _shape(graph, op.inputs[1])
        dtype_t = graph.tensors[op.inputs[0]].dtype
    elif op.type == "Conv2DBackpropInput":  # inputs (filter, out_backprop), attr input_size
        w = _shape(graph, op.inputs[0])
        x = tuple(int(v) for v in attrs.get("input_size") or _shape(graph, op.outputs[0]))
        dtype_t = graph.tensors[op.inputs[1]].dtype
    elif op.type == "Conv2DTranspose":  # inputs (x, filter[, bias]): the data gradient of a conv whose
        # forward input is this op's output and whose weight (Cin, Cout/g, kh, kw) is the filter as given
        w, x = _shape(graph, op.inputs[1]), _shape(graph, op.outputs[0])
        dtype_t = graph.tensors[op.inputs[0]].dtype
    else:  # Conv2DBackpropFilter: inputs (x, out_backprop), attr filter_size
        x = _shape(graph, op.inputs[0])
        w = tuple(int(v) for v in attrs.get("filter_size") or _shape(graph, op.outputs[0]))
        dtype_t = graph.tensors[op.inputs[0]].dtype
    if len(x) != 4 or len(w) != 4:
        raise Unsupported(f"{op.type} with input {list(x)} and weight {list(w)} is not 2-D")
    dtype = _sim_dtype(dtype_t)
    kind = {"DepthwiseConv2D": "Conv2D", "Conv2DTranspose": "Conv2DBackpropInput"}.get(op.type, op.type)
    sim_x, sim_w, sim_g = x, w, groups
    if 1 < groups == x[1] == w[0] and w[1] == 1:
        # Depthwise: CANN's DepthwiseConv2D kernels keep the filter as C1HWNCoC0, a C0 x C0 diagonal block
        # per C0 channels, so the Cube runs a group conv of C1 groups of C0 channels (C0 times the useful MACs)
        c0 = 32 // DTYPE_BYTES[dtype]
        c1 = -(-groups // c0)
        sim_x, sim_w, sim_g = (x[0], c1 * c0, x[2], x[3]), (c1 * c0, c0, w[2], w[3]), c1
    base = _made(graph, Conv2D, x=sim_x, weight=sim_w, strides=strides, pads=pads, dilations=dil, groups=sim_g,
                 dtype=dtype, bias=bool(attrs.get("has_bias")), op_type=kind)
    ho, wo = base.out_hw
    ident = (dtype, base.out_dtype, x, w, ho, wo, groups, strides, dil, pads, bool(attrs.get("has_bias")))
    key = _canonical(graph, op.type, ident, lambda: {
        "a_dtype": dtype, "b_dtype": dtype, "c_dtype": base.out_dtype,
        "a_shape_n": x[0], "a_shape_c": x[1], "a_shape_h": x[2], "a_shape_w": x[3],
        "b_shape_n": w[0], "b_shape_c": w[1], "b_shape_h": w[2], "b_shape_w": w[3],
        "c_shape_h": ho, "c_shape_w": wo,
        "a_format": "NC1HWC0", "b_format": "FRACTAL_Z", "c_format": "NC1HWC0",
        "groups": groups, "stride_h": strides[0], "stride_w": strides[1], "dilation_h": dil[0],
        "dilation_w": dil[1], "pad_top": pads[0], "pad_bottom": pads[1], "pad_left": pads[2],
        "pad_right": pads[3], "bias_flag": bool(attrs.get("has_bias")),
    })
    default = Variant("NC1HWC0", base)
    impls = [Variant("img2col_cube", base, knowledge={"impl": "img2col_cube"})]
    kh, kw = w[2], w[3]
    if (kind == "Conv2D" and kh == kw == 1 and strides == (1, 1) and pads == (0, 0, 0, 0) and groups == 1):
        # 1x1 conv = matmul over pixels; NC1HWC0 activations are already NZ-like, weights FRACTAL_Z
        mm = _made(graph, MatMul, m=x[0] * x[2] * x[3], n=w[0], k=x[1], dtype=dtype, a_format="FRACTAL_NZ",
                   b_format="FRACTAL_NZ", c_format="FRACTAL_NZ", op_type="MatMulV2")
        impls.append(Variant("conv1x1_as_matmul", mm, knowledge={"impl": "conv1x1_as_matmul"}))
    if kind == "Conv2D" and groups == x[1] == w[0] and w[1] == 1 and dil == (1, 1) and strides[0] == strides[1]:
        padded = (x[0], x[1], x[2] + pads[0] + pads[1], x[3] + pads[2] + pads[3])
        dw = _made(graph, VectorOp, "DepthwiseConv2D", padded, dtype=dtype, ksize=(kh, kw), strides=strides)
        impls.append(Variant("depthwise_vector", dw, knowledge={"impl": "depthwise_vector"}))
    return OpCase(op.name, op.type, "conv", key, default, (default,), tuple(impls))


# --- vector ------------------------------------------------------------------------------------

def _vector_case(graph: Graph, op: Op) -> OpCase:
    name = _VECTOR_AS.get(op.type, VECTOR_ALIASES.get(op.type, op.type))
    if name not in VECTOR_OPS:
        raise Unsupported(f"the simulator has no kernel model for {op.type}")
    ins = [graph.tensors[t] for t in op.inputs]
    outs = [graph.tensors[t] for t in op.outputs]
    if not ins:
        raise Unsupported(f"{op.type} has no inputs")
    main = outs[0] if op.type == "GatherElements" and outs \
        else max(ins + outs, key=lambda t: _prod(t.shape)) if name in ("Tile", "Pad", "Concat", "Gather") \
        else outs[0] if (name in _RESIZE_OPS or name == "NLLLossGrad") and outs \
        else max(ins, key=lambda t: _prod(t.shape))
    shape = tuple(int(d) for d in main.shape) or (1,)
    if op.type in _REGROUPED:
        shape = _REGROUPED[op.type](shape, op.attrs)
    if len(shape) > 8:
        raise Unsupported(f"{op.type} of rank {len(shape)} (> 8)")
    dtype = _sim_dtype(main.dtype)
    kwargs: dict[str, Any] = {}
    if name in _ROW_OPS:
        axes = op.attrs.get("axes")
        if name in ("LayerNorm", "LayerNormGrad"):
            begin = int(op.attrs.get("begin_norm_axis", len(shape) - 1)) % len(shape)
            if op.type in ("InstanceNorm", "GroupNorm", "InstanceNormGrad", "GroupNormGrad"):
                begin = 2  # per sample and channel (group) over the rest
            axes = list(range(begin, len(shape)))
        elif name in ("BNTrainingReduce", "BNTrainingUpdateGrad"):
            axes = [a for a in range(len(shape)) if a != 1] if len(shape) == 4 else [0]
        elif name == "ArgMaxV2":
            axes = [int(op.attrs.get("dimension", len(shape) - 1))]
        elif not axes:
            axes = [len(shape) - 1]
        kwargs["axes"] = tuple(int(a) % len(shape) for a in axes)
    if name == "Transpose":
        kwargs["perm"] = _REGROUP_PERM[op.type](op.attrs) if op.type in _REGROUP_PERM else \
            tuple(int(p) for p in op.attrs.get("perm", range(len(shape) - 1, -1, -1)))
    if name in ("MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad"):
        if len(shape) != 4:
            raise Unsupported(f"{op.type} on a rank-{len(shape)} tensor")
        kwargs["ksize"] = tuple(int(v) for v in op.attrs.get("ksize", (1, 1))[-2:])
        kwargs["strides"] = tuple(int(v) for v in op.attrs.get("strides", (1, 1))[-2:])
        if kwargs["ksize"][0] > shape[2] or kwargs["ksize"][1] > shape[3]:
            raise Unsupported(f"{op.type} window larger than its input")
    if op.type in ("ResizeNearestNeighborV2Grad", "ResizeBilinearV2Grad"):
        bilinear = op.type.startswith("ResizeBilinear")
        kwargs.update(_resize_grad_window(shape, _shape(graph, op.outputs[0]), bilinear))
    if name in ("LRN", "LRNGrad"):
        kwargs["ksize"] = (int(op.attrs.get("size") or 2 * int(op.attrs.get("depth_radius", 2)) + 1), 1)
    if name in _RESIZE_OPS:
        x_in = _shape(graph, op.inputs[0])
        if len(x_in) != 4 or len(shape) != 4:
            raise Unsupported(f"{op.type} of a rank-{len(x_in)} tensor (2-D resize of NCHW is modelled)")
        kwargs["ksize"] = (int(x_in[2]), int(x_in[3]))
    if name == "Cast":
        out_dtype = _sim_dtype(outs[0].dtype) if outs else dtype
        kwargs["out_dtype"] = out_dtype
    if name in ("Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "SquaredDifference") and len(ins) >= 2:
        other = min(ins[:2], key=lambda t: _prod(t.shape))
        if tuple(other.shape) != shape and len(other.shape) <= len(shape):
            padded = (1,) * (len(shape) - len(other.shape)) + tuple(other.shape)
            if all(o in (1, s) for o, s in zip(padded, shape)):
                kwargs["broadcast"] = tuple(i for i, (o, s) in enumerate(zip(padded, shape)) if o == 1 and s != 1)
    # Conv nets keep 4-D activations in NC1HWC0 between Cube operators (CANN's format propagation):
    # the vector kernel then works on channels padded to C0. Running it in NCHW instead saves the
    # padding but needs a TransData on each side: a Format choice.
    c1hwc0 = len(shape) == 4 and main.format == "NCHW" and name not in ("Transpose", "TransData")
    nchw_alt = None
    try:
        if c1hwc0:
            c0 = 32 // DTYPE_BYTES.get(dtype, 2)
            padded = (shape[0], -(-shape[1] // c0) * c0, shape[2], shape[3])
            base = _made(graph, VectorOp, name, padded, dtype=dtype, **kwargs)
            if padded != shape:
                nchw_alt = Variant("NCHW", _made(graph, VectorOp, name, shape, dtype=dtype, **kwargs),
                                   extra_ops=(_transdata(graph, shape, dtype, "NC1HWC0", "NCHW"),
                                              _transdata(graph, _out_shape(outs, shape), dtype, "NCHW", "NC1HWC0")),
                                   knowledge={"formats": ["NCHW"]})
        else:
            base = _made(graph, VectorOp, name, shape, dtype=dtype, **kwargs)
    except AoeError as exc:
        raise Unsupported(f"{op.type}: {exc}") from None
    key_attrs = _key_attrs(op.attrs)
    # repr keeps 1, 1.0 and True apart, as the stored JSON does
    ident = (tuple((t.shape, t.dtype, t.format) for t in ins), tuple((t.dtype, t.format) for t in outs),
             repr(key_attrs))
    key = _canonical(graph, op.type, ident, lambda: {
        "input_shapes": [list(t.shape) for t in ins],
        "input_dtypes": [t.dtype for t in ins],
        "input_formats": [t.format for t in ins],
        "output_dtypes": [t.dtype for t in outs],
        "output_formats": [t.format for t in outs],
        "attrs": key_attrs,
    })
    default = Variant("NC1HWC0" if c1hwc0 else "ND", base)
    formats = (default, nchw_alt) if nchw_alt is not None else (default,)
    if not c1hwc0 and name in _NZ_VECTOR and len(shape) >= 2:
        cube = _cube_formats(graph, op, base, shape, kwargs)
        if cube is not None:
            default, nz, marker = cube
            formats = (default, nz)
            key = dict(key, attrs={**key["attrs"], "cube_edges": marker})  # another context, another case
    impls = tuple(Variant(f"impl{i}", base, modes=_impl_modes(name, i), knowledge={"impl": i},
                          cube_edges=default.cube_edges) for i in range(base.impls))
    return OpCase(op.name, op.type, "vector", key, default, formats, impls)


# --- Format of vector operators next to Cube operators ----------------------------------------------
#
# The Cube computes on FRACTAL_NZ fractals. A vector operator whose input comes from a matmul or whose
# output feeds one shares that tensor with the Cube, and its layout decides whether a TransData sits
# on the edge. CANN's default format selection runs the vector operator in ND (the format its kernels
# list first). What the Cube side costs then depends on the SoC (priced in aoe.opat.tune):
# - separated SoCs (Atlas A2): the Cube kernel reads ND itself (MTE2's ND2NZ mode) and writes ND
#   through FixPipe: no TransData; NZ on the edge only changes the Cube kernel's own time;
# - coupled SoCs (Ascend910A, Ascend310P): the Cube's activations stay FRACTAL_NZ and the compiler
#   inserts a TransData for an ND neighbour: choosing NZ for the vector operator removes it.
# The NZ variant runs the vector kernel on the padded fractal layout; its other full-size neighbours
# (not Cube) then need a TransData, charged to it like every conversion a variant implies.

_CUBE_TYPES = frozenset({"MatMul", "MatMulV2", "MatMulV3", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
_NZ_VECTOR = frozenset({
    "Relu", "Abs", "Neg", "Add", "Sub", "Mul", "Maximum", "Minimum", "RealDiv", "Exp", "Log", "Sqrt", "Rsqrt",
    "Pow", "Sigmoid", "Tanh", "Gelu", "Erf", "LeakyRelu", "ClipByValue", "Cast", "ReluGrad", "GeluGrad",
    "SigmoidGrad", "TanhGrad", "Select", "DropOutDoMask",
    "SoftmaxV2", "SoftmaxGrad", "LayerNorm", "LayerNormGrad", "ReduceSumD", "ReduceMeanD", "ReduceMaxD"})
_NZ = "FRACTAL_NZ"


def _links(graph: Graph) -> tuple[dict[str, Op], dict[str, list[Op]], frozenset[str]]:
    """Producers, consumers and outputs: the graph's index, built once per revision (not once per operator)."""
    return graph.links()


def _cube_producer(t: str, prod: dict[str, Op], cons: dict[str, list[Op]]) -> Op | None:
    """The matmul producing tensor `t` (through views), when `t` is its only use; else None."""
    while True:
        if len(cons.get(t, [])) != 1:
            return None
        p = prod.get(t)
        if p is None:
            return None
        if p.type in _CUBE_TYPES:
            return p
        if not (getattr(p, "is_view", False) or p.attrs.get("view")) or not p.inputs:
            return None
        t = p.inputs[0]


def _consumers_through_views(t: str, cons: dict[str, list[Op]], outputs: frozenset[str]) -> tuple[list[tuple[Op, str]], bool]:
    """Non-view readers of `t` as (operator, the tensor it reads), and whether anything else needs it in ND."""
    found: list[tuple[Op, str]] = []
    other = t in outputs
    todo = [t]
    while todo:
        cur = todo.pop()
        for c in cons.get(cur, []):
            if getattr(c, "is_view", False) or c.attrs.get("view"):
                other = other or any(o in outputs for o in c.outputs)
                todo.extend(c.outputs)
            else:
                found.append((c, cur))
    return found, other


def _cube_side(graph: Graph, cube: Op, tensor: str) -> tuple[MatMul, MatMul] | None:
    """The Cube neighbour's kernel as its case prices it, and with `tensor`'s side in FRACTAL_NZ."""
    try:
        nd = describe(graph, cube).default.sim_op
    except AoeError:
        return None
    if not isinstance(nd, MatMul):
        return None
    if tensor in cube.outputs:
        return nd, _made(graph, replace, nd, c_format=_NZ)
    idx = cube.inputs.index(tensor)
    if idx > 1:
        return None  # a bias
    return nd, _made(graph, replace, nd, a_format=_NZ) if idx == 0 else _made(graph, replace, nd, b_format=_NZ)


def _nz_capable(graph: Graph, v: Op, tensor: str) -> bool:
    """True if vector operator `v` may take FRACTAL_NZ on its full-size tensor `tensor` (see _cube_formats)."""
    name = _VECTOR_AS.get(v.type, VECTOR_ALIASES.get(v.type, v.type))
    if name not in _NZ_VECTOR or not v.inputs:
        return False
    main = max((graph.tensors[t] for t in v.inputs), key=lambda t: _prod(t.shape))
    shape = tuple(main.shape)
    c1hwc0 = len(shape) == 4 and main.format == "NCHW"
    return not c1hwc0 and len(shape) >= 2 and tuple(graph.tensors[tensor].shape) == shape


def _vector_owned_sides(graph: Graph, mm: Op) -> set[str]:
    """Sides ("a", "b", "c") of matmul `mm` that are Cube edges of a vector operator (its layout choice)."""
    prod, cons, outputs = _links(graph)
    owned = set()
    for side, t in zip("ab", mm.inputs[:2]):
        while True:  # up through views to the producer
            p = prod.get(t)
            if p is None or not (getattr(p, "is_view", False) or p.attrs.get("view")) or not p.inputs:
                break
            t = p.inputs[0]
        if p is not None and _nz_capable(graph, p, p.outputs[0]) and p.outputs[0] == t:
            owned.add(side)
    if mm.outputs:
        readers, _ = _consumers_through_views(mm.outputs[0], cons, outputs)
        if (len(readers) == 1 and _cube_producer(readers[0][1], prod, cons) is mm
                and _nz_capable(graph, readers[0][0], readers[0][1])):
            owned.add("c")
    return owned


def _nz_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (*shape[:-2], -(-shape[-2] // 16) * 16, -(-shape[-1] // 16) * 16)


def _cube_formats(graph: Graph, op: Op, base: VectorOp, shape: tuple[int, ...],
                  kwargs: dict[str, Any]) -> tuple[Variant, Variant, list[str]] | None:
    """ND (default) and FRACTAL_NZ variants of a vector operator sharing tensors with Cube operators."""
    prod, cons, outputs = _links(graph)
    dtype = base.dtype
    edges: list[tuple[list[tuple[MatMul, MatMul]], VectorOp]] = []
    marker: list[str] = []
    other_ins: list[str] = []
    for t in dict.fromkeys(op.inputs):
        tensor = graph.tensors[t]
        if tuple(tensor.shape) != shape:
            continue  # a broadcast operand or statistics: stays as it is
        cube = _cube_producer(t, prod, cons)
        side = None
        if cube is not None:
            out = next(o for o in cube.outputs)
            side = _cube_side(graph, cube, out)
        if side is not None:
            edges.append(([side], _transdata(graph, shape, dtype, _NZ, "ND")))
            marker.append("in")
        elif tensor.kind in ("activation", "input"):
            other_ins.append(t)
    other_out = False
    if op.outputs and tuple(graph.tensors[op.outputs[0]].shape) == shape:
        readers, other_out = _consumers_through_views(op.outputs[0], cons, outputs)
        sides = []
        for c, t in readers:
            side = _cube_side(graph, c, t) if c.type in _CUBE_TYPES else None
            if side is None:
                other_out = True
            else:
                sides.append(side)
        if sides:
            edges.append((sides, _transdata(graph, shape, dtype, "ND", _NZ)))
            marker.append("out")
    elif op.outputs:
        other_out = True  # a reduced output is written as it is
    if not edges:
        return None
    try:
        nz_op = _made(graph, VectorOp, base.op_type, _nz_shape(shape), dtype=dtype, in_format=_NZ, out_format=_NZ,
                      **kwargs)
    except AoeError:
        return None
    extra = [_transdata(graph, shape, dtype, "ND", _NZ) for _ in other_ins]
    if other_out and op.outputs and tuple(graph.tensors[op.outputs[0]].shape) == shape:
        extra.append(_transdata(graph, shape, dtype, _NZ, "ND"))

    def edge(layout: str) -> tuple[CubeEdge, ...]:
        return tuple(CubeEdge(layout, tuple(s[0] for s in sides), tuple(s[1] for s in sides), td)
                     for sides, td in edges)

    default = Variant("ND", base, cube_edges=edge("ND"))
    nz = Variant("NZ", nz_op, extra_ops=tuple(extra), cube_edges=edge(_NZ), knowledge={"formats": [_NZ]})
    return default, nz, marker


def _group_shape(shape: tuple[int, ...], attrs: dict[str, Any]) -> tuple[int, ...]:
    """GroupNorm normalises [N, G, C/G * spatial]: the LayerNorm kernel over axis 2 of that view."""
    g = int(attrs.get("num_groups", 1))
    if len(shape) < 3 or g < 1 or shape[1] % g:
        raise Unsupported(f"GroupNorm of {list(shape)} with {g} groups")
    return (shape[0], g, _prod(shape[1:]) // g)


def _block_shape(shape: tuple[int, ...], attrs: dict[str, Any], to_space: bool, crd: bool) -> tuple[int, ...]:
    """The 6-D view a DepthToSpace / SpaceToDepth transposes (its input's dimensions split by the block)."""
    b = int(attrs.get("block_size", 0))
    if len(shape) != 4 or b < 1:
        raise Unsupported(f"block rearrangement of {list(shape)} with block size {b}")
    n, c, h, w = shape
    if to_space:
        if c % (b * b):
            raise Unsupported(f"DepthToSpace of {c} channels with block {b}")
        return (n, c // (b * b), b, b, h, w) if crd else (n, b, b, c // (b * b), h, w)
    if h % b or w % b:
        raise Unsupported(f"SpaceToDepth of {h}x{w} with block {b}")
    return (n, c, h // b, b, w // b, b)


# IR types priced as a kernel over another view of their input, and the Transpose of that view
_REGROUPED = {
    "GroupNorm": _group_shape, "GroupNormGrad": _group_shape,
    "DepthToSpace": lambda s, a: _block_shape(s, a, True, a.get("mode") == "CRD"),
    "SpaceToDepth": lambda s, a: _block_shape(s, a, False, False),
    "NLLLoss": lambda s, a: (_prod(s[:-1]) if len(s) > 1 else 1, min(int(s[-1]), 16)),
}
_REGROUP_PERM = {
    "DepthToSpace": lambda a: (0, 1, 4, 2, 5, 3) if a.get("mode") == "CRD" else (0, 3, 4, 1, 5, 2),
    "SpaceToDepth": lambda a: (0, 3, 5, 1, 2, 4),
}


def _resize_grad_window(dy: tuple[int, ...], dx: tuple[int, ...], bilinear: bool) -> dict[str, tuple[int, int]]:
    """The pooling window over dy that gathers one input pixel's gradient: the scale factor (nearest), or
    twice it (bilinear: each dy pixel feeds a 2x2 neighbourhood), stride the scale factor."""
    if len(dy) != 4 or len(dx) != 4:
        raise Unsupported("resize gradient of a tensor that is not NCHW")
    stride = tuple(max(1, -(-int(a) // int(b))) for a, b in zip(dy[2:], dx[2:]))
    ksize = tuple(min(int(d), 2 * s if bilinear else s) for d, s in zip(dy[2:], stride))
    return {"ksize": ksize, "strides": stride}  # type: ignore[dict-item]


def _out_shape(outs: list[Any], fallback: tuple[int, ...]) -> tuple[int, ...]:
    """Shape of the first output when it is 4-D (pooling shrinks H and W), else the input's."""
    if outs and len(outs[0].shape) == 4:
        return tuple(int(d) for d in outs[0].shape)
    return fallback


def _impl_modes(name: str, impl: int) -> frozenset[str]:
    """Precision modes an implementation is allowed under."""
    if name.startswith("Reduce") and impl == 1:
        return PERF_ONLY  # atomic accumulation across cores: order-dependent rounding
    return BOTH


# provenance, not maths: operator names never enter a key
_NOT_KEY = frozenset({"fused_names", "fused_ops"})


def _key_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """Attributes that identify a case (floats such as epsilon kept; bulky lists trimmed)."""
    out = {}
    for k, v in sorted(attrs.items()):
        if k in _NOT_KEY:
            continue
        if isinstance(v, (bool, int, str)) or v is None:
            out[k] = v
        elif isinstance(v, float):
            out[k] = v if math.isfinite(v) else str(v)
        elif isinstance(v, (list, tuple)) and len(v) <= 16:
            out[k] = [x if isinstance(x, (bool, int, str)) else str(x) for x in v]
    return out
