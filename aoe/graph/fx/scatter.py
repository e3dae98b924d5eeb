"""Masks and writes into tensors: in-place dropout's mask, ``tril``/``triu``, scatters, slice writes.

- ``bernoulli`` (what ``nn.Dropout(inplace=True)`` becomes: a mask drawn, then multiplied in) ->
  ``DropOutGenMask`` (CANN's mask generator; the multiply converts as it is);
- ``tril`` / ``triu`` (GPT-2's causal mask) -> ``Tril`` / ``Triu`` with ``diagonal``;
- ``scatter`` / ``scatter_add`` / ``scatter_reduce`` -> ``ScatterElements`` (``axis``, ``reduction``);
- ``slice_scatter`` / ``select_scatter`` (a functionalised write into a slice, e.g. T5's
  ``_shift_right``) -> ``StridedSliceAssignD`` (``begin``/``end``/``strides`` on ``axis``).
"""
from __future__ import annotations

from typing import Any

from .aten import _axis, _tensor_arg, rule
from .convert import Converter, NotMapped, Val, packet


@rule("bernoulli")
def r_bernoulli(cv: Converter, node: Any, a: dict) -> Any:
    x = _tensor_arg(a, "self")
    p = a.get("p")
    if isinstance(p, Val):
        raise NotMapped("bernoulli with a tensor of probabilities")
    out = cv.out(node)
    # torch draws the keep mask with probability 1 - dropout p: that is keep_prob
    cv.emit(node.name, "DropOutGenMask", [cv.mat(x)], [out], {"keep_prob": float(p if p is not None else 0.5)})
    return Val(out)


@rule("tril", "triu")
def r_tril(cv: Converter, node: Any, a: dict) -> Any:
    x = _tensor_arg(a, "self")
    out = cv.out(node)
    cv.emit(node.name, "Tril" if packet(node.target) == "tril" else "Triu", [cv.mat(x)], [out],
            {"diagonal": int(a.get("diagonal") or 0)})
    return Val(out)


@rule("scatter", "scatter_add", "scatter_reduce")
def r_scatter(cv: Converter, node: Any, a: dict) -> Any:
    x, idx = _tensor_arg(a, "self"), _tensor_arg(a, "index")
    src = a.get("src", a.get("value"))
    name = packet(node.target)
    reduction = "add" if name == "scatter_add" else str(a.get("reduce") or "none")
    ins = [cv.mat(x), cv.mat(idx)] + ([cv.mat(src)] if isinstance(src, Val) else [])
    attrs: dict[str, Any] = {"axis": _axis(a["dim"], len(cv.shape(x))), "reduction": reduction}
    if isinstance(src, (int, float)):
        attrs["value"] = float(src)
    out = cv.out(node)
    cv.emit(node.name, "ScatterElements", ins, [out], attrs)
    return Val(out)


@rule("slice_scatter", "select_scatter")
def r_slice_scatter(cv: Converter, node: Any, a: dict) -> Any:
    x, src = _tensor_arg(a, "self"), _tensor_arg(a, "src")
    shape = cv.shape(x)
    axis = _axis(a.get("dim", 0), len(shape))
    n = shape[axis]
    if packet(node.target) == "select_scatter":
        begin = int(a["index"]) % max(n, 1)
        end, step = begin + 1, 1
    else:
        begin = 0 if a.get("start") is None else int(a["start"])
        end = n if a.get("end") is None else min(int(a["end"]), n)
        begin, end, step = begin % n if begin < 0 else begin, end % n if end < 0 else end, int(a.get("step") or 1)
    out = cv.out(node)
    cv.emit(node.name, "StridedSliceAssignD", [cv.mat(x), cv.mat(src)], [out],
            {"axis": axis, "begin": begin, "end": end, "strides": step})
    return Val(out)
