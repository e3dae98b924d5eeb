"""CANN's recurrent operators as tuning cases: DynamicRNN (LSTM), DynamicGRUV2 and their gradients.

One CANN kernel runs the whole time loop. Each step multiplies the step's input and the previous
hidden state by the gate weights on the Cube (M = batch rows) and then runs the gate math on the
Vector unit; a step needs the previous step's hidden state, so the steps are sequential. The case's
kernel is a ``RecurrentMatMul`` (``aoe.sim``): the step's gate matmul, whose tiling tuning searches,
repeated ``T`` times with the step's vector gate operators. Work done once per operator, not per
step (GRU's input projection over all steps; the gradients' weight and bias gradients and GRU's
input gradient, one matmul or reduction over the T·B rows each) is a ``Variant.extra_ops`` kernel,
priced at CANN's default strategy.

The operators' inputs, outputs and attributes follow CANN's op proto (``rnn.h``: ``REG_OP(DynamicRNN)``,
``DynamicRNNGrad``, ``DynamicGRUV2``, ``DynamicGRUV2Grad``); see ``aoe/ops/README.md`` for the interface
the frontends emit.
"""
from __future__ import annotations

from ..bank.schema import schema_for
from ..graph import Graph, Op
from ..sim import MatMul, RecurrentMatMul, VectorOp
from .catalogue import OpCase, Unsupported, Variant, _key_attrs, _shape, _sim_dtype

RECURRENT_TYPES = frozenset({"DynamicRNN", "DynamicRNNGrad", "DynamicGRUV2", "DynamicGRUV2Grad"})


def _vec(name: str, rows: int, cols: int, dtype: str) -> VectorOp:
    return VectorOp(name, (rows, cols), dtype=dtype)


def _lstm_gates(b: int, h: int, dtype: str) -> tuple[VectorOp, ...]:
    """One LSTM step on the Vector unit: sigmoid(i, f, o), tanh(j), c = f*c + i*j, h = o*tanh(c)."""
    return (_vec("Sigmoid", b, 3 * h, dtype), _vec("Tanh", b, h, dtype), _vec("Mul", b, h, dtype),
            _vec("Mul", b, h, dtype), _vec("Add", b, h, dtype), _vec("Tanh", b, h, dtype), _vec("Mul", b, h, dtype))


def _lstm_grad_gates(b: int, h: int, dtype: str) -> tuple[VectorOp, ...]:
    """One LSTM backward step: do, dtanh(c), dc (+ the next step's), di, dj, df, dc_prev; the gates' activations' gradients."""
    return (*(_vec("Mul", b, h, dtype) for _ in range(6)), _vec("TanhGrad", b, h, dtype), _vec("Add", b, h, dtype),
            _vec("SigmoidGrad", b, 3 * h, dtype), _vec("TanhGrad", b, h, dtype))


def _gru_gates(b: int, h: int, dtype: str) -> tuple[VectorOp, ...]:
    """One GRU step (reset after the matmul): r, z = sigmoid(xr + hr, xz + hz); n = tanh(xn + r*hn); h = n + z*(h - n)."""
    return (_vec("Add", b, 2 * h, dtype), _vec("Sigmoid", b, 2 * h, dtype), _vec("Mul", b, h, dtype),
            _vec("Add", b, h, dtype), _vec("Tanh", b, h, dtype), _vec("Sub", b, h, dtype), _vec("Mul", b, h, dtype),
            _vec("Add", b, h, dtype))


def _gru_grad_gates(b: int, h: int, dtype: str) -> tuple[VectorOp, ...]:
    """One GRU backward step: dh (+ dy), dz, dn, its tanh gradient, dr, d(hn), dh_prev's share; sigmoid gradients of r, z."""
    return (_vec("Add", b, h, dtype), _vec("Sub", b, h, dtype), *(_vec("Mul", b, h, dtype) for _ in range(5)),
            _vec("TanhGrad", b, h, dtype), _vec("SigmoidGrad", b, 2 * h, dtype))


def _dims3(graph: Graph, op: Op, index: int, what: str) -> tuple[int, int, int]:
    s = _shape(graph, op.inputs[index])
    if len(s) != 3:
        raise Unsupported(f"{op.type} {what} has shape {list(s)}; CANN's recurrent operators take [T, batch, features]")
    return int(s[0]), int(s[1]), int(s[2])


