"""Training graphs: forward + backward operators + an Adam update per parameter, with exact shapes.

``derive_training(graph)`` turns an inference graph into one training step the way a framework hands
it to the graph compiler:

- forward: ``BNInfer`` becomes ``BNTrainingReduce`` + ``BNTrainingUpdate`` (batch statistics), and
  ``LayerNorm`` also outputs its mean and variance for the backward pass;
- the gradient of each graph output arrives as an extra graph input named ``grad/<output>`` (the
  loss is model-specific, so the step starts from the outputs' gradients);
- backward: the CANN gradient operator of every forward one, in reverse order (``MatMul`` -> two
  MatMuls with transposes, ``Conv2D`` -> ``Conv2DBackpropInput`` + ``Conv2DBackpropFilter``,
  ``Relu`` -> ``ReluGrad``, ``SoftmaxV2`` -> ``SoftmaxGrad``, ``LayerNorm`` -> ``LayerNormGrad``,
  batch norm -> ``BNTrainingUpdateGrad`` + ``BNTrainingReduceGrad``, broadcasting reduced with
  ``ReduceSumD``); gradients reaching one tensor from several users are summed with ``AddN``;
- optimizer: one ``ApplyAdamD`` per trained parameter (CANN's fused Adam: var, m, v, beta1_power,
  beta2_power, lr, beta1, beta2, epsilon, grad -> var, m, v). Its moments ``<param>/adam_m`` and
  ``<param>/adam_v`` are parameters too (persistent variables); the scalars are shared constants.

Gradients are only derived for tensors that depend on a parameter. Operators without a gradient rule
(``Opaque`` ones, data-dependent indexing) stop the gradient and are listed in ``graph.unsupported``.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Callable

from ..errors import AoeError
from .ir import Graph, Op, Tensor, unique_name

# Vector ops whose outputs are not differentiable (comparisons, indices, logic)
_NON_DIFF = {"Equal", "Less", "Greater", "LessEqual", "GreaterEqual", "LogicalAnd", "LogicalOr",
             "LogicalNot", "LogicalXor", "ArgMaxV2", "ArgMin", "Sign", "Floor", "Ceil", "Round",
             "IsNan", "IsInf", "FloorMod"}
_FLOAT = {"float16", "float32", "float64", "bfloat16"}
_VIEW_TYPES = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


class _Builder:
    def __init__(self, graph: Graph) -> None:
        self.g = graph
        self.tensors: dict[str, Tensor] = dict(graph.tensors)
        self.ops: list[Op] = []
        self.op_names: set[str] = {op.name for op in graph.ops}
        self.unsupported = [dict(u) for u in graph.unsupported]
        self.inputs = list(graph.inputs)
        self.counters: dict[str, int] = {}

    def tensor(self, base: str, shape: tuple[int, ...], dtype: str, fmt: str = "ND", kind: str = "activation") -> str:
        name = unique_name(base, self.tensors, counters=self.counters)
        self.tensors[name] = Tensor(name, tuple(shape), dtype, fmt, kind)
        return name

    def like(self, base: str, ref: str, kind: str = "activation") -> str:
        t = self.tensors[ref]
        return self.tensor(base, t.shape, t.dtype, t.format, kind)

    def emit(self, name: str, op_type: str, inputs: list[str], outputs: list[str], attrs: dict[str, Any] | None = None) -> Op:
        op = Op(unique_name(name, self.op_names, counters=self.counters), op_type, inputs, outputs, attrs or {})
        self.op_names.add(op.name)
        self.ops.append(op)
        return op

    def shape(self, t: str) -> tuple[int, ...]:
        return self.tensors[t].shape


def derive_training(graph: Graph) -> Graph:
    """Return the training-step graph of an inference graph (the input graph is not modified)."""
    if graph.training:
        raise AoeError(f"graph {graph.name!r} is already a training graph")
    b = _Builder(graph)
    _forward(b)
    fwd_ops = list(b.ops)
    needs = _requires_grad(b, fwd_ops)

    # seed gradients: one per differentiable graph output
    grads: dict[str, list[str]] = {}
    for out in graph.outputs:
        t = b.tensors[out]
        if out in needs and t.dtype in _FLOAT:
            seed = b.like(f"grad/{out}", out, kind="input")
            b.inputs.append(seed)
            grads[out] = [seed]

    for op in fwd_ops:
        if op.type == "Opaque" and any(i in needs for i in op.inputs):
            b.unsupported.append({"op": op.name, "onnx_type": op.attrs.get("onnx_type", op.type),
                                  "reason": "no gradient through an unsupported operator: gradients stop here"})

    for op in reversed(fwd_ops):
        gys: list[str | None] = []
        for o in op.outputs:
            contribs = grads.pop(o, [])
            gys.append(_sum(b, o, contribs))
        if all(g is None for g in gys):
            continue
        rule = _RULES.get(op.type)
        if rule is None or op.type in _NON_DIFF:
            if any(i in needs for i in op.inputs):
                b.unsupported.append({"op": op.name, "onnx_type": op.attrs.get("onnx_type", op.type),
                                      "reason": f"no gradient rule for {op.type}: gradients stop here"})
            continue
        need_in, need_out = _ARITY.get(op.type, (1, 1))
        if len(op.inputs) < need_in or len(op.outputs) < need_out:
            raise AoeError(f"operator {op.name!r} ({op.type}) has {len(op.inputs)} inputs and {len(op.outputs)} "
                           f"outputs, fewer than its gradient needs; the graph is malformed")
        got = rule(b, op, gys, needs)
        # a list keeps one entry per operand: x+x must contribute the gradient twice
        for inp, g in (got.items() if isinstance(got, dict) else got):
            if g is not None and inp in needs:
                grads.setdefault(inp, []).append(g)

    _adam(b, grads)
    outputs = list(graph.outputs) + [o for op in b.ops if op.type == "ApplyAdamD" for o in op.outputs]
    result = Graph(graph.name, b.tensors, b.ops, b.inputs, outputs, b.unsupported, graph.batch_size,
                   graph.compute_dtype, True)
    used = _referenced(result)
    result.tensors = {n: t for n, t in result.tensors.items() if n in used}
    result.validate()
    return result


def _referenced(g: Graph) -> set[str]:
    names = set(g.inputs) | set(g.outputs)
    for op in g.ops:
        names.update(op.inputs)
        names.update(op.outputs)
    return names


def _sum(b: _Builder, tensor: str, contribs: list[str]) -> str | None:
    if not contribs:
        return None
    if len(contribs) == 1:
        return contribs[0]
    out = b.like(f"grad/{tensor}", tensor)
    b.emit(f"grad/{tensor}/accumulate", "AddN", contribs, [out], {"N": len(contribs)})
    return out


# ---- forward rewrite ---------------------------------------------------------------------------
def _forward(b: _Builder) -> None:
    for op in b.g.ops:
        if op.type in ("BNInfer", "LayerNorm") and (len(op.inputs) < (5 if op.type == "BNInfer" else 2) or not op.outputs):
            raise AoeError(f"operator {op.name!r} ({op.type}) has too few inputs or outputs; the graph is malformed")
        if op.type == "BNInfer":
            x, scale, offset, mean, var = op.inputs
            c = b.shape(scale)
            s = b.tensor(f"{op.outputs[0]}/bn_sum", c, "float32")
            sq = b.tensor(f"{op.outputs[0]}/bn_square_sum", c, "float32")
            b.emit(f"{op.name}/reduce", "BNTrainingReduce", [x], [s, sq], {"data_format": b.tensors[x].format})
            outs = [op.outputs[0]] + [b.tensor(f"{op.outputs[0]}/{k}", c, "float32")
                                      for k in ("mean_out", "variance_out", "batch_mean", "batch_variance")]
            b.emit(f"{op.name}/update", "BNTrainingUpdate", [x, s, sq, scale, offset, mean, var], outs,
                   {"factor": 1.0 - float(op.attrs.get("momentum", 0.9)), "epsilon": op.attrs.get("epsilon", 1e-5)})
        elif op.type == "LayerNorm" and len(op.outputs) == 1:
            x = op.inputs[0]
            axis = int(op.attrs.get("begin_norm_axis", len(b.shape(x)) - 1))
            shp = b.shape(x)
            stat = shp[:axis] + (1,) * (len(shp) - axis)
            dt = b.tensors[x].dtype
            mean = b.tensor(f"{op.outputs[0]}/mean", stat, dt)
            var = b.tensor(f"{op.outputs[0]}/variance", stat, dt)
            b.ops.append(Op(op.name, op.type, op.inputs, op.outputs + [mean, var], op.attrs))
        else:
            b.ops.append(op)


def _requires_grad(b: _Builder, ops: list[Op]) -> set[str]:
    needs = {n for n, t in b.tensors.items() if t.kind == "param"}
    for op in ops:
        if op.type in _NON_DIFF or op.type == "Opaque":
            continue
        if any(i in needs for i in op.inputs):
            needs.update(o for o in op.outputs if b.tensors[o].dtype in _FLOAT)
    # running statistics are updated, not trained
    for op in ops:
        if op.type == "BNTrainingUpdate":
            needs.discard(op.inputs[5])
            needs.discard(op.inputs[6])
    return needs


# ---- gradient rules ----------------------------------------------------------------------------
GradRule = Callable[[_Builder, Op, list, set], dict]


def _unbroadcast(b: _Builder, g: str, target: str, name: str) -> str:
    """Sum a gradient over the axes along which ``target`` was broadcast, back to target's shape."""
    gs, ts = b.shape(g), b.shape(target)
    if gs == ts:
        return g
    lead = len(gs) - len(ts)
    axes = [i for i in range(len(gs)) if i < lead or (ts[i - lead] == 1 and gs[i] != 1)]
    dt = b.tensors[g].dtype
    if axes == list(range(lead)):
        # only leading axes were added by broadcasting: one reduction without keep_dims is exact
        red = b.tensor(f"{g}/sum_to_{target}", ts, dt, b.tensors[target].format)
        b.emit(f"{name}/reduce", "ReduceSumD", [g], [red], {"axes": axes, "keep_dims": False})
        return red
    kept = tuple(1 if i in axes else d for i, d in enumerate(gs))
    red = b.tensor(f"{g}/sum_to_{target}", kept, dt, b.tensors[target].format)
    b.emit(f"{name}/reduce", "ReduceSumD", [g], [red], {"axes": axes, "keep_dims": True})
    if kept == ts:
        return red
    out = b.tensor(f"{red}/reshape", ts, dt, b.tensors[target].format)
    b.emit(f"{name}/reshape", "Reshape", [red], [out], {"view": True, "shape": list(ts)})
    return out


