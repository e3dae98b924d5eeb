"""ONNX frontend: an ONNX model (untrusted bytes) -> a static-shape Graph with CANN operator types.

``importer`` walks the nodes once, in topological order; per node it infers shapes (``shape_rules``),
folds constants (``fold``) or maps the node to CANN operators (``mapping``). ``inputs`` fixes the
graph inputs' static shapes; ``geometry`` (windows, slices, splits, pads), ``tables`` and ``node``
hold what they share.
The ``onnx`` package itself is imported only inside the functions that read protobuf, so importing
this package (and aoe.graph) stays cheap when no ONNX model is loaded.
"""
from __future__ import annotations

from .importer import import_onnx_file, import_onnx_model

__all__ = ["import_onnx_file", "import_onnx_model"]
