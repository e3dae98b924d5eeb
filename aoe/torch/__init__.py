"""Tune PyTorch models where they live: ``torch.compile(model, backend="aoe")`` and ``aoe.torch.tune``.

    import aoe.torch
    model = torch.compile(model, backend="aoe")                          # AOE_MODE=2 in the environment
    model = torch.compile(model, backend=aoe.torch.backend(mode="op", bank="bank"))
    result = aoe.torch.tune(model, (x,), loss_fn=lambda out: out.sum(), mode="op", bank="bank")

PyTorch is an optional extra (``pip install 'aoe[torch]'``); it is imported only when used.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from ..errors import AoeError


def backend(**options: Any) -> Any:
    """A dynamo backend tuning every captured graph (see ``backend.Options`` for the options)."""
    from ..graph.fx.convert import import_torch
    from .backend import Backend, make_options

    import_torch()
    return Backend(make_options(options))


def _dynamo_backend(gm: Any, example_inputs: list[Any]) -> Any:
    """``torch.compile(backend="aoe")``: settings from the environment (AOE_MODE, TUNE_BANK_PATH, ...)."""
    from .backend import Backend

    return Backend()(gm, example_inputs)


def capture(model: Any, example_inputs: Sequence[Any], name: str | None = None) -> Any:
    """The forward graph of ``model(*example_inputs)`` as an ``aoe.graph.Graph`` (nothing is computed)."""
    from .train_step import capture as _capture

    return _capture(model, example_inputs, name)


def capture_train_step(model: Any, example_inputs: Sequence[Any], loss_fn: Callable[..., Any] | None = None,
                       optimizer: Any = None, name: str | None = None) -> Any:
    """Forward + loss + backward + optimizer update as one training ``aoe.graph.Graph``."""
    from .train_step import capture_train_step as _cts

    return _cts(model, example_inputs, loss_fn, optimizer, name)


def tune(model: Any, example_inputs: Sequence[Any], loss_fn: Callable[..., Any] | None = None,
         mode: str | int = "op", bank: str | os.PathLike[str] | None = None, optimizer: Any = None,
         **options: Any) -> Any:
    """Tune ``model``'s training step (forward + backward + optimizer) without running a loop.

    ``loss_fn(output) -> scalar`` (default: the output's ``.loss``, a scalar output itself, or the sum of
    the outputs); ``optimizer``: None or Adam -> ``ApplyAdamD`` per parameter, other ``torch.optim``
    optimizers are traced. ``options``: ``soc_version``, ``work_path``, ``aoe_config_file``, ``budget``,
    ``repeat_tune``, ``device``, ``lock``, ``lock_dir``, ``env``, ``verbose``, ``name``. Returns the
    job's ``JobResult`` (``status``, ``result_file``, ``section``).
    """
    from ..job.api import tune as job_tune

    known = {"soc_version", "work_path", "aoe_config_file", "budget", "repeat_tune", "device", "lock", "lock_dir",
             "env", "verbose", "name", "progress", "workers"}
    bad = sorted(set(options) - known)
    if bad:
        raise AoeError(f"aoe.torch.tune: unknown option(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")
    graph = capture_train_step(model, example_inputs, loss_fn, optimizer, options.pop("name", None))
    soc = options.pop("soc_version", "Ascend910B2")
    tune_ops = options.pop("aoe_config_file", None)
    return job_tune(graph, mode=mode, soc=soc, bank=bank, tune_ops=tune_ops, **options)


__all__ = ["backend", "tune", "capture", "capture_train_step"]
