"""One ONNX node as the importer reads it, and the small checks every rule shares."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import AoeError
from .tables import ARITY, NP_DTYPES, VALUE_CAP


class Node:
    """The parts of an ONNX NodeProto the importer needs, read once (protobuf access is slow)."""

    __slots__ = ("index", "name", "op_type", "domain", "inputs", "outputs", "attrs", "has_graph")

    def __init__(self, index: int, proto: Any) -> None:
        from onnx import helper

        self.index = index
        self.op_type = onnx_str(proto.op_type)
        # unnamed nodes get a stable name from their position, used in messages and as the op name
        self.name = onnx_str(proto.name) or f"{self.op_type}_{index}"
        self.domain = onnx_str(proto.domain)
        self.inputs = [onnx_str(x) for x in proto.input]
        self.outputs = [onnx_str(x) for x in proto.output]
        self.attrs: dict[str, Any] = {}
        self.has_graph = False
        for a in proto.attribute:
            if a.type in (5, 10):  # GRAPH, GRAPHS: control flow; kept opaque
                self.has_graph = True
                continue
            try:
                self.attrs[onnx_str(a.name)] = helper.get_attribute_value(a)
            except Exception:  # malformed attribute: treat as absent, the rule reports what is missing
                continue

    def attr_ints(self, key: str, default: Sequence[int] | None = None) -> list[int] | None:
        """An integer-list attribute (None when absent and no default), checked."""
        v = self.attrs.get(key)
        if v is None:
            return None if default is None else list(default)
        if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
            return [int(x) for x in v]
        raise AoeError(f"node {self.name!r} ({self.op_type}): attribute {key!r} must be a list of integers")

    def attr_int(self, key: str, default: int) -> int:
        """An integer attribute, checked."""
        v = self.attrs.get(key, default)
        if isinstance(v, int) and not isinstance(v, bool):
            return int(v)
        raise AoeError(f"node {self.name!r} ({self.op_type}): attribute {key!r} must be an integer")

    def attr_float(self, key: str, default: float) -> float:
        """A numeric attribute as float, checked."""
        v = self.attrs.get(key, default)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        raise AoeError(f"node {self.name!r} ({self.op_type}): attribute {key!r} must be a number")

    def attr_str(self, key: str, default: str) -> str:
        """A string attribute (bytes decoded), checked."""
        v = self.attrs.get(key, default)
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        if isinstance(v, str):
            return v
        raise AoeError(f"node {self.name!r} ({self.op_type}): attribute {key!r} must be a string")


class Unsupported(Exception):
    """Raised by a rule when it cannot handle a node (the node then becomes Opaque)."""


class TooBig(Exception):
    """Raised while folding when a constant would exceed VALUE_CAP elements (it then keeps only its shape)."""


def onnx_str(v: Any) -> str:
    """A string field of the model as str: invalid UTF-8 arrives as bytes and is kept distinguishable."""
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)


def is_static(shape: tuple[int, ...]) -> bool:
    """True when no dimension is unknown (-1)."""
    return all(d >= 0 for d in shape)


def np_to_dtype(dt: np.dtype) -> str:
    """The IR dtype of a folded numpy value."""
    name = np.dtype(dt).name
    return name if name in NP_DTYPES else "float32"


def norm_axis(axis: int, rank: int, node: Node) -> int:
    """A possibly negative ONNX axis as an index in [0, rank), checked."""
    if not -rank <= axis < max(rank, 1):
        raise AoeError(f"node {node.name!r} ({node.op_type}): axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def check_arity(node: Node) -> None:
    """Refuse a node that lacks the inputs its operator requires, or has no outputs."""
    need = ARITY.get(node.op_type, 1)
    if len(node.inputs) < need or not all(node.inputs[:need]):
        raise AoeError(f"node {node.name!r} ({node.op_type}) needs {need} input(s), has "
                       f"{len([i for i in node.inputs if i])}; the model is invalid")
    if not any(node.outputs):
        raise AoeError(f"node {node.name!r} ({node.op_type}) has no outputs")


def guard_size(shape: Sequence[int]) -> None:
    """Raise TooBig when a value of this shape should not be computed."""
    n = 1
    for d in shape:
        n *= int(d)
    if n > VALUE_CAP:
        raise TooBig()
