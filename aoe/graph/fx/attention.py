"""Fused scaled-dot-product attention (``torch.nn.functional.scaled_dot_product_attention``) unfused.

On CPU PyTorch runs attention as one flash-attention kernel and its backward as another. The Ascend
graph compiler without a fused attention kernel runs the textbook form, which is what is emitted:
forward ``BatchMatMulV2(q, k^T)`` -> ``Muls(scale)`` -> ``Add(mask)`` -> ``SoftmaxV2`` (which also keeps
the log-sum-exp the backward reads) -> ``BatchMatMulV2(p, v)``; backward recomputes the probabilities
(as flash attention does), then ``dV = p^T dO``, ``dP = dO v^T``, ``SoftmaxGrad``, ``dQ = dS k``,
``dK = dS^T q``.
"""
from __future__ import annotations

import math
from typing import Any

from .aten import _tensor_arg, rule
from .convert import Converter, NotMapped, Val


def _probs(cv: Converter, node: Any, q: str, k: str, a: dict, lse: str | None) -> str:
    qs, ks = cv.shape(q), cv.shape(k)
    if len(qs) != 4 or len(ks) != 4:
        raise NotMapped("attention on tensors that are not [batch, heads, seq, dim]")
    scores_shape = qs[:-1] + (ks[-2],)
    dt = cv.dtype(q)
    s = cv.new_tensor(f"{node.name}/scores", scores_shape, dt)
    cv.emit(f"{node.name}/qk", "BatchMatMulV2", [q, k], [s], {"transpose_x1": False, "transpose_x2": True,
                                                               "has_bias": False})
    scale = a.get("scale")
    scale = float(scale) if isinstance(scale, (int, float)) else 1.0 / math.sqrt(qs[-1])
    scaled = cv.new_tensor(f"{node.name}/scaled", scores_shape, dt)
    cv.emit(f"{node.name}/scale", "Muls", [s], [scaled], {"value": scale})
    mask = a.get("attn_mask")
    if isinstance(mask, Val) or a.get("is_causal"):
        if isinstance(mask, Val):
            m = cv.mat(mask)
        else:  # is_causal: the lower-triangular mask is a constant of the compiled graph
            m = cv.new_tensor(f"{node.name}/causal_mask", (qs[-2], ks[-2]), dt, kind="const")
        masked = cv.new_tensor(f"{node.name}/masked", scores_shape, dt)
        cv.emit(f"{node.name}/mask", "Add", [scaled, m], [masked])
        scaled = masked
    p = cv.new_tensor(f"{node.name}/probs", scores_shape, dt)
    cv.emit(f"{node.name}/softmax", "SoftmaxV2", [scaled], [p] + ([lse] if lse else []), {"axes": [3]})
    return p


@rule("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
      "_scaled_dot_product_efficient_attention", "_scaled_dot_product_attention_math")
def r_sdpa(cv: Converter, node: Any, a: dict) -> Any:
    if float(a.get("dropout_p") or 0.0) != 0.0:
        raise NotMapped("attention with dropout")
    if "attn_bias" in a and isinstance(a.get("attn_bias"), Val):
        a = {**a, "attn_mask": a["attn_bias"]}
    q, k, v = (cv.mat(_tensor_arg(a, n)) for n in ("query", "key", "value"))
    vals = node.meta["val"]
    outs = [cv.out(node, i) if hasattr(x, "shape") else None for i, x in enumerate(vals)]
    p = _probs(cv, node, q, k, a, outs[1] if len(outs) > 1 else None)
    cv.emit(f"{node.name}/pv", "BatchMatMulV2", [p, v], [outs[0]], {"transpose_x1": False, "transpose_x2": False,
                                                                    "has_bias": False})
    rest = [cv.const(node, i) if o and i > 1 else (Val(o) if o else None) for i, o in enumerate(outs)]
    return tuple(rest)


@rule("_scaled_dot_product_flash_attention_for_cpu_backward", "_scaled_dot_product_flash_attention_backward",
      "_scaled_dot_product_efficient_attention_backward")
def r_sdpa_bw(cv: Converter, node: Any, a: dict) -> Any:
    if float(a.get("dropout_p") or 0.0) != 0.0:
        raise NotMapped("attention with dropout")
    dout, q, k, v = (cv.mat(_tensor_arg(a, n)) for n in ("grad_out", "query", "key", "value"))
    p = _probs(cv, node, q, k, a, None)
    dq, dk, dv = (cv.out(node, i) for i in range(3))
    mm = {"has_bias": False}
    cv.emit(f"{node.name}/grad_value", "BatchMatMulV2", [p, dout], [dv], {**mm, "transpose_x1": True, "transpose_x2": False})
    dp = cv.like(f"{node.name}/grad_probs", p)
    cv.emit(f"{node.name}/grad_probs", "BatchMatMulV2", [dout, v], [dp], {**mm, "transpose_x1": False, "transpose_x2": True})
    ds = cv.like(f"{node.name}/grad_scores", p)
    cv.emit(f"{node.name}/softmax_grad", "SoftmaxGrad", [p, dp], [ds], {"axes": [3]})
    scale = a.get("scale")
    scale = float(scale) if isinstance(scale, (int, float)) else 1.0 / math.sqrt(cv.shape(q)[-1])
    dss = cv.like(f"{node.name}/grad_scores_scaled", p)
    cv.emit(f"{node.name}/grad_scale", "Muls", [ds], [dss], {"value": scale})
    cv.emit(f"{node.name}/grad_query", "BatchMatMulV2", [dss, k], [dq], {**mm, "transpose_x1": False, "transpose_x2": False})
    cv.emit(f"{node.name}/grad_key", "BatchMatMulV2", [dss, q], [dk], {**mm, "transpose_x1": True, "transpose_x2": False})
    return (Val(dq), Val(dk), Val(dv))
