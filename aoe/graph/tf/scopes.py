"""Name-scope fusion: Keras/TF layers that TensorFlow decomposes become the CANN operator they are.

Keras 3 does not use TensorFlow's fused kernels: ``BatchNormalization`` and ``LayerNormalization``
are ``moments`` (Mean, SquaredDifference, Mean) plus Rsqrt/Mul/Add, ``tf.nn.gelu`` is an Erfc (or
Tanh) formula, and the GradientTape differentiates each piece, so the backward pass is dozens of
small elementwise ops per layer. CANN's TensorFlow parser meets the same graphs and fuses them by
name scope ("scope fusion passes"); this module does the same:

- a scope ``S`` holding ``S/moments/mean`` is a normalisation: reducing every axis but the last is a
  batch norm (``BNTrainingReduce`` + ``BNTrainingUpdate``; its gradient scope ``gradient_tape/S/``
  becomes ``BNTrainingUpdateGrad`` + ``BNTrainingReduceGrad``), reducing a suffix of the axes is a
  layer norm (``LayerNorm`` / ``LayerNormGrad``);
- a scope ``.../Gelu`` holding Erf/Erfc (or Tanh) is ``Gelu`` (gradient: ``GeluGrad``);
- the gradient scope of a ``Softmax`` op is ``SoftmaxGrad``;
- a Keras ``LSTM`` / ``GRU`` layer (a ``While`` loop over its cell, whose variables are
  ``.../lstm_cell/...`` or ``.../gru_cell/...``) is CANN's ``DynamicRNN`` / ``DynamicGRUV2``, its
  gradient scope (the gradient ``While``) ``DynamicRNNGrad`` / ``DynamicGRUV2Grad``.

A region is fused only when its boundary is what the fused operator reads and writes (one input
activation, one output, the expected variables, gradient outputs of the right shapes); otherwise it
is left decomposed. ``AddN`` ops summing only the region's own gradient pieces join the region.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GRAD_PREFIX = "gradient_tape/"


@dataclass
class Region:
    """A fused layer: its TF ops, the tensors it reads and writes by role, its gradient outputs."""

    kind: str                                   # batchnorm | layernorm | gelu | softmax_grad | rnn
    scope: str
    ops: set[str]
    roles: dict[str, Any]                       # x, y, dy, gamma, beta, moving_mean, moving_variance (TF tensors/vars)
    grad_outputs: dict[str, str] = field(default_factory=dict)   # TF tensor name -> dx | dgamma | dbeta
    attrs: dict[str, Any] = field(default_factory=dict)
    has_grad: bool = False


def find_regions(ops: list[Any], live: set[str], var_of: dict[str, str], var_names: dict[str, str]) -> list[Region]:
    """Fusable regions among the live ops (``var_of``: resource tensor -> variable id -> ``var_names``)."""
    by_name = {op.name: op for op in ops if op.name in live}
    taken: set[str] = set()
    regions: list[Region] = []
    for op in ops:
        if op.name not in live:
            continue
        reg = None
        if op.type == "Mean" and op.name.endswith("/moments/mean"):
            reg = _norm_region(op, by_name, live, var_of, var_names)
        elif op.type == "Rsqrt" and op.name.endswith("/batchnorm/Rsqrt") and not op.name.startswith(GRAD_PREFIX):
            reg = _bn_infer_region(op, by_name, live)
        elif op.type in ("Erf", "Erfc", "Tanh") and _gelu_scope(op.name):
            reg = _gelu_region(op, by_name, live)
        elif op.type == "Softmax":
            reg = _softmax_grad_region(op, by_name, live)
        elif op.type in ("While", "StatelessWhile") and op.name.endswith("/while") \
                and not op.name.startswith(GRAD_PREFIX):
            reg = _rnn_region(op, by_name, live, var_of, var_names)
        if reg is not None and not (reg.ops & taken):
            taken |= reg.ops
            regions.append(reg)
    return regions


def _gelu_scope(name: str) -> str | None:
    scope = name.rsplit("/", 1)[0] if "/" in name else ""
    last = scope.rsplit("/", 1)[-1]
    return scope if last.startswith(("Gelu", "gelu")) else None


def _collect(by_name: dict[str, Any], scope: str) -> tuple[set[str], set[str]]:
    # placeholders (captured variable handles) live in the scope by name only: they are not its work
    fwd = {n for n, op in by_name.items() if n.startswith(scope + "/") and op.type != "Placeholder"}
    grad = {n for n, op in by_name.items() if n.startswith(GRAD_PREFIX + scope + "/") and op.type != "Placeholder"}
    return fwd, grad


def _absorb_addn(by_name: dict[str, Any], region: set[str]) -> set[str]:
    """AddN ops whose every input comes from the region join it (they sum the region's own pieces)."""
    changed = True
    while changed:
        changed = False
        for name, op in by_name.items():
            if name in region or op.type != "AddN":
                continue
            if op.inputs and all(i.op.name in region for i in op.inputs):
                region.add(name)
                changed = True
    return region


def _boundary(by_name: dict[str, Any], region: set[str], live: set[str]) -> tuple[list[Any], list[Any]]:
    ins: dict[str, Any] = {}
    outs: dict[str, Any] = {}
    for n in region:
        op = by_name[n]
        for t in op.inputs:
            if t.op.name not in region:
                ins[t.name] = t
        for t in op.outputs:
            if any(c.name in live and c.name not in region for c in t.consumers()):
                outs[t.name] = t
    return list(ins.values()), list(outs.values())


def _is_const(t: Any) -> bool:
    return t.op.type in ("Const", "Shape", "ShapeN", "Size", "Rank")


def _shape(t: Any) -> tuple[int, ...] | None:
    if t.shape.rank is None:
        return None
    return tuple(-1 if d is None else int(d) for d in t.shape.as_list())


def _depends_on(t: Any, target: str, region: set[str]) -> bool:
    seen: set[str] = set()
    stack = [t]
    while stack:
        cur = stack.pop()
        if cur.name == target:
            return True
        if cur.op.name not in region or cur.op.name in seen:
            continue
        seen.add(cur.op.name)
        stack.extend(cur.op.inputs)
    return False


def _grad_roles(by_name: dict[str, Any], region: set[str], grad: set[str], live: set[str], x: Any,
                outs: list[Any], allowed_small: tuple[int, ...] | None) -> dict[str, str] | None:
    """Gradient outputs by role: x's shape -> dx; the parameter shape -> dgamma (depends on x) / dbeta."""
    roles: dict[str, str] = {}
    for t in outs:
        if t.op.name not in grad:
            continue
        s = _shape(t)
        if s == _shape(x):
            roles[t.name] = "dx"
        elif allowed_small is not None and s is not None and _numel(s) == _numel(allowed_small):
            roles[t.name] = "dgamma" if _depends_on(t, x.name, region) else "dbeta"
        else:
            return None
    return roles


def _numel(s: tuple[int, ...]) -> int:
    n = 1
    for d in s:
        n *= d
    return n


def _dy(ins: list[Any], grad_ops: set[str], by_name: dict[str, Any], ref: Any, exclude: set[str]) -> Any | None:
    """The one incoming gradient: a non-constant tensor of ``ref``'s shape read by the gradient ops."""
    cands = []
    for t in ins:
        if t.name in exclude or _is_const(t) or t.dtype.is_integer or _shape(t) != _shape(ref):
            continue
        if any(c.name in grad_ops for c in t.consumers()):
            cands.append(t)
    return cands[0] if len(cands) == 1 else None


def _norm_region(mean_op: Any, by_name: dict[str, Any], live: set[str], var_of: dict[str, str],
                 var_names: dict[str, str]) -> Region | None:
    scope = mean_op.name[: -len("/moments/mean")]
    fwd, grad = _collect(by_name, scope)
    region = _absorb_addn(by_name, fwd | grad)
    grad |= region - fwd
    x = mean_op.inputs[0]
    xs, ms = _shape(x), _shape(mean_op.outputs[0])
    if xs is None or ms is None or len(xs) != len(ms) or x.op.name in region or -1 in xs:
        return None
    rank = len(xs)
    reduced = _mean_axes(mean_op, rank)
    if reduced is None:  # axes not a constant: the ones the shapes say are reduced
        reduced = [i for i in range(rank) if ms[i] == 1 and xs[i] != 1]
    if reduced == list(range(rank - 1)):
        kind = "batchnorm"
    elif reduced and reduced == list(range(reduced[0], rank)):
        kind = "layernorm"
    else:
        return None
    ins, outs = _boundary(by_name, region, live)
    # variables the scope reads, by their Keras names
    roles: dict[str, Any] = {"x": x}
    for n in fwd:
        op = by_name[n]
        if op.type == "ReadVariableOp":
            vid = var_of.get(op.inputs[0].name)
            if vid is None:
                continue
            base = var_names.get(vid, "").rsplit("/", 1)[-1].split(":")[0]
            for role in ("gamma", "beta", "moving_mean", "moving_variance"):
                if base == role:
                    roles[role] = vid
    # a batch norm without gamma (scale=False) or beta (center=False) has no such variable: the fused
    # operator takes ones / zeros there (what CANN's BNTrainingUpdate reads)
    need = ("moving_mean", "moving_variance") if kind == "batchnorm" else ("gamma", "beta")
    if kind == "layernorm" and any(r not in roles for r in need):
        roles.update(_affine_by_use(by_name, fwd, ins, x))
    if any(r not in roles for r in need):
        return None
    ys = [t for t in outs if t.op.name in fwd]
    if len(ys) != 1 or _shape(ys[0]) != xs:
        return None
    roles["y"] = ys[0]
    if any(t.op.type in ("Const",) for t in ins if t.name == x.name):
        return None
    reg = Region(kind, scope, region, roles)
    reg.attrs["epsilon"] = _epsilon(by_name, fwd)
    if kind == "layernorm":
        reg.attrs["begin_norm_axis"] = reduced[0]
    live_grad = {n for n in grad if n in live}
    if live_grad:
        dy = _dy(ins, live_grad, by_name, x, {x.name})
        c = xs[-1] if kind == "batchnorm" else _numel(xs[reduced[0]:])
        gr = _grad_roles(by_name, region, grad, live, x, outs, (c,))
        if dy is None or gr is None or "dx" not in gr.values():
            return None
        roles["dy"] = dy
        reg.grad_outputs = gr
        reg.has_grad = True
    return reg


def _mean_axes(mean_op: Any, rank: int) -> list[int] | None:
    """The constant reduction axes of a ``Mean`` (sorted, non-negative): a batch of 1 or a 1x1 feature
    map reduces an axis of size 1, which the shapes alone do not show."""
    if len(mean_op.inputs) < 2 or not _is_const(mean_op.inputs[1]):
        return None
    try:
        import tensorflow as tf

        v = tf.get_static_value(mean_op.inputs[1])
    except Exception:  # noqa: BLE001 - not evaluable statically: the caller falls back to the shapes
        return None
    if v is None:
        return None
    axes = sorted({int(a) % rank for a in v.reshape(-1).tolist()}) if rank else []
    return axes or None


def _bn_infer_region(rsqrt: Any, by_name: dict[str, Any], live: set[str]) -> Region | None:
    """``tf.nn.batch_normalization`` with given statistics (inference, or a frozen model): ``BNInfer``.

    ``inv = rsqrt(var + eps) [* gamma]; y = x * inv + (beta - mean * inv)`` (without beta: ``+ (-mean) * inv``),
    found by dataflow so that ``scale=False`` / ``center=False`` (no gamma / beta) are recognised too.
    """
    scope = rsqrt.name[: -len("/batchnorm/Rsqrt")]
    if scope + "/moments/mean" in by_name:
        return None  # training: the moments region handles it
    b = scope + "/batchnorm/"
    fwd, grad = _collect(by_name, scope)
    if any(n in live for n in grad):
        return None  # differentiated through fixed statistics: leave it decomposed
    region = {n for n in fwd if n.startswith(b)}
    add = rsqrt.inputs[0].op
    if add.type not in ("AddV2", "Add") or add.name not in region:
        return None
    var = add.inputs[0]
    cshape = _shape(rsqrt.outputs[0])

    def users(t: Any, kind: tuple[str, ...]) -> list[Any]:
        return [c for c in t.consumers() if c.name in region and c.type in kind]

    inv, gamma = rsqrt.outputs[0], None
    first = users(inv, ("Mul",))
    if len(first) == 1 and _shape(first[0].outputs[0]) == cshape:
        # the one user of rsqrt is the scaling by gamma (without gamma it has two: x * inv, mean * inv)
        gamma = next((t for t in first[0].inputs if t.name != inv.name), None)
        inv = first[0].outputs[0]
    muls = users(inv, ("Mul",))
    xmul = [m for m in muls if _shape(m.outputs[0]) != cshape]
    mmul = [m for m in muls if _shape(m.outputs[0]) == cshape]
    if len(xmul) != 1 or len(mmul) != 1:
        return None
    x = next((t for t in xmul[0].inputs if t.name != inv.name), None)
    mean = next((t for t in mmul[0].inputs if t.name != inv.name), None)
    subs = users(mmul[0].outputs[0], ("Sub",))
    beta, y = None, None
    if mean is not None and mean.op.type == "Neg" and mean.op.name in region:
        # center=False: y = x * inv + (-mean) * inv
        mean = mean.op.inputs[0]
        adds = users(mmul[0].outputs[0], ("AddV2", "Add"))
        if len(adds) == 1 and xmul[0].outputs[0].name in [t.name for t in adds[0].inputs]:
            y = adds[0].outputs[0]
    elif len(subs) == 1 and subs[0].inputs[1].name == mmul[0].outputs[0].name:
        sub = subs[0]
        if sub.inputs[0].name == xmul[0].outputs[0].name:
            y = sub.outputs[0]                                  # center=False: x * inv - mean * inv
        else:
            beta = sub.inputs[0]
            adds = users(sub.outputs[0], ("AddV2", "Add"))
            if len(adds) == 1 and xmul[0].outputs[0].name in [t.name for t in adds[0].inputs]:
                y = adds[0].outputs[0]
    if y is None or x is None or mean is None:
        return None
    _, outs = _boundary(by_name, region, live)
    if len(outs) != 1 or outs[0].name != y.name or _shape(x) != _shape(y):
        return None
    return Region("batchnorm_infer", scope, region,
                  {"x": x, "y": y, "gamma": gamma, "beta": beta, "mean": mean, "variance": var},
                  attrs={"epsilon": _epsilon(by_name, region)})


def _affine_by_use(by_name: dict[str, Any], fwd: set[str], ins: list[Any], x: Any) -> dict[str, Any]:
    """gamma / beta of a norm whose variables are constants (a frozen model): the one scaling, the one added."""
    out: dict[str, Any] = {}
    consts = [by_name[n].outputs[0] for n in sorted(fwd) if by_name[n].type == "Const"]
    for t in list(ins) + consts:
        if t.name == x.name or t.dtype.is_integer or (t.shape.num_elements() or 0) <= 1:
            continue
        cur = t
        op = None
        for _ in range(4):  # through the reshapes Keras puts around the parameters
            users = [c for c in cur.consumers() if c.name in fwd]
            if len(users) != 1:
                break
            op = users[0]
            if op.type not in ("Reshape", "Cast", "Identity", "ExpandDims"):
                break
            cur = op.outputs[0]
        if op is None:
            continue
        role = "gamma" if op.type == "Mul" else "beta" if op.type in ("AddV2", "Add", "Sub") else None
        if role and role not in out:
            out[role] = t
    return out if len(out) == 2 else {}


def _epsilon(by_name: dict[str, Any], fwd: set[str]) -> float:
    """The constant added to the variance before Rsqrt (Keras: 1e-3 for both norms by default)."""
    for n in fwd:
        op = by_name[n]
        if op.type == "Rsqrt":
            add = op.inputs[0].op
            if add.type in ("AddV2", "Add"):
                for t in add.inputs:
                    if t.op.type == "Const":
                        try:
                            import tensorflow as tf

                            v = tf.get_static_value(t)
                            if v is not None and getattr(v, "size", 0) == 1:
                                return float(v.reshape(-1)[0])
                        except Exception:  # noqa: BLE001, S110 - an unreadable constant: keep the default
                            pass
    return 1e-3


def _gelu_region(op: Any, by_name: dict[str, Any], live: set[str]) -> Region | None:
    scope = _gelu_scope(op.name)
    if scope is None:
        return None
    fwd, grad = _collect(by_name, scope)
    region = _absorb_addn(by_name, fwd | grad)
    grad |= region - fwd
    ins, outs = _boundary(by_name, region, live)
    xs_in = [t for t in ins if not _is_const(t) and t.op.name not in region and any(c.name in fwd for c in t.consumers())]
    if len(xs_in) != 1:
        return None
    x = xs_in[0]
    ys = [t for t in outs if t.op.name in fwd]
    if len(ys) != 1 or _shape(ys[0]) != _shape(x):
        return None
    approx = any(by_name[n].type == "Tanh" for n in fwd)
    reg = Region("gelu", scope, region, {"x": x, "y": ys[0]}, attrs={"approximate": "tanh" if approx else "none"})
    live_grad = {n for n in grad if n in live}
    if live_grad:
        dy = _dy(ins, live_grad, by_name, x, {x.name, ys[0].name})
        gr = _grad_roles(by_name, region, grad, live, x, outs, None)
        if dy is None or gr is None or not gr:
            return None
        reg.roles["dy"] = dy
        reg.grad_outputs = gr
        reg.has_grad = True
    return reg


def _softmax_grad_region(op: Any, by_name: dict[str, Any], live: set[str]) -> Region | None:
    """TF's Softmax gradient ``(dy - sum(dy * y, -1)) * y``: Mul, Sum, Sub, Mul around the output y."""
    y = op.outputs[0]
    for m1 in y.consumers():
        if m1.type != "Mul" or m1.name not in live or not m1.name.startswith(GRAD_PREFIX):
            continue
        dy = next((t for t in m1.inputs if t.name != y.name), None)
        sums = [c for c in m1.outputs[0].consumers() if c.type == "Sum" and c.name in live]
        if dy is None or len(sums) != 1:
            continue
        subs = [c for c in sums[0].outputs[0].consumers() if c.type == "Sub" and c.inputs[0].name == dy.name]
        if len(subs) != 1:
            continue
        m2s = [c for c in subs[0].outputs[0].consumers() if c.type == "Mul" and y.name in [t.name for t in c.inputs]]
        if len(m2s) != 1 or _shape(m2s[0].outputs[0]) != _shape(y):
            continue
        region = {m1.name, sums[0].name, subs[0].name, m2s[0].name}
        inner = [m1.outputs[0], sums[0].outputs[0], subs[0].outputs[0]]
        if any(c.name in live and c.name not in region for t in inner for c in t.consumers()):
            continue
        return Region("softmax_grad", op.name, region, {"y": y, "dy": dy}, {m2s[0].outputs[0].name: "dx"},
                      has_grad=True)
    return None


# ---- Keras LSTM / GRU: the time loop -------------------------------------------------------------
_RNN_VARS = ("kernel", "recurrent_kernel", "bias")


def _const_like(t: Any) -> bool:
    return _is_const(t) or t.op.type in ("Fill", "ZerosLike", "OnesLike")


def _absorb_plumbing(by_name: dict[str, Any], region: set[str], live: set[str]) -> set[str]:
    """Outside ops that only serve the loops (``zeros_like`` of loop outputs feeding the gradient loop)."""
    changed = True
    while changed:
        changed = False
        for name, op in by_name.items():
            if name in region:
                continue
            users = [c for t in op.outputs for c in t.consumers() if c.name in live]
            if not users or any(c.name not in region for c in users):
                continue
            if any(t.op.name in region or t.dtype.name == "variant" for t in op.inputs) \
                    or any(t.dtype.name == "variant" for t in op.outputs):
                region.add(name)
                changed = True
    return region


def _loop_var(t: Any, var_of: dict[str, str]) -> str | None:
    """The variable whose gradient a gradient-loop output accumulates (its initial value is
    ``zeros(VariableShape(variable))``), or None."""
    while t.op.type == "Identity" and t.op.inputs:
        t = t.op.inputs[0]
    op = t.op
    if op.type not in ("While", "StatelessWhile") or t.value_index >= len(op.inputs):
        return None
    init = op.inputs[t.value_index].op
    if init.type == "Fill" and init.inputs and init.inputs[0].op.type == "VariableShape":
        handle = init.inputs[0].op.inputs[0]
        while handle.op.type in ("While", "StatelessWhile", "Identity") and handle.name not in var_of:
            # a resource passed through the forward loop: the loop's input of the same index
            handle = handle.op.inputs[handle.value_index if handle.op.type != "Identity" else 0]
        return var_of.get(handle.name)
    return None


def _rnn_region(loop: Any, by_name: dict[str, Any], live: set[str], var_of: dict[str, str],
                var_names: dict[str, str]) -> Region | None:
    """A Keras LSTM / GRU layer: its time loop, the transposes around it and its gradient loop."""
    scope = loop.name[: -len("/while")]
    roles: dict[str, Any] = {}
    cell = None
    for t in loop.inputs:
        if t.dtype.name != "resource":
            continue
        vid = var_of.get(t.name)
        path = var_names.get(vid or "", "")
        parts = path.split(":")[0].split("/")
        kind = "lstm" if any(p.startswith("lstm_cell") for p in parts) else \
            "gru" if any(p.startswith("gru_cell") for p in parts) else None
        if kind is None or parts[-1] not in _RNN_VARS or (cell is not None and kind != cell):
            return None
        cell = kind
        roles[parts[-1]] = vid
    if cell is None or "kernel" not in roles or "recurrent_kernel" not in roles:
        return None
    fwd, grad = _collect(by_name, scope)
    region = _absorb_plumbing(by_name, fwd | grad, live)
    grad |= region - fwd
    ins, outs = _boundary(by_name, region, live)
    xs = [t for t in ins if t.dtype.is_floating and not _const_like(t) and t.shape.rank == 3
          and any(c.name in fwd for c in t.consumers())]
    if len(xs) != 1:
        return None  # an initial state given by the model, or a mask: left as it is
    x = xs[0]
    b, steps, _ = _shape(x) or (-1, -1, -1)
    outputs = [t for t in outs if t.op.name in fwd]
    seq = [t for t in outputs if t.shape.rank == 3]
    last = [t for t in outputs if t.shape.rank == 2]
    if len(seq) + len(last) != len(outputs) or len(seq) > 1 or len(last) > 1 or not outputs:
        return None
    hidden = int(_shape(outputs[0])[-1])
    if (seq and _shape(seq[0]) != (b, steps, hidden)) or (last and _shape(last[0]) != (b, hidden)):
        return None
    roles.update(x=x, outputs=outputs)
    reg = Region("rnn", scope, region, roles, attrs={"cell": cell, "hidden": hidden})
    live_grad = {n for n in grad if n in live}
    if not live_grad:
        return reg
    grads: dict[str, str] = {}
    for t in outs:
        if t.op.name not in grad:
            continue
        vid = _loop_var(t, var_of)
        role = next((f"d{k}" for k in _RNN_VARS if vid is not None and roles.get(k) == vid), None)
        if role is None and _shape(t) == _shape(x):
            role = "dx"
        if role is None:
            return None
        grads[t.name] = role
    for t in ins:
        if t.dtype.is_floating and not _const_like(t) and any(c.name in live_grad for c in t.consumers()):
            if seq and _shape(t) == _shape(seq[0]) and "dy_seq" not in roles:
                roles["dy_seq"] = t
            elif last and _shape(t) == _shape(last[0]) and "dy_last" not in roles:
                roles["dy_last"] = t
            elif t.name != x.name:
                return None
    if "dy_seq" not in roles and "dy_last" not in roles:
        return None
    reg.grad_outputs = grads
    reg.has_grad = True
    return reg
