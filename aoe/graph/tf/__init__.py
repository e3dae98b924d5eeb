"""TensorFlow frontend: SavedModels, frozen GraphDefs and traced training steps -> the aoe IR.

    from aoe.graph.tf import load_tf, training_graph
    g = load_tf(Path("saved_model_dir"), {"input_1": (8, 224, 224, 3)}, "float16", "resnet")
    g = training_graph(train_step, images, labels)      # forward + GradientTape + optimizer ops

TensorFlow is imported only here, lazily: without it every entry point raises one AoeError naming
the extra to install. See README.md in this directory for what maps to what.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ...errors import AoeError

MISSING = "TensorFlow is not installed: pip install 'aoe[tensorflow]' (installs tensorflow-cpu)"


def import_tf() -> Any:
    """The tensorflow module, or AoeError naming the extra to install."""
    try:
        import tensorflow as tf
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in ("tensorflow", "keras"):
            raise AoeError(MISSING) from None
        raise
    return tf


def load_tf(path: Path, shapes: dict[str, tuple[int, ...]], compute_dtype: str, name: str) -> Any:
    """A SavedModel directory or a frozen GraphDef ``.pb`` file as a static-shape inference Graph."""
    from .files import load_model

    import_tf()
    return load_model(Path(path), shapes, compute_dtype, name)


def concrete_function(fn: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
    """The traced graph of ``fn`` for these arguments (a tf.function, a plain callable or a ConcreteFunction)."""
    tf = import_tf()
    kwargs = kwargs or {}
    if hasattr(fn, "graph") and hasattr(fn, "captured_inputs"):
        return fn  # already a ConcreteFunction
    if not hasattr(fn, "get_concrete_function"):
        fn = tf.function(fn)
    return fn.get_concrete_function(*args, **kwargs)


def training_graph(fn: Any, *args: Any, name: str | None = None, compute_dtype: str = "float16",
                   optimizer_variables: Iterable[Any] | None = None, **kwargs: Any) -> Any:
    """Trace a real training step (forward, GradientTape gradients, optimizer updates) as a training Graph.

    ``fn`` is the step (``tf.function``, plain callable or ConcreteFunction); ``args``/``kwargs`` are its
    arguments (tensors or ``tf.TensorSpec`` with static shapes). Tracing does not run the step.
    ``optimizer_variables`` (e.g. ``optimizer.variables``) become ``param`` tensors like the trained
    weights; without it, updated non-trainable variables other than normalisation statistics do.
    """
    cf = concrete_function(fn, args, kwargs)
    return from_concrete_function(cf, name=name or _fn_name(fn), compute_dtype=compute_dtype, training=True,
                                  optimizer_variables=optimizer_variables)


def from_concrete_function(cf: Any, name: str = "model", compute_dtype: str = "float16", training: bool = False,
                           optimizer_variables: Iterable[Any] | None = None) -> Any:
    """Convert a ConcreteFunction (its FuncGraph, captured variables and outputs) to a Graph."""
    from .convert import Converter, Source

    import_tf()
    if compute_dtype not in ("float16", "float32"):
        raise AoeError(f"compute_dtype must be float16 or float32, not {compute_dtype!r}")
    graph = cf.graph
    n_data = len(cf.inputs) - len(cf.captured_inputs)
    inputs = [t for t in cf.inputs[:n_data] if t.dtype.name not in ("resource", "variant")]
    for t in inputs:
        if not t.shape.is_fully_defined():
            raise AoeError(f"input {t.name!r} of {name!r} has shape {t.shape}; trace the step with static shapes "
                           "(real tensors or tf.TensorSpec without None dimensions)")
    opt_handles = {id(_handle(v)) for v in (optimizer_variables or [])}
    src = Source(graph, inputs, [t for t in cf.outputs if t is not None], name=name, training=training)
    by_handle = {id(_handle(v)): v for v in graph.variables}
    for ext, internal in graph.captures:
        if internal.dtype.name != "resource":
            continue
        v = by_handle.get(id(ext))
        vid = internal.name
        src.var_of[vid] = vid
        src.var_names[vid] = _var_name(v) if v is not None else internal.name.split(":")[0]
        dims = _static_dims(v)
        if dims is not None:
            src.var_shapes[vid] = (dims, v.dtype)
        if v is not None and v.trainable:
            src.trainable.add(vid)
        elif id(ext) in opt_handles:
            src.state.add(vid)
    if optimizer_variables is None:
        src.state |= _updated_state(graph, src)
    return Converter(src, compute_dtype).run()


def _static_dims(v: Any) -> tuple[int, ...] | None:
    """A variable's shape when every dimension is known (None otherwise, or without a variable)."""
    try:
        dims = tuple(int(d) for d in v.shape)
    except (AttributeError, TypeError, ValueError):  # no variable, or a None dimension
        return None
    return dims if all(d >= 0 for d in dims) else None


def _handle(v: Any) -> Any:
    inner = getattr(v, "value", None)  # Keras 3 Variable wraps a tf.Variable
    if inner is not None and hasattr(inner, "handle") and not hasattr(v, "handle"):
        v = inner
    return getattr(v, "handle", v)


def _var_name(v: Any) -> str:
    path = getattr(v, "path", None)
    return str(path) if path else v.name.split(":")[0]


def _updated_state(graph: Any, src: Any) -> set[str]:
    """Non-trainable float variables with more than one element that the step writes (optimizer slots)."""
    out: set[str] = set()
    for op in graph.get_operations():
        if op.type in ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp"):
            vid = src.var_of.get(op.inputs[0].name)
            val = op.inputs[1]
            n = val.shape.num_elements()
            if vid and vid not in src.trainable and val.dtype.is_floating and n and n > 1:
                base = src.var_names.get(vid, "").rsplit("/", 1)[-1]
                if base not in ("moving_mean", "moving_variance"):
                    out.add(vid)
    return out


def _fn_name(fn: Any) -> str:
    for attr in ("__name__", "name"):
        v = getattr(fn, attr, None)
        if isinstance(v, str) and v:
            return v
    return "train_step"


__all__ = ["MISSING", "concrete_function", "from_concrete_function", "import_tf", "load_tf", "training_graph"]