def recurrent_case(graph: Graph, op: Op) -> OpCase:
    """The tuning case of a DynamicRNN / DynamicGRUV2 operator or of its gradient."""
    if op.attrs.get("time_major") is False:
        raise Unsupported(f"{op.type} with time_major=false (CANN's kernels take [T, batch, features])")
    need = {"DynamicRNN": 3, "DynamicRNNGrad": 16, "DynamicGRUV2": 3, "DynamicGRUV2Grad": 12}[op.type]
    if len(op.inputs) < need:
        raise Unsupported(f"{op.type} needs at least {need} inputs (CANN's op proto), got {len(op.inputs)}")
    t, b, i = _dims3(graph, op, 0, "x")
    dtype = _sim_dtype(graph.tensors[op.inputs[0]].dtype)
    extra: list[object] = []
    if op.type in ("DynamicRNN", "DynamicRNNGrad"):
        w = _shape(graph, op.inputs[1])                      # [input + hidden, 4 * hidden]
        if len(w) != 2 or w[1] % 4 or w[0] <= i:
            raise Unsupported(f"{op.type} weight {list(w)} is not [input + hidden, 4 * hidden] for input {i}")
        h = int(w[1]) // 4
        if op.type == "DynamicRNN":
            step = dict(m=b, k=i + h, n=4 * h, bias=True)
            gates = _lstm_gates(b, h, dtype)
        else:
            # d[x_t, h_prev] = dgates x w^T per step; dw = [x, h_prev]^T x dgates and db once over T*B rows
            step = dict(m=b, k=4 * h, n=i + h, trans_b=True)
            gates = _lstm_grad_gates(b, h, dtype)
            extra = [MatMul(m=i + h, n=4 * h, k=t * b, dtype=dtype, trans_a=True),
                     VectorOp("ReduceSumD", (t * b, 4 * h), dtype=dtype, axes=(0,))]
    else:
        wi, wh = _shape(graph, op.inputs[1]), _shape(graph, op.inputs[2])  # [input, 3H], [hidden, 3H]
        if len(wi) != 2 or len(wh) != 2 or wi[0] != i or wh[1] != wi[1] or wh[1] != 3 * wh[0]:
            raise Unsupported(f"{op.type} weights {list(wi)}, {list(wh)} are not [input, 3H], [H, 3H] for input {i}")
        h = int(wh[0])
        if op.type == "DynamicGRUV2":
            # x's projection for every step at once, then the hidden projection step by step
            step = dict(m=b, k=h, n=3 * h, bias=True)
            gates = _gru_gates(b, h, dtype)
            extra = [MatMul(m=t * b, n=3 * h, k=i, dtype=dtype, bias=True)]
        else:
            step = dict(m=b, k=3 * h, n=h, trans_b=True)
            gates = _gru_grad_gates(b, h, dtype)
            extra = [MatMul(m=h, n=3 * h, k=t * b, dtype=dtype, trans_a=True),      # dw_hidden
                     MatMul(m=i, n=3 * h, k=t * b, dtype=dtype, trans_a=True),      # dw_input
                     MatMul(m=t * b, n=i, k=3 * h, dtype=dtype, trans_b=True),      # dx
                     VectorOp("ReduceSumD", (t * b, 3 * h), dtype=dtype, axes=(0,)),  # db_input
                     VectorOp("ReduceSumD", (t * b, 3 * h), dtype=dtype, axes=(0,))]  # db_hidden
    kernel = RecurrentMatMul(dtype=dtype, op_type="MatMulV2", steps=t, step_ops=gates, **step)  # type: ignore[arg-type]
    ins = [graph.tensors[n] for n in op.inputs]
    outs = [graph.tensors[n] for n in op.outputs]
    key = schema_for(op.type).canonical_key(op.type, {
        "input_shapes": [list(x.shape) for x in ins],
        "input_dtypes": [x.dtype for x in ins],
        "input_formats": [x.format for x in ins],
        "output_dtypes": [x.dtype for x in outs],
        "output_formats": [x.format for x in outs],
        "attrs": _key_attrs(op.attrs),
    })
    default = Variant("ND", kernel, extra_ops=tuple(extra))  # type: ignore[arg-type]
    return OpCase(op.name, op.type, "vector", key, default, (default,), (default,))
