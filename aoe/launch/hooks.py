"""What `aoe run` installs in the training script's interpreter before the script imports a framework.

Post-import hooks (a finder on `sys.meta_path` that lets the real loader run, then patches the module):

| module | patched | tuned |
|---|---|---|
| `keras` | `Model.fit` | the first `fit` step (`aoe.tf.TuneCallback` added to its callbacks) |
| `tensorflow` | `tf.function` calls | the first eager call of a tf.function whose graph takes gradients and writes variables |
| `tensorflow` | `tf.compat.v1.Session` | the first `run` that trains (fetches an optimizer update); the session `config`'s `NpuOptimizer` `parameter_map` (`aoe_mode`, `work_path`, `aoe_config_file`) wins over the environment |
| `torch` | global module-call and optimizer-step hooks | the first `optimizer.step()`: the model of the last outer module call, its inputs, and a loss module called on its output |

Only the first training step of the run (of any of its processes) is captured and tuned (by the job, as `aoe -m`: banks,
counters, result file, device lock); the step then runs as it would have, and so does every later one.
Without a tuning mode (no AOE_MODE, no `aoe_mode` in a session config) nothing is patched but the v1
Session (which only reads its config). A tuning error stops the script with exit code 2, as `aoe` does.
"""
from __future__ import annotations

import importlib.abc
import os
import signal
import sys
import threading
from typing import Any, Callable, NoReturn

_LOCK = threading.Lock()
_CLAIMED = False
_LOCAL = threading.local()           # a hook at work does not hook the framework calls it makes itself
_INSTALLED: list[Any] = []


def claim() -> bool:
    """True once per `aoe run`: for the first training step captured in any of its processes (it is tuned),
    False afterwards and in every other process (a fork, a spawned trainer: the device is the job's)."""
    global _CLAIMED
    with _LOCK:
        if _CLAIMED:
            return False
        _CLAIMED = True
        path = os.environ.get("AOE_RUN_CLAIM")     # set by `aoe run` (aoe.launch.cli.CLAIM_ENV)
        if path:
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                return False                        # another process of this run tunes its step
            except OSError:
                return True                         # the claim cannot be recorded: this process decides alone
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
        return True


def claimed() -> bool:
    """Whether a training step of this process was already captured."""
    return _CLAIMED


def _busy() -> bool:
    return bool(getattr(_LOCAL, "busy", False))


def tune(graph: Any, settings: Any) -> Any:
    """Tune `graph` with the job (settings: `aoe.tf.session.Settings`); print its summary; errors exit 2."""
    from ..errors import AoeError
    from ..safetext import safe_text
    from ..tf import session

    _LOCAL.busy = True
    try:
        res = session.tune_graph(graph, settings)
    except AoeError as exc:
        print(f"aoe: error: {safe_text(exc, keep_newlines=True)}", file=sys.stderr, flush=True)
        _exit(2)
    finally:
        _LOCAL.busy = False
    for line in res.summary_lines(5):
        print(line, flush=True)
    if res.signal is not None:
        # the job held the signal back to write its result file: now it acts as it would have (SIGTERM
        # ends the process, exit 143; SIGINT raises KeyboardInterrupt; the script's own handler runs)
        print(f"aoe: tuning interrupted by {signal.Signals(res.signal).name}; the result file says "
              f"\"tuning incomplete\"", file=sys.stderr, flush=True)
        if threading.current_thread() is threading.main_thread():
            signal.raise_signal(res.signal)
        else:
            raise KeyboardInterrupt
    return res


def _exit(code: int) -> NoReturn:
    """End the script with `code`: SystemExit in the main thread; in another thread (where SystemExit
    would end only that thread, and the script would go on to exit 0) the process itself."""
    if threading.current_thread() is threading.main_thread():
        raise SystemExit(code)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(code)


def _env_settings() -> Any:
    from ..tf import session

    return session.resolve()


