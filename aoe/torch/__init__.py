"""Tune PyTorch models where they live: ``torch.compile(model, backend="aoe")`` and ``aoe.torch.tune``.

    import aoe.torch
    model = torch.compile(model, backend="aoe")                          # AOE_MODE=2 in the environment
    model = torch.compile(model, backend=aoe.torch.backend(mode="op", bank="bank"))
    result = aoe.torch.tune(model, (x,), loss_fn=F.cross_entropy, targets=(y,), mode="op", bank="bank")

PyTorch is an optional extra (``pip install 'aoe[torch]'``); it is imported only when used.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from ..errors import AoeError  # noqa: F401 - part of the face (the error every entry point raises)


def backend(**options: Any) -> Any:
    """A dynamo backend tuning every captured graph (see ``aoe.torch.dynamo.Options`` for the options)."""
    from ..graph.fx.convert import import_torch
    from .dynamo import Backend, make_options

    import_torch()
    opts = make_options(options)
    from .recurrent import watch_dynamo

    watch_dynamo()   # say when dynamo declines an LSTM/GRU: no aoe backend ever sees it
    return Backend(opts)


def _entry_backend(gm: Any, example_inputs: list[Any]) -> Any:
    """``torch.compile(backend="aoe")``: settings from the environment (AOE_MODE, TUNE_BANK_PATH, ...)."""
    from .dynamo import Backend

    return Backend()(gm, example_inputs)


def __getattr__(name: str) -> Any:
    # The entry point (aoe = "aoe.torch:_dynamo_backend") is read by dynamo when torch.compile first looks
    # the backend up, before it traces anything: the moment to watch for the modules dynamo declines
    # (they never reach the backend itself). Dynamo is loaded then, whenever aoe.torch was imported.
    if name == "_dynamo_backend":
        from .recurrent import watch_dynamo

        watch_dynamo()
        return _entry_backend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def capture(model: Any, example_inputs: Sequence[Any], name: str | None = None) -> Any:
    """The forward graph of ``model(*example_inputs)`` as an ``aoe.graph.Graph`` (nothing is computed)."""
    from .train_step import capture as _capture

    return _capture(model, example_inputs, name)


def capture_train_step(model: Any, example_inputs: Sequence[Any], loss_fn: Callable[..., Any] | None = None,
                       optimizer: Any = None, name: str | None = None, targets: Sequence[Any] = ()) -> Any:
    """Forward + ``loss_fn(output, *targets)`` + backward + optimizer update as one training ``aoe.graph.Graph``."""
    from .train_step import capture_train_step as _cts

    return _cts(model, example_inputs, loss_fn, optimizer, name, targets=targets)


def tune(model: Any, example_inputs: Sequence[Any], loss_fn: Callable[..., Any] | None = None,
         mode: str | int = "op", bank: str | os.PathLike[str] | None = None, optimizer: Any = None,
         targets: Sequence[Any] = (), **options: Any) -> Any:
    """Tune ``model``'s training step (forward + backward + optimizer) without running a loop.

    ``loss_fn(output, *targets) -> scalar`` (default: the output's ``.loss``, a scalar output itself, or
    the sum of the outputs; ``targets``, e.g. labels, are traced as inputs like ``example_inputs``); ``optimizer``: None or Adam(W) -> ``ApplyAdamD`` per parameter, SGD with momentum ->
    ``ApplyMomentum`` (whichever implementation: single tensor, foreach, fused), other ``torch.optim``
    optimizers are traced. ``options`` are those of ``backend()`` (``soc_version``, ``work_path``,
    ``aoe_config_file``, ``budget``, ``repeat_tune``, ``device``, ``lock``, ``env``, ``verbose`` (default
    False here), ``name``, ...). The job runs as for ``aoe.tune``: banks, counters, REPEAT_TUNE, result
    file, device lock, tune_ops. Returns its ``JobResult`` (``status``, ``result_file``, ``section``).
    """
    from ..job import config as cfg
    from .dynamo import Backend, make_options

    opts = make_options({"verbose": False, **options, "mode": mode, "bank": bank})
    graph = capture_train_step(model, example_inputs, loss_fn, optimizer, options.get("name"), targets)
    return Backend(opts).tune_graph(graph, cfg.parse_mode(mode, "mode"))


__all__ = ["backend", "tune", "capture", "capture_train_step"]
