"""Single-operator files (`aoe --singleop OP.json`, `load(path, framework="singleop")`): operator
descriptions -> a graph of independent operators.

The file is JSON: one operator object or a list of them (AOE's single-operator description style):

    [{"op": "MatMulV2", "name": "mm0",
      "input_desc":  [{"shape": [1024, 4096], "type": "float16", "format": "ND"},
                      {"shape": [4096, 1024], "type": "float16", "format": "ND"}],
      "output_desc": [{"shape": [1024, 1024], "type": "float16", "format": "ND"}],
      "attr": [{"name": "transpose_x1", "type": "bool", "value": false}]}]

`attr` may also be a plain object `{"transpose_x1": false}`. Everything in the file is untrusted:
shapes and names are validated, and names stay data (never paths).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..errors import AoeError
from ..safeio import read_regular
from .ir import Graph, Op, Tensor

MAX_OPS = 10_000
MAX_FILE = 64 * 1024 * 1024
_OP_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def load_single_ops(path: str | os.PathLike[str]) -> Graph:
    """Read a single-operator description file into a graph of independent operators."""
    p = os.fspath(path)
    try:
        raw = read_regular(p, MAX_FILE, "single-operator file")
        data = json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
    except RecursionError:
        raise AoeError(f"{p} is nested too deeply to be a single-operator file") from None
    except FileNotFoundError:
        raise AoeError(f"single-operator file {p} does not exist") from None
    except IsADirectoryError:
        raise AoeError(f"{p} is a directory; give a JSON file describing the operators") from None
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise AoeError(f"{p} is not a valid single-operator JSON file: {exc}") from None
    except OSError as exc:
        raise AoeError(f"cannot read {p}: {exc.strerror or exc}") from None
    return single_ops_graph(data, name=os.path.basename(p))


def load_singleop_file(path: Path, shapes: dict[str, tuple[int, ...]], compute_dtype: str, name: str) -> Graph:
    """The model loader for framework "singleop": the file's operators give their own shapes and dtypes."""
    if shapes:
        raise AoeError("--input_shape does not apply to a single-operator file: each operator's input_desc "
                       "gives its shapes")
    # dtypes are the file's own; the graph keeps the whole file name (suffix included) as its name, as the
    # result files of `aoe --singleop` always have
    del compute_dtype, name
    return load_single_ops(path)


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not allowed in a single-operator file")


def single_ops_graph(data: Any, name: str = "singleop") -> Graph:
    """Build the graph from already-parsed JSON (an object or a list of objects)."""
    ops_in = data if isinstance(data, list) else [data]
    if not ops_in:
        raise AoeError("the single-operator file lists no operators")
    if len(ops_in) > MAX_OPS:
        raise AoeError(f"the single-operator file lists {len(ops_in)} operators; at most {MAX_OPS} are allowed")
    tensors: dict[str, Tensor] = {}
    ops: list[Op] = []
    names: set[str] = set()
    dynamic: list[dict[str, Any]] = []
    for i, d in enumerate(ops_in):
        where = f"operator #{i}"
        if not isinstance(d, dict):
            raise AoeError(f"{where} must be a JSON object with 'op', 'input_desc' and 'output_desc'")
        op_type = d.get("op", d.get("type"))
        if not isinstance(op_type, str) or not _OP_TYPE.fullmatch(op_type):
            raise AoeError(f"{where}: 'op' must be a CANN operator type such as MatMulV2, got {op_type!r}")
        op_name = d.get("name", f"{op_type}_{i}")
        if not isinstance(op_name, str) or not op_name or len(op_name) > 512 or "\x00" in op_name:
            raise AoeError(f"{where}: 'name' must be a non-empty string of at most 512 characters")
        if op_name in names:
            op_name = f"{op_name}#{i}"
        names.add(op_name)
        ins = _descs(d.get("input_desc"), f"{where} input_desc", required=True)
        outs = _descs(d.get("output_desc"), f"{where} output_desc", required=False)
        if any(t["dynamic"] for t in ins + outs):
            # a dynamic-shape operator is skipped, as the product skips dynamic operators: the others are tuned
            dynamic.append({"op": op_name, "onnx_type": op_type,
                            "reason": "dynamic shape (-1/-2 dimension): only static shapes are tuned"})
            continue
        in_names, out_names = [], []
        for j, t in enumerate(ins):
            tname = f"{op_name}:in{j}"
            tensors[tname] = Tensor(tname, t["shape"], t["type"], t["format"], "input" if j == 0 else "param")
            in_names.append(tname)
        for j, t in enumerate(outs):
            tname = f"{op_name}:out{j}"
            tensors[tname] = Tensor(tname, t["shape"], t["type"], t["format"], "activation")
            out_names.append(tname)
        ops.append(Op(op_name, op_type, in_names, out_names, _attrs(d.get("attr", d.get("attrs", {})), where)))
    g = Graph(name=name, tensors=tensors, ops=ops, inputs=[n for n, t in tensors.items() if t.kind == "input"],
              outputs=[o for op in ops for o in op.outputs], unsupported=dynamic)
    return g


