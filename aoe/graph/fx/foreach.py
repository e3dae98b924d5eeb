"""``_foreach_*`` operators (the optimizers' multi-tensor steps) as one elementwise operator per tensor.

``torch.optim`` updates all parameters with list operators (``_foreach_mul``, ``_foreach_addcmul``,
``_foreach_lerp``, ...). CANN runs one kernel per tensor, so each list operator becomes, per element,
the elementwise CANN operators computing it (composites such as ``addcmul`` as their Mul/Add steps).
``optimizer.recognise_adam`` later folds a recognised Adam step into ``ApplyAdamD`` per parameter.
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
