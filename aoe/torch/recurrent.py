"""``nn.LSTM`` / ``nn.GRU`` as CANN's recurrent operators, and the warning when dynamo declines them.

Dynamo does not trace RNN, GRU or LSTM modules: a ``torch.compile``d model containing one never
reaches the aoe backend (no graph, no result file). ``watch_dynamo()`` makes that visible: one warning
per declined module, naming it and saying why. ``aoe.torch.tune`` / ``capture*`` trace such models
themselves: while they trace, every ``nn.LSTM`` / ``nn.GRU`` of the model runs through the custom
operators below (``aoe::dynamic_rnn``, ``aoe::dynamic_gru_v2`` and their gradients, registered with
``torch.library``), which ``aoe.graph.fx`` converts to CANN's ``DynamicRNN`` / ``DynamicGRUV2`` (and
``DynamicRNNGrad`` / ``DynamicGRUV2Grad`` in the backward graph), one per layer and direction.

The operators compute what the modules compute (a step loop in PyTorch, so a traced model still runs
eagerly and gives the module's results); what is traced is their shapes.
"""
from __future__ import annotations

import contextlib
import re
import threading
import types
import warnings
from typing import Any, Iterator

_LOCK = threading.Lock()
_OPS: Any = None            # the registered custom operators (torch.ops.aoe), once per process
_SEEN: dict[str, int] = {}  # dynamo "unimplemented" reason -> count already reported
_REPORTED: set[tuple[str, str]] = set()
_RNN_REASON = "RNN, GRU, or LSTM"


# ---- the operators ---------------------------------------------------------------------------------
def _lstm_ref(torch: Any, x: Any, w: Any, b: Any, h0: Any, c0: Any, reverse: bool) -> tuple:
    """DynamicRNN's outputs: y, output_h, output_c (every step), the gates i, j, f, o and tanh(c).

    Gate order of PyTorch's weights: i, f, g (CANN's j), o (CANN's ``gate_order="ifjo"``).
    """
    steps, hidden = x.shape[0], w.shape[1] // 4
    h, c = h0[0], c0[0]
    out: list[list[Any]] = [[None] * steps for _ in range(7)]
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        z = torch.cat([x[t], h], 1) @ w + b
        i, f, j, o = z.split(hidden, 1)
        i, f, j, o = torch.sigmoid(i), torch.sigmoid(f), torch.tanh(j), torch.sigmoid(o)
        c = f * c + i * j
        tc = torch.tanh(c)
        h = o * tc
        for k, v in enumerate((h, c, i, j, f, o, tc)):
            out[k][t] = v
    h_all, c_all, i, j, f, o, tc = (torch.stack(v) for v in out)
    return h_all, h_all.clone(), c_all, i, j, f, o, tc


def _gru_ref(torch: Any, x: Any, wi: Any, wh: Any, bi: Any, bh: Any, h0: Any, reverse: bool) -> tuple:
    """DynamicGRUV2's outputs: y, output_h (every step), update z, reset r, new n, hidden_new (W_hn h + b_hn).

    PyTorch's gate order r, z, n (CANN's ``gate_order="rzh"``), reset applied after the matmul.
    """
    steps, hidden = x.shape[0], wh.shape[0]
    h = h0[0]
    out: list[list[Any]] = [[None] * steps for _ in range(5)]
    xp = x @ wi + bi
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        hp = h @ wh + bh
        xr, xz, xn = xp[t].split(hidden, 1)
        hr, hz, hn = hp.split(hidden, 1)
        r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
        n = torch.tanh(xn + r * hn)
        h = n + z * (h - n)
        for k, v in enumerate((h, z, r, n, hn)):
            out[k][t] = v
    h_all, z, r, n, hn = (torch.stack(v) for v in out)
    return h_all, h_all.clone(), z, r, n, hn


def _steps(n: int, reverse: bool) -> tuple[range, int]:
    """The backward order of a forward loop and the direction of "previous step"."""
    return (range(n) if reverse else range(n - 1, -1, -1)), (1 if reverse else -1)


