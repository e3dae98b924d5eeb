"""Keras LSTM / GRU layers as CANN's recurrent operators: DynamicRNN / DynamicGRUV2 and their gradients.

``scopes.py`` finds the layer (its ``While`` loop, the transposes around it, its gradient loop); this
module writes the CANN operators with the inputs and attributes of CANN's op proto (``rnn.h``:
``REG_OP(DynamicRNN)``, ``DynamicRNNGrad``, ``DynamicGRUV2``, ``DynamicGRUV2Grad``): time-major
``x`` with a ``Transpose`` on each side, zero initial states and a full ``seq_length`` as constants.
"""
from __future__ import annotations

from typing import Any

from .convert import Converter
from .scopes import Region


def _rnn_attrs(reg: Region, training: bool) -> dict[str, Any]:
    """CANN's attributes of DynamicRNN / DynamicGRUV2 (op proto ``rnn.h``) for a Keras layer."""
    attrs: dict[str, Any] = {"direction": "UNIDIRECTIONAL", "cell_depth": 1, "keep_prob": 1.0, "cell_clip": -1.0,
                             "num_proj": 0, "time_major": True, "activation": "tanh", "is_training": training,
                             "hidden_size": reg.attrs["hidden"]}
    if reg.attrs["cell"] == "lstm":
        # Keras keeps the gates as i, f, c, o: CANN's "ifjo" (j is the cell candidate)
        attrs.update(cell_type="LSTM", use_peephole=False, forget_bias=0.0, gate_order="ifjo")
    else:
        attrs.update(gate_order="zrh", reset_after=True)   # Keras GRU: z, r, h; reset after the matmul
    return attrs


