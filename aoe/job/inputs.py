"""What a job's inputs must satisfy before tuning, and the names taken from them.

- `check_inputs`: input errors (exit 2) before any tuning: 0 dimensions, tensors no device can hold,
  single operators whose inputs contradict each other; dynamic single operators skipped with a warning.
- `task_name` / `output_file_name`: `tuning_name` and the `--output DIR` file name, never taken from an
  untrusted graph name that is generic or could be a path.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import AoeError
from ..opat.apply import select_ops
from ..ops import Unsupported, describe
from .settings import JobSpec, _warn

# names exporters give every graph: they say nothing about the model, and two models would collide
GENERIC_GRAPH_NAMES = frozenset({"", "graph", "main_graph", "torch_jit", "torch-jit-export", "tf2onnx", "model",
                                 "onnx_graph", "test_graph", "default", "main"})
_NAME_MAX = 128


def _plain_name(name: str) -> bool:
    # a name may reach a file name (--output DIR): no separators, no dot files, no control characters
    return (0 < len(name) <= _NAME_MAX and not name.startswith(".") and not any(c in name for c in "/\\:")
            and name.isprintable() and name.strip() == name)


def task_name(spec: JobSpec, graph: Any) -> str:
    """`tuning_name`: the name given, else the graph's own unless it is generic or unsafe, else the model file's."""
    if spec.name:
        return spec.name
    own = str(getattr(graph, "name", "") or "")
    if own.lower() not in GENERIC_GRAPH_NAMES and _plain_name(own):
        return own
    model = spec.model or ""
    if model and not model.startswith("zoo:"):
        stem = Path(model).stem
        if stem.lower() == "singleop" or not stem:
            stem = Path(model).name
        if _plain_name(stem):
            return stem
    return "graph" if not _plain_name(own) else own


def output_file_name(name: str) -> str:
    """`<name>_tuned.json` with anything that cannot be a plain file name replaced by `_`."""
    safe = "".join(c if (c.isalnum() or c in "-_.+=@") else "_" for c in name)[:_NAME_MAX].lstrip(".")
    return f"{safe or 'graph'}_tuned.json"


MAX_TENSOR_BYTES = 64 << 30  # more than the memory of any Ascend device: not a shape anyone can run


def check_inputs(graph: Any, single_ops: bool = False) -> None:
    """Input errors before tuning (exit 2): 0 or impossible dimensions, and single operators that do not fit.

    A single-operator file is the user's own description: an operator whose inputs contradict each
    other (conv channels 3 against a weight of 5) or that has too few inputs is rejected here, naming
    it, instead of being tuned or counted as "tuning failed". Dynamic-shape operators were left out by
    the loader (as the product skips them): say which.
    """
    for name in list(graph.inputs) + ([t for op in graph.ops for t in op.inputs + op.outputs] if single_ops else []):
        t = graph.tensors.get(name)
        shape = tuple(getattr(t, "shape", ()) or ())
        if any(int(d) == 0 for d in shape):
            raise AoeError(f"tensor {name!r} has a 0 dimension {list(shape)}: an empty tensor cannot be tuned; "
                           f"give every dimension a size of at least 1 (--input_shape)")
    for op in graph.ops:
        for name in op.inputs + op.outputs:
            t = graph.tensors.get(name)
            if t is None:
                continue
            try:
                nbytes = int(t.nbytes)
            except (TypeError, ValueError, KeyError, AttributeError):
                continue
            if nbytes > MAX_TENSOR_BYTES:
                raise AoeError(f"operator {op.name!r} ({op.type}): tensor {name!r} {list(t.shape)} needs "
                               f"{nbytes / (1 << 30):.0f} GiB, more than any Ascend device's memory "
                               f"({MAX_TENSOR_BYTES >> 30} GiB); give smaller shapes or batch (--input_shape)")
    for u in getattr(graph, "unsupported", None) or []:
        if str(u.get("reason", "")).startswith("dynamic shape") and single_ops:
            _warn(f"operator {u.get('op')!r} ({u.get('onnx_type')}) skipped: {u.get('reason')}")
    if not single_ops:
        return

    bad = []
    for op in graph.ops:
        why = _conv_mismatch(graph, op)
        if why:
            bad.append(f"operator {op.name!r} ({op.type}): {why}")
            continue
        try:
            describe(graph, op)
        except Unsupported as exc:
            if "mismatch" in str(exc):  # contradictory shapes are the file's error, not an unmodelled operator
                bad.append(f"operator {op.name!r} ({op.type}): {exc}")
            continue  # skipped and listed by the tuner, as in a model
        except AoeError as exc:
            bad.append(f"operator {op.name!r} ({op.type}): {exc}")
        except (IndexError, KeyError, ValueError, TypeError, ZeroDivisionError) as exc:
            bad.append(f"operator {op.name!r} ({op.type}): its input/output descriptions do not fit the operator "
                       f"({len(op.inputs)} input(s); {type(exc).__name__}: {exc})")
    if bad:
        raise AoeError("the single-operator file describes operators that cannot exist: " + "; ".join(bad[:5])
                       + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "") + "; fix their shapes or attributes")


def model_bytes(spec: JobSpec, graph: Any) -> int:
    """The model's size: its file, else its parameters (what each worker process holds)."""
    if spec.model and not spec.model.startswith("zoo:"):
        try:
            return os.path.getsize(spec.model)
        except OSError:
            pass
    return sum(int(t.nbytes) for t in graph.tensors.values() if getattr(t, "kind", "") == "param")


