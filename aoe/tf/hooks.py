"""The two ways into a training script: a Keras callback and a wrapper of a custom train step.

Both do the same on the first training step, and nothing when tuning is off: trace the real step
(forward, GradientTape gradients, optimizer updates) for the first batch's exact shapes, convert it
(``aoe.graph.tf``), tune it with the job (``session.tune_graph``), then run that batch as usual, so
the step and every later one compute exactly what they would without tuning.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..errors import AoeError
from . import session


def _keras() -> Any:
    from ..graph.tf import import_tf

    import_tf()
    import keras

    return keras


def _take(iterator: Any, n: int) -> list[Any]:
    """Up to ``n`` batches from a tf.data / distributed iterator (the elements the step would read)."""
    out: list[Any] = []
    for _ in range(max(1, n)):
        if hasattr(iterator, "get_next_as_optional"):
            opt = iterator.get_next_as_optional()
            if not bool(opt.has_value()):
                break
            out.append(opt.get_value())
        else:
            try:
                out.append(next(iterator))
            except StopIteration:
                break
    return out


class _KerasHook:
    """What TuneCallback does, separate from the Keras base class (created lazily, see make_callback)."""

    def _aoe_init(self, config: Mapping[str, Any] | None, env: Mapping[str, str] | None) -> None:
        self.settings = session.resolve(config, env)
        self.result: Any = None
        self.graph: Any = None
        self._armed = False

    def on_train_begin(self, logs: Any = None) -> None:
        if self.settings is None or self.result is not None or self._armed:
            return
        model = self.model
        original = model.train_function
        if original is None:
            return
        self._armed = True

        def first_step(iterator: Any) -> Any:
            model.train_function = original  # every later step is Keras' own, untouched
            batches = _take(iterator, int(getattr(model, "steps_per_execution", 1) or 1))
            if not batches:
                raise StopIteration
            self._tune(model, batches[0])
            # a list takes Keras' per-batch path: the same one_step_on_data on the same batches
            return original(batches)

        model.train_function = first_step

    def _tune(self, model: Any, batch: Any) -> None:
        self.graph = self._capture(model, batch)
        self.result = session.tune_graph(self.graph, self.settings)

    def _capture(self, model: Any, batch: Any) -> Any:
        """The converted training step of `model` on `batch` (its trace is the one Keras then runs)."""
        from ..graph.tf import concrete_function, from_concrete_function

        cf = concrete_function(model.train_step, (batch,))
        opt = getattr(model, "optimizer", None)
        return from_concrete_function(cf, name=model.name or "model", training=True,
                                      optimizer_variables=list(opt.variables) if opt is not None else None)


def make_callback_class() -> type:
    """``TuneCallback``: a ``keras.callbacks.Callback`` (needs TensorFlow, so it is built on first use)."""
    keras = _keras()

    class TuneCallback(_KerasHook, keras.callbacks.Callback):
        """Tune the model's training step on the first ``fit`` step; nothing when tuning is off.

        ``config``: the product's session options as a dict (``aoe_mode``, ``work_path``,
        ``aoe_config_file``, ``soc_version``, ``tune_bank_path``, ``builtin``); unset keys come from the environment
        (``AOE_MODE``, ``ASCEND_WORK_PATH``, ``TUNE_BANK_PATH`` ...). After ``fit``, ``.result`` is the
        job's JobResult (result file, counters) and ``.graph`` the tuned graph.
        """

        def __init__(self, config: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None) -> None:
            keras.callbacks.Callback.__init__(self)
            self._aoe_init(config, env)

    return TuneCallback


class TunedStep:
    """A train step that is tuned on its first call (see ``tune_step``)."""

    def __init__(self, step: Any, settings: session.Settings | None, optimizer: Any = None,
                 name: str | None = None) -> None:
        self.step = step
        self.settings = settings
        self.optimizer = optimizer
        self.name = name
        self.result: Any = None
        self.graph: Any = None
        self._lock = threading.Lock()
        self._done = settings is None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._done:
            with self._lock:
                if not self._done:
                    self._tune(args, kwargs)
                    self._done = True
        return self.step(*args, **kwargs)

    def _tune(self, args: tuple, kwargs: dict) -> None:
        from ..graph.tf import concrete_function, from_concrete_function

        # tracing a tf.function fills its cache: the call that follows runs this very trace
        cf = concrete_function(self.step, args, kwargs)
        opt_vars = list(self.optimizer.variables) if self.optimizer is not None else None
        name = self.name or getattr(self.step, "__name__", None) or getattr(self.step, "name", None) or "train_step"
        self.graph = from_concrete_function(cf, name=str(name), training=True, optimizer_variables=opt_vars)
        self.result = session.tune_graph(self.graph, self.settings)

    def __getattr__(self, item: str) -> Any:
        if item == "step":
            raise AttributeError(item)
        return getattr(self.step, item)


def tune_step(step: Any, config: Mapping[str, Any] | None = None, *, optimizer: Any = None, name: str | None = None,
              env: Mapping[str, str] | None = None) -> Any:
    """Wrap a training step (a ``tf.function`` or plain function) so that its first call tunes it.

    Returns ``step`` itself when tuning is off. ``optimizer`` (optional): its variables are the
    optimizer state of the graph; without it, updated non-trainable tensors are taken as such.
    """
    if not callable(step):
        raise AoeError("tune_step needs the training step function (a tf.function or a callable)")
    settings = session.resolve(config, env)
    if settings is None:
        return step
    return TunedStep(step, settings, optimizer=optimizer, name=name)