def _lstm_grad(torch: Any, x: Any, w: Any, h0: Any, c0: Any, h: Any, c: Any, dy: Any, dh: Any, dc: Any, i: Any,
               j: Any, f: Any, o: Any, tc: Any, reverse: bool) -> tuple:
    """DynamicRNNGrad's outputs (dw, db, dx, dh_prev, dc_prev) from the forward's saved gates, step by step."""
    n_in = x.shape[2]
    dw, db, dx = torch.zeros_like(w), w.new_zeros(w.shape[1]), torch.zeros_like(x)
    dh_next, dc_next = dh[0], dc[0]
    order, prev = _steps(x.shape[0], reverse)
    for t in order:
        first = t == (x.shape[0] - 1 if reverse else 0)
        h_prev, c_prev = (h0[0], c0[0]) if first else (h[t + prev], c[t + prev])
        dh_t = dy[t] + dh_next
        dc_t = dc_next + dh_t * o[t] * (1 - tc[t] * tc[t])
        dz = torch.cat([dc_t * j[t] * i[t] * (1 - i[t]), dc_t * c_prev * f[t] * (1 - f[t]),
                        dc_t * i[t] * (1 - j[t] * j[t]), dh_t * tc[t] * o[t] * (1 - o[t])], 1)
        dw = dw + torch.cat([x[t], h_prev], 1).t() @ dz
        db = db + dz.sum(0)
        dxh = dz @ w.t()
        dx[t] = dxh[:, :n_in]
        dh_next, dc_next = dxh[:, n_in:], dc_t * f[t]
    return dw, db, dx, dh_next[None], dc_next[None]


def _gru_grad(torch: Any, x: Any, wi: Any, wh: Any, h0: Any, h: Any, dy: Any, dh: Any, z: Any, r: Any, n: Any,
              hn: Any, reverse: bool) -> tuple:
    """DynamicGRUV2Grad's outputs (dw_input, dw_hidden, db_input, db_hidden, dx, dh_prev) from the saved gates."""
    dwi, dwh, dx = torch.zeros_like(wi), torch.zeros_like(wh), torch.zeros_like(x)
    dbi, dbh = wi.new_zeros(wi.shape[1]), wh.new_zeros(wh.shape[1])
    dh_next = dh[0]
    order, prev = _steps(x.shape[0], reverse)
    for t in order:
        first = t == (x.shape[0] - 1 if reverse else 0)
        h_prev = h0[0] if first else h[t + prev]
        dh_t = dy[t] + dh_next
        dn = dh_t * (1 - z[t]) * (1 - n[t] * n[t])
        dr = dn * hn[t] * r[t] * (1 - r[t])
        dzp = dh_t * (h_prev - n[t]) * z[t] * (1 - z[t])
        dxp, dhp = torch.cat([dr, dzp, dn], 1), torch.cat([dr, dzp, dn * r[t]], 1)
        dwi, dbi = dwi + x[t].t() @ dxp, dbi + dxp.sum(0)
        dwh, dbh = dwh + h_prev.t() @ dhp, dbh + dhp.sum(0)
        dx[t] = dxp @ wi.t()
        dh_next = dh_t * z[t] + dhp @ wh.t()
    return dwi, dwh, dbi, dbh, dx, dh_next[None]


def _last(t: Any, reverse: bool) -> Any:
    return t[:1] if reverse else t[-1:]


def ops() -> Any:
    """Register (once) and return the custom operators' namespace ``torch.ops.aoe``."""
    global _OPS
    with _LOCK:
        if _OPS is not None:
            return _OPS
        _OPS = _register()
        return _OPS


def _schema(tensors: str, n_out: int) -> str:
    ins = ", ".join(f"Tensor {n}" for n in tensors.split())
    return f"({ins}, bool reverse) -> ({', '.join(['Tensor'] * n_out)})"


