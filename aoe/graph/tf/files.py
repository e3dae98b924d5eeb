"""Model files: a SavedModel directory or a frozen GraphDef ``.pb``, imported with static input shapes.

Both end as a GraphDef whose variables are constants (``convert_variables_to_constants_v2`` for a
SavedModel's serving signature). It is imported into a fresh ``tf.Graph`` with every input placeholder
replaced by one of the static shape asked for (``--input_shape``), so TensorFlow's own shape inference
gives every tensor a static shape; then ``convert.py`` maps it. Nothing in the model is executed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import AoeError
from ..shapes import INPUT_SHAPE_SYNTAX, check_shape

MAX_PB_BYTES = 2**31 - 1
_SIGNATURE = "serving_default"


def load_model(path: Path, shapes: dict[str, tuple[int, ...]], compute_dtype: str, name: str) -> Any:
    """Dispatch on what ``path`` is (a SavedModel directory or a GraphDef file)."""
    if path.is_dir():
        if not (path / "saved_model.pb").is_file():
            raise AoeError(f"{str(path)!r} is a directory without saved_model.pb; pass a SavedModel directory "
                           "or a frozen GraphDef .pb file")
        graph_def, inputs, outputs, weights = _saved_model(path)
    elif path.is_file():
        graph_def = _read_graph_def(path)
        inputs, outputs = _graph_io(graph_def)
        weights = None  # a frozen GraphDef does not say which constants were trainable variables
    else:
        raise AoeError(f"model path {str(path)!r} is not a regular file or a SavedModel directory")
    return _import(graph_def, inputs, outputs, shapes, compute_dtype, name, weights)


def _read_graph_def(path: Path) -> Any:
    import tensorflow as tf

    try:
        size = path.stat().st_size
        if size > MAX_PB_BYTES:
            raise AoeError(f"{str(path)!r} is {size} bytes; a GraphDef must be under 2 GiB")
        data = path.read_bytes()
    except OSError as exc:
        raise AoeError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    gd = tf.compat.v1.GraphDef()
    try:
        gd.ParseFromString(data)
    except Exception as exc:  # noqa: BLE001 - protobuf DecodeError (and others) on corrupt bytes
        raise AoeError(f"{str(path)!r} is not a TensorFlow GraphDef ({type(exc).__name__}); pass a frozen "
                       "graph .pb or a SavedModel directory") from None
    from .convert import MAX_OPS

    if len(gd.node) > MAX_OPS:
        raise AoeError(f"{str(path)!r} has {len(gd.node)} nodes, more than the {MAX_OPS} aoe accepts")
    if not gd.node:
        raise AoeError(f"{str(path)!r} holds no TensorFlow graph nodes; pass a frozen graph .pb or a SavedModel directory")
    return gd


def _saved_model(path: Path) -> tuple[Any, list[tuple[str, str]], list[str], set[str]]:
    """The serving signature frozen to a GraphDef; inputs as (signature name, placeholder op name); the
    names of the constants that hold the SavedModel's trainable variables (the only weights to train)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    try:
        loaded = tf.saved_model.load(str(path))
    except Exception as exc:  # noqa: BLE001 - corrupt or incompatible SavedModel
        raise AoeError(f"{str(path)!r} is not a loadable SavedModel ({type(exc).__name__}: {str(exc)[:200]})") from None
    sigs = getattr(loaded, "signatures", {}) or {}
    if not sigs:
        raise AoeError(f"SavedModel {str(path)!r} has no signatures; export it with a serving signature "
                       "(model.export(path) or tf.saved_model.save(..., signatures=...))")
    fn = sigs[_SIGNATURE] if _SIGNATURE in sigs else sigs[min(sigs)]
    frozen = convert_variables_to_constants_v2(fn)
    # freezing turns each captured variable handle into a Const of the capture's name; only those of
    # trainable variables are weights (moving statistics, normalisation constants ... stay constants)
    trainable = {id(getattr(v, "handle", v)) for v in getattr(loaded, "trainable_variables", ()) or ()}
    weights = {internal.op.name for ext, internal in fn.graph.captures
               if internal.dtype.name == "resource" and id(ext) in trainable}
    _, kw = fn.structured_input_signature
    names = sorted(kw) if kw else []
    placeholders = [t.op.name for t in frozen.inputs if t.dtype.name not in ("resource",)]
    inputs = list(zip(names, placeholders)) if len(names) == len(placeholders) else [(p, p) for p in placeholders]
    outputs = [t.name for t in frozen.outputs]
    return frozen.graph.as_graph_def(), inputs, outputs, weights


def _graph_io(gd: Any) -> tuple[list[tuple[str, str]], list[str]]:
    used = {i.split(":")[0].lstrip("^") for n in gd.node for i in n.input}
    inputs = [(n.name, n.name) for n in gd.node if n.op == "Placeholder"]
    outputs = [f"{n.name}:0" for n in gd.node
               if n.name not in used and n.op not in ("NoOp", "Assert", "Const", "Placeholder", "SaveV2", "RestoreV2")]
    if not outputs:
        raise AoeError("the GraphDef has no output (every node is consumed); aoe takes the unconsumed nodes as outputs")
    return inputs, outputs


def _import(gd: Any, inputs: list[tuple[str, str]], outputs: list[str], shapes: dict[str, tuple[int, ...]],
            compute_dtype: str, name: str, weights: set[str] | None = None) -> Any:
    import tensorflow as tf

    from .convert import Converter, Source

    by_node = {n.name: n for n in gd.node}
    known = {a for a, _ in inputs} | {p for _, p in inputs}
    for k in shapes:
        if k not in known:
            raise AoeError(f"--input_shape names {k!r}, which is not an input of {name!r} "
                           f"(inputs: {', '.join(a for a, _ in inputs) or 'none'})")
    g = tf.Graph()
    input_map: dict[str, Any] = {}
    with g.as_default():
        fixed = []
        for sig_name, ph in inputs:
            node = by_node[ph]
            dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
            declared = None
            if "shape" in node.attr and not node.attr["shape"].shape.unknown_rank:
                declared = [d.size for d in node.attr["shape"].shape.dim]
            shape = shapes.get(sig_name, shapes.get(ph))
            if shape is None:
                if declared is None or any(d < 0 for d in declared):
                    raise AoeError(f"input {sig_name!r} of {name!r} has a dynamic shape {declared}; give it with "
                                   f"{INPUT_SHAPE_SYNTAX}")
                shape = tuple(declared)
            elif declared is not None and (len(declared) != len(shape) or
                                           any(d >= 0 and d != s for d, s in zip(declared, shape))):
                raise AoeError(f"--input_shape gives {sig_name!r} {list(shape)}, but the model declares {declared}")
            shape = check_shape(shape, f"input {sig_name!r}")
            p = tf.compat.v1.placeholder(dtype, shape, name=f"aoe_input_{len(fixed)}")
            input_map[f"{ph}:0"] = p
            fixed.append(p)
        try:
            outs = tf.graph_util.import_graph_def(gd, input_map=input_map, return_elements=outputs, name="")
        except Exception as exc:  # noqa: BLE001 - shape conflicts or unknown ops in the GraphDef
            raise AoeError(f"{name!r}: TensorFlow cannot import the graph with these input shapes "
                           f"({type(exc).__name__}: {str(exc)[:300]})") from None
    outs = [o for o in outs if hasattr(o, "dtype")]
    src = Source(g, fixed, outs, name=name, training=False, input_names=[a for a, _ in inputs],
                 trainable_consts=weights)
    return Converter(src, compute_dtype).run()