def _grad_of(b: _Builder, x: str, shape: tuple[int, ...] | None = None) -> str:
    t = b.tensors[x]
    return b.tensor(f"grad/{x}", t.shape if shape is None else shape, t.dtype, t.format)


def _mm_type(*shapes: tuple[int, ...]) -> str:
    return "MatMulV2" if all(len(s) == 2 for s in shapes) else "BatchMatMulV2"


def _mm_shape(b: _Builder, a: str, c: str, ta: bool, tc: bool) -> tuple[int, ...]:
    sa, sc = b.shape(a), b.shape(c)
    m = sa[-1] if ta else sa[-2]
    n = sc[-2] if tc else sc[-1]
    batch_a, batch_c = sa[:-2], sc[:-2]
    n_b = max(len(batch_a), len(batch_c))
    batch = []
    for i in range(n_b):
        x = batch_a[i - n_b + len(batch_a)] if i - n_b + len(batch_a) >= 0 else 1
        y = batch_c[i - n_b + len(batch_c)] if i - n_b + len(batch_c) >= 0 else 1
        batch.append(max(x, y))
    return tuple(batch) + (m, n)


def _matmul_grad_one(b: _Builder, op: Op, gy: str, a: str, c: str, ta: bool, tc: bool, target: str, tag: str) -> str:
    """Emit ``op(a)·op(c)`` for a gradient; flatten batch dims when the target is a 2-D weight."""
    sa, sc = b.shape(a), b.shape(c)
    if len(b.shape(target)) == 2 and len(sa) > 2 and len(sc) > 2 and ta and not tc and sa[:-2] == sc[:-2]:
        # weight gradient of a batched product (x[B,S,K] with a 2-D weight): both operands contract
        # over batch and rows, so fold the batch into the rows and do one MatMul (no batch reduce)
        def flat(t: str) -> str:
            s = b.shape(t)
            if len(s) == 2:
                return t
            rows = 1
            for d in s[:-1]:
                rows *= d
            out = b.tensor(f"{t}/flat", (rows, s[-1]), b.tensors[t].dtype)
            b.emit(f"{op.name}/{tag}/flatten_{t}", "Reshape", [t], [out], {"view": True, "shape": [rows, s[-1]]})
            return out
        a, c = flat(a), flat(c)
    shape = _mm_shape(b, a, c, ta, tc)
    out = _grad_of(b, target, shape)
    b.emit(f"{op.name}/{tag}", _mm_type(b.shape(a), b.shape(c)), [a, c], [out],
           {"transpose_x1": ta, "transpose_x2": tc, "has_bias": False})
    return _unbroadcast(b, out, target, f"{op.name}/{tag}")


