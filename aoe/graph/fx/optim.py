"""Optimizer steps in FX graphs -> CANN's apply operators, whatever torch.optim implementation traced them.

A compiled ``opt.step`` is an FX graph of elementwise ATen operators; CANN runs each parameter's
update as one fused apply kernel. Recognised here (besides the foreach Adam of ``foreach.py``):

- the single-tensor Adam / AdamW step (``foreach=False``, and the default on CPU tensors):
  ``p' = addcdiv(p or p * (1 - lr*wd), lerp(m, g), sqrt(v') ...)`` -> ``ApplyAdamD`` per parameter
  (AdamW's decay stays the ``Muls`` before it, as ``aoe.torch.tune`` emits it);
- SGD with momentum, single-tensor and foreach (``buf' = buf * momentum + g``, ``p' = p - lr * buf'``,
  and Nesterov's ``p' = p - lr * (g + momentum * buf')``) -> ``ApplyMomentum`` per parameter.

Fused steps (``fused=True``) never reach a dynamo backend (PyTorch disables tracing into them);
``aoe.torch.tune(..., optimizer=...)`` maps them by type. Steps not recognised (AMSGrad, maximize,
dampening, capturable ...) convert operator by operator; ``lerp``, ``addcmul``, ``addcdiv`` and ``fma``
have elementwise rules for that.
"""
from __future__ import annotations

import operator
from typing import Any

from .aten import binary, rule
from .convert import Converter, NotMapped, Val, packet

PASS = object()  # handle(): the node is not part of a recognised step


def _name(n: Any) -> str:
    return packet(n.target) if getattr(n, "op", "") == "call_function" else ""


def _shape(n: Any) -> tuple | None:
    v = getattr(n, "meta", {}).get("val")
    return tuple(v.shape) if hasattr(v, "shape") else None


def _ancestors(n: Any) -> set:
    """Every node ``n`` reads, directly or not (placeholders included), and ``n`` itself."""
    seen, todo = set(), [n]
    while todo:
        cur = todo.pop()
        if cur in seen or not hasattr(cur, "all_input_nodes"):
            continue
        seen.add(cur)
        todo.extend(cur.all_input_nodes)
    return seen


class Step:
    """One apply operator: its CANN type, input nodes (values read when emitted), attributes, outputs' nodes."""

    def __init__(self, op_type: str, ins: list, attrs: dict, provides: list) -> None:
        self.op_type, self.ins, self.attrs, self.provides = op_type, ins, attrs, provides


class Plan:
    """Recognised optimizer steps of one graph: which nodes they replace and where each is emitted."""

    def __init__(self, first: Any = None) -> None:
        self.first = first                      # the foreach Adam plan (foreach.AdamPlan) or None
        self.skip: set[str] = set()
        self.emit_at: dict[str, list[Step]] = {}
        self.provided: dict[str, Any] = {}      # node name -> (Step, output index) or a tuple of them
        self.scalars: list[str] | None = None

    def __bool__(self) -> bool:
        return self.first is not None or bool(self.emit_at)

    def handle(self, cv: Converter, node: Any) -> Any:
        """The node's value when a recognised step owns it, else PASS."""
        if self.first is not None:
            if node.name in self.first.skip:
                val = node.meta.get("val")
                return tuple(None for _ in val) if isinstance(val, (list, tuple)) else None
            if node is self.first.update:
                from .foreach import emit_adam

                return emit_adam(cv, self.first)
        for step in self.emit_at.get(node.name, ()):
            self._emit(cv, node, step)
        if node.name in self.provided:
            return self.provided[node.name]()
        if node.name in self.skip:
            val = node.meta.get("val")
            return tuple(None for _ in val) if isinstance(val, (list, tuple)) else None
        return PASS

    def _emit(self, cv: Converter, node: Any, step: Step) -> None:
        vals = []
        for x in step.ins:
            v = x if isinstance(x, str) else cv.env.get(x.name)
            if isinstance(v, str):
                vals.append(v)
            elif isinstance(v, Val):
                vals.append(cv.mat(v))
            else:
                raise NotMapped(f"{step.op_type} of a value that is not a tensor")
        outs = [cv.like(f"{vals[k]}/updated", vals[k]) for k in step.attrs.pop("_outs")]
        cv.emit(f"{node.name}/{step.op_type.lower()}", step.op_type, vals, outs, step.attrs)
        step.outs = [Val(o) for o in outs]  # type: ignore[attr-defined]

    def scalar_names(self, cv: Converter, keys: tuple[str, ...], tag: str) -> list[str]:
        return [cv.new_tensor(f"{tag}/{k}", (), cv.compute_dtype, kind="const") for k in keys]


_ADAM_SCALARS = ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon")


def _provide(plan: Plan, node: Any, step: Step, k: int) -> None:
    # (None when the node comes before the step could be emitted: only state write-backs read it then)
    plan.provided[node.name] = lambda: step.outs[k] if hasattr(step, "outs") else None  # type: ignore[attr-defined]


