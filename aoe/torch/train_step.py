"""A module's whole training step as one aoe graph, without running a training loop.

``capture_train_step`` traces forward + loss + backward as one joint graph (``aot_export_module`` with
``trace_joint=True``: fake tensors, nothing is computed), converts it, and appends the optimizer:

- Adam (or no optimizer given): CANN's fused ``ApplyAdamD`` per parameter, as the graph compiler
  fuses a recognised Adam step (AdamW: the decoupled weight decay ``Muls`` before it);
- any other ``torch.optim`` optimizer: its real step traced with ``make_fx`` (functionalised), so its
  ``_foreach_*`` list operators become one elementwise operator per parameter.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..errors import AoeError
from ..graph.fx.convert import import_torch
from ..graph.ir import Graph, Op, Tensor


def _flat_tensors(out: Any, torch: Any) -> tuple[Any, ...]:
    import torch.utils._pytree as pytree

    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return tuple(x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor))


def _loss_of(out: Any, loss_fn: Callable[..., Any] | None, targets: Sequence[Any], torch: Any) -> Any:
    if loss_fn is not None:
        return loss_fn(out, *targets)
    loss = getattr(out, "loss", None)
    if isinstance(loss, torch.Tensor) and loss.dim() == 0:
        return loss
    if isinstance(out, torch.Tensor) and out.dim() == 0:
        return out
    # no loss given: the sum of the outputs seeds every output's gradient with ones
    return sum(t.float().sum() for t in _flat_tensors(out, torch) if t.is_floating_point())


def _export(module: Any, args: tuple[Any, ...], **kw: Any) -> Any:
    """``aot_export_module`` on fake copies of the inputs (the module's tensors are faked as they are read).

    With ``trace_joint=True`` PyTorch re-traces the joint graph by running it on the arguments it was
    given (``make_fx`` in real mode): real tensors would compute a whole forward and backward pass (for
    ResNet-50 at batch 32, about 20 of the capture's 25 CPU seconds). Under a fake mode nothing is computed.
    """
    from torch._functorch.aot_autograd import aot_export_module
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

    torch = import_torch()
    if any(isinstance(a, FakeTensor) for a in args):  # the caller's own fake mode
        return aot_export_module(module, args, **kw)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
        return aot_export_module(module, fake, **kw)


def capture(model: Any, example_inputs: Sequence[Any], name: str | None = None,
            compute_dtype: str = "float16") -> Graph:
    """The inference graph of ``model(*example_inputs)`` (forward only) as an aoe graph."""
    torch = import_torch()
    from ..graph.fx import from_fx

    class _Outputs(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, *args: Any) -> Any:
            return _flat_tensors(self.m(*args), torch)

    from .recurrent import as_cann_ops

    with torch.no_grad(), as_cann_ops(model):   # nn.LSTM / nn.GRU as CANN's DynamicRNN / DynamicGRUV2
        gm, sig = _export(_Outputs(model), tuple(example_inputs), trace_joint=False)
    kinds = {**{k: "param" for k in sig.inputs_to_parameters}, **{k: "const" for k in sig.inputs_to_buffers}}
    return from_fx(gm, name or type(model).__name__, kinds, compute_dtype, training=False)


def capture_train_step(model: Any, example_inputs: Sequence[Any], loss_fn: Callable[..., Any] | None = None,
                       optimizer: Any = None, name: str | None = None, compute_dtype: str = "float16",
                       targets: Sequence[Any] = ()) -> Graph:
    """Forward + loss + backward + optimizer update of ``model`` as one training graph.

    The loss is ``loss_fn(model(*example_inputs), *targets)`` (targets such as labels are graph inputs too).
    """
    torch = import_torch()
    from ..graph.fx import from_fx

    class _Step(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, *args: Any) -> Any:
            n = len(args) - len(targets)
            return (_loss_of(self.m(*args[:n]), loss_fn, args[n:], torch),)

    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise AoeError("the model has no trainable parameters (requires_grad=True): nothing to train")
    from .recurrent import as_cann_ops

    try:
        with as_cann_ops(model):   # nn.LSTM / nn.GRU as CANN's DynamicRNN / DynamicGRUV2 (+ their gradients)
            gm, sig = _export(_Step(model), tuple(example_inputs) + tuple(targets), trace_joint=True,
                              output_loss_index=0)
    except RuntimeError as exc:
        raise AoeError(f"cannot trace the training step of {type(model).__name__}: {str(exc).splitlines()[0]}; "
                       "pass loss_fn=lambda output, *targets: <scalar loss> (and tensors it reads as targets=...)") from None
    except AssertionError as exc:
        # AOTAutograd's joint export wants a gradient per parameter: tied (shared) parameters fail it
        raise AoeError(f"cannot trace the training step of {type(model).__name__}: {str(exc).splitlines()[0]} "
                       "(tied or unused parameters); torch.compile(model, backend='aoe') captures such a model "
                       "during a real training step") from None
    kinds = {**{k: "param" for k in sig.inputs_to_parameters}, **{k: "const" for k in sig.inputs_to_buffers}}
    values: dict[str, str] = {}
    graph = from_fx(gm, name or type(model).__name__, kinds, compute_dtype, training=True, values=values)
    # parameter FQN -> its tensor in the graph; gradient output node -> parameter FQN
    by_fqn = {fqn: ph for ph, fqn in sig.inputs_to_parameters.items()}
    grads = {by_fqn[fqn]: values[g] for g, fqn in sig.backward_signature.gradients_to_parameters.items()
             if fqn in by_fqn and g in values}
    _add_optimizer(graph, grads, optimizer, torch)
    graph.validate()
    return graph


# ---- the optimizer -----------------------------------------------------------------------------
def _add_optimizer(g: Graph, grads: dict[str, str], optimizer: Any, torch: Any) -> None:
    grads = {p: t for p, t in grads.items() if p in g.tensors and t in g.tensors}
    kind = type(optimizer).__name__ if optimizer is not None else "Adam"
    if kind in ("Adam", "AdamW") and not (optimizer is not None and _adam_variant(optimizer)):
        wd = float(optimizer.defaults.get("weight_decay", 0.0)) if optimizer is not None else 0.0
        lr = float(optimizer.defaults.get("lr", 1e-3)) if optimizer is not None else 1e-3
        _apply_adam(g, grads, decoupled_decay=lr * wd if kind == "AdamW" else 0.0, l2=wd if kind == "Adam" else 0.0)
        return
    d = optimizer.defaults if optimizer is not None else {}
    if kind == "SGD" and d.get("momentum") and not d.get("dampening") and not d.get("maximize"):
        _apply_momentum(g, grads, float(d.get("weight_decay") or 0.0), bool(d.get("nesterov")))
        return
    _traced_optimizer(g, grads, optimizer, torch)


def _apply_momentum(g: Graph, grads: dict[str, str], l2: float, nesterov: bool) -> None:
    """SGD with momentum (any implementation: single tensor, foreach, fused) as CANN's ApplyMomentum per parameter."""
    scalars = {k: _new(g, f"momentum/{k}", shape=(), dtype=g.compute_dtype, kind="const") for k in ("lr", "momentum")}
    for p, grad in grads.items():
        accum = _new(g, f"{p}/momentum_buffer", p, kind="param")
        grad = _optimizer_grad(g, p, grad, "momentum", l2)
        outs = [_new(g, f"{p}/updated", p), _new(g, f"{accum}/updated", p)]
        _emit(g, f"{p}/momentum", "ApplyMomentum", [p, accum, scalars["lr"], grad, scalars["momentum"]], outs,
              {"use_nesterov": nesterov, "use_locking": False})
        g.outputs.extend(outs)


def _optimizer_grad(g: Graph, p: str, grad: str, tag: str, l2: float) -> str:
    """The gradient an apply operator of parameter `p` reads: cast to the parameter's dtype, plus `l2 * p`
    (the coupled weight decay of SGD and Adam) when `l2` is set."""
    if g.tensors[grad].dtype != g.tensors[p].dtype:
        cast = _new(g, f"{grad}/cast", p)
        _emit(g, f"{p}/{tag}/cast_grad", "Cast", [grad], [cast], {"dst_type": g.tensors[p].dtype})
        grad = cast
    if l2:
        wp, g2 = _new(g, f"{p}/{tag}/decay", p), _new(g, f"{grad}/decayed", p)
        _emit(g, f"{p}/{tag}/decay", "Muls", [p], [wp], {"value": l2})
        _emit(g, f"{p}/{tag}/decay_add", "Add", [grad, wp], [g2])
        grad = g2
    return grad


def _adam_variant(opt: Any) -> bool:
    """Adam settings ApplyAdamD does not compute (then the real step is traced instead)."""
    d = opt.defaults
    return bool(d.get("amsgrad") or d.get("maximize") or d.get("capturable") or d.get("differentiable"))


def _new(g: Graph, base: str, like: str | None = None, shape: tuple[int, ...] | None = None, dtype: str | None = None,
         kind: str = "activation") -> str:
    from ..graph.ir import unique_name

    name = unique_name(base, g.tensors)
    ref = g.tensors[like] if like else None
    g.tensors[name] = Tensor(name, shape if shape is not None else ref.shape, dtype or ref.dtype,
                             ref.format if ref else "ND", kind)
    return name


def _emit(g: Graph, name: str, op_type: str, ins: list[str], outs: list[str], attrs: dict | None = None) -> None:
    from ..graph.ir import unique_name

    taken = {op.name for op in g.ops}
    g.ops.append(Op(unique_name(name, taken), op_type, ins, outs, attrs or {}))


def _apply_adam(g: Graph, grads: dict[str, str], decoupled_decay: float, l2: float) -> None:
    scalars = {k: _new(g, f"adam/{k}", shape=(), dtype=g.compute_dtype, kind="const")
               for k in ("beta1_power", "beta2_power", "lr", "beta1", "beta2", "epsilon")}
    for p, grad in grads.items():
        m = _new(g, f"{p}/adam_m", p, kind="param")
        v = _new(g, f"{p}/adam_v", p, kind="param")
        grad = _optimizer_grad(g, p, grad, "adam", l2)
        var = p
        if decoupled_decay:
            # AdamW: p *= 1 - lr * wd before the Adam step (decoupled_decay = lr * wd)
            var = _new(g, f"{p}/adamw/decayed", p)
            _emit(g, f"{p}/adamw/decay", "Muls", [p], [var], {"value": 1.0 - decoupled_decay})
        outs = [_new(g, f"{p}/updated", p), _new(g, f"{m}/updated", p), _new(g, f"{v}/updated", p)]
        _emit(g, f"{p}/adam", "ApplyAdamD", [var, m, v, scalars["beta1_power"], scalars["beta2_power"],
                                              scalars["lr"], scalars["beta1"], scalars["beta2"], scalars["epsilon"],
                                              grad], outs, {"use_locking": False, "use_nesterov": False})
        g.outputs.extend(outs)


def _traced_optimizer(g: Graph, grads: dict[str, str], optimizer: Any, torch: Any) -> None:
    """Trace ``optimizer``'s real step on stand-in tensors and splice its operators into ``g``."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from ..graph.fx import from_fx

    names = list(grads)
    cls = type(optimizer)
    defaults = dict(optimizer.defaults)
    defaults["foreach"] = True if "foreach" in defaults else None
    defaults.pop("fused", None)   # the foreach form is the one traced (a fused kernel cannot be)
    if defaults.get("foreach") is None:
        defaults.pop("foreach", None)
    shapes = [g.tensors[p].shape for p in names]

    def step(*flat: Any) -> Any:
        n = len(flat) // 2
        ps = [torch.nn.Parameter(t.clone()) for t in flat[:n]]
        for p, gr in zip(ps, flat[n:]):
            p.grad = gr
        opt = cls(ps, **defaults)
        opt.step()
        return [p.detach() for p in ps]

    example = [torch.zeros(s) for s in shapes] * 2
    try:
        ogm = make_fx(torch.func.functionalize(step), tracing_mode="fake")(*example)
    except Exception as exc:  # an optimizer whose step cannot be traced
        raise AoeError(f"cannot trace the step of optimizer {cls.__name__} ({type(exc).__name__}: "
                       f"{str(exc).splitlines()[0] if str(exc) else ''}); pass optimizer=None for Adam") from None
    og = from_fx(ogm, "optimizer", {}, g.compute_dtype, training=True)
    places = [n.name for n in ogm.graph.nodes if n.op == "placeholder"]
    rename = {}
    for i, ph in enumerate(places):
        if ph in og.tensors:
            rename[ph] = names[i] if i < len(names) else grads[names[i - len(names)]]
    for t in og.tensors.values():
        if t.name in rename:
            continue
        new = f"{cls.__name__.lower()}/{t.name}"
        while new in g.tensors:
            new += "_"
        rename[t.name] = new
        g.tensors[new] = Tensor(new, t.shape, t.dtype, t.format, t.kind if t.kind != "input" else "const")
    for op in og.ops:
        _emit(g, f"{cls.__name__.lower()}/{op.name}", op.type, [rename[i] for i in op.inputs],
              [rename[o] for o in op.outputs], op.attrs)
    g.outputs.extend(rename[o] for o in og.outputs if rename[o] not in g.outputs)
    g.unsupported.extend({**u, "op": f"{cls.__name__.lower()}/{u['op']}"} for u in og.unsupported)