def _register() -> Any:
    import torch
    from torch import Tensor  # noqa: F401  (the annotations below)

    lib = "aoe"
    T8 = T6 = T5 = tuple  # the schemas are given as text (annotations are strings under __future__)

    @torch.library.custom_op(f"{lib}::dynamic_rnn", mutates_args=(),
                               schema=_schema("x w b init_h init_c", 8))
    def dynamic_rnn(x: Tensor, w: Tensor, b: Tensor, init_h: Tensor, init_c: Tensor, reverse: bool) -> T8:
        return tuple(v.contiguous() for v in _lstm_ref(torch, x, w, b, init_h, init_c, reverse))  # type: ignore[return-value]

    @dynamic_rnn.register_fake
    def _(x, w, b, init_h, init_c, reverse):  # type: ignore[no-untyped-def]
        shape = (x.shape[0], x.shape[1], w.shape[1] // 4)
        return tuple(x.new_empty(shape) for _ in range(8))

    @torch.library.custom_op(f"{lib}::dynamic_rnn_grad", mutates_args=(),
                               schema=_schema("x w b y init_h init_c h c dy dh dc i j f o tanhct", 5))
    def dynamic_rnn_grad(x: Tensor, w: Tensor, b: Tensor, y: Tensor, init_h: Tensor, init_c: Tensor, h: Tensor,
                         c: Tensor, dy: Tensor, dh: Tensor, dc: Tensor, i: Tensor, j: Tensor, f: Tensor, o: Tensor,
                         tanhct: Tensor, reverse: bool) -> T5:
        return _lstm_grad(torch, x, w, init_h, init_c, h, c, dy, dh, dc, i, j, f, o, tanhct, reverse)

    @dynamic_rnn_grad.register_fake
    def _(x, w, b, y, init_h, init_c, h, c, dy, dh, dc, i, j, f, o, tanhct, reverse):  # type: ignore[no-untyped-def]
        return w.new_empty(w.shape), b.new_empty(b.shape), x.new_empty(x.shape), init_h.new_empty(init_h.shape), \
            init_c.new_empty(init_c.shape)

    def rnn_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
        x, w, b, h0, c0, reverse = inputs
        ctx.reverse = reverse
        ctx.save_for_backward(x, w, b, h0, c0, *output)

    def rnn_backward(ctx: Any, dy: Any, dh_all: Any, dc_all: Any, *_: Any) -> tuple:
        x, w, b, h0, c0, y, h, c, i, j, f, o, tc = ctx.saved_tensors
        r = ctx.reverse
        # the module returns the last step's h and c: their gradients are dh and dc of CANN's operator
        dw, db, dx, dh0, dc0 = torch.ops.aoe.dynamic_rnn_grad(x, w, b, y, h0, c0, h, c, dy, _last(dh_all, r),
                                                              _last(dc_all, r), i, j, f, o, tc, r)
        return dx, dw, db, dh0, dc0, None

    dynamic_rnn.register_autograd(rnn_backward, setup_context=rnn_setup)

    @torch.library.custom_op(f"{lib}::dynamic_gru_v2", mutates_args=(),
                               schema=_schema("x weight_input weight_hidden bias_input bias_hidden init_h", 6))
    def dynamic_gru_v2(x: Tensor, weight_input: Tensor, weight_hidden: Tensor, bias_input: Tensor,
                       bias_hidden: Tensor, init_h: Tensor, reverse: bool) -> T6:
        return tuple(v.contiguous() for v in _gru_ref(torch, x, weight_input, weight_hidden, bias_input,  # type: ignore[return-value]
                                                      bias_hidden, init_h, reverse))

    @dynamic_gru_v2.register_fake
    def _(x, weight_input, weight_hidden, bias_input, bias_hidden, init_h, reverse):  # type: ignore[no-untyped-def]
        shape = (x.shape[0], x.shape[1], weight_hidden.shape[0])
        return tuple(x.new_empty(shape) for _ in range(6))

    @torch.library.custom_op(f"{lib}::dynamic_gru_v2_grad", mutates_args=(),
                               schema=_schema("x weight_input weight_hidden y init_h h dy dh update reset new hidden_new", 6))
    def dynamic_gru_v2_grad(x: Tensor, weight_input: Tensor, weight_hidden: Tensor, y: Tensor, init_h: Tensor,
                            h: Tensor, dy: Tensor, dh: Tensor, update: Tensor, reset: Tensor, new: Tensor,
                            hidden_new: Tensor, reverse: bool) -> T6:
        return _gru_grad(torch, x, weight_input, weight_hidden, init_h, h, dy, dh, update, reset, new, hidden_new,
                         reverse)

    @dynamic_gru_v2_grad.register_fake
    def _(x, weight_input, weight_hidden, y, init_h, h, dy, dh, update, reset, new, hidden_new,  # type: ignore[no-untyped-def]
          reverse):
        g3 = weight_hidden.shape[1]
        return (weight_input.new_empty(weight_input.shape), weight_hidden.new_empty(weight_hidden.shape),
                x.new_empty((g3,)), x.new_empty((g3,)),
                x.new_empty(x.shape), init_h.new_empty(init_h.shape))

    def gru_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
        x, wi, wh, bi, bh, h0, reverse = inputs
        ctx.reverse = reverse
        ctx.save_for_backward(x, wi, wh, bi, bh, h0, *output)

    def gru_backward(ctx: Any, dy: Any, dh_all: Any, *_: Any) -> tuple:
        x, wi, wh, bi, bh, h0, y, h, z, r_, n, hn = ctx.saved_tensors
        r = ctx.reverse
        dwi, dwh, dbi, dbh, dx, dh0 = torch.ops.aoe.dynamic_gru_v2_grad(x, wi, wh, y, h0, h, dy, _last(dh_all, r), z,
                                                                        r_, n, hn, r)
        return dx, dwi, dwh, dbi, dbh, dh0, None

    dynamic_gru_v2.register_autograd(gru_backward, setup_context=gru_setup)
    return torch.ops.aoe


# ---- the modules -----------------------------------------------------------------------------------
def _params(mod: Any, layer: int, reverse: bool) -> list[Any]:
    sfx = f"_l{layer}" + ("_reverse" if reverse else "")
    names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if mod.bias else [])
    return [getattr(mod, n + sfx) for n in names]


