"""``aoe.graph.load``: the one loader of every model source.

A model is ``zoo:NAME`` (a bundled ONNX model) or a path. Its framework is given (AOE's codes 5 = ONNX,
3 = TensorFlow, or the names ``onnx``, ``tensorflow``, ``json``, ``singleop``) or told from the model:
``zoo:`` prefix, ``.json`` suffix (the project's JSON graph), else ONNX. Each framework's loader is
named in ``_LOADERS`` and imported only when a model of that framework is loaded, so an optional
framework costs nothing (and needs nothing installed) until it is used.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Callable, Mapping

from ..errors import AoeError
from ..safeio import read_regular
from .ir import Graph
from .shapes import parse_input_shape
from .training import derive_training
from .zoo import zoo_model

COMPUTE_DTYPES = ("float16", "float32")
MAX_JSON_BYTES = 1 << 30

# framework -> "module:function"; every loader is fn(path: Path, shapes, compute_dtype, name) -> Graph
_LOADERS = {
    "onnx": "aoe.graph.onnx:import_onnx_file",
    "json": "aoe.graph.loader:_load_json",
    "singleop": "aoe.graph.singleop:load_singleop_file",
    "tensorflow": "aoe.graph.tf:load_tf",
}
# AOE's --framework codes for the frameworks above, and the ones this re-creation does not import
_CODES = {5: "onnx", 3: "tensorflow"}
_UNSUPPORTED_CODES = {0: "Caffe", 1: "MindSpore"}
# what to do when a framework's loader cannot be imported (an optional extra that is not installed)
_EXTRAS = {"tensorflow": "TensorFlow models need the tensorflow extra: pip install 'aoe[tensorflow]'"}
# a TensorFlow SavedModel is a directory; every other model is one regular file
_DIRECTORY_MODELS = {"tensorflow"}
_VALID = "5 or 'onnx', 3 or 'tensorflow', 'json', 'singleop', or None to tell from the model"


def load(model: str | os.PathLike, input_shape: str | Mapping[str, object] | None = None, *,
         training: bool = False, compute_dtype: str = "float16", framework: int | str | None = None) -> Graph:
    """Load a model (``zoo:NAME`` or a path; see the module docstring for ``framework``) as a static-shape Graph."""
    if compute_dtype not in COMPUTE_DTYPES:
        raise AoeError(f"compute_dtype must be one of {', '.join(COMPUTE_DTYPES)}, not {compute_dtype!r}")
    fw = framework_name(framework)
    shapes = parse_input_shape(input_shape)
    spec = os.fspath(model) if isinstance(model, os.PathLike) else model
    if not isinstance(spec, str) or not spec:
        raise AoeError("no model given: pass a path to an .onnx file, a .json graph, or zoo:NAME")
    if training and fw == "singleop":
        raise AoeError("--training cannot be used with --singleop: a single-operator file describes independent "
                       "operators, not a model to train")

    if spec.startswith("zoo:"):
        if fw not in (None, "onnx"):
            raise AoeError(f"{spec} is a bundled ONNX model: load it with framework 5 (onnx) or without one")
        path, defaults, name = zoo_model(spec[4:])
        graph = _loader("onnx")(path, shapes, compute_dtype, name, defaults=defaults)
    else:
        path = Path(spec)
        is_json = path.suffix.lower() == ".json"
        if fw is None or (fw == "onnx" and is_json):
            # a .json graph is the project's saved form of an imported ONNX model, so framework 5 accepts it
            fw = "json" if is_json else "onnx"
        if not path.exists():
            raise AoeError(_missing(fw, spec))
        if not (path.is_file() or (fw in _DIRECTORY_MODELS and path.is_dir())):
            raise AoeError(f"model path {spec!r} is not a regular file")
        graph = _loader(fw)(path, shapes, compute_dtype, path.stem)

    if training and not graph.training:
        graph = derive_training(graph)
    return graph


def check_model_ref(model: str, input_shape: str | None = None) -> None:
    """What `load` checks before reading a model (a known zoo name or an existing file, valid shapes),
    without reading it: AoeError otherwise."""
    parse_input_shape(input_shape)
    if not model:
        raise AoeError("no model given: pass a path to an .onnx file, a .json graph, or zoo:NAME")
    if model.startswith("zoo:"):
        zoo_model(model[4:])
        return
    path = Path(model)
    if not path.exists():
        raise AoeError(_missing("json" if path.suffix.lower() == ".json" else "onnx", model))
    if not (path.is_file() or path.is_dir()):
        raise AoeError(f"model path {model!r} is not a regular file")


def framework_name(framework: int | str | None) -> str | None:
    """The loader name of a framework value (AOE's code 5 or 3, as int or text, or a name); None stays None."""
    if framework is None:
        return None
    code: int | None = None
    if isinstance(framework, int) and not isinstance(framework, bool):
        code = framework
    elif isinstance(framework, str):
        v = framework.strip().lower()
        if v in _LOADERS:
            return v
        if v.isascii() and v.isdigit() and len(v) < 4:  # "5" as the command line gives it
            code = int(v)
    if code in _CODES:
        return _CODES[code]
    if code in _UNSUPPORTED_CODES:
        raise AoeError(f"framework {code} ({_UNSUPPORTED_CODES[code]}) is not supported by this re-creation; "
                       f"export the model to ONNX and use framework 5 (valid: {_VALID})")
    shown = repr(framework)
    raise AoeError(f"framework {shown[:40]}{'...' if len(shown) > 40 else ''} is not valid; use {_VALID}")


def _loader(framework: str) -> Callable[..., Graph]:
    module, _, function = _LOADERS[framework].partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        # the framework's own package missing (an extra not installed) is the user's to fix; a missing
        # module of aoe itself is a bug and stays an ImportError
        if framework not in _EXTRAS or (missing.startswith("aoe.") and not module.startswith(missing)):
            raise
        raise AoeError(_EXTRAS[framework]) from None
    fn = getattr(mod, function, None)
    if fn is None:  # e.g. a namespace package left behind by a partial install of the frontend
        if framework in _EXTRAS:
            raise AoeError(_EXTRAS[framework])
        raise ImportError(f"{module} has no loader {function}()")
    return fn


def _missing(framework: str, spec: str) -> str:
    if framework == "singleop":
        return f"single-operator file {spec!r} does not exist"
    if framework == "tensorflow":
        return f"TensorFlow model {spec!r} does not exist"
    return (f"model file {spec!r} does not exist; pass an .onnx file, a .json graph from `aoe graph --json`, "
            "or one of the bundled zoo:NAME models")


def _load_json(path: Path, shapes: dict[str, tuple[int, ...]], compute_dtype: str, name: str) -> Graph:
    text = read_regular(path, MAX_JSON_BYTES, "graph file")
    try:
        graph = Graph.from_json(text)
    except RecursionError:
        raise AoeError(f"graph file {str(path)!r} is nested too deeply to be a graph aoe wrote") from None
    # a JSON graph is already static: --input_shape may only restate it
    for tname, shape in shapes.items():
        t = graph.tensors.get(tname)
        if t is None or tname not in graph.inputs:
            raise AoeError(f"--input_shape names {tname!r}, which is not an input of graph {graph.name!r} "
                           f"(inputs: {', '.join(graph.inputs) or 'none'})")
        if t.shape != shape:
            raise AoeError(f"graph {graph.name!r} was saved with {tname} of shape {list(t.shape)}; a JSON graph "
                           "cannot be re-shaped, re-import the ONNX model with the new --input_shape")
    # a saved graph keeps its own name and the dtypes it was imported with (graph.compute_dtype)
    del compute_dtype, name
    return graph
