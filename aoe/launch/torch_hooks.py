"""`aoe run`'s PyTorch hook: the first ``optimizer.step()`` of the script captures its training step.

PyTorch's global hooks (public API) watch the script: module-call hooks remember the outermost module
calls (the model's, with its inputs and output, and a loss module's called on that output), and an
optimizer step pre-hook, at the first step, captures forward + loss + backward + that optimizer's update
(``aoe.torch.capture_train_step``, fake tensors: nothing is computed, no state changes), tunes it, and
removes every hook. The step and the rest of training run as they would have.
A functional loss (``F.cross_entropy(out, y)``) is not a module call: the sum of the outputs stands in
for it (the model's forward, backward and optimizer operators are the same; the loss's few are not).
"""
from __future__ import annotations

import sys
import threading
from typing import Any

from . import hooks

_KEEP = 4   # outer module calls remembered (the model's and a loss module's are the last two)
_MISSES = 3  # optimizer steps without a model call of theirs before the hooks give up


class _Watch:
    """The global hooks and what they saw, until the first optimizer step."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.depth = threading.local()
        self.calls: list[tuple[Any, tuple, Any, dict]] = []   # (module, args, output, kwargs) of outer calls
        self.handles: list[Any] = []
        self.misses = 0

    def install(self) -> None:
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim

        self.handles = [nn_module.register_module_forward_pre_hook(self.pre),
                        nn_module.register_module_forward_hook(self.post, with_kwargs=True, always_call=True),
                        optim.register_optimizer_step_pre_hook(self.step)]

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        self.calls = []

    def pre(self, module: Any, args: tuple) -> None:
        self.depth.n = getattr(self.depth, "n", 0) + 1
        if self.depth.n == 1 and not hooks._busy():
            self.calls.append((module, args, None, {}))
            del self.calls[:-_KEEP]

    def post(self, module: Any, args: tuple, kwargs: dict, output: Any) -> None:
        self.depth.n = max(0, getattr(self.depth, "n", 1) - 1)
        if self.depth.n == 0 and self.calls and self.calls[-1][0] is module and self.calls[-1][2] is None:
            self.calls[-1] = (module, args, output, dict(kwargs or {}))

    def step(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        if hooks._busy():
            return
        if hooks.claimed():          # another framework's step was tuned: nothing left to watch
            self.remove()
            return
        found = self._model_call(optimizer)
        if found is None:
            self.misses += 1
            if self.misses >= _MISSES:   # no module call trains these parameters: stop watching
                self.remove()
                print(f"aoe run: warning: the training step is not tuned: {_MISSES} optimizer steps ran without a "
                      f"module call of their parameters before them", file=sys.stderr, flush=True)
            return
        self.remove()
        if not hooks.claim():
            return
        model, inputs, loss_fn, targets = found
        hooks._guarded(f"the training step of {type(model).__name__}",
                       lambda: self._tune(model, inputs, loss_fn, targets, optimizer))

    def _model_call(self, optimizer: Any) -> tuple[Any, tuple, Any, tuple] | None:
        """The last outer call of a module the optimizer trains, and the loss module called on its output."""
        params = {id(p) for g in optimizer.param_groups for p in g["params"]}
        for i in range(len(self.calls) - 1, -1, -1):
            module, args, output, kwargs = self.calls[i]
            if output is None or not any(id(p) in params for p in module.parameters()):
                continue
            loss_fn, targets = None, ()
            for lmod, largs, _, _ in self.calls[i + 1:]:
                if largs and largs[0] is output and not any(True for _ in lmod.parameters()):
                    def loss_fn(out: Any, *t: Any, _m: Any = lmod) -> Any:
                        return _m(out, *t)
                    targets = tuple(largs[1:])
                    break
            model, inputs = _with_kwargs(_plain(module), tuple(args), kwargs)
            return model, inputs, loss_fn, targets
        return None

    def _tune(self, model: Any, inputs: tuple, loss_fn: Any, targets: tuple, optimizer: Any) -> None:
        from ..torch import capture_train_step

        settings = hooks._env_settings()
        if settings is None:
            return
        hooks._LOCAL.busy = True
        try:
            graph = capture_train_step(model, inputs, loss_fn, optimizer, type(model).__name__, targets=targets)
        finally:
            hooks._LOCAL.busy = False
        hooks.tune(graph, settings)


def _with_kwargs(model: Any, args: tuple, kwargs: dict) -> tuple[Any, tuple]:
    """`model` called with keyword arguments too (``model(x, labels=y)``): a module taking them positionally
    after `args` (tensors as inputs of the capture, other values as they were), and those inputs."""
    if not kwargs:
        return model, args
    import torch

    names = [k for k, v in kwargs.items() if isinstance(v, torch.Tensor)]
    fixed = {k: v for k, v in kwargs.items() if k not in names}
    n = len(args)

    class KeywordCall(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *a: Any) -> Any:
            return self.model(*a[:n], **fixed, **dict(zip(names, a[n:])))

    wrapper = KeywordCall()
    wrapper.__class__.__name__ = type(model).__name__
    return wrapper, args + tuple(kwargs[k] for k in names)


def _plain(module: Any) -> Any:
    """The module a ``torch.compile`` wrapper (``OptimizedModule``, same parameters) runs: the capture
    traces that one like any model (FX cannot trace the wrapper)."""
    orig = getattr(module, "_orig_mod", None)
    return orig if orig is not None and type(module).__name__ == "OptimizedModule" else module


def install(torch: Any) -> None:
    """Watch the script's module calls and optimizer steps until its first step is tuned."""
    _Watch(torch).install()