def _emit_point(order: dict, owned: set, after: list) -> Any:
    """The first owned node that comes after every node in ``after`` (their values are needed)."""
    floor = max((order.get(a, -1) for a in after), default=-1)
    cands = [n for n in owned if order[n] > floor]
    return min(cands, key=lambda n: order[n]) if cands else None


def _single_adam(nodes: list, order: dict, plan: Plan, cv_scalars: list) -> None:
    for upd in (n for n in nodes if _name(n) == "addcdiv" and len(n.args) >= 3):
        var, m_new, denom = upd.args[0], upd.args[1], upd.args[2]
        if _name(m_new) != "lerp" or len(m_new.args) < 2:
            continue
        m, g = m_new.args[0], m_new.args[1]
        p = var if getattr(var, "op", "") == "placeholder" else (
            var.args[0] if _name(var) == "mul" and getattr(var.args[0], "op", "") == "placeholder" else None)
        shape = _shape(upd)
        if p is None or getattr(m, "op", "") != "placeholder" or not hasattr(g, "op") or shape is None:
            continue
        chain = _ancestors(denom)
        grad_side = _ancestors(g)   # the gradient itself (with Adam's L2 term: g + wd * p)
        vs = [n for n in chain if n.op == "placeholder" and _shape(n) == shape and n not in (p, m)
              and n not in grad_side]
        sq = [n for n in chain if _name(n) == "sqrt" and _shape(n) == shape]
        if len(vs) != 1 or len(sq) != 1 or vs[0] not in _ancestors(sq[0].args[0]):
            continue  # AMSGrad (two second moments) or another variant: converted op by op
        v, v_new = vs[0], sq[0].args[0]
        keep = _ancestors(g) | _ancestors(var) - {upd}
        owned = {n for n in _ancestors(upd) if n.op == "call_function" and n not in keep}
        if var is not p:
            owned.discard(var)
        at = _emit_point(order, owned, [g, var])
        if at is None:
            continue
        ins = [var, m, v, *cv_scalars, g]
        step = Step("ApplyAdamD", ins, {"use_locking": False, "use_nesterov": False, "_outs": [0, 1, 2]}, [])
        plan.emit_at.setdefault(at.name, []).append(step)
        plan.skip |= {n.name for n in owned}
        for node, k in ((upd, 0), (m_new, 1), (v_new, 2)):
            _provide(plan, node, step, k)


def _momentum_parts(upd: Any) -> tuple | None:
    """(param, buf, grad, buf_new, extra nodes, nesterov) of ``p' = p - lr * (buf*momentum + g)`` forms."""
    alpha = upd.kwargs.get("alpha", upd.args[2] if len(upd.args) > 2 else None)
    if not isinstance(alpha, (int, float)) or alpha >= 0 or len(upd.args) < 2:
        return None
    p, x = upd.args[0], upd.args[1]
    nesterov, extra = False, []
    if (_name(x) == "add" and len(x.args) > 1 and _name(x.args[0]) != "mul" and _name(x.args[1]) == "add"
            and _name(x.args[1].args[0]) == "mul"):   # Nesterov: g + momentum * buf'
        extra, x, nesterov = [x], x.args[1], True
    if _name(x) != "add" or len(x.args) < 2 or x.kwargs.get("alpha", 1) != 1 or _name(x.args[0]) != "mul":
        return None
    mul = x.args[0]
    buf, mom = mul.args[0], mul.args[1] if len(mul.args) > 1 else None
    if getattr(buf, "op", "") != "placeholder" or getattr(p, "op", "") != "placeholder" or \
            not isinstance(mom, (int, float)) or _shape(buf) != _shape(p):
        return None
    return p, buf, x.args[1], x, [mul, *extra], nesterov


def _single_momentum(nodes: list, order: dict, plan: Plan, scalars: list) -> None:
    for upd in (n for n in nodes if _name(n) == "add" and n.name not in plan.skip):
        parts = _momentum_parts(upd)
        if parts is None:
            continue
        p, buf, g, buf_new, extra, nesterov = parts
        owned = {upd, buf_new, *extra}
        at = _emit_point(order, owned, [g])
        if at is None:
            continue
        step = Step("ApplyMomentum", [p, buf, scalars[0], g, scalars[1]],
                    {"use_nesterov": nesterov, "use_locking": False, "_outs": [0, 1]}, [])
        plan.emit_at.setdefault(at.name, []).append(step)
        plan.skip |= {n.name for n in owned}
        _provide(plan, upd, step, 0)
        _provide(plan, buf_new, step, 1)


def _items(arg: Any) -> list | None:
    return list(arg) if isinstance(arg, (list, tuple)) else None


def _source(items: list) -> Any:
    srcs = {a.args[0] for a in items if getattr(a, "target", None) is operator.getitem}
    ok = len(srcs) == 1 and all(getattr(a, "target", None) is operator.getitem for a in items)
    return srcs.pop() if ok else None


