"""``_foreach_*`` operators (the optimizers' multi-tensor steps) as one elementwise operator per tensor.

``torch.optim`` updates all parameters with list operators (``_foreach_mul``, ``_foreach_addcmul``,
``_foreach_lerp``, ...). CANN runs one kernel per tensor, so each list operator becomes, per element,
the elementwise CANN operators computing it (composites such as ``addcmul`` as their Mul/Add steps).
A recognised Adam step (``recognise_adam``: the foreach form torch.optim.Adam compiles to) becomes
CANN's fused ``ApplyAdamD`` per parameter instead, as the graph compiler fuses it.
"""
from __future__ import annotations

from typing import Any

from .aten import _BINARY, _UNARY, binary, rule
from .convert import Converter, NotMapped, Val

_LISTS = ("self", "other", "tensor1", "tensor2", "tensors1", "weights", "scalars", "exponent", "src", "weight",
          "scalar")


def _elem(v: Any, i: int) -> Any:
    if isinstance(v, (list, tuple)):
        return v[i] if i < len(v) else None
    return v


def _scaled(cv: Converter, node: Any, t: Val, value: Any, tag: str) -> Val:
    if not isinstance(value, (int, float)) or value == 1:
        if isinstance(value, Val):
            out = cv.like(f"{node.name}/{tag}", t.name)
            cv.emit(f"{node.name}/{tag}", "Mul", [t.name, cv.mat(value)], [out])
            return Val(out)
        return t
    out = cv.like(f"{node.name}/{tag}", t.name)
    cv.emit(f"{node.name}/{tag}", "Muls", [t.name], [out], {"value": float(value)})
    return Val(out)


def _step(cv: Converter, node: Any, base: str, a: dict, i: int) -> Any:
    e = {k: _elem(v, i) for k, v in a.items()}
    x = e.get("self")
    if base in ("copy",):
        return e.get("src")
    if base == "zero":
        return cv.const(node, i)
    if base in _UNARY:
        out = cv.out(node, i)
        cv.emit(f"{node.name}/{i}", _UNARY[base], [cv.mat(x)], [out])
        return Val(out)
    if base in ("addcmul", "addcdiv"):
        t1, t2 = e["tensor1"], e["tensor2"]
        prod = cv.like(f"{node.name}/{i}/{base}", cv.mat(t1))
        cv.emit(f"{node.name}/{i}/{base}", "Mul" if base == "addcmul" else "RealDiv", [cv.mat(t1), cv.mat(t2)], [prod])
        scaled = _scaled(cv, node, Val(prod), e.get("value", e.get("scalars", e.get("scalar"))), f"{i}/value")
        return binary(cv, node, "Add", x, scaled)
    if base == "lerp":
        end, w = e.get("tensors1", e.get("other")), e.get("weight", e.get("weights"))
        diff = cv.like(f"{node.name}/{i}/lerp_diff", cv.mat(x))
        cv.emit(f"{node.name}/{i}/lerp_diff", "Sub", [cv.mat(end), cv.mat(x)], [diff])
        return binary(cv, node, "Add", x, _scaled(cv, node, Val(diff), w, f"{i}/lerp_weight"))
    if base in _BINARY:
        y = e.get("other", e.get("scalar", e.get("scalars", e.get("exponent"))))
        if base == "pow" and not isinstance(x, Val):
            return binary(cv, node, "Pow", x, y)
        return binary(cv, node, _BINARY[base], x, y, e.get("alpha"))
    raise NotMapped(f"no elementwise mapping for _foreach_{base}")


@rule("_foreach")
def r_foreach(cv: Converter, node: Any, a: dict) -> Any:
    base = node.target.__name__.split(".")[0][len("_foreach_"):].rstrip("_")
    val = node.meta.get("val")
    if not isinstance(val, (list, tuple)):
        raise NotMapped("a _foreach operator without a list result")
    outs = []
    for i in range(len(val)):
        cv.elem = i
        try:
            outs.append(_step(cv, node, base, a, i))
        finally:
            cv.elem = None
    return tuple(outs)


# ---- Adam ------------------------------------------------------------------------------------------
class AdamPlan:
    """A recognised multi-tensor Adam step: parameter, moments and gradient per tensor, and its nodes."""

    def __init__(self, update: Any, m_node: Any, v_node: Any, params: list, ms: list, vs: list, grads: list,
                 skip: set[str]) -> None:
        self.update, self.m_node, self.v_node = update, m_node, v_node
        self.params, self.ms, self.vs, self.grads = params, ms, vs, grads
        self.skip = skip


