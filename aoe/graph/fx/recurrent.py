"""aoe's recurrent custom operators (``aoe.torch.recurrent``) -> CANN's DynamicRNN / DynamicGRUV2 and gradients.

Inputs, outputs and attributes as CANN's op proto (``rnn.h``) and ``aoe/ops/README.md`` list them; the
optional inputs aoe does not use (seq_length, peephole weights, mask) are left out, so the positions
after the last used input are not CANN's.
"""
from __future__ import annotations

from typing import Any

from .aten import rule
from .convert import Converter, NotMapped, Val


def _attrs(cv: Converter, reverse: bool, extra: dict[str, Any]) -> dict[str, Any]:
    return {"direction": "REDIRECTIONAL" if reverse else "UNIDIRECTIONAL", "cell_depth": 1, "keep_prob": 1.0,
            "cell_clip": -1.0, "num_proj": 0, "time_major": True, "activation": "tanh",
            "is_training": bool(cv.training), **extra}


def _ins(cv: Converter, a: dict, names: tuple[str, ...]) -> list[str]:
    vals = [a.get(n) for n in names]
    if not all(isinstance(v, Val) for v in vals):
        raise NotMapped("a recurrent operator with an input that is not a tensor")
    return [cv.mat(v) for v in vals]


def _emit(cv: Converter, node: Any, op_type: str, ins: list[str], n_out: int, attrs: dict[str, Any]) -> tuple:
    outs = [cv.out(node, i) for i in range(n_out)]
    cv.emit(node.name, op_type, ins, outs, attrs)
    return tuple(Val(o) for o in outs)


@rule("dynamic_rnn")
def r_dynamic_rnn(cv: Converter, node: Any, a: dict) -> Any:
    ins = _ins(cv, a, ("x", "w", "b", "init_h", "init_c"))
    # CANN's inputs: x, w, b, seq_length (unused: every sequence is full length), init_h, init_c
    return _emit(cv, node, "DynamicRNN", ins, 8, _attrs(cv, bool(a.get("reverse")), {
        "cell_type": "LSTM", "use_peephole": False, "forget_bias": 0.0, "gate_order": "ifjo"}))


@rule("dynamic_rnn_grad")
def r_dynamic_rnn_grad(cv: Converter, node: Any, a: dict) -> Any:
    ins = _ins(cv, a, ("x", "w", "b", "y", "init_h", "init_c", "h", "c", "dy", "dh", "dc", "i", "j", "f", "o",
                       "tanhct"))
    attrs = _attrs(cv, bool(a.get("reverse")), {"cell_type": "LSTM", "use_peephole": False, "forget_bias": 0.0,
                                                 "gate_order": "ifjo"})
    attrs.pop("activation"), attrs.pop("is_training")  # not attributes of DynamicRNNGrad
    return _emit(cv, node, "DynamicRNNGrad", ins, 5, attrs)


@rule("dynamic_gru_v2")
def r_dynamic_gru(cv: Converter, node: Any, a: dict) -> Any:
    ins = _ins(cv, a, ("x", "weight_input", "weight_hidden", "bias_input", "bias_hidden", "init_h"))
    return _emit(cv, node, "DynamicGRUV2", ins, 6, _attrs(cv, bool(a.get("reverse")), {
        "gate_order": "rzh", "reset_after": True}))


@rule("dynamic_gru_v2_grad")
def r_dynamic_gru_grad(cv: Converter, node: Any, a: dict) -> Any:
    # the biases the custom operator also takes (to recompute the forward in eager mode) are not CANN inputs
    ins = _ins(cv, a, ("x", "weight_input", "weight_hidden", "y", "init_h", "h", "dy", "dh", "update", "reset", "new",
                       "hidden_new"))
    attrs = _attrs(cv, bool(a.get("reverse")), {"gate_order": "rzh", "reset_after": True})
    attrs.pop("is_training")
    return _emit(cv, node, "DynamicGRUV2Grad", ins, 6, attrs)