def _run(mod: Any, kind: str, input: Any, hx: Any) -> Any:
    import torch
    import torch.nn.functional as F

    aoe = ops()
    x = input.transpose(0, 1) if mod.batch_first else input
    steps, batch, hidden = x.shape[0], x.shape[1], mod.hidden_size
    dirs = 2 if mod.bidirectional else 1
    n = mod.num_layers * dirs
    if kind == "LSTM":
        h0, c0 = hx if hx is not None else (x.new_zeros(n, batch, hidden), x.new_zeros(n, batch, hidden))
    else:
        h0, c0 = (hx if hx is not None else x.new_zeros(n, batch, hidden)), None
    hn, cn = [], []
    for layer in range(mod.num_layers):
        outs = []
        for d in range(dirs):
            k, rev = layer * dirs + d, bool(d)
            p = _params(mod, layer, rev)
            g = 4 if kind == "LSTM" else 3
            b_ih, b_hh = (p[2], p[3]) if mod.bias else (x.new_zeros(g * hidden), x.new_zeros(g * hidden))
            if kind == "LSTM":
                w = torch.cat([p[0], p[1]], 1).t()      # CANN's w: [input + hidden, 4 * hidden]
                # (x 1.0: the two biases' gradients must be distinct tensors of the joint graph, AOTAutograd
                # names each parameter's gradient by its node)
                b = b_ih + b_hh * 1.0 if mod.bias else b_ih
                y, h, c, *_ = aoe.dynamic_rnn(x, w, b, h0[k:k + 1], c0[k:k + 1], rev)
                cn.append(_last(c, rev))
            else:
                y, h, *_ = aoe.dynamic_gru_v2(x, p[0].t(), p[1].t(), b_ih, b_hh, h0[k:k + 1], rev)
            outs.append(y)
            hn.append(_last(h, rev))
        x = outs[0] if dirs == 1 else torch.cat(outs, 2)
        if mod.dropout and mod.training and layer < mod.num_layers - 1:
            x = F.dropout(x, mod.dropout, True)
    out = x.transpose(0, 1) if mod.batch_first else x
    h_n = torch.cat(hn, 0)
    return (out, (h_n, torch.cat(cn, 0))) if kind == "LSTM" else (out, h_n)