def _list_of(arg: Any) -> list | None:
    return list(arg) if isinstance(arg, (list, tuple)) else None


def _producer(items: list) -> Any:
    """The multi-output node a list of ``getitem`` nodes reads, if they all read the same one."""
    import operator

    srcs = {a.args[0] for a in items if getattr(a, "target", None) is operator.getitem}
    return srcs.pop() if len(srcs) == 1 and all(getattr(a, "target", None) is operator.getitem for a in items) else None


def recognise_adam(gm: Any) -> AdamPlan | None:
    """torch.optim.Adam's foreach step in an FX graph -> the tensors of one ApplyAdamD per parameter.

    The step's signature: ``params = addcdiv(params, m', denom)`` with ``m' = lerp(m, g)`` (or its
    ``addcmul`` form) and ``v' = addcmul(v * beta2, g, g)``; every other ``_foreach_*`` operator of the
    graph (step counts, bias corrections, the denominator) is part of that update.
    """
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    name = lambda n: getattr(n.target, "__name__", "")  # noqa: E731
    for upd in (n for n in nodes if name(n).startswith("_foreach_addcdiv")):
        params, m_new = _list_of(upd.args[0]), _list_of(upd.args[1])
        decay = _producer(params or [])
        if decay is not None and not (name(decay).startswith("_foreach_mul") and all(
                getattr(p, "op", "") == "placeholder" for p in _list_of(decay.args[0]) or [None])):
            decay = None
        # AdamW: the parameters decayed first (p * (1 - lr * wd)), a Muls per parameter kept before ApplyAdamD
        if not params or not m_new or (decay is None and any(getattr(p, "op", "") != "placeholder" for p in params)):
            continue
        m_node = _producer(m_new)
        if m_node is None or not name(m_node).startswith(("_foreach_lerp", "_foreach_addcmul")):
            continue
        ms = _list_of(m_node.args[0])
        v_node = next((n for n in nodes if name(n).startswith("_foreach_addcmul") and n is not m_node
                       and len(n.args) > 2 and list(n.args[1]) == list(n.args[2])), None)
        if v_node is None or ms is None:
            continue
        grads = _list_of(v_node.args[1])
        mul = _producer(_list_of(v_node.args[0]) or [])
        vs = _list_of(mul.args[0]) if mul is not None and name(mul).startswith("_foreach_mul") else None
        if vs is None or not grads or not (len(params) == len(ms) == len(vs) == len(grads)):
            continue
        skip = {n.name for n in nodes if name(n).startswith("_foreach_") and n is not upd and n is not decay}
        return AdamPlan(upd, m_node, v_node, params, ms, vs, grads, skip)
    return None


def emit_adam(cv: Converter, plan: AdamPlan) -> tuple:
    """One ApplyAdamD per parameter at the update node; the moments' nodes read their outputs."""
    import operator

    scalars = [cv.new_tensor(f"adam/{k}", (), cv.compute_dtype, kind="const")
               for k in ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon")]
    news: list[tuple[Val, Val, Val]] = []
    for i, (p, m, v, g) in enumerate(zip(plan.params, plan.ms, plan.vs, plan.grads)):
        pv, mv, vv, gv = (cv.env.get(x.name) for x in (p, m, v, g))
        if not all(isinstance(x, Val) for x in (pv, mv, vv, gv)):
            raise NotMapped("Adam step on values that are not tensors")
        outs = [cv.like(f"{t.name}/updated", t.name) for t in (pv, mv, vv)]
        cv.emit(f"{plan.update.name}/{i}", "ApplyAdamD", [pv.name, mv.name, vv.name, *scalars, cv.mat(gv)], outs,
                {"use_locking": False, "use_nesterov": False})
        news.append(tuple(Val(o) for o in outs))  # type: ignore[arg-type]
    for node, k in ((plan.m_node, 1), (plan.v_node, 2)):
        cv.env[node.name] = tuple(n[k] for n in news)
        for u in node.users:
            if u.target is operator.getitem:
                cv.env[u.name] = news[u.args[1]][k]
    return tuple(n[0] for n in news)
