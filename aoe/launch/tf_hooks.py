"""`aoe run`'s TensorFlow hooks: the first training `tf.function` call and the first training v1 Session run.

Both capture the step exactly as it is about to run (the tf.function's trace for these arguments, which
the call then reuses; the session's graph pruned to what the run fetches, with the fed shapes), tune it,
then let the call run unchanged.
"""
from __future__ import annotations

import sys
import threading
import weakref
from typing import Any

from . import hooks

_SEEN_LOCK = threading.Lock()


# ---- tf.function --------------------------------------------------------------------------------
def patch_function(function_cls: Any) -> None:
    """Patch `tf.function`'s Function.__call__: its first eager training call is captured and tuned."""
    import tensorflow as tf

    original = function_cls.__call__
    seen: weakref.WeakSet[Any] = weakref.WeakSet()

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not hooks.claimed() and not hooks._busy() and tf.executing_eagerly():
            with _SEEN_LOCK:
                new = self not in seen
                seen.add(self)
            if new:
                _maybe_tune_function(self, args, kwargs)
        return original(self, *args, **kwargs)

    __call__.__wrapped__ = original  # type: ignore[attr-defined]
    function_cls.__call__ = __call__


def _maybe_tune_function(fn: Any, args: tuple, kwargs: dict) -> None:
    from ..graph.tf import from_concrete_function
    from ..tf.v1 import is_training_graph

    hooks._LOCAL.busy = True
    try:
        try:
            # the trace for these arguments: the call that follows reuses it from the function's cache
            cf = fn.get_concrete_function(*args, **kwargs)
        except Exception:  # noqa: BLE001 - not traceable here: the call traces (and fails) as it would
            return
        if not is_training_graph(cf.graph.get_operations()) or not hooks.claim():
            return
    finally:
        hooks._LOCAL.busy = False
    name = str(getattr(fn, "__name__", None) or getattr(fn, "name", None) or "train_step")

    def run() -> None:
        settings = hooks._env_settings()
        graph = from_concrete_function(cf, name=name, training=True)
        hooks.tune(graph, settings)

    hooks._guarded(f"tf.function {name!r}", run)


# ---- tf.compat.v1.Session -----------------------------------------------------------------------
def patch_session(tf_session: Any) -> None:
    """Patch the v1 Session: its config's NpuOptimizer parameter_map is read; its first training run is tuned."""
    session_cls = tf_session.Session
    base = tf_session.BaseSession
    init, run = session_cls.__init__, base.run

    def __init__(self: Any, target: str = "", graph: Any = None, config: Any = None) -> None:
        from ..errors import AoeError
        from ..safetext import safe_text
        from ..tf import session as aoe_session

        # read and validated as the session starts: a bad aoe_mode stops the script here, as aoe does
        init(self, target, graph, config)
        try:
            self._aoe_settings = aoe_session.from_session_config(config)
        except AoeError as exc:
            self.close()
            print(f"aoe: error: {safe_text(exc, keep_newlines=True)}", file=sys.stderr, flush=True)
            hooks._exit(2)

    def run_(self: Any, fetches: Any, feed_dict: Any = None, options: Any = None, run_metadata: Any = None) -> Any:
        if not hooks.claimed() and not hooks._busy():
            settings = getattr(self, "_aoe_settings", None)
            if settings is None:
                settings = hooks._env_settings()
            if settings is not None:
                _maybe_tune_run(self, fetches, feed_dict, settings)
        return run(self, fetches, feed_dict, options, run_metadata)

    __init__.__wrapped__ = init  # type: ignore[attr-defined]
    run_.__wrapped__ = run  # type: ignore[attr-defined]
    session_cls.__init__ = __init__
    base.run = run_


def _maybe_tune_run(sess: Any, fetches: Any, feed_dict: Any, settings: Any) -> None:
    from ..tf.v1 import run_graph, training_subgraph

    hooks._LOCAL.busy = True
    try:
        sub = hooks._guarded("the session run", lambda: training_subgraph(sess.graph, fetches))
        if sub is None or not hooks.claim():
            return
    finally:
        hooks._LOCAL.busy = False

    def go() -> None:
        graph = run_graph(sess.graph, sub, fetches, feed_dict, name="session")
        hooks.tune(graph, settings)

    hooks._guarded("the session's training step", go)
