"""Pattern fusion on the imported IR: exported GELU formulas become one ``Gelu`` operator.

Exporters spell GELU as a small elementwise formula: ``x*0.5*(1+erf(x/sqrt(2)))`` (exact) or
``0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3)))`` (GPT-2's approximation). Rather than matching one
operator order, a candidate region around each Erf/Tanh (elementwise ops fed only by one tensor ``x``
and scalar constants, with no outside users of its intermediate results) is evaluated with numpy on
sample points and fused when it equals GELU: any operand order or constant folding an exporter chose
is recognised, and nothing that merely looks similar is.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .ir import Op, unique_name

_ARITH = {"Add", "Sub", "Mul", "RealDiv", "Pow"}
_SAMPLES = np.linspace(-4.0, 4.0, 41)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


_REFERENCE = {"none": _gelu_erf(_SAMPLES), "tanh": _gelu_tanh(_SAMPLES)}


def _evaluate(ops: list[Op], region: list[int], x: str, out: str,
              value: Callable[[str], np.ndarray | None]) -> np.ndarray | None:
    env: dict[str, np.ndarray] = {x: _SAMPLES}
    for i in region:
        op = ops[i]
        args = []
        for t in op.inputs:
            v = env.get(t)
            if v is None:
                c = value(t)
                if c is None or c.size != 1:
                    return None
                v = np.float64(c.reshape(-1)[0])
            args.append(v)
        with np.errstate(all="ignore"):
            if op.type == "Erf":
                r = np.vectorize(math.erf)(args[0])
            elif op.type == "Tanh":
                r = np.tanh(args[0])
            elif op.type == "Add":
                r = args[0] + args[1]
            elif op.type == "Sub":
                r = args[0] - args[1]
            elif op.type == "Mul":
                r = args[0] * args[1]
            elif op.type == "RealDiv":
                r = args[0] / args[1]
            elif op.type == "Pow":
                r = np.power(args[0], args[1])
            else:
                return None
        env[op.outputs[0]] = np.asarray(r, dtype=np.float64)
    return env.get(out)


def fuse_gelu(ops: list[Op], value: Callable[[str], np.ndarray | None], kind: dict[str, str],
              shape: dict[str, tuple[int, ...]], outputs: set[str], op_names: set[str]) -> list[Op]:
    """Return ``ops`` with every Erf/Tanh GELU formula replaced by a single Gelu operator."""
    producer = {t: i for i, op in enumerate(ops) for t in op.outputs}
    consumers: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        for t in op.inputs:
            consumers.setdefault(t, []).append(i)

    def is_const(t: str) -> bool:
        return kind.get(t) == "const"

    removed: set[int] = set()
    new_at: dict[int, Op] = {}
    for i, anchor in enumerate(ops):
        if anchor.type not in ("Erf", "Tanh") or i in removed or len(anchor.inputs) != 1:
            continue
        region = {i}
        # backward: pull in single-use elementwise producers until one non-constant tensor remains
        leaves: set[str] = set()
        stack = [anchor.inputs[0]]
        while stack and len(leaves) <= 1:
            t = stack.pop()
            j = producer.get(t)
            if (j is not None and j not in removed and ops[j].type in _ARITH and len(consumers.get(t, [])) == 1
                    and t not in outputs):
                region.add(j)
                stack.extend(u for u in ops[j].inputs if not is_const(u))
            else:
                leaves.add(t)
        if len(leaves) != 1:
            continue
        x = next(iter(leaves))
        # forward: follow the single-use chain; side branches may only combine x and constants
        cur = anchor.outputs[0]
        best: tuple[set[int], str, str] | None = None
        while cur not in outputs:
            cons = consumers.get(cur, [])
            if len(cons) != 1 or cons[0] in removed or ops[cons[0]].type not in _ARITH:
                break
            c = cons[0]
            extra = []
            ok = True
            for u in ops[c].inputs:
                if u in (cur, x) or is_const(u):
                    continue
                j = producer.get(u)
                if (j is not None and j not in removed and ops[j].type in _ARITH and len(consumers.get(u, [])) == 1
                        and u not in outputs and all(w == x or is_const(w) for w in ops[j].inputs)):
                    extra.append(j)
                else:
                    ok = False
            if not ok:
                break
            region.add(c)
            region.update(extra)
            cur = ops[c].outputs[0]
            if shape.get(cur) != shape.get(x):
                continue
            got = _evaluate(ops, sorted(region), x, cur, value)
            if got is None:
                continue
            for approx, ref in _REFERENCE.items():
                if np.allclose(got, ref, atol=2e-4, rtol=0):
                    best = (set(region), cur, approx)
        if best is None:
            continue
        members, out, approx = best
        removed.update(members)
        name = unique_name(anchor.name, op_names, "/gelu")
        op_names.add(name)
        new_at[max(members)] = Op(name, "Gelu", [x], [out], {"approximate": approx,
                                                             "fused_names": [ops[i].name for i in sorted(members)]})
    if not removed:
        return ops
    result = []
    for i, op in enumerate(ops):
        if i in new_at:
            result.append(new_at[i])
        elif i not in removed:
            result.append(op)
    return result


def fuse_layernorm(ops: list[Op], value: Callable[[str], np.ndarray | None], kind: dict[str, str],
                   shape: dict[str, tuple[int, ...]], outputs: set[str], op_names: set[str]) -> list[Op]:
    """Replace the decomposed LayerNorm of pre-opset-17 exports by one ``LayerNorm`` operator.

    Pattern (operand order of commutative ops free): ``m = mean(x)``, ``d = x - m``,
    ``v = mean(d^2 | d*d)``, ``n = d / sqrt(v + eps)``, ``y = n * gamma + beta`` with both means over
    the same trailing axes and gamma/beta parameters of the normalised shape.
    """
    producer = {t: i for i, op in enumerate(ops) for t in op.outputs}
    consumers: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        for t in op.inputs:
            consumers.setdefault(t, []).append(i)

    def prod(t: str, *types: str) -> int | None:
        j = producer.get(t)
        return j if j is not None and ops[j].type in types else None

    def single(t: str) -> int | None:
        c = consumers.get(t, [])
        return c[0] if len(c) == 1 and t not in outputs else None

    def scalar(t: str) -> float | None:
        if kind.get(t) != "const":
            return None
        v = value(t)
        return float(v.reshape(-1)[0]) if v is not None and v.size == 1 else None

    removed: set[int] = set()
    new_at: dict[int, Op] = {}
    for i_sqrt, sq in enumerate(ops):
        if sq.type != "Sqrt" or i_sqrt in removed:
            continue
        i_add = prod(sq.inputs[0], "Add")
        if i_add is None or single(sq.inputs[0]) != i_sqrt:
            continue
        var, eps_t = ops[i_add].inputs if scalar(ops[i_add].inputs[1]) is not None else ops[i_add].inputs[::-1]
        eps = scalar(eps_t)
        i_var = prod(var, "ReduceMeanD")
        if eps is None or i_var is None or single(var) != i_add:
            continue
        sqd = ops[i_var].inputs[0]
        i_pow = prod(sqd, "Pow", "Mul")
        if i_pow is None or single(sqd) != i_var:
            continue
        p = ops[i_pow]
        if p.type == "Pow" and scalar(p.inputs[1]) != 2.0 or p.type == "Mul" and p.inputs[0] != p.inputs[1]:
            continue
        d = p.inputs[0]
        i_sub = prod(d, "Sub")
        if i_sub is None:
            continue
        x, mean = ops[i_sub].inputs
        i_mean = prod(mean, "ReduceMeanD")
        if i_mean is None or ops[i_mean].inputs[0] != x or single(mean) != i_sub:
            continue
        i_div = single(sq.outputs[0])
        if i_div is None or ops[i_div].type != "RealDiv" or ops[i_div].inputs != [d, sq.outputs[0]]:
            continue
        if sorted(consumers.get(d, [])) != sorted({i_pow, i_div}) or d in outputs:
            continue
        rank = len(shape[x])
        axes = ops[i_mean].attrs.get("axes")
        if axes != ops[i_var].attrs.get("axes") or not axes or axes != list(range(axes[0], rank)):
            continue
        if not (ops[i_mean].attrs.get("keep_dims") and ops[i_var].attrs.get("keep_dims")):
            continue
        k = axes[0]
        norm_shape = shape[x][k:]
        # the affine part: n * gamma + beta, both parameters of the normalised shape
        n = ops[i_div].outputs[0]
        i_mul = single(n)
        if i_mul is None or ops[i_mul].type != "Mul":
            continue
        gamma = next((t for t in ops[i_mul].inputs if t != n), None)
        i_badd = single(ops[i_mul].outputs[0])
        if gamma is None or kind.get(gamma) != "param" or shape[gamma] != norm_shape or i_badd is None \
                or ops[i_badd].type != "Add":
            continue
        beta = next((t for t in ops[i_badd].inputs if t != ops[i_mul].outputs[0]), None)
        if beta is None or kind.get(beta) != "param" or shape[beta] != norm_shape:
            continue
        out = ops[i_badd].outputs[0]
        if shape[out] != shape[x]:
            continue
        members = {i_mean, i_sub, i_pow, i_var, i_add, i_sqrt, i_div, i_mul, i_badd}
        if members & removed:
            continue
        removed.update(members)
        name = unique_name(ops[i_mean].name, op_names, "/layernorm")
        op_names.add(name)
        new_at[max(members)] = Op(name, "LayerNorm", [x, gamma, beta], [out],
                                  {"begin_norm_axis": k, "begin_params_axis": k, "epsilon": eps,
                                   "fused_names": [ops[i].name for i in sorted(members)]})
    if not removed:
        return ops
    return [new_at[i] if i in new_at else op for i, op in enumerate(ops) if i in new_at or i not in removed]
