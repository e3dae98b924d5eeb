"""Model graphs for tuning: the IR, the model loaders (ONNX, JSON graphs, single-operator files,
TensorFlow), training-graph derivation and the model zoo.

``load("zoo:bert_base", "input_ids:32,128;attention_mask:32,128", training=True)`` is the entry point
for every model source (``framework=`` picks one; by default it is told from the model).
A framework's packages (``onnx``, ``tensorflow``) are imported only when a model of it is loaded.
"""
from __future__ import annotations

from .ir import Graph, Op, Tensor
from .loader import load
from .shapes import parse_input_shape

__all__ = ["Graph", "Op", "Tensor", "load", "parse_input_shape"]