def _conv_mismatch(graph: Any, op: Any) -> str | None:
    """Why a single Conv2D's input, weight and output channels contradict each other (NCHW), else None."""
    if op.type not in ("Conv2D", "DepthwiseConv2D", "Conv3D") or len(op.inputs) < 2:
        return None
    x, w = graph.tensors.get(op.inputs[0]), graph.tensors.get(op.inputs[1])
    if x is None or w is None or len(x.shape) != len(w.shape) or len(x.shape) not in (4, 5):
        return None
    if str(getattr(x, "format", "NCHW")).upper() not in ("NCHW", "ND", "NCDHW"):
        return None
    groups = op.attrs.get("groups", 1)
    groups = groups if isinstance(groups, int) and groups >= 1 else 1
    if op.type == "DepthwiseConv2D":
        return None if w.shape[1] in (1, x.shape[1]) or w.shape[0] % x.shape[1] == 0 else \
            f"weight {list(w.shape)} does not fit {x.shape[1]} input channels"
    if x.shape[1] != w.shape[1] * groups:
        return (f"input channels {x.shape[1]} (input {list(x.shape)}) do not match the weight's "
                f"{w.shape[1]} x groups {groups} (weight {list(w.shape)})")
    if op.outputs:
        y = graph.tensors.get(op.outputs[0])
        if y is not None and len(y.shape) == len(x.shape) and y.shape[1] != w.shape[0]:
            return f"output channels {y.shape[1]} do not match the weight's {w.shape[0]} filters"
    return None


def selected_ops(spec: JobSpec, graph: Any, tuning_name: str) -> set[str] | None:
    """The operators a tune_ops selection names (None: no selection, tune all); warns of names not in the graph."""
    if spec.tune_ops is None:
        return None
    only = select_ops(graph, spec.tune_ops.names, spec.tune_ops.types) or set()
    unknown = sorted(set(spec.tune_ops.names) - {op.name for op in graph.ops})
    types = {t for op in graph.ops for t in ([op.type] + list(op.attrs.get("fused_ops") or []))}
    unknown_t = sorted(set(spec.tune_ops.types) - types)
    if unknown or unknown_t:
        _warn(f"{spec.tune_ops.source}: not in the graph: "
              + ", ".join([f"operator {n!r}" for n in unknown[:5]] + [f"type {t!r}" for t in unknown_t[:5]])
              + (" ..." if len(unknown) > 5 or len(unknown_t) > 5 else ""))
    if not only:
        _warn(f"{spec.tune_ops.source} selects no operator of {tuning_name}: nothing will be tuned")
    return only