def _supported(mod: Any, input: Any) -> bool:
    return getattr(mod, "proj_size", 0) == 0 and hasattr(input, "dim") and input.dim() == 3


@contextlib.contextmanager
def as_cann_ops(model: Any) -> Iterator[list[str]]:
    """While active, the model's ``nn.LSTM`` / ``nn.GRU`` modules run as the custom operators (yields their names).

    Only the instances' ``forward`` is replaced (and restored on exit): parameter names are unchanged.
    Packed sequences, unbatched inputs and LSTMs with ``proj_size`` run as they are (traced step by step).
    """
    import torch

    found = [(name, m) for name, m in model.named_modules() if type(m) in (torch.nn.LSTM, torch.nn.GRU)]
    for name, m in found:
        kind = type(m).__name__

        def forward(self: Any, input: Any, hx: Any = None, _kind: str = kind, _orig: Any = m.forward) -> Any:
            return _run(self, _kind, input, hx) if _supported(self, input) else _orig(input, hx)

        m.forward = types.MethodType(forward, m)
    try:
        yield [name for name, _ in found]
    finally:
        for _, m in found:
            m.__dict__.pop("forward", None)


# ---- dynamo ----------------------------------------------------------------------------------------
def watch_dynamo() -> None:
    """Warn (once per module) when dynamo declines an RNN, GRU or LSTM module or a fused optimizer step."""
    with _LOCK:
        try:
            from torch._dynamo.callback import callback_handler
        except ImportError:  # an older dynamo: nothing to hook
            return
        # (torch._dynamo.reset() clears the callbacks: register again when ours is gone)
        if _on_compile_end not in getattr(callback_handler, "end_callbacks", []):
            callback_handler.register_end_callback(_on_compile_end)


def _on_compile_end(*_: Any) -> None:
    _report_declined()


def declined_modules() -> list[tuple[str, str]]:
    """(what, why) for each RNN/GRU/LSTM module or fused optimizer step dynamo declined since the last call."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return []
    new = []
    with _LOCK:
        for reason, count in list(counters.get("unimplemented", {}).items()):
            text = str(reason)
            if not any(k in text for k in _DECLINED) or count <= _SEEN.get(text, 0):
                continue
            _SEEN[text] = count
            m = re.search(r"Developer debug context:\s*(.+)", text)
            item = (m.group(1).strip() if m else "a module", next(v for k, v in _DECLINED.items() if k in text))
            if item not in _REPORTED:   # one decline is often recorded under several reasons
                _REPORTED.add(item)
                new.append(item)
    return new


_DECLINED = {  # dynamo's reason -> what it means for aoe and what to do
    _RNN_REASON: "dynamo declines RNN, GRU and LSTM modules, so the graph holding it never reaches the aoe backend "
                 "and is not tuned; tune the training step with aoe.torch.tune(model, example_inputs, ...), which "
                 "maps nn.LSTM / nn.GRU to CANN's DynamicRNN / DynamicGRUV2",
    "fused optimizer": "PyTorch does not let dynamo trace a fused optimizer step, so the aoe backend never sees it; "
                       "compile the default or foreach step (both become ApplyAdamD / ApplyMomentum), or pass "
                       "optimizer= to aoe.torch.tune",
}


def _report_declined() -> None:
    for what, why in declined_modules():
        warnings.warn(f"aoe: torch.compile did not capture {what}: {why}", stacklevel=2)
