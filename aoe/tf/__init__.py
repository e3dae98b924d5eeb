"""aoe for TensorFlow training scripts: one line tunes the real training step.

    import aoe.tf
    model.fit(x, y, callbacks=[aoe.tf.TuneCallback()])     # Keras (tf.keras / Keras 3)
    train_step = aoe.tf.tune_step(train_step)              # a custom tf.function step

With ``AOE_MODE`` unset (and no ``aoe_mode`` in the config dict) both do nothing. See README.md.

| name | what |
|---|---|
| `TuneCallback(config=None)` | Keras callback: tunes on the first ``fit`` step |
| `tune_step(step, config=None, optimizer=None)` | wrapper of a custom train step |
| `resolve(config=None, env=None)` | the settings, or None when tuning is off |
| `examples` | Keras models built from code for tests and benches |
"""
from __future__ import annotations

from typing import Any

from .hooks import TunedStep, tune_step
from .session import KEYS, Settings, resolve

_CLASSES: dict[str, Any] = {}


def __getattr__(name: str) -> Any:
    """``TuneCallback`` subclasses Keras' Callback, so it is created when first asked for."""
    if name == "TuneCallback":
        if name not in _CLASSES:
            from .hooks import make_callback_class

            _CLASSES[name] = make_callback_class()
        return _CLASSES[name]
    raise AttributeError(f"module 'aoe.tf' has no attribute {name!r}")


__all__ = ["KEYS", "Settings", "TuneCallback", "TunedStep", "resolve", "tune_step"]