def g_matmul(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    gy = gys[0]
    x1, x2 = op.inputs[0], op.inputs[1]
    if len(b.shape(x1)) < 2 or len(b.shape(x2)) < 2:
        return {}
    t1, t2 = bool(op.attrs.get("transpose_x1")), bool(op.attrs.get("transpose_x2"))
    res: list[tuple[str, str]] = []
    if x1 in needs:
        res.append((x1, _matmul_grad_one(b, op, gy, gy, x2, False, not t2, x1, "grad_x1") if not t1
                    else _matmul_grad_one(b, op, gy, x2, gy, t2, True, x1, "grad_x1")))
    if x2 in needs:
        res.append((x2, _matmul_grad_one(b, op, gy, x1, gy, not t1, False, x2, "grad_x2") if not t2
                    else _matmul_grad_one(b, op, gy, gy, x1, True, t1, x2, "grad_x2")))
    if op.attrs.get("has_bias") and len(op.inputs) > 2 and op.inputs[2] in needs:
        res.append((op.inputs[2], _unbroadcast(b, gy, op.inputs[2], f"{op.name}/grad_bias")))
    return res


def _conv_grads(b: _Builder, op: Op, gys: list, needs: set, transpose: bool) -> dict:
    """dx and dw of a convolution (transpose: of a transposed one, whose input gradient is a forward conv)."""
    gy = gys[0]
    x, w = op.inputs[0], op.inputs[1]
    attrs = {k: op.attrs[k] for k in ("strides", "pads", "dilations", "groups", "kernel", "data_format") if k in op.attrs}
    res: dict[str, str | None] = {}
    if x in needs:
        dx = _grad_of(b, x)
        if transpose:
            b.emit(f"{op.name}/grad_input", "Conv2D", [gy, w], [dx], {**attrs, "has_bias": False})
        else:
            b.emit(f"{op.name}/grad_input", "Conv2DBackpropInput", [w, gy], [dx],
                   {**attrs, "input_size": list(b.shape(x))})
        res[x] = dx
    if w in needs:
        dw = _grad_of(b, w)
        b.emit(f"{op.name}/grad_filter", "Conv2DBackpropFilter", [gy, x] if transpose else [x, gy], [dw],
               {**attrs, "filter_size": list(b.shape(w))})
        res[w] = dw
    if op.attrs.get("has_bias") and len(op.inputs) > 2 and op.inputs[2] in needs:
        res[op.inputs[2]] = _reduce_to(b, gy, op.inputs[2], [0, 2, 3], f"{op.name}/grad_bias")
    return res


def _reduce_to(b: _Builder, g: str, target: str, axes: list[int], name: str) -> str:
    out = _grad_of(b, target)
    b.emit(name, "ReduceSumD", [g], [out], {"axes": axes, "keep_dims": False})
    return out


def _unary(grad_type: str, inputs: Callable[[Op, str], list[str]]) -> GradRule:
    def rule(b: _Builder, op: Op, gys: list, needs: set) -> dict:
        x = op.inputs[0]
        dx = _grad_of(b, x)
        attrs = {k: v for k, v in op.attrs.items()
                 if k in ("approximate", "alpha", "min", "max", "axes", "depth_radius", "size", "beta", "bias",
                          "block_size")}
        b.emit(f"{op.name}/grad", grad_type, inputs(op, gys[0]), [dx], attrs)
        return {x: dx}
    return rule


def g_mul_scalar(factor_from_y: bool) -> GradRule:
    """Exp: dx = dy * y."""
    def rule(b: _Builder, op: Op, gys: list, needs: set) -> dict:
        x = op.inputs[0]
        dx = _grad_of(b, x)
        b.emit(f"{op.name}/grad", "Mul", [gys[0], op.outputs[0]], [dx])
        return {x: dx}
    return rule


def g_binary(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    gy = gys[0]
    a, c = op.inputs[0], op.inputs[1]
    res: list[tuple[str, str]] = []

    def tmp(tag: str) -> str:
        return b.tensor(f"{gy}/{tag}", b.shape(gy), b.tensors[gy].dtype, b.tensors[gy].format)

    if op.type == "Add":
        ga, gc = gy, gy
    elif op.type == "Sub":
        ga = gy
        gc = None
        if c in needs:
            gc = tmp("neg")
            b.emit(f"{op.name}/grad_x2", "Neg", [gy], [gc])
    elif op.type == "Mul":
        ga = gc = None
        if a in needs:
            ga = tmp("mul_x2")
            b.emit(f"{op.name}/grad_x1", "Mul", [gy, c], [ga])
        if c in needs:
            gc = tmp("mul_x1")
            b.emit(f"{op.name}/grad_x2", "Mul", [gy, a], [gc])
    elif op.type == "RealDiv":
        ga = gc = None
        if a in needs:
            ga = tmp("div_x2")
            b.emit(f"{op.name}/grad_x1", "RealDiv", [gy, c], [ga])
        if c in needs:
            # d(a/c)/dc = -y/c
            t1, t2, gc = tmp("mul_y"), tmp("div_x2"), tmp("neg")
            b.emit(f"{op.name}/grad_x2/mul", "Mul", [gy, op.outputs[0]], [t1])
            b.emit(f"{op.name}/grad_x2/div", "RealDiv", [t1, c], [t2])
            b.emit(f"{op.name}/grad_x2/neg", "Neg", [t2], [gc])
    elif op.type in ("Maximum", "Minimum"):
        ga, gc = tmp("grad_x1"), tmp("grad_x2")
        b.emit(f"{op.name}/grad", f"{op.type}Grad", [gy, a, c], [ga, gc], {"grad_x": True, "grad_y": True})
    elif op.type == "Pow":
        ga = gc = None
        if a in needs:
            # dx = dy * p * x^(p-1) = dy * p * y / x  (exponent is a constant in exported models)
            t1, t2, ga = tmp("pow_y_over_x"), tmp("pow_scaled"), tmp("pow_grad")
            b.emit(f"{op.name}/grad/div", "RealDiv", [op.outputs[0], a], [t1])
            b.emit(f"{op.name}/grad/mul_exponent", "Mul", [t1, c], [t2])
            b.emit(f"{op.name}/grad", "Mul", [gy, t2], [ga])
    else:  # PRelu and friends: elementwise gradient of the same shape
        ga, gc = tmp("grad_x1"), tmp("grad_x2")
        b.emit(f"{op.name}/grad", f"{op.type}Grad", [gy, a, c], [ga, gc])
    if a in needs and ga is not None:
        res.append((a, _unbroadcast(b, ga, a, f"{op.name}/grad_x1")))
    if c in needs and gc is not None:
        res.append((c, _unbroadcast(b, gc, c, f"{op.name}/grad_x2")))
    return res


def g_addn(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    return [(x, _unbroadcast(b, gys[0], x, f"{op.name}/grad_{i}")) for i, x in enumerate(op.inputs)]


def g_view(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x = op.inputs[0]
    if b.shape(x) == b.shape(gys[0]):
        return {x: gys[0]}
    dx = _grad_of(b, x)
    b.emit(f"{op.name}/grad", "Reshape", [gys[0]], [dx], {"view": True, "shape": list(b.shape(x))})
    return {x: dx}


def g_cast(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x = op.inputs[0]
    if op.is_view:
        return {x: gys[0]}
    dx = _grad_of(b, x)
    b.emit(f"{op.name}/grad", "Cast", [gys[0]], [dx], {"dst_type": b.tensors[x].dtype})
    return {x: dx}


def g_transpose(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    perm = [int(p) for p in op.attrs.get("perm", [])]
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    x = op.inputs[0]
    dx = _grad_of(b, x)
    b.emit(f"{op.name}/grad", "Transpose", [gys[0]], [dx], {"perm": inv})
    return {x: dx}


def g_softmax(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x = op.inputs[0]
    dx = _grad_of(b, x)
    kind = "SoftmaxGrad" if op.type == "SoftmaxV2" else "LogSoftmaxGrad"
    b.emit(f"{op.name}/grad", kind, [op.outputs[0], gys[0]], [dx], {"axes": op.attrs.get("axes", [-1])})
    return {x: dx}


def g_layernorm(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x, gamma = op.inputs[0], op.inputs[1]
    beta = op.inputs[2] if len(op.inputs) > 2 else None
    mean, var = op.outputs[1], op.outputs[2]
    dx, dg = _grad_of(b, x), _grad_of(b, gamma)
    outs = [dx, dg]
    if beta is not None:
        outs.append(_grad_of(b, beta))
    b.emit(f"{op.name}/grad", "LayerNormGrad", [gys[0], x, var, mean, gamma], outs,
           {"begin_norm_axis": op.attrs.get("begin_norm_axis"), "begin_params_axis": op.attrs.get("begin_params_axis")})
    res = {x: dx, gamma: dg}
    if beta is not None:
        res[beta] = outs[2]
    return res


def g_instance_norm(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    """InstanceNorm / GroupNorm: dx (the statistics recomputed from x) and the per-channel scale and bias grads."""
    x, params = op.inputs[0], op.inputs[1:3]
    outs = [_grad_of(b, x)] + [_grad_of(b, p) for p in params]
    b.emit(f"{op.name}/grad", f"{op.type}Grad", [gys[0], x, *params[:1]], outs,
           {k: v for k, v in op.attrs.items() if k in ("num_groups", "epsilon")})
    return dict(zip([x, *params], outs))


def g_bn_update(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x, _, _, scale, offset, _, _ = op.inputs
    batch_mean, batch_var = op.outputs[3], op.outputs[4]
    gy = gys[0]
    if gy is None:
        return {}
    ds = _grad_of(b, scale)
    do = _grad_of(b, offset)
    b.emit(f"{op.name}/grad", "BNTrainingUpdateGrad", [gy, x, batch_mean, batch_var], [ds, do],
           {"epsilon": op.attrs.get("epsilon", 1e-5)})
    res: dict[str, str | None] = {scale: ds, offset: do}
    if x in needs:
        dx = _grad_of(b, x)
        b.emit(f"{op.name}/reduce_grad", "BNTrainingReduceGrad", [gy, x, ds, do, scale, batch_mean, batch_var], [dx],
               {"epsilon": op.attrs.get("epsilon", 1e-5)})
        res[x] = dx
    return res


def g_reduce(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x = op.inputs[0]
    xs = b.shape(x)
    axes = [int(a) for a in op.attrs.get("axes", list(range(len(xs))))]
    gy = gys[0]
    kept = tuple(1 if i in axes else d for i, d in enumerate(xs))
    if b.shape(gy) != kept:
        r = b.tensor(f"{gy}/keep_dims", kept, b.tensors[gy].dtype, b.tensors[x].format)
        b.emit(f"{op.name}/grad/reshape", "Reshape", [gy], [r], {"view": True, "shape": list(kept)})
        gy = r
    dx = _grad_of(b, x)
    if op.type == "ReduceMeanD":
        n = 1
        for a in axes:
            n *= xs[a]
        scaled = b.tensor(f"{gy}/scaled", kept, b.tensors[gy].dtype, b.tensors[x].format)
        b.emit(f"{op.name}/grad/scale", "Muls", [gy], [scaled], {"value": 1.0 / max(n, 1)})
        gy = scaled
    b.emit(f"{op.name}/grad", "BroadcastToD", [gy], [dx], {"shape": list(xs)})
    return {x: dx}


def g_broadcast(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    return {op.inputs[0]: _unbroadcast(b, gys[0], op.inputs[0], f"{op.name}/grad")}


def g_concat(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    axis = int(op.attrs.get("axis", 0))
    outs = [_grad_of(b, x) for x in op.inputs]
    b.emit(f"{op.name}/grad", "SplitV", [gys[0]], outs,
           {"split_dim": axis, "size_splits": [b.shape(x)[axis] for x in op.inputs], "num_split": len(outs)})
    return list(zip(op.inputs, outs))


def g_split(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    parts = []
    for o, g in zip(op.outputs, gys):
        if g is None:
            g = b.like(f"grad/{o}/zeros", o)
            b.emit(f"{op.name}/grad/zeros_{o}", "ZerosLike", [o], [g])
        parts.append(g)
    x = op.inputs[0]
    dx = _grad_of(b, x)
    b.emit(f"{op.name}/grad", "Concat", parts, [dx], {"axis": op.attrs.get("split_dim", 0), "N": len(parts)})
    return {x: dx}


def g_slice(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x = op.inputs[0]
    dx = _grad_of(b, x)
    b.emit(f"{op.name}/grad", "StridedSliceGrad", [gys[0]], [dx],
           {"shape": list(b.shape(x)), **{k: op.attrs[k] for k in ("begin", "end", "strides") if k in op.attrs}})
    return {x: dx}


def g_pad(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x = op.inputs[0]
    xs = b.shape(x)
    begin = [int(p[0]) for p in op.attrs.get("paddings", [[0, 0]] * len(xs))]
    dx = _grad_of(b, x)
    b.emit(f"{op.name}/grad", "StridedSliceD", [gys[0]], [dx],
           {"begin": begin, "end": [s + d for s, d in zip(begin, xs)], "strides": [1] * len(xs)})
    return {x: dx}


def g_gather(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    data, idx = op.inputs[0], op.inputs[1]
    axis = int(op.attrs.get("axis", 0))
    dd = _grad_of(b, data)
    if axis == 0 and len(b.shape(data)) == 2:
        # embedding table: dense gradient scattered by row
        b.emit(f"{op.name}/grad", "EmbeddingDenseGrad", [gys[0], idx], [dd],
               {"num_weights": b.shape(data)[0], "padding_idx": -1, "scale_grad_by_freq": False})
    else:
        b.emit(f"{op.name}/grad", "UnsortedSegmentSum", [gys[0], idx], [dd],
               {"axis": axis, "num_segments": b.shape(data)[axis]})
    return {data: dd}


def g_pool(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x = op.inputs[0]
    dx = _grad_of(b, x)
    attrs = {k: op.attrs[k] for k in ("ksize", "strides", "pads", "ceil_mode", "data_format") if k in op.attrs}
    if op.type == "MaxPool":
        b.emit(f"{op.name}/grad", "MaxPoolGrad", [x, op.outputs[0], gys[0]], [dx], attrs)
    else:
        b.emit(f"{op.name}/grad", "AvgPoolGrad", [gys[0]], [dx], {**attrs, "orig_input_shape": list(b.shape(x))})
    return {x: dx}


def g_select(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    cond, a, c = op.inputs
    gy = gys[0]
    zeros = b.like(f"{gy}/zeros", gy)
    b.emit(f"{op.name}/grad/zeros", "ZerosLike", [gy], [zeros])
    res = []
    for x, args, tag in ((a, [cond, gy, zeros], "x1"), (c, [cond, zeros, gy], "x2")):
        if x in needs:
            t = b.like(f"{gy}/select_{tag}", gy)
            b.emit(f"{op.name}/grad_{tag}", "Select", args, [t])
            res.append((x, _unbroadcast(b, t, x, f"{op.name}/grad_{tag}")))
    return res


def g_muls(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x = op.inputs[0]
    dx = _grad_of(b, x)
    b.emit(f"{op.name}/grad", "Muls", [gys[0]], [dx], {"value": op.attrs.get("value", 1.0)})
    return {x: dx}


def g_neg(b: _Builder, op: Op, gys: list, needs: set) -> dict:
    x = op.inputs[0]
    dx = _grad_of(b, x)
    b.emit(f"{op.name}/grad", "Neg", [gys[0]], [dx])
    return {x: dx}


# (inputs, outputs) a gradient rule reads; default (1, 1)
_ARITY = {"MatMulV2": (2, 1), "BatchMatMulV2": (2, 1), "Conv2D": (2, 1), "Conv2DTranspose": (2, 1),
          "Add": (2, 1), "Sub": (2, 1), "Mul": (2, 1), "RealDiv": (2, 1), "Pow": (2, 1), "Maximum": (2, 1),
          "Minimum": (2, 1), "PRelu": (2, 1), "LayerNorm": (2, 3), "BNTrainingUpdate": (7, 5),
          "Gather": (2, 1), "Select": (3, 1)}

_y_dy = lambda op, gy: [op.outputs[0], gy]  # noqa: E731  (CANN's *Grad(y, dy) argument order)
_dy_x = lambda op, gy: [gy, op.inputs[0]]  # noqa: E731

_RULES: dict[str, GradRule] = {
    "MatMulV2": g_matmul, "BatchMatMulV2": g_matmul,
    "Conv2D": partial(_conv_grads, transpose=False), "Conv2DTranspose": partial(_conv_grads, transpose=True),
    "Relu": _unary("ReluGrad", lambda op, gy: [gy, op.outputs[0]]),
    "Relu6": _unary("Relu6Grad", _dy_x),
    "Gelu": _unary("GeluGrad", lambda op, gy: [gy, op.inputs[0], op.outputs[0]]),
    "Sigmoid": _unary("SigmoidGrad", _y_dy), "Tanh": _unary("TanhGrad", _y_dy),
    "Sqrt": _unary("SqrtGrad", _y_dy), "Rsqrt": _unary("RsqrtGrad", _y_dy),
    "Reciprocal": _unary("ReciprocalGrad", _y_dy),
    "LeakyRelu": _unary("LeakyReluGrad", _dy_x), "Elu": _unary("EluGrad", _y_dy),
    "Softplus": _unary("SoftplusGrad", _dy_x), "HardSwish": _unary("HardSwishGrad", _dy_x),
    "HardSigmoid": _unary("HardSigmoidGrad", _dy_x), "ClipByValue": _unary("ClipByValueGrad", _dy_x),
    "Erf": _unary("ErfGrad", _dy_x), "Log": _unary("RealDiv", _dy_x), "Mish": _unary("MishGrad", _dy_x),
    "Selu": _unary("SeluGrad", _dy_x), "Softsign": _unary("SoftsignGrad", _dy_x),
    "Abs": _unary("AbsGrad", lambda op, gy: [op.inputs[0], gy]), "Sin": _unary("SinGrad", _dy_x),
    "Cos": _unary("CosGrad", _dy_x),
    "LRN": _unary("LRNGrad", lambda op, gy: [gy, op.inputs[0], op.outputs[0]]),
    "InstanceNorm": g_instance_norm, "GroupNorm": g_instance_norm,
    # a block rearrangement's gradient is the inverse rearrangement of dy (the same transpose work)
    "DepthToSpace": _unary("SpaceToDepth", lambda op, gy: [gy]),
    "SpaceToDepth": _unary("DepthToSpace", lambda op, gy: [gy]),
    "ResizeNearestNeighborV2": _unary("ResizeNearestNeighborV2Grad", lambda op, gy: [gy]),
    "ResizeBilinearV2": _unary("ResizeBilinearV2Grad", lambda op, gy: [gy]),
    "Exp": g_mul_scalar(True), "Neg": g_neg, "Muls": g_muls,
    "Add": g_binary, "Sub": g_binary, "Mul": g_binary, "RealDiv": g_binary, "Pow": g_binary,
    "Maximum": g_binary, "Minimum": g_binary, "PRelu": g_binary, "AddN": g_addn,
    "SoftmaxV2": g_softmax, "LogSoftmaxV2": g_softmax, "LayerNorm": g_layernorm,
    "BNTrainingUpdate": g_bn_update,
    "ReduceSumD": g_reduce, "ReduceMeanD": g_reduce,
    **{k: g_view for k in _VIEW_TYPES}, "Cast": g_cast, "Transpose": g_transpose,
    "BroadcastToD": g_broadcast, "Concat": g_concat, "SplitV": g_split, "StridedSliceD": g_slice,
    "Pad": g_pad, "Gather": g_gather, "MaxPool": g_pool, "AvgPool": g_pool, "Select": g_select,
}


# ---- optimizer ---------------------------------------------------------------------------------
def _adam(b: _Builder, grads: dict[str, list[str]]) -> None:
    params = [n for n, t in b.g.tensors.items() if t.kind == "param" and grads.get(n)]
    if not params:
        return
    scalars = {}
    for k in ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon"):
        scalars[k] = b.tensor(f"adam/{k}", (), b.g.compute_dtype, "ND", kind="const")
    for p in params:
        g = _sum(b, p, grads[p])
        assert g is not None
        m = b.like(f"{p}/adam_m", p, kind="param")
        v = b.like(f"{p}/adam_v", p, kind="param")
        if b.tensors[g].dtype != b.tensors[p].dtype:  # BN's fp32 statistics gradients
            cast = b.like(f"{g}/cast", p)
            b.emit(f"{p}/adam/cast_grad", "Cast", [g], [cast], {"dst_type": b.tensors[p].dtype})
            g = cast
        outs = [b.like(f"{p}/updated", p), b.like(f"{m}/updated", p), b.like(f"{v}/updated", p)]
        b.emit(f"{p}/adam", "ApplyAdamD",
               [p, m, v, scalars["beta1_power"], scalars["beta2_power"], scalars["lr"], scalars["beta1"],
                scalars["beta2"], scalars["epsilon"], g], outs, {"use_locking": False, "use_nesterov": False})
