"""``aoe.graph.load``: one entry point for .onnx files, the project's JSON graphs and ``zoo:NAME``."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from ..errors import AoeError
from .ir import Graph
from .shapes import parse_input_shape

COMPUTE_DTYPES = ("float16", "float32")
MAX_JSON_BYTES = 1 << 30


def load(model: str | os.PathLike, input_shape: str | Mapping[str, object] | None = None,
         training: bool = False, compute_dtype: str = "float16") -> Graph:
    """Load a model (``.onnx`` path, ``.json`` graph, or ``zoo:NAME``) as a static-shape Graph."""
    if compute_dtype not in COMPUTE_DTYPES:
        raise AoeError(f"compute_dtype must be one of {', '.join(COMPUTE_DTYPES)}, not {compute_dtype!r}")
    shapes = parse_input_shape(input_shape)
    spec = os.fspath(model) if isinstance(model, os.PathLike) else model
    if not isinstance(spec, str) or not spec:
        raise AoeError("no model given: pass a path to an .onnx file, a .json graph, or zoo:NAME")

    if spec.startswith("zoo:"):
        from .zoo import zoo_model

        path, defaults, name = zoo_model(spec[4:])
        graph = _import_onnx(path, shapes, compute_dtype, defaults=defaults, name=name)
    else:
        path = Path(spec)
        if not path.exists():
            raise AoeError(f"model file {spec!r} does not exist; pass an .onnx file, a .json graph "
                           "from `aoe graph --json`, or one of the bundled zoo:NAME models")
        if not path.is_file():
            raise AoeError(f"model path {spec!r} is not a regular file")
        if path.suffix.lower() == ".json":
            graph = _load_json(path, shapes, compute_dtype)
        else:
            graph = _import_onnx(path, shapes, compute_dtype, defaults={}, name=path.stem)

    if training and not graph.training:
        from .training import derive_training

        graph = derive_training(graph)
    return graph


def _import_onnx(path: Path, shapes: dict[str, tuple[int, ...]], compute_dtype: str,
                 defaults: dict[str, tuple[int, ...]], name: str) -> Graph:
    from .onnx import import_onnx_file

    return import_onnx_file(path, shapes, compute_dtype, name, defaults=defaults)


def _load_json(path: Path, shapes: dict[str, tuple[int, ...]], compute_dtype: str) -> Graph:
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise AoeError(f"graph file {str(path)!r} is larger than 1 GiB; that is not a graph aoe wrote")
        text = path.read_bytes()
    except OSError as exc:
        raise AoeError(f"cannot read graph file {str(path)!r}: {exc.strerror}") from None
    graph = Graph.from_json(text)
    # a JSON graph is already static: --input_shape may only restate it
    for name, shape in shapes.items():
        t = graph.tensors.get(name)
        if t is None or name not in graph.inputs:
            raise AoeError(f"--input_shape names {name!r}, which is not an input of graph {graph.name!r} "
                           f"(inputs: {', '.join(graph.inputs) or 'none'})")
        if t.shape != shape:
            raise AoeError(f"graph {graph.name!r} was saved with {name} of shape {list(t.shape)}; a JSON graph "
                           "cannot be re-shaped, re-import the ONNX model with the new --input_shape")
    del compute_dtype  # a saved graph keeps the dtypes it was imported with (graph.compute_dtype)
    return graph
