"""Reading an ONNX graph's initializers and inputs (static shapes fixed), and ordering its nodes."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from ...errors import AoeError
from ..shapes import INPUT_SHAPE_SYNTAX, check_shape
from .node import Node, onnx_str
from .tables import FLOAT_DTYPES, ONNX_DTYPES

if TYPE_CHECKING:
    from .importer import _Importer


def read_initializers(imp: _Importer, g: Any) -> None:
    """Record every initializer's shape and dtype; float weights in weight slots are trained parameters."""
    weight_slots: set[str] = set()
    const_slots: set[str] = set()
    for node in g.node:
        t = node.op_type
        if t in ("Gemm", "Conv", "ConvTranspose", "MatMul", "LayerNormalization", "PRelu"):
            weight_slots.update(onnx_str(x) for x in node.input[1:])
        elif t == "BatchNormalization":
            weight_slots.update(onnx_str(x) for x in node.input[1:3])
        elif t == "Gather" and node.input:
            weight_slots.add(onnx_str(node.input[0]))
        elif t in ("Resize", "Upsample"):
            const_slots.update(onnx_str(x) for x in node.input[1:])  # roi, scales, sizes: never trained
    for init in g.initializer:
        name = onnx_str(init.name)
        if name in imp.shape:
            raise AoeError(f"model {imp.name!r}: initializer {name!r} is defined twice")
        dtype = _onnx_dtype(imp, init.data_type, f"initializer {name!r}")
        shape = check_shape(init.dims, f"initializer {name!r}")
        imp.shape[name] = shape
        imp.dtype[name] = dtype
        numel = math.prod(shape)
        trainable = dtype in FLOAT_DTYPES and (numel > 1 or name in weight_slots) and name not in const_slots
        imp.kind[name] = "param" if trainable else "const"
        imp.init_protos[name] = init


def _onnx_dtype(imp: _Importer, code: int, what: str) -> str:
    d = ONNX_DTYPES.get(int(code))
    if d is None:
        raise AoeError(f"model {imp.name!r}: {what} has unknown element type {code}")
    return d


def read_inputs(imp: _Importer, g: Any) -> None:
    """Fix every graph input's static shape from --input_shape, shared symbols and the defaults."""
    infos = []
    for vi in g.input:
        vname = onnx_str(vi.name)
        if vname in imp.init_protos:
            continue  # old exporters list initializers as inputs too; the initializer wins
        if not vi.type.HasField("tensor_type"):
            raise AoeError(f"model {imp.name!r}: input {vname!r} is not a tensor; aoe imports tensor inputs only")
        tt = vi.type.tensor_type
        dims: list[int | str | None] = []
        if tt.HasField("shape"):
            for d in tt.shape.dim:
                if d.HasField("dim_value") and d.dim_value >= 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(onnx_str(d.dim_param))
                else:
                    dims.append(None)
        else:
            dims = None  # type: ignore[assignment]
        infos.append((vname, _onnx_dtype(imp, tt.elem_type, f"input {vname!r}"), dims))
    names = [n for n, _, _ in infos]
    for n in imp.user_shapes:
        if n not in names:
            raise AoeError(f"--input_shape names {n!r}, which is not an input of model {imp.name!r} "
                           f"(inputs: {', '.join(repr(x) for x in names) or 'none'})")
    # a symbolic dimension fixed in one input (e.g. "batch") fixes it in every input
    symbols: dict[str, int] = {}
    for n, _, dims in infos:
        shape = imp.user_shapes.get(n)
        if shape is None or dims is None:
            continue
        if len(shape) != len(dims):
            raise AoeError(f"--input_shape gives {n!r} rank {len(shape)}, but the model's input has rank "
                           f"{len(dims)} ({_fmt_dims(dims)})")
        for i, (want, have) in enumerate(zip(shape, dims)):
            if isinstance(have, int) and have != want:
                raise AoeError(f"--input_shape gives {n!r} dimension {i} = {want}, but the model fixes it "
                               f"to {have} ({_fmt_dims(dims)}); re-export the model with that axis dynamic")
            if isinstance(have, str):
                symbols.setdefault(have, want)
    for n, dtype, dims in infos:
        shape = imp.user_shapes.get(n)
        if shape is None:
            shape = _resolve_input(imp, n, dims, symbols, names)
        imp.shape[n] = check_shape(shape, f"input {n!r}")
        imp.dtype[n] = dtype
        imp.kind[n] = "input"
        imp.graph_inputs.append(n)


def _resolve_input(imp: _Importer, n: str, dims: list[int | str | None] | None, symbols: dict[str, int],
                   names: list[str]) -> tuple[int, ...]:
    default = imp.defaults.get(n)
    if dims is None:
        if default is not None:
            return default
        raise AoeError(f"input {n!r} of model {imp.name!r} has no shape; give it with {INPUT_SHAPE_SYNTAX}")
    if default is not None and len(default) != len(dims):
        default = None
    out = []
    for i, d in enumerate(dims):
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, str) and d in symbols:
            out.append(symbols[d])
        elif default is not None:
            out.append(default[i])
        else:
            example = ";".join(f"{x}:{_example_dims(x, dims if x == n else None)}" for x in names)
            raise AoeError(
                f"input {n!r} of model {imp.name!r} has a dynamic dimension {i} "
                f"({'unnamed' if d is None else repr(d)} in shape {_fmt_dims(dims)}); aoe tunes static shapes only: fix it with "
                f"--input_shape, e.g. --input_shape \"{example}\" (syntax: {INPUT_SHAPE_SYNTAX})")
    return tuple(out)


def sorted_nodes(imp: _Importer, g: Any) -> list[Node]:
    """The nodes in topological order (ties by file position); refuses duplicate producers and cycles."""
    import heapq

    nodes = [Node(i, p) for i, p in enumerate(g.node)]
    producer: dict[str, int] = {}
    for node in nodes:
        for o in node.outputs:
            if not o:
                continue
            if o in producer or o in imp.shape:
                raise AoeError(f"model {imp.name!r}: tensor {o!r} is produced more than once "
                               f"(again by node {node.name!r}); the graph is invalid")
            producer[o] = node.index
    indeg = [0] * len(nodes)
    users: list[list[int]] = [[] for _ in nodes]
    for node in nodes:
        for t in set(node.inputs):
            if not t or t in imp.shape:
                continue
            j = producer.get(t)
            if j is None:
                raise AoeError(f"model {imp.name!r}: node {node.name!r} ({node.op_type}) reads tensor {t!r}, "
                               "which no node, input or initializer defines")
            indeg[node.index] += 1
            users[j].append(node.index)
    ready = [n.index for n in nodes if indeg[n.index] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(nodes[i])
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        stuck = next(n for n in nodes if indeg[n.index] > 0)
        raise AoeError(f"model {imp.name!r} has a cycle through node {stuck.name!r} ({stuck.op_type}); "
                       "an ONNX graph must be acyclic")
    return order


def _fmt_dims(dims: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _example_dims(name: str, dims: Sequence[int | str | None] | None) -> str:
    if dims is None:
        return "..."
    return ",".join(str(d) if isinstance(d, int) else "N" for d in dims)
