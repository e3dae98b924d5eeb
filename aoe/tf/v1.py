"""A ``tf.compat.v1`` session's training run as an aoe graph: what ``sess.run(fetches, feed_dict)`` computes.

The session's graph is pruned to the nodes the fetches need (so variable initialisers and summaries are
not tuned), re-imported with each fed placeholder fixed to the shape of the value fed to it, and
converted like a traced step (``aoe.graph.tf``): resource variables (TF 2's default, also in graph
mode) are read by ``ReadVariableOp`` and updated by ``ResourceApply*`` / ``Assign*VariableOp``.
Nothing runs: the session's own run follows unchanged.
"""
from __future__ import annotations

from typing import Any

from ..errors import AoeError


def _fetch_elements(graph: Any, fetches: Any) -> list[Any]:
    """The tf.Tensor / tf.Operation objects a run's fetches name (nested lists, tuples and dicts)."""
    import tensorflow as tf

    out = []
    for f in tf.nest.flatten(fetches):
        try:
            out.append(graph.as_graph_element(f, allow_tensor=True, allow_operation=True))
        except (TypeError, ValueError, KeyError):
            continue
    return out


# a graph that writes variables with these ops (or a ResourceApply*), and takes gradients, trains
_WRITES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")


def is_training_graph(ops: Any) -> bool:
    """Whether these graph operations (tf.Operation or GraphDef nodes) take gradients and update
    variables (an optimizer step): a training step rather than inference, metrics or initialisation."""
    types = [getattr(o, "type", None) or getattr(o, "op", "") for o in ops]
    names = [o.name for o in ops]
    updates = any(t.startswith("ResourceApply") or t in _WRITES for t in types)
    grads = any(n.startswith(("gradient_tape/", "gradients/")) or "/gradients/" in n or "gradient_tape/" in n
                for n in names)
    return updates and grads


def training_subgraph(graph: Any, fetches: Any) -> Any:
    """The GraphDef of what ``fetches`` need, when that run trains; None for any other run."""
    import tensorflow as tf

    elements = _fetch_elements(graph, fetches)
    dest = sorted({getattr(e, "op", e).name for e in elements})
    if not dest:
        return None
    sub = tf.compat.v1.graph_util.extract_sub_graph(graph.as_graph_def(), dest)
    return sub if is_training_graph(sub.node) else None


def run_graph(graph: Any, sub: Any, fetches: Any, feed_dict: Any, name: str = "session",
              compute_dtype: str = "float16") -> Any:
    """The aoe training Graph of one session run: ``sub`` (``training_subgraph``) with the fed shapes."""
    import numpy as np
    import tensorflow as tf

    from ..graph.tf.convert import Converter, Source
    from ..graph.tf.ops import APPLY

    kept = {n.name for n in sub.node}
    feeds: list[tuple[Any, tuple[int, ...]]] = []
    for key, value in (feed_dict or {}).items():
        t = graph.as_graph_element(key, allow_tensor=True, allow_operation=False)
        if t.op.type == "Placeholder" and t.op.name in kept:
            feeds.append((t, tuple(int(d) for d in np.shape(value))))
    for n in sub.node:
        if n.op == "Placeholder" and n.name not in {t.op.name for t, _ in feeds}:
            raise AoeError(f"placeholder {n.name!r} is needed by the training run but not fed: feed it in "
                           f"feed_dict, or give it a static shape")
    outputs = [e.name for e in _fetch_elements(graph, fetches) if isinstance(e, tf.Tensor) and e.op.name in kept]
    g = tf.Graph()
    with g.as_default():
        phs = [tf.compat.v1.placeholder(t.dtype, shape, name=f"aoe_input_{i}") for i, (t, shape) in enumerate(feeds)]
        try:
            outs = tf.graph_util.import_graph_def(sub, input_map={t.name: p for (t, _), p in zip(feeds, phs)},
                                                  return_elements=outputs, name="")
        except Exception as exc:  # noqa: BLE001 - shapes fed that the graph cannot take
            raise AoeError(f"TensorFlow cannot re-import the session's training graph with the fed shapes "
                           f"({type(exc).__name__}: {str(exc)[:300]})") from None
    trainable = {_handle_op(v) for v in graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)}
    src = Source(g, phs, list(outs), name=name, training=True, input_names=[t.op.name for t, _ in feeds])
    for op in g.get_operations():
        if op.type == "VarHandleOp":
            vid = op.outputs[0].name
            src.var_of[vid] = vid
            src.var_names[vid] = op.name
            src.var_shapes[vid] = (tuple(tf.TensorShape(op.get_attr("shape")).as_list()), op.get_attr("dtype"))
            if op.name in trainable:
                src.trainable.add(vid)
    for op in g.get_operations():
        if op.type in APPLY:   # an optimizer's slots (Adam's m and v ...) are state, like the weights
            for t in op.inputs[1:APPLY[op.type][1]]:
                if t.name in src.var_of and src.var_of[t.name] not in src.trainable:
                    src.state.add(src.var_of[t.name])
    if not src.trainable:
        raise AoeError("the session's training run updates no trainable resource variable; aoe converts resource "
                       "variables (TF 2's default; not tf.compat.v1.disable_resource_variables())")
    return Converter(src, compute_dtype).run()


def _handle_op(v: Any) -> str:
    handle = getattr(v, "handle", None)
    return handle.op.name if handle is not None else v.op.name