def emit_rnn(cv: Converter, reg: Region) -> None:
    """A Keras LSTM / GRU as CANN's time-major DynamicRNN / DynamicGRUV2 (+ their gradients).

    Inputs in CANN's order: LSTM ``x, w, b, seq_length, init_h, init_c`` (w = [kernel; recurrent_kernel],
    [input + hidden, 4 * hidden]); GRU ``x, weight_input, weight_hidden, bias_input, bias_hidden,
    seq_length, init_h``. Keras starts from zero states over full-length sequences: ``init_*`` are zero
    constants, ``seq_length`` a constant of the sequence length.
    """
    r, scope, lstm = reg.roles, reg.scope, reg.attrs["cell"] == "lstm"
    xi = cv.inp(r["x"])
    b, t, i = cv.tensors[xi].shape
    h = int(reg.attrs["hidden"])
    dt = cv.tensors[xi].dtype
    gates = 4 if lstm else 3

    def new(name: str, shape: tuple[int, ...], kind: str = "activation", dtype: str = dt) -> str:
        return cv.new_tensor(f"{scope}/{name}", shape, dtype, kind)

    xt = new("x_time_major", (t, b, i))
    cv.emit(None, "Transpose", [xi], {"perm": [1, 0, 2]}, outputs=[xt], name=f"{scope}/transpose_x")
    kernel, rec = cv.variable_by_id(r["kernel"]), cv.variable_by_id(r["recurrent_kernel"])
    bias = cv.variable_by_id(r["bias"]) if "bias" in r else new("bias_zeros", (gates * h,), "const")
    seq_len = new("seq_length", (b,), "const", "int32")
    init_h = new("init_h", (1, b, h), "const")
    states = ("y", "output_h", "output_c", "i", "j", "f", "o", "tanhc") if lstm else \
        ("y", "output_h", "update", "reset", "new", "hidden_new")
    outs = {k: new(k, (t, b, h)) for k in states}
    attrs = _rnn_attrs(reg, cv.src.training)
    if lstm:
        w = new("w", (i + h, 4 * h))
        cv.emit(None, "Concat", [kernel, rec], {"axis": 0, "N": 2}, outputs=[w], name=f"{scope}/w")
        init_c = new("init_c", (1, b, h), "const")
        cv.emit(None, "DynamicRNN", [xt, w, bias, seq_len, init_h, init_c], attrs, outputs=list(outs.values()),
                name=f"{scope}/dynamic_rnn")
    else:
        if cv.tensors[bias].shape == (2, 3 * h):   # reset_after: input and hidden biases stacked
            halves = [new(f"bias_{k}_2d", (1, 3 * h)) for k in ("input", "hidden")]
            cv.emit(None, "SplitV", [bias], {"split_dim": 0, "size_splits": [1, 1], "num_split": 2}, outputs=halves,
                    name=f"{scope}/split_bias")
            b_in, b_hid = new("bias_input", (3 * h,)), new("bias_hidden", (3 * h,))
            for half, flat in zip(halves, (b_in, b_hid)):
                cv.emit(None, "Reshape", [half], {"view": True, "shape": [3 * h]}, outputs=[flat], name=f"{flat}/view")
        else:
            b_in, b_hid = bias, new("bias_hidden_zeros", (3 * h,), "const")
            attrs["reset_after"] = False
        cv.emit(None, "DynamicGRUV2", [xt, kernel, rec, b_in, b_hid, seq_len, init_h], attrs,
                outputs=list(outs.values()), name=f"{scope}/dynamic_gru_v2")
    for out in r["outputs"]:
        target = cv.alias[out.name]
        if out.shape.rank == 3:
            cv.emit(None, "Transpose", [outs["y"]], {"perm": [1, 0, 2]}, outputs=[target], name=f"{scope}/transpose_y")
        else:
            cv.emit(None, "StridedSliceD", [outs["y"]], {"begin": [t - 1, 0, 0], "end": [t, b, h], "strides": [1, 1, 1],
                                                         "shrink_axis_mask": 1}, outputs=[target], name=f"{scope}/last")
    if not reg.has_grad:
        return
    if "dy_seq" in r:
        dy = new("dy_time_major", (t, b, h))
        cv.emit(None, "Transpose", [cv.inp(r["dy_seq"])], {"perm": [1, 0, 2]}, outputs=[dy],
                name=f"{scope}/transpose_dy")
    else:
        dy = new("dy_zeros", (t, b, h), "const")   # only the last step is read: its gradient is dh
    if "dy_last" in r:
        dh = new("dh", (1, b, h))
        cv.emit(None, "Reshape", [cv.inp(r["dy_last"])], {"view": True, "shape": [1, b, h]}, outputs=[dh],
                name=f"{scope}/dh_view")
    else:
        dh = new("dh_zeros", (1, b, h), "const")
    dxt = new("dx_time_major", (t, b, i))
    dh_prev = new("dh_prev", (1, b, h))
    kshape, rshape = cv.tensors[kernel].shape, cv.tensors[rec].shape
    dk = cv.region_grad(reg, "dkernel", kshape, cv.tensors[kernel].dtype)
    dr = cv.region_grad(reg, "drecurrent_kernel", rshape, cv.tensors[rec].dtype)
    db = cv.region_grad(reg, "dbias", cv.tensors[bias].shape, cv.tensors[bias].dtype)
    if lstm:
        dw = new("dw", (i + h, 4 * h))
        dc = new("dc_zeros", (1, b, h), "const")
        ins = [xt, w, bias, outs["y"], init_h, init_c, outs["output_h"], outs["output_c"], dy, dh, dc,
               outs["i"], outs["j"], outs["f"], outs["o"], outs["tanhc"]]
        cv.emit(None, "DynamicRNNGrad", ins, attrs, outputs=[dw, db, dxt, dh_prev, new("dc_prev", (1, b, h))],
                name=f"{scope}/dynamic_rnn_grad")
        cv.emit(None, "SplitV", [dw], {"split_dim": 0, "size_splits": [i, h], "num_split": 2}, outputs=[dk, dr],
                name=f"{scope}/split_dw")
    else:
        two = cv.tensors[bias].shape == (2, 3 * h)
        db_in = new("db_input", (3 * h,)) if two else db
        db_hid = new("db_hidden", (3 * h,))
        ins = [xt, kernel, rec, outs["y"], init_h, outs["output_h"], dy, dh, outs["update"], outs["reset"],
               outs["new"], outs["hidden_new"]]
        cv.emit(None, "DynamicGRUV2Grad", ins, attrs, outputs=[dk, dr, db_in, db_hid, dxt, dh_prev],
                name=f"{scope}/dynamic_gru_v2_grad")
        if two:
            cv.emit(None, "Pack", [db_in, db_hid], {"axis": 0, "N": 2}, outputs=[db], name=f"{scope}/pack_db")
    dx = cv.region_grad(reg, "dx", (b, t, i), dt)
    cv.emit(None, "Transpose", [dxt], {"perm": [1, 0, 2]}, outputs=[dx], name=f"{scope}/transpose_dx")