def _foreach_momentum(nodes: list, order: dict, plan: Plan, scalars: list) -> None:
    for upd in (n for n in nodes if _name(n) == "_foreach_add" and n.name not in plan.skip):
        alpha = upd.kwargs.get("alpha")
        params, news = _items(upd.args[0]), _items(upd.args[1]) if len(upd.args) > 1 else None
        if not isinstance(alpha, (int, float)) or alpha >= 0 or not params or not news:
            continue
        add = _source(news)
        if add is None or _name(add) != "_foreach_add" or add.kwargs.get("alpha", 1) != 1:
            continue
        mul = _source(_items(add.args[0]) or [])
        grads = _items(add.args[1]) if len(add.args) > 1 else None
        if mul is None or _name(mul) != "_foreach_mul" or not grads or not isinstance(mul.args[1], (int, float)):
            continue
        bufs = _items(mul.args[0])
        if not bufs or not (len(params) == len(bufs) == len(grads)) or \
                any(getattr(x, "op", "") != "placeholder" for x in params + bufs):
            continue
        at = _emit_point(order, {mul, add, upd}, grads)
        if at is None:
            continue
        steps = [Step("ApplyMomentum", [p, b, scalars[0], g, scalars[1]],
                      {"use_nesterov": False, "use_locking": False, "_outs": [0, 1]}, [])
                 for p, b, g in zip(params, bufs, grads)]
        plan.emit_at.setdefault(at.name, []).extend(steps)
        plan.skip |= {mul.name, add.name, upd.name}
        plan.provided[upd.name] = lambda s=steps: tuple(x.outs[0] for x in s)  # type: ignore[attr-defined]
        plan.provided[add.name] = lambda s=steps: tuple(x.outs[1] for x in s)  # type: ignore[attr-defined]


def recognise(gm: Any, cv: Converter) -> Plan | None:
    """The optimizer steps of ``gm`` that become CANN apply operators (None: there are none)."""
    from .foreach import recognise_adam

    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    plan = Plan(recognise_adam(gm))
    names = {_name(n) for n in nodes}
    if plan.first is None and "addcdiv" in names and "lerp" in names:
        adam = [cv.new_tensor(f"adam/{k}", (), cv.compute_dtype, kind="const") for k in _ADAM_SCALARS]
        _single_adam(nodes, {n: i for i, n in enumerate(gm.graph.nodes)}, plan, adam)
    if "add" in names or "_foreach_add" in names:
        order = {n: i for i, n in enumerate(gm.graph.nodes)}
        mom = [cv.new_tensor(f"momentum/{k}", (), cv.compute_dtype, kind="const") for k in ("lr", "momentum")]
        _single_momentum(nodes, order, plan, mom)
        _foreach_momentum(nodes, order, plan, mom)
    return plan if plan else None


# ---- elementwise forms of the steps not recognised -------------------------------------------------
def _scaled(cv: Converter, node: Any, t: Val, value: Any, tag: str) -> Val:
    if isinstance(value, Val):
        out = cv.like(f"{node.name}/{tag}", t.name)
        cv.emit(f"{node.name}/{tag}", "Mul", [t.name, cv.mat(value)], [out])
        return Val(out)
    if not isinstance(value, (int, float)) or value == 1:
        return t
    out = cv.like(f"{node.name}/{tag}", t.name)
    cv.emit(f"{node.name}/{tag}", "Muls", [t.name], [out], {"value": float(value)})
    return Val(out)


@rule("addcmul", "addcdiv")
def r_addc(cv: Converter, node: Any, a: dict) -> Any:
    x, t1, t2 = a.get("self"), a.get("tensor1"), a.get("tensor2")
    if not all(isinstance(v, Val) for v in (x, t1, t2)):
        raise NotMapped("addcmul/addcdiv of values that are not tensors")
    kind = "Mul" if packet(node.target) == "addcmul" else "RealDiv"
    prod = cv.like(f"{node.name}/{kind.lower()}", cv.mat(t1), cv.static_shape(node.meta["val"].shape, node.name))
    cv.emit(f"{node.name}/{kind.lower()}", kind, [cv.mat(t1), cv.mat(t2)], [prod])
    return binary(cv, node, "Add", x, _scaled(cv, node, Val(prod), a.get("value", 1), "value"))


@rule("lerp")
def r_lerp(cv: Converter, node: Any, a: dict) -> Any:
    x, end = a.get("self"), a.get("end")
    if not isinstance(x, Val) or not isinstance(end, Val):
        raise NotMapped("lerp of values that are not tensors")
    diff = cv.like(f"{node.name}/diff", cv.mat(x))
    cv.emit(f"{node.name}/diff", "Sub", [cv.mat(end), cv.mat(x)], [diff])
    return binary(cv, node, "Add", x, _scaled(cv, node, Val(diff), a.get("weight"), "weight"))


@rule("fma")
def r_fma(cv: Converter, node: Any, a: dict) -> Any:
    # prims.fma(a, b, c) = a * b + c
    x, y, z = a.get("a"), a.get("b"), a.get("c")
    if not isinstance(x, Val):
        raise NotMapped("fma of a first operand that is not a tensor")
    return binary(cv, node, "Add", _scaled(cv, node, x, y, "mul"), z)