def _descs(v: Any, where: str, required: bool) -> list[dict[str, Any]]:
    if v is None:
        if required:
            raise AoeError(f"{where} is missing: list the operator's tensors with shape, type and format")
        return []
    if not isinstance(v, list) or len(v) > 64:
        raise AoeError(f"{where} must be a list of at most 64 tensor descriptions")
    out = []
    for j, t in enumerate(v):
        if not isinstance(t, dict):
            raise AoeError(f"{where}[{j}] must be an object with 'shape', 'type' and 'format'")
        shape = t.get("shape")
        if not isinstance(shape, list) or len(shape) > 8 or not all(type(x) is int for x in shape):
            raise AoeError(f"{where}[{j}].shape must be a list of at most 8 integers")
        dyn = bool(shape) and all(x >= 1 or x in (-1, -2) for x in shape) and any(x < 0 for x in shape)
        if not dyn and any(x < 1 or x > (1 << 31) - 1 for x in shape):
            raise AoeError(f"{where}[{j}].shape {shape} must have static dimensions in [1, 2^31-1] "
                           f"(only static shapes can be tuned)")
        dtype = t.get("type", t.get("dtype", "float16"))
        fmt = t.get("format", "ND")
        if not isinstance(dtype, str) or not isinstance(fmt, str) or len(dtype) > 32 or len(fmt) > 32:
            raise AoeError(f"{where}[{j}]: 'type' and 'format' must be short strings")
        out.append({"shape": tuple(shape), "type": dtype.lower(), "format": fmt.upper(), "dynamic": dyn})
    return out


def _attrs(v: Any, where: str) -> dict[str, Any]:
    if isinstance(v, dict):
        items = list(v.items())
    elif isinstance(v, list):
        items = []
        for a in v:
            if not isinstance(a, dict) or not isinstance(a.get("name"), str):
                raise AoeError(f"{where}: each attr must be an object with 'name' and 'value'")
            items.append((a["name"], a.get("value")))
    else:
        raise AoeError(f"{where}: 'attr' must be a list of {{name, value}} objects or an object")
    out: dict[str, Any] = {}
    for k, val in items:
        if not isinstance(k, str) or len(k) > 128:
            raise AoeError(f"{where}: attribute names must be strings of at most 128 characters")
        if isinstance(val, (list, tuple)) and len(val) > 64:
            raise AoeError(f"{where}: attribute {k!r} is too long")
        out[k] = val
    # the IR's names for the common MatMul attributes
    for src, dst in (("transpose_a", "transpose_x1"), ("transpose_b", "transpose_x2"), ("adj_x1", "transpose_x1"),
                     ("adj_x2", "transpose_x2")):
        if src in out and dst not in out:
            out[dst] = out.pop(src)
    return out
