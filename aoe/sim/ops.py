"""Operator descriptors the simulator prices: matmul, vector kernels and convolutions.

Each descriptor is immutable plain data with `kind` (the native model) and `params()` (the flat
int64 vector of the native layout). Construction validates everything, so a bad shape is an
`AoeError` here and never reaches C++.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

import numpy as np

from .. import _sim
from ..codes import dtype_code, format_code
from ..errors import AoeError

# The dtypes and formats the kernel models know, under their CANN ge::DataType / ge::Format codes
# (one table for the whole project: aoe.codes, the numbers bank files store).
DTYPES: dict[str, int] = {n: dtype_code(n) for n in ("float32", "float16", "int8", "int32", "bfloat16")}
FORMATS: dict[str, int] = {n: format_code(n) for n in ("NCHW", "NHWC", "ND", "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ")}
_DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16",
                  "bf16": "bfloat16", "int8": "int8", "int32": "int32"}
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int32": 4}

MATMUL_TYPES = frozenset({"MatMul", "MatMulV2", "MatMulV3", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"})
CONV_TYPES = {"Conv2D": 0, "Conv2DBackpropInput": 1, "Conv2DBackpropFilter": 2,
              "DepthwiseConv2D": 0, "DepthwiseConv2DBackpropInput": 1, "DepthwiseConv2DBackpropFilter": 2}
VECTOR_OPS: dict[str, int] = {name: code for code, (name, _) in enumerate(_sim.vector_ops())}
VECTOR_IMPLS: dict[str, int] = {name: impls for name, impls in _sim.vector_ops()}
# CANN names that price like another vector kernel.
VECTOR_ALIASES = {"AddV2": "Add", "Div": "RealDiv", "ReduceSum": "ReduceSumD", "ReduceMean": "ReduceMeanD",
                  "ReduceMax": "ReduceMaxD", "Softmax": "SoftmaxV2", "ConcatD": "Concat", "ConcatV2": "Concat",
                  "SplitD": "Split", "SplitV": "Split", "StridedSlice": "Slice", "StridedSliceD": "Slice",
                  "PadD": "Pad", "PadV3": "Pad", "GatherV2": "Gather", "Maximum": "Maximum",
                  "Minimum": "Minimum", "ClipByValueV2": "ClipByValue", "SelectV2": "Select", "Where": "Select",
                  "TileD": "Tile", "BroadcastTo": "Tile", "Expand": "Tile", "Square": "Mul",
                  "PowD": "Pow", "LayerNormV3": "LayerNorm", "LayerNormV4": "LayerNorm", "FastGelu": "Gelu",
                  "FastGeluGrad": "GeluGrad", "Reciprocal": "RealDiv", "Adam": "ApplyAdamD", "ApplyAdam": "ApplyAdamD",
                  "BatchNorm": "BNInfer", "BatchNormInference": "BNInfer", "HardSwishD": "HardSwish",
                  "HardSigmoidD": "HardSigmoid", "SiLU": "Swish", "Silu": "Swish", "Cos": "Sin",
                  "Ceil": "Floor", "Round": "Floor", "ArgMin": "ArgMaxV2", "ArgMaxD": "ArgMaxV2",
                  "ArgMinD": "ArgMaxV2", "ResizeNearestNeighbor": "ResizeNearestNeighborV2",
                  "ResizeBilinear": "ResizeBilinearV2", "MinimumGrad": "MaximumGrad",
                  # TensorFlow's in-place variable updates (Keras 3 optimizers) and safe division
                  "AssignAdd": "Add", "AssignSub": "Sub", "DivNoNan": "RealDiv",
                  # Assign copies the value into the variable's buffer: data movement only, like a slice
                  "Assign": "Slice"}

MAX_DIM = 1 << 31


def dtype_name(dtype: str) -> str:
    """Canonical dtype name (float16, bfloat16, float32, int8, int32)."""
    if not isinstance(dtype, str):
        raise AoeError(f"dtype must be a string such as 'float16', got {dtype!r}")
    name = _DTYPE_ALIASES.get(dtype.lower(), dtype.lower())
    if name not in DTYPES:
        raise AoeError(f"unknown dtype {dtype!r}; use one of {', '.join(DTYPES)}")
    return name


def _fmt(fmt: str, allowed: Sequence[str], what: str) -> int:
    if not isinstance(fmt, str) or fmt.upper() not in allowed:
        raise AoeError(f"{what} format must be one of {', '.join(allowed)}, got {fmt!r}")
    return FORMATS[fmt.upper()]


def _dims(values: Sequence[int], what: str, lo: int = 1) -> tuple[int, ...]:
    try:
        dims = tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise AoeError(f"{what} must be a list of integers, got {values!r}") from None
    for v in dims:
        if v < lo or v > MAX_DIM:
            raise AoeError(f"{what} has dimension {v}; dimensions must be in [{lo}, 2^31]")
    return dims


def _check_native(kind: int, params: np.ndarray, what: str) -> None:
    msg = _sim.check_op(kind, params)
    if msg:
        raise AoeError(f"{what}: {msg}")


@dataclass(frozen=True)
class MatMul:
    """C = op(A) @ op(B) (+ bias), A: [batch, M, K], B: [batch_b, K, N], on the Cube."""

    m: int
    n: int
    k: int
    batch: int = 1
    batch_b: int | None = None
    dtype: str = "float16"
    out_dtype: str | None = None
    a_format: str = "ND"
    b_format: str = "ND"
    c_format: str = "ND"
    trans_a: bool = False
    trans_b: bool = False
    bias: bool = False
    op_type: str = "MatMulV2"
    kind: int = field(default=_sim.K_MATMUL, init=False)

    def __post_init__(self) -> None:
        _dims([self.m, self.n, self.k, self.batch, self.batch if self.batch_b is None else self.batch_b],
              "matmul m, n, k, batch")
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        out = self.out_dtype or ("int32" if self.dtype == "int8" else self.dtype)
        object.__setattr__(self, "out_dtype", dtype_name(out))
        _check_native(self.kind, self.params(), f"{self.op_type} {self.m}x{self.k}x{self.n}")

    def params(self) -> np.ndarray:
        """Native parameter vector."""
        bb = self.batch if self.batch_b is None else self.batch_b
        return np.array([self.m, self.n, self.k, self.batch, bb, DTYPES[self.dtype], DTYPES[self.out_dtype],
                         _fmt(self.a_format, ("ND", "FRACTAL_NZ"), "A"),
                         _fmt(self.b_format, ("ND", "FRACTAL_NZ"), "B"),
                         _fmt(self.c_format, ("ND", "FRACTAL_NZ"), "C"),
                         int(bool(self.trans_a)), int(bool(self.trans_b)), int(bool(self.bias))], dtype=np.int64)

    @property
    def flops(self) -> float:
        """Useful FLOPs (2 per multiply-add)."""
        return 2.0 * self.m * self.n * self.k * max(self.batch, self.batch_b or self.batch)



@dataclass(frozen=True)
class RecurrentMatMul(MatMul):
    """A recurrent operator's time loop (CANN DynamicRNN / DynamicGRUV2 and their gradients), one kernel.

    Each of `steps` sequential time steps runs this matmul (the gate matmul of one step: M = batch,
    the strategy fields and tiling are the matmul's) and then `step_ops`, the gate math of that step
    on the Vector unit. The time is priced from the native models of both (`aoe.sim.simulate_times`):
    ``launch + steps * (matmul - launch + sum(vector op at its default strategy - launch))`` -- the
    kernel is launched once; a step cannot start before the previous step's hidden state exists, so
    the steps do not overlap (the Cube/Vector hand-over inside a step is not overlapped either).
    """

    steps: int = 1
    step_ops: tuple["VectorOp", ...] = ()
    # SoC -> one step's gate time (aoe.sim._recurrent_times); a cache, not part of the descriptor
    gate_cache: dict = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        _dims([self.steps], "recurrent steps")
        if not all(isinstance(v, VectorOp) for v in self.step_ops):
            raise AoeError("a recurrent operator's step_ops must be VectorOp descriptors")


@dataclass(frozen=True)
class VectorOp:
    """A Vector-unit kernel over a main input `shape` (see `aoe._sim.vector_ops()` for the list).

    `axes` are the reduced / normalised axes of row operators (Softmax, LayerNorm, Reduce*),
    `broadcast` the axes along which the second input has size 1, `perm` a Transpose permutation,
    `src_format`/`dst_format` a TransData conversion, `ksize`/`strides` a pooling window (LRN: ksize[0]
    is the channel window; Resize: `shape` is the output and ksize the input height and width).
    """

    op_type: str
    shape: tuple[int, ...]
    dtype: str = "float16"
    out_dtype: str | None = None
    axes: tuple[int, ...] = ()
    broadcast: tuple[int, ...] = ()
    perm: tuple[int, ...] = ()
    in_format: str = "ND"
    out_format: str = "ND"
    src_format: str = ""
    dst_format: str = ""
    ksize: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    kind: int = field(default=_sim.K_VECTOR, init=False)

    def __post_init__(self) -> None:
        name = VECTOR_ALIASES.get(self.op_type, self.op_type)
        if name not in VECTOR_OPS:
            raise AoeError(f"the simulator has no model for operator type {self.op_type!r}; "
                           f"modelled vector operators: {', '.join(sorted(VECTOR_OPS))}")
        object.__setattr__(self, "op_type", name)
        shape = _dims(self.shape, f"{name} shape")
        if not 1 <= len(shape) <= 8:
            raise AoeError(f"{name} shape must have 1 to 8 dimensions, got {len(shape)}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        object.__setattr__(self, "out_dtype", dtype_name(self.out_dtype or self.dtype))
        rank = len(shape)
        norm_axes = []
        for group, label in ((self.axes, "axes"), (self.broadcast, "broadcast")):
            try:
                axes = tuple(sorted({int(a) % rank if -rank <= int(a) < rank else int(a) for a in group}))
            except (TypeError, ValueError):
                raise AoeError(f"{name} {label} must be integers") from None
            if any(a < 0 or a >= rank for a in axes):
                raise AoeError(f"{name} {label} {group} out of range for rank {rank}")
            norm_axes.append(axes)
        object.__setattr__(self, "axes", norm_axes[0])
        object.__setattr__(self, "broadcast", norm_axes[1])
        if name == "Transpose":
            perm = tuple(int(p) for p in (self.perm or reversed(range(rank))))
            if sorted(perm) != list(range(rank)):
                raise AoeError(f"Transpose perm {perm} is not a permutation of {rank} axes")
            object.__setattr__(self, "perm", perm)
        if name in ("SoftmaxV2", "SoftmaxGrad", "LayerNorm", "LayerNormGrad", "ArgMaxV2") and not self.axes:
            object.__setattr__(self, "axes", (rank - 1,))
        _check_native(self.kind, self.params(), f"{name} {list(shape)}")

    @cached_property
    def _params(self) -> np.ndarray:
        rank = len(self.shape)
        dims = list(self.shape) + [1] * (8 - rank)
        axes_mask = sum(1 << a for a in self.axes)
        bcast_mask = sum(1 << a for a in self.broadcast)
        p = [0, 0, 0, 0]
        if self.op_type == "Transpose":
            p[0] = sum(a << (4 * i) for i, a in enumerate(self.perm))
        elif self.op_type == "TransData":
            p[0] = FORMATS.get(self.src_format.upper(), -1)
            p[1] = FORMATS.get(self.dst_format.upper(), -1)
        elif self.op_type == "Gemv":
            p[0] = int(self.ksize[0])  # rows of A
        elif self.op_type in ("LRN", "LRNGrad"):
            p[0] = int(self.ksize[0])  # window size (channels)
        elif self.op_type in ("ResizeNearestNeighborV2", "ResizeBilinearV2"):
            p[0], p[1] = int(self.ksize[0]), int(self.ksize[1])  # input height and width
        elif self.op_type in ("MaxPool", "AvgPool", "MaxPoolGrad", "AvgPoolGrad", "DepthwiseConv2D"):
            p = [int(self.ksize[0]), int(self.ksize[1]), int(self.strides[0]), int(self.strides[1])]
        in_fmt = FORMATS.get(self.in_format.upper(), FORMATS["ND"])
        out_fmt = FORMATS.get(self.out_format.upper(), FORMATS["ND"])
        return np.array([VECTOR_OPS[self.op_type], DTYPES[self.dtype], DTYPES[self.out_dtype], rank, *dims,
                         in_fmt, out_fmt, axes_mask, bcast_mask, *p], dtype=np.int64)

    def params(self) -> np.ndarray:
        """Native parameter vector."""
        return self._params

    @property
    def elements(self) -> int:
        """Elements of the main input."""
        return int(np.prod(self.shape, dtype=np.float64))

    @property
    def impls(self) -> int:
        """Number of alternative implementations the model knows for this operator."""
        return VECTOR_IMPLS[self.op_type]


@dataclass(frozen=True)
class Conv2D:
    """2-D convolution and its gradients as img2col on the Cube (NC1HWC0 / FRACTAL_Z inside).

    `x` = (N, C, H, W) of the forward input, `weight` = (Cout, C/groups, kh, kw); `direction` is
    `Conv2D`, `Conv2DBackpropInput` or `Conv2DBackpropFilter` (shapes are always the forward ones).
    """

    x: tuple[int, int, int, int]
    weight: tuple[int, int, int, int]
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilations: tuple[int, int] = (1, 1)
    groups: int = 1
    dtype: str = "float16"
    out_dtype: str | None = None
    bias: bool = False
    op_type: str = "Conv2D"
    kind: int = field(default=_sim.K_CONV, init=False)

    def __post_init__(self) -> None:
        if self.op_type not in CONV_TYPES:
            raise AoeError(f"unknown convolution type {self.op_type!r}; use one of {', '.join(CONV_TYPES)}")
        x = _dims(self.x, "conv input (N, C, H, W)")
        w = _dims(self.weight, "conv weight (Cout, C/groups, kh, kw)")
        if len(x) != 4 or len(w) != 4:
            raise AoeError("conv input and weight must both have 4 dimensions (NCHW and OIHW)")
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "weight", w)
        object.__setattr__(self, "strides", _dims(self.strides, "conv strides"))
        object.__setattr__(self, "dilations", _dims(self.dilations, "conv dilations"))
        object.__setattr__(self, "pads", _dims(self.pads, "conv pads", lo=0))
        if len(self.strides) != 2 or len(self.dilations) != 2 or len(self.pads) != 4:
            raise AoeError("conv strides and dilations take 2 values, pads 4 (top, bottom, left, right)")
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        object.__setattr__(self, "out_dtype", dtype_name(self.out_dtype or self.dtype))
        _check_native(self.kind, self.params(), f"{self.op_type} x={list(x)} w={list(w)}")

    def params(self) -> np.ndarray:
        """Native parameter vector."""
        n, c, h, w = self.x
        cout, _, kh, kw = self.weight
        return np.array([CONV_TYPES[self.op_type], n, c, h, w, cout, kh, kw, *self.strides, *self.pads,
                         *self.dilations, int(self.groups), DTYPES[self.dtype], DTYPES[self.out_dtype],
                         int(bool(self.bias))], dtype=np.int64)

    @property
    def out_hw(self) -> tuple[int, int]:
        """Forward output height and width."""
        _, _, h, w = self.x
        _, _, kh, kw = self.weight
        ho = (h + self.pads[0] + self.pads[1] - self.dilations[0] * (kh - 1) - 1) // self.strides[0] + 1
        wo = (w + self.pads[2] + self.pads[3] - self.dilations[1] * (kw - 1) - 1) // self.strides[1] + 1
        return ho, wo


SimOp = MatMul | VectorOp | Conv2D


def make_op(op_type: str, shapes: Sequence[Sequence[int]], dtype: str = "float16", **attrs: object) -> SimOp:
    """Build the descriptor of a CANN operator type from its input shapes and attributes."""
    if not isinstance(op_type, str) or not op_type:
        raise AoeError("operator type must be a non-empty string")
    if not shapes:
        raise AoeError(f"{op_type} needs at least one input shape")
    if op_type in MATMUL_TYPES:
        if len(shapes) < 2:
            raise AoeError(f"{op_type} needs two input shapes (A and B)")
        a, b = _dims(shapes[0], "A shape"), _dims(shapes[1], "B shape")
        if len(a) < 2 or len(b) < 2:
            raise AoeError(f"{op_type} inputs must have at least 2 dimensions, got {list(a)} and {list(b)}")
        ta, tb = bool(attrs.get("trans_a", False)), bool(attrs.get("trans_b", False))
        m, ka = (a[-1], a[-2]) if ta else (a[-2], a[-1])
        kb, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
        if ka != kb:
            raise AoeError(f"{op_type}: K of A ({ka}) and B ({kb}) differ")
        batch_a = int(np.prod(a[:-2], dtype=np.int64)) if len(a) > 2 else 1
        batch_b = int(np.prod(b[:-2], dtype=np.int64)) if len(b) > 2 else 1
        return MatMul(m=m, n=n, k=ka, batch=batch_a, batch_b=batch_b, dtype=dtype, trans_a=ta, trans_b=tb,
                      bias=bool(attrs.get("bias", len(shapes) > 2)), op_type=op_type,
                      a_format=str(attrs.get("a_format", "ND")), b_format=str(attrs.get("b_format", "ND")),
                      c_format=str(attrs.get("c_format", "ND")))
    if op_type in CONV_TYPES:
        if len(shapes) < 2:
            raise AoeError(f"{op_type} needs the input and weight shapes")
        return Conv2D(x=tuple(shapes[0]), weight=tuple(shapes[1]),  # type: ignore[arg-type]
                      strides=tuple(attrs.get("strides", (1, 1))),  # type: ignore[arg-type]
                      pads=tuple(attrs.get("pads", (0, 0, 0, 0))),  # type: ignore[arg-type]
                      dilations=tuple(attrs.get("dilations", (1, 1))),  # type: ignore[arg-type]
                      groups=int(attrs.get("groups", 1)), dtype=dtype, bias=bool(attrs.get("bias", False)),
                      op_type=op_type)
    shape = shapes[0]
    broadcast: tuple[int, ...] = tuple(attrs.get("broadcast", ()))  # type: ignore[arg-type]
    if not broadcast and len(shapes) > 1 and VECTOR_ALIASES.get(op_type, op_type) in (
            "Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum"):
        broadcast = _broadcast_axes(shapes[0], shapes[1])
    return VectorOp(op_type=op_type, shape=tuple(shape), dtype=dtype,
                    out_dtype=attrs.get("out_dtype"),  # type: ignore[arg-type]
                    axes=tuple(attrs.get("axes", ())), broadcast=broadcast,  # type: ignore[arg-type]
                    perm=tuple(attrs.get("perm", ())),  # type: ignore[arg-type]
                    in_format=str(attrs.get("in_format", "ND")), out_format=str(attrs.get("out_format", "ND")),
                    src_format=str(attrs.get("src_format", "")), dst_format=str(attrs.get("dst_format", "")),
                    ksize=tuple(attrs.get("ksize", (1, 1))),  # type: ignore[arg-type]
                    strides=tuple(attrs.get("strides", (1, 1))))  # type: ignore[arg-type]


def _broadcast_axes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """Axes of `a` along which `b` (right-aligned, numpy rules) has size 1."""
    a, b = list(a), list(b)
    if len(b) > len(a):
        raise AoeError(f"second input {b} has more dimensions than the first {a}; put the larger first")
    b = [1] * (len(a) - len(b)) + b
    axes = []
    for i, (da, db) in enumerate(zip(a, b)):
        if db == 1 and da != 1:
            axes.append(i)
        elif db != da:
            raise AoeError(f"shapes {a} and {b} do not broadcast")
    return tuple(axes)
