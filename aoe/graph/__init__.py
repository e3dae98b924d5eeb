"""Model graphs for tuning: the IR, the ONNX importer, training-graph derivation and the model zoo.

``load("zoo:bert_base", "input_ids:32,128;attention_mask:32,128", training=True)`` is the entry point.
The ONNX package is imported only when an ONNX model is actually loaded.
"""
from __future__ import annotations

from .ir import Graph, Op, Tensor
from .loader import load
from .shapes import parse_input_shape

__all__ = ["Graph", "Op", "Tensor", "load", "parse_input_shape"]