def _guarded(what: str, fn: Callable[[], Any]) -> Any:
    """Run a capture; a capture that fails says so and leaves training untouched (untuned)."""
    from ..errors import AoeError

    try:
        return fn()
    except (SystemExit, KeyboardInterrupt):
        raise
    except AoeError as exc:
        print(f"aoe run: warning: {what} not tuned: {exc}", file=sys.stderr, flush=True)
    except Exception as exc:  # noqa: BLE001 - never break the user's training for a capture of ours
        print(f"aoe run: warning: {what} not tuned ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)
    return None


# ---- the post-import finder ---------------------------------------------------------------------
class _Loader(importlib.abc.Loader):
    """The real loader, then the hook on the executed module."""

    def __init__(self, inner: Any, hook: Callable[[Any], None]) -> None:
        self.inner = inner
        self.hook = hook

    def create_module(self, spec: Any) -> Any:
        return self.inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        module.__loader__ = self.inner
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.inner
        self.inner.exec_module(module)
        _guarded(f"the {module.__name__} hook", lambda: self.hook(module))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class _PostImport(importlib.abc.MetaPathFinder):
    """Finds a hooked module with the other finders and wraps its loader."""

    def __init__(self, hooks: dict[str, Callable[[Any], None]]) -> None:
        self.hooks = hooks

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name not in self.hooks:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        spec.loader = _Loader(spec.loader, self.hooks.pop(name))
        return spec


def install(env: dict[str, str] | None = None) -> None:
    """Install the hooks (once); modules already imported are patched at once."""
    if _INSTALLED:
        return
    env = dict(os.environ if env is None else env)
    hooks: dict[str, Callable[[Any], None]] = {"tensorflow": _patch_tensorflow}
    if env.get("AOE_MODE", "").strip():
        # nothing of the job is imported here: every Python process the script starts (data loader
        # workers, aoe's own worker processes) runs this bootstrap too; `aoe run` checked AOE_MODE
        hooks.update(keras=_patch_keras, torch=_patch_torch)
    for name in list(hooks):
        if name in sys.modules:
            hooks.pop(name)(sys.modules[name])
    finder = _PostImport(hooks)
    sys.meta_path.insert(0, finder)
    _INSTALLED.append(finder)


# ---- Keras --------------------------------------------------------------------------------------
def _patch_keras(keras: Any) -> None:
    import inspect

    model_cls = keras.Model
    original = model_cls.fit
    sig = inspect.signature(original)

    def fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not claimed() and not _busy() and claim():
            bound = sig.bind(self, *args, **kwargs)
            bound.arguments["callbacks"] = list(bound.arguments.get("callbacks") or []) + [_fit_callback()]
            return original(*bound.args, **bound.kwargs)
        return original(self, *args, **kwargs)

    fit.__wrapped__ = original  # type: ignore[attr-defined]
    fit.__doc__ = original.__doc__
    model_cls.fit = fit


def _fit_callback() -> Any:
    """`aoe.tf.TuneCallback` as `aoe run` adds it: a step it cannot capture is not tuned (a warning, training
    goes on); a tuning error ends the script with exit code 2 and a signal acts after the result file."""
    from ..errors import AoeError
    from ..safetext import safe_text
    from ..tf import TuneCallback

    class RunTuneCallback(TuneCallback):  # type: ignore[misc, valid-type]
        def _tune(self, model: Any, batch: Any) -> None:
            def capture() -> Any:
                _LOCAL.busy = True
                try:
                    return self._capture(model, batch)
                finally:
                    _LOCAL.busy = False

            graph = _guarded(f"the fit step of {getattr(model, 'name', None) or type(model).__name__}", capture)
            if graph is not None:
                self.graph = graph
                self.result = tune(graph, self.settings)

    try:
        return RunTuneCallback()
    except AoeError as exc:      # a bad setting in the environment (aoe run checked it before the start)
        print(f"aoe: error: {safe_text(exc, keep_newlines=True)}", file=sys.stderr, flush=True)
        _exit(2)


# ---- TensorFlow ---------------------------------------------------------------------------------
def _patch_tensorflow(tf: Any) -> None:
    from tensorflow.python.client import session as tf_session
    from tensorflow.python.eager.polymorphic_function import polymorphic_function as pf

    from . import tf_hooks

    tf_hooks.patch_session(tf_session)
    if os.environ.get("AOE_MODE", "").strip():
        tf_hooks.patch_function(pf.Function)


# ---- torch --------------------------------------------------------------------------------------
def _patch_torch(torch: Any) -> None:
    from . import torch_hooks

    torch_hooks.install(torch)
