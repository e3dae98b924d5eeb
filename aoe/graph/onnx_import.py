"""ONNX frontend: an ONNX model (untrusted bytes) -> a static-shape Graph with CANN operator types.

One pass over the nodes in topological order does three things at once: it infers every tensor's
static shape with the rules below, it folds nodes whose inputs are all constants (the Shape -> Gather
-> Concat -> Reshape chains exporters emit) into constants, and it maps the remaining nodes to CANN
operators. Operators it does not know become ``Opaque`` (listed in ``graph.unsupported``); their
output shapes come from ONNX's own shape inference when it knows them. Afterwards the Erf/Tanh GELU
formulas, decomposed LayerNorms (pre-opset-17 exports) and MatMul+bias pairs are fused, and dead
operators are dropped.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..errors import AoeError
from .ir import Graph, Op, Tensor, unique_name
from .shapes import INPUT_SHAPE_SYNTAX, broadcast, check_shape

log = logging.getLogger("aoe.graph")

MAX_NODES = 1_000_000
# constant values are computed only up to this many elements; bigger constants keep shape and dtype
VALUE_CAP = 1 << 16
# when true, an unexpected exception inside the importer propagates instead of becoming an AoeError
# (tests set it so that fuzzing finds real bugs rather than hiding them behind the safety net)
STRICT = False

ONNX_DTYPES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "string",
    9: "bool", 10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64",
    15: "complex128", 16: "bfloat16", 17: "float8e4m3fn", 18: "float8e4m3fnuz", 19: "float8e5m2",
    20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1", 24: "float8e8m0",
}
FLOAT_DTYPES = {"float16", "float32", "float64", "bfloat16"}
_NP_OK = {"float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32",
          "int64", "uint64", "bool"}

# ONNX op -> CANN op for elementwise operators with one data input (attributes copied through)
UNARY = {
    "Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "Erf": "Erf", "Sqrt": "Sqrt", "Exp": "Exp",
    "Log": "Log", "Neg": "Neg", "Abs": "Abs", "Reciprocal": "Reciprocal", "Floor": "Floor",
    "Ceil": "Ceil", "Not": "LogicalNot", "Softplus": "Softplus", "Elu": "Elu", "LeakyRelu": "LeakyRelu",
    "HardSigmoid": "HardSigmoid", "HardSwish": "HardSwish", "Gelu": "Gelu", "Sign": "Sign",
    "Sin": "Sin", "Cos": "Cos", "Round": "Round", "Softsign": "Softsign", "Selu": "Selu",
    "Mish": "Mish", "IsNaN": "IsNan", "IsInf": "IsInf",
}
# ONNX op -> CANN op for broadcasting binary operators
BINARY = {
    "Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "RealDiv", "Pow": "Pow", "Max": "Maximum",
    "Min": "Minimum", "Equal": "Equal", "Less": "Less", "Greater": "Greater",
    "LessOrEqual": "LessEqual", "GreaterOrEqual": "GreaterEqual", "And": "LogicalAnd",
    "Or": "LogicalOr", "Xor": "LogicalXor", "Mod": "FloorMod", "PRelu": "PRelu",
}
BOOL_OUT = {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not",
            "IsNaN", "IsInf"}
REDUCE = {"ReduceSum": "ReduceSumD", "ReduceMean": "ReduceMeanD", "ReduceMax": "ReduceMaxD",
          "ReduceMin": "ReduceMinD", "ReduceProd": "ReduceProdD", "ReduceL2": "ReduceL2",
          "ReduceSumSquare": "ReduceSumSquare", "ReduceLogSumExp": "ReduceLogSumExp"}
VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout"}
# nodes that must never be folded even when their inputs are constant
NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
           "Bernoulli"}


class _Node:
    """The parts of an ONNX NodeProto the importer needs, read once (protobuf access is slow)."""

    __slots__ = ("index", "name", "op_type", "domain", "inputs", "outputs", "attrs", "has_graph")

    def __init__(self, index: int, proto: Any) -> None:
        from onnx import helper

        self.index = index
        self.op_type = _s(proto.op_type)
        # unnamed nodes get a stable name from their position, used in messages and as the op name
        self.name = _s(proto.name) or f"{self.op_type}_{index}"
        self.domain = _s(proto.domain)
        self.inputs = [_s(x) for x in proto.input]
        self.outputs = [_s(x) for x in proto.output]
        self.attrs: dict[str, Any] = {}
        self.has_graph = False
        for a in proto.attribute:
            if a.type in (5, 10):  # GRAPH, GRAPHS: control flow; kept opaque
                self.has_graph = True
                continue
            try:
                self.attrs[_s(a.name)] = helper.get_attribute_value(a)
            except Exception:  # malformed attribute: treat as absent, the rule reports what is missing
                continue

    def attr_ints(self, key: str, default: Sequence[int] | None = None) -> list[int] | None:
        v = self.attrs.get(key)
        if v is None:
            return None if default is None else list(default)
        if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
            return [int(x) for x in v]
        raise AoeError(f"node {self.name!r} ({self.op_type}): attribute {key!r} must be a list of integers")

    def attr_int(self, key: str, default: int) -> int:
        v = self.attrs.get(key, default)
        if isinstance(v, int) and not isinstance(v, bool):
            return int(v)
        raise AoeError(f"node {self.name!r} ({self.op_type}): attribute {key!r} must be an integer")

    def attr_float(self, key: str, default: float) -> float:
        v = self.attrs.get(key, default)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        raise AoeError(f"node {self.name!r} ({self.op_type}): attribute {key!r} must be a number")

    def attr_str(self, key: str, default: str) -> str:
        v = self.attrs.get(key, default)
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        if isinstance(v, str):
            return v
        raise AoeError(f"node {self.name!r} ({self.op_type}): attribute {key!r} must be a string")


class _Unsupported(Exception):
    """Raised by a rule when it cannot handle a node (the node then becomes Opaque)."""


def import_onnx_file(path: Path, input_shape: dict[str, tuple[int, ...]], compute_dtype: str,
                     defaults: dict[str, tuple[int, ...]], name: str) -> Graph:
    """Read an ONNX file (weights never loaded) and import it; every user-caused failure is an AoeError."""
    import onnx

    try:
        # external data is never followed: a model file cannot make aoe open other paths
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, RecursionError, ... on corrupt bytes
        raise AoeError(f"{str(path)!r} is not a readable ONNX model ({type(exc).__name__}: "
                       f"{str(exc)[:200]}); pass a valid .onnx file") from None
    return import_onnx_model(model, input_shape, compute_dtype, defaults, name)


def import_onnx_model(model: Any, input_shape: dict[str, tuple[int, ...]] | None = None,
                      compute_dtype: str = "float16", defaults: dict[str, tuple[int, ...]] | None = None,
                      name: str = "model") -> Graph:
    """Import an in-memory onnx.ModelProto."""
    try:
        return _Importer(model, input_shape or {}, compute_dtype, defaults or {}, name).run()
    except AoeError:
        raise
    except (RecursionError, MemoryError) as exc:
        raise AoeError(f"model {name!r} is too large or too deeply nested to import ({type(exc).__name__})") from None
    except Exception as exc:
        if STRICT:
            raise
        raise AoeError(f"model {name!r} could not be imported ({type(exc).__name__}: {str(exc)[:200]}); "
                       "the file is probably corrupt") from None


class _Importer:
    def __init__(self, model: Any, input_shape: dict[str, tuple[int, ...]], compute_dtype: str,
                 defaults: dict[str, tuple[int, ...]], name: str) -> None:
        self.model = model
        self.user_shapes = input_shape
        self.compute_dtype = compute_dtype
        self.defaults = defaults
        self.name = name
        self.shape: dict[str, tuple[int, ...]] = {}
        self.dtype: dict[str, str] = {}
        self.kind: dict[str, str] = {}
        self.values: dict[str, np.ndarray] = {}
        self.init_protos: dict[str, Any] = {}
        self.ops: list[Op] = []
        self.op_names: set[str] = set()
        self.name_counters: dict[str, int] = {}
        self.unsupported: list[dict[str, Any]] = []
        self.warned: set[str] = set()
        self.onnx_inferred: dict[str, tuple[tuple[int, ...], str]] | None = None
        self.opset = 1
        self.has_conv = False

    # ---- driver --------------------------------------------------------------------------------
    def run(self) -> Graph:
        g = self.model.graph
        if not self.model.HasField("graph") or (len(g.node) == 0 and len(g.input) == 0):
            raise AoeError(f"model {self.name!r} is not an ONNX model with a graph (no nodes, no inputs); "
                           "pass a valid .onnx file")
        if len(g.node) > MAX_NODES:
            raise AoeError(f"model {self.name!r} has {len(g.node)} nodes, more than the {MAX_NODES} aoe accepts")
        for imp in self.model.opset_import:
            if _s(imp.domain) in ("", "ai.onnx"):
                self.opset = max(1, int(imp.version))
        self._read_initializers(g)
        self._read_inputs(g)
        nodes = self._sorted_nodes(g)
        for node in nodes:
            self._node(node)
        outputs = [_s(o.name) for o in g.output]
        for o in outputs:
            if o not in self.shape:
                raise AoeError(f"model {self.name!r}: graph output {o!r} is not produced by any node")
        self._fuse_gelu(outputs)
        self._fuse_bias(outputs)
        self._dead_code(outputs)
        return self._build(outputs)

    def _ir_dtype(self, dtype: str) -> str:
        # mixed precision like ATC's default: fp32 tensors compute in fp16
        return "float16" if dtype == "float32" and self.compute_dtype == "float16" else dtype

    def _build(self, outputs: list[str]) -> Graph:
        inputs = [i for i in self.graph_inputs]
        names: dict[str, None] = dict.fromkeys(inputs)
        for op in self.ops:
            names.update(dict.fromkeys(op.inputs))
            names.update(dict.fromkeys(op.outputs))
        names.update(dict.fromkeys(outputs))
        tensors = {}
        for n in names:
            shape = self.shape[n]
            fmt = "NCHW" if self.has_conv and len(shape) == 4 else "ND"
            tensors[n] = Tensor(n, shape, self._ir_dtype(self.dtype[n]), fmt, self.kind[n])
        batch = 1
        if inputs and self.shape[inputs[0]]:
            batch = max(1, self.shape[inputs[0]][0])
        graph = Graph(_s(self.model.graph.name) or self.name, tensors, self.ops, inputs, outputs,
                      self.unsupported, batch, self.compute_dtype, False)
        graph.validate()
        return graph

    # ---- initializers and inputs ---------------------------------------------------------------
    def _read_initializers(self, g: Any) -> None:
        weight_slots: set[str] = set()
        for node in g.node:
            t = node.op_type
            if t in ("Gemm", "Conv", "ConvTranspose", "MatMul", "LayerNormalization", "PRelu"):
                weight_slots.update(_s(x) for x in node.input[1:])
            elif t == "BatchNormalization":
                weight_slots.update(_s(x) for x in node.input[1:3])
            elif t == "Gather" and node.input:
                weight_slots.add(_s(node.input[0]))
        for init in g.initializer:
            name = _s(init.name)
            if name in self.shape:
                raise AoeError(f"model {self.name!r}: initializer {name!r} is defined twice")
            dtype = self._onnx_dtype(init.data_type, f"initializer {name!r}")
            shape = check_shape(init.dims, f"initializer {name!r}")
            self.shape[name] = shape
            self.dtype[name] = dtype
            numel = math.prod(shape)
            trainable = dtype in FLOAT_DTYPES and (numel > 1 or name in weight_slots)
            self.kind[name] = "param" if trainable else "const"
            self.init_protos[name] = init

    def _onnx_dtype(self, code: int, what: str) -> str:
        d = ONNX_DTYPES.get(int(code))
        if d is None:
            raise AoeError(f"model {self.name!r}: {what} has unknown element type {code}")
        return d

    def _read_inputs(self, g: Any) -> None:
        infos = []
        for vi in g.input:
            vname = _s(vi.name)
            if vname in self.init_protos:
                continue  # old exporters list initializers as inputs too; the initializer wins
            if not vi.type.HasField("tensor_type"):
                raise AoeError(f"model {self.name!r}: input {vname!r} is not a tensor; aoe imports tensor inputs only")
            tt = vi.type.tensor_type
            dims: list[int | str | None] = []
            if tt.HasField("shape"):
                for d in tt.shape.dim:
                    if d.HasField("dim_value") and d.dim_value >= 0:
                        dims.append(int(d.dim_value))
                    elif d.HasField("dim_param") and d.dim_param:
                        dims.append(_s(d.dim_param))
                    else:
                        dims.append(None)
            else:
                dims = None  # type: ignore[assignment]
            infos.append((vname, self._onnx_dtype(tt.elem_type, f"input {vname!r}"), dims))
        names = [n for n, _, _ in infos]
        for n in self.user_shapes:
            if n not in names:
                raise AoeError(f"--input_shape names {n!r}, which is not an input of model {self.name!r} "
                               f"(inputs: {', '.join(repr(x) for x in names) or 'none'})")
        # a symbolic dimension fixed in one input (e.g. "batch") fixes it in every input
        symbols: dict[str, int] = {}
        for n, _, dims in infos:
            shape = self.user_shapes.get(n)
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
        self.graph_inputs: list[str] = []
        for n, dtype, dims in infos:
            shape = self.user_shapes.get(n)
            if shape is None:
                shape = self._resolve_input(n, dims, symbols, names)
            self.shape[n] = check_shape(shape, f"input {n!r}")
            self.dtype[n] = dtype
            self.kind[n] = "input"
            self.graph_inputs.append(n)

    def _resolve_input(self, n: str, dims: list[int | str | None] | None, symbols: dict[str, int],
                       names: list[str]) -> tuple[int, ...]:
        default = self.defaults.get(n)
        if dims is None:
            if default is not None:
                return default
            raise AoeError(f"input {n!r} of model {self.name!r} has no shape; give it with {INPUT_SHAPE_SYNTAX}")
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
                    f"input {n!r} of model {self.name!r} has a dynamic dimension {i} "
                    f"({'unnamed' if d is None else repr(d)} in shape {_fmt_dims(dims)}); aoe tunes static shapes only: fix it with "
                    f"--input_shape, e.g. --input_shape \"{example}\" (syntax: {INPUT_SHAPE_SYNTAX})")
        return tuple(out)

    def _sorted_nodes(self, g: Any) -> list[_Node]:
        import heapq

        nodes = [_Node(i, p) for i, p in enumerate(g.node)]
        producer: dict[str, int] = {}
        for node in nodes:
            for o in node.outputs:
                if not o:
                    continue
                if o in producer or o in self.shape:
                    raise AoeError(f"model {self.name!r}: tensor {o!r} is produced more than once "
                                   f"(again by node {node.name!r}); the graph is invalid")
                producer[o] = node.index
        indeg = [0] * len(nodes)
        users: list[list[int]] = [[] for _ in nodes]
        for node in nodes:
            for t in set(node.inputs):
                if not t or t in self.shape:
                    continue
                j = producer.get(t)
                if j is None:
                    raise AoeError(f"model {self.name!r}: node {node.name!r} ({node.op_type}) reads tensor {t!r}, "
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
            raise AoeError(f"model {self.name!r} has a cycle through node {stuck.name!r} ({stuck.op_type}); "
                           "an ONNX graph must be acyclic")
        return order

    # ---- values --------------------------------------------------------------------------------
    def value(self, name: str) -> np.ndarray | None:
        """The constant value of a tensor if it is known and small (never loads weights)."""
        if not name:
            return None
        v = self.values.get(name)
        if v is not None:
            return v
        proto = self.init_protos.get(name)
        if proto is None or self.kind.get(name) == "param":
            return None  # weights are never read: they are not needed and may not be there
        if math.prod(self.shape[name]) > VALUE_CAP or proto.data_location == 1:  # 1 = EXTERNAL
            return None
        if self.dtype[name] not in _NP_OK:
            return None
        try:
            from onnx import numpy_helper

            arr = numpy_helper.to_array(proto)
        except Exception:  # truncated or inconsistent data: the value is simply unknown
            return None
        if tuple(arr.shape) != self.shape[name]:
            return None
        self.values[name] = arr
        return arr

    def need_value(self, node: _Node, name: str, what: str) -> np.ndarray:
        v = self.value(name)
        if v is None:
            raise _Unsupported(f"{what} ({name!r}) is not a constant")
        return v

    def ints_of(self, node: _Node, idx: int, attr: str, what: str, required: bool = True) -> list[int] | None:
        """An integer list given as attribute ``attr`` (old opsets) or as constant input ``idx``."""
        a = node.attr_ints(attr)
        if a is not None:
            return a
        if idx < len(node.inputs) and node.inputs[idx]:
            v = self.need_value(node, node.inputs[idx], what)
            if v.dtype.kind not in "iub":
                raise AoeError(f"node {node.name!r} ({node.op_type}): {what} must be integers")
            return [int(x) for x in v.reshape(-1).tolist()]
        if required:
            raise _Unsupported(f"{what} missing")
        return None

    # ---- one node ------------------------------------------------------------------------------
    def _node(self, node: _Node) -> None:
        ins = [i for i in node.inputs if i]
        outs = [o for o in node.outputs if o]
        if not outs:
            return
        standard = node.domain in ("", "ai.onnx")
        foldable = (standard and node.op_type not in NO_FOLD and not node.has_graph
                    and (all(self.kind[i] == "const" for i in ins) or node.op_type in ("Shape", "Size")))
        if foldable:
            self._fold(node, outs)
            return
        if node.op_type == "Identity" and standard and len(ins) == 1 and self.kind[ins[0]] == "param":
            # exporters de-duplicate equal initial weights through Identity: each output is its own
            # parameter of the real model (it trains separately), not a runtime copy
            self.shape[outs[0]], self.dtype[outs[0]] = self.shape[ins[0]], self.dtype[ins[0]]
            self.kind[outs[0]] = "param"
            return
        if any(not _static(self.shape[i]) for i in ins):
            src = next(i for i in ins if not _static(self.shape[i]))
            self._opaque(node, f"input {src!r} has an unknown shape (downstream of an unsupported operator)")
            return
        handler = _HANDLERS.get(node.op_type) if standard and not node.has_graph else None
        if handler is None:
            why = "control flow" if node.has_graph else (
                f"operator domain {node.domain!r}" if not standard else "operator not supported")
            self._opaque(node, why)
            return
        _check_arity(node)
        try:
            handler(self, node)
        except _Unsupported as exc:
            self._opaque(node, str(exc))

    def _fold(self, node: _Node, outs: list[str]) -> None:
        """Evaluate a node whose inputs are all constant; its outputs become constants."""
        results = None
        ev = _EVAL.get(node.op_type)
        if ev is not None:
            ins = [self.value(i) if i else None for i in node.inputs]
            if node.op_type in ("Shape", "Size") or all(v is not None for i, v in zip(node.inputs, ins) if i):
                try:
                    with np.errstate(all="ignore"):  # x/0 in a constant is the model's business
                        results = ev(self, node, ins)
                except _TooBig:
                    results = None
                except AoeError:
                    raise
                except Exception as exc:
                    raise AoeError(f"model {self.name!r}: constant node {node.name!r} ({node.op_type}) cannot be "
                                   f"evaluated ({type(exc).__name__}: {str(exc)[:120]}); the model is invalid") from None
        if results is not None:
            for o, r in zip(node.outputs, results):
                if not o:
                    continue
                r = np.asarray(r)
                dtype = _np_to_dtype(r.dtype)
                self.shape[o] = check_shape(r.shape, f"constant {o!r}")
                self.dtype[o] = dtype
                self.kind[o] = "const"
                self.values[o] = r
            return
        # too big or not evaluable: the outputs are constants of known shape (folded at compile time)
        try:
            shapes = self.infer(node)
        except _Unsupported:
            shapes = self._onnx_shapes(node)
        for o, (shape, dtype) in zip(node.outputs, shapes):
            if o:
                self.shape[o] = shape
                self.dtype[o] = dtype
                self.kind[o] = "const"
        if any(not _static(s) for s, _ in shapes):
            self._note_unsupported(node, node.name or node.op_type, "constant of unknown shape")

    def infer(self, node: _Node) -> list[tuple[tuple[int, ...], str]]:
        """Output shapes and dtypes by this module's rules (raises _Unsupported when it has none)."""
        rule = _SHAPE_RULES.get(node.op_type)
        if rule is None:
            raise _Unsupported("no shape rule")
        _check_arity(node)
        res = rule(self, node)
        return [(check_shape(s, f"output {o!r} of node {node.name!r}"), d) for (s, d), o in zip(res, node.outputs)]

    def _onnx_shapes(self, node: _Node) -> list[tuple[tuple[int, ...], str]]:
        """Fallback: ONNX's shape inference (run once, lazily) for nodes this importer has no rule for."""
        if self.onnx_inferred is None:
            self.onnx_inferred = self._run_onnx_inference()
        out = []
        first_dtype = self.dtype.get(node.inputs[0], "float32") if node.inputs and node.inputs[0] else "float32"
        for o in node.outputs:
            shape, dtype = self.onnx_inferred.get(o, ((-1,), first_dtype))
            out.append((shape, dtype))
        return out

    def _run_onnx_inference(self) -> dict[str, tuple[tuple[int, ...], str]]:
        import onnx

        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        for vi in m.graph.input:
            if _s(vi.name) in self.graph_input_set and vi.type.HasField("tensor_type"):
                shape = vi.type.tensor_type.shape
                shape.ClearField("dim")
                for d in self.shape[_s(vi.name)]:
                    shape.dim.add().dim_value = d
        try:
            inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
        except Exception:
            return {}
        out: dict[str, tuple[tuple[int, ...], str]] = {}
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            if not vi.type.HasField("tensor_type"):
                continue
            tt = vi.type.tensor_type
            dtype = ONNX_DTYPES.get(tt.elem_type, "float32")
            if not tt.HasField("shape"):
                out[_s(vi.name)] = ((-1,), dtype)
                continue
            dims = tuple(int(d.dim_value) if d.HasField("dim_value") and 0 <= d.dim_value <= 2**31 - 1 else -1
                         for d in tt.shape.dim)
            out[_s(vi.name)] = (dims, dtype)
        return out

    @property
    def graph_input_set(self) -> set[str]:
        return set(self.graph_inputs)

    # ---- emitting operators --------------------------------------------------------------------
    def op_name(self, node: _Node, suffix: str = "") -> str:
        name = unique_name(node.name, self.op_names, suffix, self.name_counters)
        self.op_names.add(name)
        return name

    def emit(self, node: _Node, op_type: str, inputs: list[str], attrs: dict[str, Any],
             outs: list[tuple[str, tuple[int, ...], str]] | None = None, suffix: str = "") -> Op:
        """Append an IR operator; ``outs`` defaults to the node's outputs with inferred shapes."""
        if outs is None:
            shapes = self.infer(node)
            outs = [(o, s, d) for o, (s, d) in zip(node.outputs, shapes) if o]
        for o, s, d in outs:
            self.shape[o] = check_shape(s, f"output {o!r} of node {node.name!r}")
            self.dtype[o] = d
            self.kind[o] = "activation"
        op = Op(self.op_name(node, suffix), op_type, inputs, [o for o, _, _ in outs], attrs)
        self.ops.append(op)
        return op

    def _opaque(self, node: _Node, reason: str) -> None:
        try:
            shapes = self.infer(node) if node.domain in ("", "ai.onnx") and not node.has_graph else None
        except (_Unsupported, AoeError):
            shapes = None
        if shapes is None:
            shapes = self._onnx_shapes(node)
        outs = [(o, s, d) for o, (s, d) in zip(node.outputs, shapes) if o]
        for o, s, d in outs:
            self.shape[o] = s if not _static(s) else check_shape(s, f"output {o!r} of node {node.name!r}")
            self.dtype[o] = d
            self.kind[o] = "activation"
        op = Op(self.op_name(node), "Opaque", [i for i in node.inputs if i], [o for o, _, _ in outs],
                {"onnx_type": node.op_type, "domain": node.domain})
        self.ops.append(op)
        self._note_unsupported(node, op.name, reason)

    def _note_unsupported(self, node: _Node, op_name: str, reason: str) -> None:
        self.unsupported.append({"op": op_name, "onnx_type": node.op_type, "reason": reason})
        key = f"{node.domain}:{node.op_type}"
        if key not in self.warned:
            self.warned.add(key)
            log.warning("aoe: model %r: operator %r is not supported (%s); it is kept as an opaque node "
                        "that tuning skips", self.name, node.op_type, reason)

    # ---- post passes ---------------------------------------------------------------------------
    def _consumers(self) -> dict[str, list[int]]:
        cons: dict[str, list[int]] = {}
        for i, op in enumerate(self.ops):
            for t in op.inputs:
                cons.setdefault(t, []).append(i)
        return cons

    def _fuse_gelu(self, outputs: list[str]) -> None:
        """Fuse exported GELU formulas (checked numerically) and decomposed LayerNorms into single operators."""
        from .fusion import fuse_gelu, fuse_layernorm

        self.ops = fuse_gelu(self.ops, self.value, self.kind, self.shape, set(outputs), self.op_names)
        self.ops = fuse_layernorm(self.ops, self.value, self.kind, self.shape, set(outputs), self.op_names)

    def _fuse_bias(self, outputs: list[str]) -> None:
        """MatMul followed by Add of a 1-D parameter of size N becomes a MatMul with has_bias."""
        cons = self._consumers()
        producer = {t: i for i, op in enumerate(self.ops) for t in op.outputs}
        out_set = set(outputs)
        drop: set[int] = set()
        for i, op in enumerate(self.ops):
            if op.type != "Add" or len(op.inputs) != 2:
                continue
            for a, b in (op.inputs, op.inputs[::-1]):
                j = producer.get(a)
                if j is None or j in drop:
                    continue
                mm = self.ops[j]
                if (mm.type not in ("MatMulV2", "BatchMatMulV2") or mm.attrs.get("has_bias")
                        or len(cons.get(a, [])) != 1 or a in out_set):
                    continue
                n = self.shape[a][-1] if self.shape[a] else -1
                if self.kind.get(b) != "param" or self.shape[b] != (n,):
                    continue
                if self.shape[op.outputs[0]] != self.shape[a]:
                    continue
                mm.inputs.append(b)
                mm.attrs["has_bias"] = True
                mm.outputs = list(op.outputs)
                drop.add(i)
                break
        if drop:
            self.ops = [op for i, op in enumerate(self.ops) if i not in drop]

    def _dead_code(self, outputs: list[str]) -> None:
        """Drop operators none of whose outputs is used (exporters leave some, folding leaves more)."""
        live = set(outputs)
        keep = []
        for op in reversed(self.ops):
            if any(o in live for o in op.outputs):
                keep.append(op)
                live.update(op.inputs)
        self.ops = keep[::-1]


# ---- helpers ------------------------------------------------------------------------------------
def _s(v: Any) -> str:
    """A string field of the model as str: invalid UTF-8 arrives as bytes and is kept distinguishable."""
    return v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)


def _static(shape: tuple[int, ...]) -> bool:
    return all(d >= 0 for d in shape)


def _fmt_dims(dims: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _example_dims(name: str, dims: Sequence[int | str | None] | None) -> str:
    if dims is None:
        return "..."
    return ",".join(str(d) if isinstance(d, int) else "N" for d in dims)


def _np_to_dtype(dt: np.dtype) -> str:
    name = np.dtype(dt).name
    return name if name in _NP_OK else "float32"


def _axis(axis: int, rank: int, node: _Node) -> int:
    if not -rank <= axis < max(rank, 1):
        raise AoeError(f"node {node.name!r} ({node.op_type}): axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


# inputs that must be present (by position) for the rules of an ONNX operator; default 1
_ARITY = {**{k: 2 for k in BINARY}, "MatMul": 2, "Gemm": 2, "Conv": 2, "ConvTranspose": 2,
          "BatchNormalization": 5, "LayerNormalization": 2, "Gather": 2, "GatherElements": 2, "Where": 3,
          "Expand": 2, "Tile": 2, "Range": 3, "CastLike": 2, "TopK": 2, "Constant": 0}


def _check_arity(node: _Node) -> None:
    need = _ARITY.get(node.op_type, 1)
    if len(node.inputs) < need or not all(node.inputs[:need]):
        raise AoeError(f"node {node.name!r} ({node.op_type}) needs {need} input(s), has "
                       f"{len([i for i in node.inputs if i])}; the model is invalid")
    if not any(node.outputs):
        raise AoeError(f"node {node.name!r} ({node.op_type}) has no outputs")


class _TooBig(Exception):
    pass


def _guard(shape: Sequence[int]) -> None:
    n = 1
    for d in shape:
        n *= int(d)
    if n > VALUE_CAP:
        raise _TooBig()


# ---- shape rules --------------------------------------------------------------------------------
Rule = Callable[[_Importer, _Node], list[tuple[tuple[int, ...], str]]]


def _in(imp: _Importer, node: _Node, i: int) -> tuple[int, ...]:
    if i >= len(node.inputs) or not node.inputs[i]:
        raise AoeError(f"node {node.name!r} ({node.op_type}) is missing input {i}")
    return imp.shape[node.inputs[i]]


def _dt(imp: _Importer, node: _Node, i: int = 0) -> str:
    return imp.dtype[node.inputs[i]] if i < len(node.inputs) and node.inputs[i] else "float32"


def r_same(imp: _Importer, node: _Node):
    s, d = _in(imp, node, 0), _dt(imp, node)
    return [(s, "bool" if node.op_type in BOOL_OUT else d)] + [(s, "bool")] * (len(node.outputs) - 1)


def r_broadcast(imp: _Importer, node: _Node):
    shapes = [imp.shape[i] for i in node.inputs if i]
    if not shapes:
        raise AoeError(f"node {node.name!r} ({node.op_type}) has no inputs")
    out = shapes[0]
    for s in shapes[1:]:
        out = broadcast(out, s, f"node {node.name!r} ({node.op_type})")
    if node.op_type == "Where":
        return [(out, _dt(imp, node, 1))]
    return [(out, "bool" if node.op_type in BOOL_OUT else _dt(imp, node))]


def r_matmul(imp: _Importer, node: _Node):
    a, b = _in(imp, node, 0), _in(imp, node, 1)
    what = f"node {node.name!r} (MatMul)"
    if not a or not b:
        raise AoeError(f"{what}: operands must have rank >= 1")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise AoeError(f"{what}: inner dimensions differ ({list(a)} x {list(b)})")
    batch = broadcast(a2[:-2], b2[:-2], what)
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [(out, _dt(imp, node))]


def r_gemm(imp: _Importer, node: _Node):
    a, b = _in(imp, node, 0), _in(imp, node, 1)
    if len(a) != 2 or len(b) != 2:
        raise AoeError(f"node {node.name!r} (Gemm): A and B must be matrices, got {list(a)} and {list(b)}")
    m, k = (a[1], a[0]) if node.attr_int("transA", 0) else a
    k2, n = (b[1], b[0]) if node.attr_int("transB", 0) else b
    if k != k2:
        raise AoeError(f"node {node.name!r} (Gemm): inner dimensions differ ({list(a)} x {list(b)})")
    return [((m, n), _dt(imp, node))]


def _conv_geometry(imp: _Importer, node: _Node, x: tuple[int, ...], kernel: list[int], transpose: bool):
    """Strides, dilations, begin/end pads and output spatial dims of a Conv/ConvTranspose/Pool node."""
    nd = len(kernel)
    spatial = list(x[2:])
    if nd < 1 or nd != len(spatial):
        raise AoeError(f"node {node.name!r} ({node.op_type}): kernel {kernel} does not match input {list(x)}")
    strides = node.attr_ints("strides", [1] * nd)
    dil = node.attr_ints("dilations", [1] * nd)
    pads = node.attr_ints("pads", [0] * (2 * nd))
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd or min(strides + dil + [1]) < 1 or min(pads + [0]) < 0:
        raise AoeError(f"node {node.name!r} ({node.op_type}): strides/dilations/pads do not match a {nd}-D kernel")
    if min(kernel) < 1:
        raise AoeError(f"node {node.name!r} ({node.op_type}): kernel {kernel} is not positive")
    auto = node.attr_str("auto_pad", "NOTSET")
    ceil_mode = node.attr_int("ceil_mode", 0)
    out = []
    for i in range(nd):
        k_eff = (kernel[i] - 1) * dil[i] + 1
        if transpose:
            opad = (node.attr_ints("output_padding", [0] * nd) or [0] * nd)[i]
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                o = spatial[i] * strides[i]
                total = max(strides[i] * (spatial[i] - 1) + opad + k_eff - o, 0)
                lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
                pads[i], pads[i + nd] = lo, total - lo
            oshape = node.attr_ints("output_shape")
            if oshape and len(oshape) >= nd:
                o = oshape[len(oshape) - nd + i]
                total = max(strides[i] * (spatial[i] - 1) + opad + k_eff - o, 0)
                lo = total // 2 if auto != "SAME_LOWER" else total - total // 2
                pads[i], pads[i + nd] = lo, total - lo
            else:
                o = strides[i] * (spatial[i] - 1) + opad + k_eff - pads[i] - pads[i + nd]
        else:
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                o = -(-spatial[i] // strides[i])
                total = max((o - 1) * strides[i] + k_eff - spatial[i], 0)
                lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
                pads[i], pads[i + nd] = lo, total - lo
            elif auto == "VALID":
                pads[i] = pads[i + nd] = 0
            span = spatial[i] + pads[i] + pads[i + nd] - k_eff
            if ceil_mode:
                o = -(-span // strides[i]) + 1
                # the last window must start inside the input or its begin padding
                if (o - 1) * strides[i] >= spatial[i] + pads[i]:
                    o -= 1
            else:
                o = span // strides[i] + 1
        if o < 1:
            raise AoeError(f"node {node.name!r} ({node.op_type}): output would be empty for input {list(x)} "
                           "(kernel larger than the padded input?); check --input_shape")
        out.append(o)
    return strides, dil, pads, out


def r_conv(imp: _Importer, node: _Node):
    x, w = _in(imp, node, 0), _in(imp, node, 1)
    if len(x) < 3 or len(w) != len(x):
        raise AoeError(f"node {node.name!r} (Conv): input {list(x)} and weight {list(w)} ranks do not match")
    groups = node.attr_int("group", 1)
    if groups < 1 or w[0] % groups or x[1] != w[1] * groups:
        raise AoeError(f"node {node.name!r} (Conv): input channels {x[1]} do not match weight {list(w)} "
                       f"with groups={groups}")
    kernel = node.attr_ints("kernel_shape") or list(w[2:])
    _, _, _, out = _conv_geometry(imp, node, x, kernel, False)
    return [((x[0], w[0], *out), _dt(imp, node))]


def r_conv_transpose(imp: _Importer, node: _Node):
    x, w = _in(imp, node, 0), _in(imp, node, 1)
    if len(x) < 3 or len(w) != len(x):
        raise AoeError(f"node {node.name!r} (ConvTranspose): input {list(x)} and weight {list(w)} ranks do not match")
    groups = node.attr_int("group", 1)
    if groups < 1 or x[1] != w[0]:
        raise AoeError(f"node {node.name!r} (ConvTranspose): input channels {x[1]} do not match weight {list(w)}")
    kernel = node.attr_ints("kernel_shape") or list(w[2:])
    _, _, _, out = _conv_geometry(imp, node, x, kernel, True)
    return [((x[0], w[1] * groups, *out), _dt(imp, node))]


def r_pool(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    kernel = node.attr_ints("kernel_shape")
    if kernel is None or len(x) != len(kernel) + 2:
        raise AoeError(f"node {node.name!r} ({node.op_type}): kernel_shape does not match input {list(x)}")
    _, _, _, out = _conv_geometry(imp, node, x, kernel, False)
    shape = (x[0], x[1], *out)
    return [(shape, _dt(imp, node))] + [(shape, "int64")] * (len(node.outputs) - 1)


def r_global_pool(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    if len(x) < 3:
        raise AoeError(f"node {node.name!r} ({node.op_type}): input {list(x)} has no spatial dims")
    return [((x[0], x[1]) + (1,) * (len(x) - 2), _dt(imp, node))]


def r_batchnorm(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    if len(x) < 2:
        raise AoeError(f"node {node.name!r} (BatchNormalization): input {list(x)} has no channel dim")
    for i in range(1, min(5, len(node.inputs))):
        if node.inputs[i] and imp.shape[node.inputs[i]] != (x[1],):
            raise AoeError(f"node {node.name!r} (BatchNormalization): input {i} must have shape [{x[1]}]")
    return [(x, _dt(imp, node))] + [((x[1],), _dt(imp, node))] * (len(node.outputs) - 1)


def r_layernorm(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    axis = _axis(node.attr_int("axis", -1), len(x), node)
    stat = x[:axis] + (1,) * (len(x) - axis)
    return [(x, _dt(imp, node))] + [(stat, "float32")] * (len(node.outputs) - 1)


def _reduce_axes(imp: _Importer, node: _Node, rank: int) -> list[int] | None:
    axes = imp.ints_of(node, 1, "axes", "reduction axes", required=False)
    if axes is None:
        return None
    return sorted({_axis(a, rank, node) for a in axes})


def r_reduce(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    axes = _reduce_axes(imp, node, len(x))
    keep = node.attr_int("keepdims", 1)
    if axes is None or (not axes and not node.attr_int("noop_with_empty_axes", 0)):
        if axes == [] and node.attr_int("noop_with_empty_axes", 0):
            return [(x, _dt(imp, node))]
        axes = list(range(len(x)))
    if not axes and node.attr_int("noop_with_empty_axes", 0):
        return [(x, _dt(imp, node))]
    out = tuple(1 if i in axes else d for i, d in enumerate(x) if keep or i not in axes)
    return [(out, _dt(imp, node))]


def r_argreduce(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    axis = _axis(node.attr_int("axis", 0), len(x), node)
    keep = node.attr_int("keepdims", 1)
    out = tuple(1 if i == axis else d for i, d in enumerate(x) if keep or i != axis)
    return [(out, "int64")]


def r_transpose(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    perm = node.attr_ints("perm") or list(range(len(x)))[::-1]
    if sorted(perm) != list(range(len(x))):
        raise AoeError(f"node {node.name!r} (Transpose): perm {perm} is not a permutation of rank {len(x)}")
    return [(tuple(x[p] for p in perm), _dt(imp, node))]


def _reshape_target(imp: _Importer, node: _Node, x: tuple[int, ...], target: list[int]) -> tuple[int, ...]:
    allowzero = node.attr_int("allowzero", 0)
    out = []
    infer_at = -1
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(x):
                raise AoeError(f"node {node.name!r} (Reshape): 0 at position {i} but input has rank {len(x)}")
            out.append(x[i])
        elif d == -1:
            if infer_at >= 0:
                raise AoeError(f"node {node.name!r} (Reshape): more than one -1 in target shape {target}")
            infer_at = i
            out.append(1)
        elif d < 0:
            raise AoeError(f"node {node.name!r} (Reshape): invalid target dimension {d}")
        else:
            out.append(d)
    n_in, n_out = math.prod(x), math.prod(out)
    if infer_at >= 0:
        if n_out == 0 or n_in % n_out:
            raise AoeError(f"node {node.name!r} (Reshape): cannot reshape {list(x)} to {target}")
        out[infer_at] = n_in // n_out
    elif n_in != n_out:
        raise AoeError(f"node {node.name!r} (Reshape): cannot reshape {list(x)} ({n_in} elements) to {target}; "
                       "check --input_shape")
    return tuple(out)


def r_reshape(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    if node.op_type == "Reshape":
        target = imp.ints_of(node, 1, "shape", "target shape")
        return [(_reshape_target(imp, node, x, target), _dt(imp, node))]
    if node.op_type == "Flatten":
        axis = node.attr_int("axis", 1)
        axis = axis % len(x) if axis < 0 else axis
        if axis > len(x):
            raise AoeError(f"node {node.name!r} (Flatten): axis {axis} out of range for rank {len(x)}")
        return [((math.prod(x[:axis]), math.prod(x[axis:])), _dt(imp, node))]
    if node.op_type == "Squeeze":
        axes = imp.ints_of(node, 1, "axes", "squeeze axes", required=False)
        if axes is None:
            return [(tuple(d for d in x if d != 1), _dt(imp, node))]
        axes_n = {_axis(a, len(x), node) for a in axes}
        for a in axes_n:
            if x[a] != 1:
                raise AoeError(f"node {node.name!r} (Squeeze): dimension {a} of {list(x)} is not 1")
        return [(tuple(d for i, d in enumerate(x) if i not in axes_n), _dt(imp, node))]
    if node.op_type == "Unsqueeze":
        axes = imp.ints_of(node, 1, "axes", "unsqueeze axes")
        rank = len(x) + len(axes)
        axes_n = {_axis(a, rank, node) for a in axes}
        if len(axes_n) != len(axes):
            raise AoeError(f"node {node.name!r} (Unsqueeze): repeated axes {axes}")
        it = iter(x)
        return [(tuple(1 if i in axes_n else next(it) for i in range(rank)), _dt(imp, node))]
    # Identity, Dropout (mask output is bool)
    return [(x, _dt(imp, node))] + [(x, "bool")] * (len(node.outputs) - 1)


def r_concat(imp: _Importer, node: _Node):
    shapes = [imp.shape[i] for i in node.inputs if i]
    if not shapes or not shapes[0]:
        raise AoeError(f"node {node.name!r} (Concat) needs inputs of rank >= 1")
    rank = len(shapes[0])
    axis = _axis(node.attr_int("axis", 0), rank, node)
    total = 0
    for s in shapes:
        if len(s) != rank or any(s[i] != shapes[0][i] for i in range(rank) if i != axis):
            raise AoeError(f"node {node.name!r} (Concat): inputs {[list(s) for s in shapes]} do not match off axis {axis}")
        total += s[axis]
    out = list(shapes[0])
    out[axis] = total
    return [(tuple(out), _dt(imp, node))]


def _split_sizes(imp: _Importer, node: _Node, x: tuple[int, ...]) -> tuple[int, list[int]]:
    axis = _axis(node.attr_int("axis", 0), len(x), node)
    n_out = len(node.outputs)
    sizes = imp.ints_of(node, 1, "split", "split sizes", required=False)
    if sizes is None:
        parts = node.attr_int("num_outputs", n_out)
        if parts < 1:
            raise AoeError(f"node {node.name!r} (Split): num_outputs must be positive")
        chunk = -(-x[axis] // parts)
        sizes = [min(chunk, max(x[axis] - chunk * i, 0)) for i in range(parts)]
    if len(sizes) != n_out or sum(sizes) != x[axis] or min(sizes + [0]) < 0:
        raise AoeError(f"node {node.name!r} (Split): sizes {sizes} do not split dimension {axis} of {list(x)} "
                       f"into {n_out} outputs")
    return axis, sizes


def r_split(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    axis, sizes = _split_sizes(imp, node, x)
    return [(x[:axis] + (s,) + x[axis + 1:], _dt(imp, node)) for s in sizes]


def _slice_params(imp: _Importer, node: _Node, x: tuple[int, ...]):
    """Normalised begin/end/stride per dimension of an ONNX Slice, and the output shape."""
    if "starts" in node.attrs:  # opset < 10
        starts = node.attr_ints("starts") or []
        ends = node.attr_ints("ends") or []
        axes = node.attr_ints("axes")
        steps = None
    else:
        starts = imp.ints_of(node, 1, "", "slice starts") or []
        ends = imp.ints_of(node, 2, "", "slice ends") or []
        axes = imp.ints_of(node, 3, "", "slice axes", required=False)
        steps = imp.ints_of(node, 4, "", "slice steps", required=False)
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        raise AoeError(f"node {node.name!r} (Slice): starts/ends/axes/steps have different lengths")
    begin = [0] * len(x)
    end = list(x)
    stride = [1] * len(x)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(a, len(x), node)
        dim = x[a]
        if st == 0:
            raise AoeError(f"node {node.name!r} (Slice): step 0")
        if st > 0:
            s = max(0, min(dim, s + dim if s < 0 else s))
            e = max(0, min(dim, e + dim if e < 0 else e))
        else:
            s = max(-1, min(dim - 1, s + dim if s < 0 else s))
            e = max(-1, min(dim - 1, e + dim if e < 0 else e))
        begin[a], end[a], stride[a] = s, e, st
    out = tuple(max(0, -(-(e - b) // st)) if st > 0 else max(0, -(-(b - e) // -st))
                for b, e, st in zip(begin, end, stride))
    return begin, end, stride, out


def r_slice(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    return [(_slice_params(imp, node, x)[3], _dt(imp, node))]


def r_gather(imp: _Importer, node: _Node):
    x, idx = _in(imp, node, 0), _in(imp, node, 1)
    axis = _axis(node.attr_int("axis", 0), len(x), node)
    return [(x[:axis] + idx + x[axis + 1:], _dt(imp, node))]


def r_gather_elements(imp: _Importer, node: _Node):
    return [(_in(imp, node, 1), _dt(imp, node))]


def _pads_of(imp: _Importer, node: _Node, rank: int) -> list[int]:
    pads = imp.ints_of(node, 1, "pads", "pads")
    axes = imp.ints_of(node, 3, "", "pad axes", required=False) if "pads" not in node.attrs else None
    if axes is not None:
        full = [0] * (2 * rank)
        if len(pads) != 2 * len(axes):
            raise AoeError(f"node {node.name!r} (Pad): pads do not match axes")
        for j, a in enumerate(axes):
            a = _axis(a, rank, node)
            full[a], full[a + rank] = pads[j], pads[j + len(axes)]
        pads = full
    if len(pads) != 2 * rank:
        raise AoeError(f"node {node.name!r} (Pad): {len(pads)} pads for rank {rank}")
    return pads


def r_pad(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    pads = _pads_of(imp, node, len(x))
    out = tuple(d + pads[i] + pads[i + len(x)] for i, d in enumerate(x))
    if min(out + (0,)) < 0:
        raise AoeError(f"node {node.name!r} (Pad): negative output size")
    return [(out, _dt(imp, node))]


def r_cast(imp: _Importer, node: _Node):
    to = ONNX_DTYPES.get(node.attr_int("to", 1))
    if to is None:
        raise AoeError(f"node {node.name!r} (Cast): unknown target type")
    return [(_in(imp, node, 0), to)]


def r_castlike(imp: _Importer, node: _Node):
    return [(_in(imp, node, 0), _dt(imp, node, 1))]


def r_expand(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    shape = imp.ints_of(node, 1, "", "expand shape")
    if min(shape + [0]) < 0:
        raise AoeError(f"node {node.name!r} (Expand): negative target shape {shape}")
    return [(broadcast(x, tuple(shape), f"node {node.name!r} (Expand)"), _dt(imp, node))]


def r_tile(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    reps = imp.ints_of(node, 1, "", "tile repeats")
    if len(reps) != len(x) or min(reps + [0]) < 0:
        raise AoeError(f"node {node.name!r} (Tile): repeats {reps} do not match rank {len(x)}")
    return [(tuple(d * r for d, r in zip(x, reps)), _dt(imp, node))]


def r_shape(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    start = node.attr_int("start", 0)
    end = node.attr_int("end", len(x))
    return [((len(range(len(x))[start:end]),), "int64")]


def r_constant_of_shape(imp: _Importer, node: _Node):
    shape = imp.ints_of(node, 0, "", "ConstantOfShape shape")
    v = node.attrs.get("value")
    dtype = ONNX_DTYPES.get(int(v.data_type), "float32") if v is not None and hasattr(v, "data_type") else "float32"
    return [(tuple(shape), dtype)]


def r_range(imp: _Importer, node: _Node):
    vals = [imp.need_value(node, node.inputs[i], "range bound") if i < len(node.inputs) else None for i in range(3)]
    if any(v is None or v.size != 1 for v in vals):
        raise _Unsupported("range bounds must be scalars")
    s, l, d = (float(v.reshape(-1)[0]) for v in vals)  # type: ignore[union-attr]
    if d == 0 or not all(math.isfinite(v) for v in (s, l, d)):
        raise AoeError(f"node {node.name!r} (Range): invalid delta or bounds")
    n = max(math.ceil((l - s) / d), 0)
    return [((n,), _dt(imp, node))]


def r_constant(imp: _Importer, node: _Node):
    a = node.attrs
    if "value" in a and hasattr(a["value"], "dims"):
        t = a["value"]
        return [(tuple(t.dims), ONNX_DTYPES.get(int(t.data_type), "float32"))]
    for key, shape, dtype in (("value_float", (), "float32"), ("value_int", (), "int64")):
        if key in a:
            return [(shape, dtype)]
    for key, dtype in (("value_floats", "float32"), ("value_ints", "int64")):
        if key in a and isinstance(a[key], list):
            return [((len(a[key]),), dtype)]
    raise _Unsupported("Constant without a supported value attribute")


def r_topk(imp: _Importer, node: _Node):
    x = _in(imp, node, 0)
    axis = _axis(node.attr_int("axis", -1), len(x), node)
    k = imp.ints_of(node, 1, "k", "TopK k")[0]
    out = x[:axis] + (k,) + x[axis + 1:]
    return [(out, _dt(imp, node)), (out, "int64")]


def r_size(imp: _Importer, node: _Node):
    return [((), "int64")]


def r_clip(imp: _Importer, node: _Node):
    return [(_in(imp, node, 0), _dt(imp, node))]


def r_einsum_unsupported(imp: _Importer, node: _Node):
    raise _Unsupported("no shape rule")


_SHAPE_RULES: dict[str, Rule] = {
    **{k: r_same for k in UNARY},
    **{k: r_broadcast for k in BINARY}, "Sum": r_broadcast, "Mean": r_broadcast, "Where": r_broadcast,
    "MatMul": r_matmul, "Gemm": r_gemm, "Conv": r_conv, "ConvTranspose": r_conv_transpose,
    "MaxPool": r_pool, "AveragePool": r_pool, "LpPool": r_pool,
    "GlobalAveragePool": r_global_pool, "GlobalMaxPool": r_global_pool,
    "BatchNormalization": r_batchnorm, "LayerNormalization": r_layernorm,
    "InstanceNormalization": r_same, "LRN": r_same, "Softmax": r_same, "LogSoftmax": r_same,
    "Hardmax": r_same, "Clip": r_clip, "CumSum": r_same, "Trilu": r_same,
    **{k: r_reduce for k in REDUCE}, "ReduceL1": r_reduce, "ReduceLogSum": r_reduce,
    "ArgMax": r_argreduce, "ArgMin": r_argreduce,
    "Transpose": r_transpose, **{k: r_reshape for k in VIEWS},
    "Concat": r_concat, "Split": r_split, "Slice": r_slice, "Gather": r_gather,
    "GatherElements": r_gather_elements, "Pad": r_pad, "Cast": r_cast, "CastLike": r_castlike,
    "Expand": r_expand, "Tile": r_tile, "Shape": r_shape, "Size": r_size,
    "ConstantOfShape": r_constant_of_shape, "Range": r_range, "Constant": r_constant, "TopK": r_topk,
}


# ---- constant evaluation (numpy) -----------------------------------------------------------------
def _constant_value(node: _Node) -> np.ndarray:
    from onnx import numpy_helper

    a = node.attrs
    if "value" in a and hasattr(a["value"], "dims"):
        t = a["value"]
        n = math.prod(check_shape(t.dims, f"constant {node.name!r}"))
        if n > VALUE_CAP or t.data_location == 1:
            raise _TooBig()
        arr = numpy_helper.to_array(t)
        if tuple(arr.shape) != tuple(t.dims):
            raise ValueError("constant data does not match its dims")
        return arr
    if "value_float" in a:
        return np.array(a["value_float"], np.float32)
    if "value_floats" in a:
        return np.array(a["value_floats"], np.float32)
    if "value_int" in a:
        return np.array(a["value_int"], np.int64)
    if "value_ints" in a:
        return np.array(a["value_ints"], np.int64)
    raise _Unsupported("Constant without a supported value attribute")


def _ev_constant(imp, node, ins):
    return [_constant_value(node)]


def _ev_shape(imp, node, ins):
    x = imp.shape[node.inputs[0]]
    if not _static(x):
        raise _TooBig()
    start = node.attr_int("start", 0)
    end = node.attr_int("end", len(x))
    return [np.array(x[start:end], np.int64)]


def _ev_size(imp, node, ins):
    return [np.array(math.prod(imp.shape[node.inputs[0]]), np.int64)]


def _ev_infer_then(fn):
    """Evaluate only when the rule-inferred output is small enough."""
    def ev(imp, node, ins):
        for s, _ in imp.infer(node):
            _guard(s)
        return fn(imp, node, ins)
    return ev


def _np_binary(f):
    def ev(imp, node, ins):
        a, b = ins[0], ins[1]
        _guard(np.broadcast_shapes(a.shape, b.shape))
        return [np.asarray(f(a, b))]
    return ev


def _div(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return np.trunc(np.true_divide(a, np.where(b == 0, 1, b))).astype(np.result_type(a, b))
    return np.true_divide(a, b)


def _ev_cast(imp, node, ins):
    to = ONNX_DTYPES.get(node.attr_int("to", 1))
    if to not in _NP_OK:
        raise _TooBig()
    return [ins[0].astype(to)]


def _ev_gather(imp, node, ins):
    axis = node.attr_int("axis", 0)
    idx = ins[1].astype(np.int64)
    dim = ins[0].shape[axis]
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        raise AoeError(f"node {node.name!r} (Gather): constant index out of range")
    return [np.take(ins[0], np.where(idx < 0, idx + dim, idx), axis=axis)]


def _ev_reshape_like(imp, node, ins):
    (shape, _), = imp.infer(node)[:1]
    return [ins[0].reshape(shape)]


def _ev_concat(imp, node, ins):
    return [np.concatenate([v for v in ins if v is not None], axis=node.attr_int("axis", 0))]


def _ev_slice(imp, node, ins):
    begin, end, stride, _ = _slice_params(imp, node, tuple(ins[0].shape))
    sl = tuple(slice(b, (None if e < 0 and st < 0 else e), st) for b, e, st in zip(begin, end, stride))
    return [ins[0][sl]]


def _ev_constant_of_shape(imp, node, ins):
    shape = [int(x) for x in ins[0].reshape(-1)]
    _guard(shape)
    v = node.attrs.get("value")
    fill = np.zeros(1, np.float32)
    if v is not None and hasattr(v, "dims"):
        from onnx import numpy_helper

        fill = numpy_helper.to_array(v).reshape(-1)[:1]
    return [np.full(shape, fill[0] if fill.size else 0, dtype=fill.dtype)]


def _ev_range(imp, node, ins):
    (shape, _), = imp.infer(node)
    _guard(shape)
    s, l, d = (v.reshape(-1)[0] for v in ins[:3])
    return [np.arange(s, l, d, dtype=ins[0].dtype)]


def _ev_expand(imp, node, ins):
    (shape, _), = imp.infer(node)
    _guard(shape)
    return [np.broadcast_to(ins[0], shape).copy()]


def _ev_tile(imp, node, ins):
    (shape, _), = imp.infer(node)
    _guard(shape)
    return [np.tile(ins[0], [int(r) for r in ins[1].reshape(-1)])]


def _ev_where(imp, node, ins):
    _guard(np.broadcast_shapes(*(v.shape for v in ins)))
    return [np.where(ins[0], ins[1], ins[2])]


def _ev_transpose(imp, node, ins):
    return [np.transpose(ins[0], node.attr_ints("perm"))]


def _ev_reduce(f):
    def ev(imp, node, ins):
        (shape, _), = imp.infer(node)
        axes = _reduce_axes(imp, node, ins[0].ndim)
        if axes == [] and node.attr_int("noop_with_empty_axes", 0):
            return [ins[0]]
        res = f(ins[0], axis=tuple(axes) if axes else None, keepdims=bool(node.attr_int("keepdims", 1)))
        return [np.asarray(res).astype(ins[0].dtype).reshape(shape)]
    return ev


def _ev_split(imp, node, ins):
    axis, sizes = _split_sizes(imp, node, tuple(ins[0].shape))
    return np.split(ins[0], np.cumsum(sizes)[:-1], axis=axis)


def _ev_trilu(imp, node, ins):
    k = int(ins[1].reshape(-1)[0]) if len(ins) > 1 and ins[1] is not None else 0
    return [np.triu(ins[0], k) if node.attr_int("upper", 1) else np.tril(ins[0], k)]


def _ev_unary(f):
    return lambda imp, node, ins: [np.asarray(f(ins[0]))]


_EVAL: dict[str, Callable[[Any, _Node, list], list]] = {
    "Constant": _ev_constant, "Shape": _ev_shape, "Size": _ev_size,
    "Add": _np_binary(np.add), "Sub": _np_binary(np.subtract), "Mul": _np_binary(np.multiply),
    "Div": _np_binary(_div), "Equal": _np_binary(np.equal), "Less": _np_binary(np.less),
    "Greater": _np_binary(np.greater), "LessOrEqual": _np_binary(np.less_equal),
    "GreaterOrEqual": _np_binary(np.greater_equal), "And": _np_binary(np.logical_and),
    "Or": _np_binary(np.logical_or), "Max": _np_binary(np.maximum), "Min": _np_binary(np.minimum),
    "Pow": _np_binary(np.power), "Mod": _np_binary(np.mod),
    "Not": _ev_unary(np.logical_not), "Neg": _ev_unary(np.negative), "Abs": _ev_unary(np.abs),
    "Sqrt": _ev_unary(np.sqrt), "Floor": _ev_unary(np.floor), "Ceil": _ev_unary(np.ceil),
    "Reciprocal": _ev_unary(np.reciprocal), "Exp": _ev_unary(np.exp), "Identity": _ev_unary(np.array),
    "Cast": _ev_cast, "Gather": _ev_infer_then(_ev_gather),
    "Reshape": _ev_reshape_like, "Flatten": _ev_reshape_like, "Squeeze": _ev_reshape_like,
    "Unsqueeze": _ev_reshape_like, "Concat": _ev_infer_then(_ev_concat), "Slice": _ev_slice,
    "ConstantOfShape": _ev_constant_of_shape, "Range": _ev_range, "Expand": _ev_expand, "Tile": _ev_tile,
    "Where": _ev_where, "Transpose": _ev_transpose, "ReduceProd": _ev_reduce(np.prod),
    "ReduceSum": _ev_reduce(np.sum), "ReduceMax": _ev_reduce(np.max), "ReduceMin": _ev_reduce(np.min),
    "Split": _ev_split, "Trilu": _ev_trilu,
}


# ---- operator handlers: ONNX node -> IR operators ------------------------------------------------
Handler = Callable[[_Importer, _Node], None]


def _data_inputs(node: _Node) -> list[str]:
    return [i for i in node.inputs if i]


def h_unary(imp: _Importer, node: _Node) -> None:
    attrs = {k: v for k, v in node.attrs.items() if isinstance(v, (int, float, str, bytes))}
    if node.op_type == "Gelu":
        attrs = {"approximate": node.attr_str("approximate", "none")}
    imp.emit(node, UNARY[node.op_type], [node.inputs[0]], attrs)


def h_binary(imp: _Importer, node: _Node) -> None:
    ins = _data_inputs(node)
    if len(ins) != 2:
        if node.op_type in ("Max", "Min") and len(ins) > 2:
            raise _Unsupported(f"{node.op_type} with {len(ins)} inputs")
        if len(ins) == 1:
            imp.emit(node, "Identity", ins, {"view": True})
            return
        raise AoeError(f"node {node.name!r} ({node.op_type}) needs two inputs")
    imp.emit(node, BINARY[node.op_type], ins, {})


def h_sum(imp: _Importer, node: _Node) -> None:
    ins = _data_inputs(node)
    imp.emit(node, "AddN" if len(ins) > 1 else "Identity", ins,
             {"N": len(ins)} if len(ins) > 1 else {"view": True})


def h_where(imp: _Importer, node: _Node) -> None:
    imp.emit(node, "Select", _data_inputs(node), {})


def h_matmul(imp: _Importer, node: _Node) -> None:
    a, b = imp.shape[node.inputs[0]], imp.shape[node.inputs[1]]
    kind = "MatMulV2" if len(a) == 2 and len(b) == 2 else "BatchMatMulV2"
    imp.emit(node, kind, node.inputs[:2], {"transpose_x1": False, "transpose_x2": False, "has_bias": False})


def h_gemm(imp: _Importer, node: _Node) -> None:
    ins = _data_inputs(node)
    attrs: dict[str, Any] = {"transpose_x1": bool(node.attr_int("transA", 0)),
                             "transpose_x2": bool(node.attr_int("transB", 0)), "has_bias": len(ins) > 2}
    alpha, beta = node.attr_float("alpha", 1.0), node.attr_float("beta", 1.0)
    if alpha != 1.0:
        attrs["alpha"] = alpha
    if beta != 1.0 and len(ins) > 2:
        attrs["beta"] = beta
    imp.emit(node, "MatMulV2", ins, attrs)


def h_conv(imp: _Importer, node: _Node) -> None:
    x, w = imp.shape[node.inputs[0]], imp.shape[node.inputs[1]]
    if len(x) != 4:
        (shape, _), = imp.infer(node)  # validates even if we then keep it opaque
        raise _Unsupported(f"{len(x) - 2}-D convolution (only 2-D is mapped)")
    transpose = node.op_type == "ConvTranspose"
    kernel = node.attr_ints("kernel_shape") or list(w[2:])
    strides, dil, pads, _ = _conv_geometry(imp, node, x, kernel, transpose)
    ins = _data_inputs(node)
    attrs = {"strides": strides, "pads": [pads[0], pads[2], pads[1], pads[3]], "dilations": dil,
             "groups": node.attr_int("group", 1), "kernel": kernel, "has_bias": len(ins) > 2,
             "data_format": "NCHW"}
    if transpose:
        attrs["output_padding"] = node.attr_ints("output_padding", [0, 0])
    imp.has_conv = True
    imp.emit(node, "Conv2DTranspose" if transpose else "Conv2D", ins, attrs)


def h_pool(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    if len(x) != 4 or node.op_type == "LpPool":
        raise _Unsupported("only 2-D max/average pooling is mapped")
    kernel = node.attr_ints("kernel_shape") or []
    strides, dil, pads, _ = _conv_geometry(imp, node, x, kernel, False)
    attrs: dict[str, Any] = {"ksize": kernel, "strides": strides, "pads": [pads[0], pads[2], pads[1], pads[3]],
                             "ceil_mode": bool(node.attr_int("ceil_mode", 0)), "data_format": "NCHW"}
    if node.op_type == "MaxPool":
        if dil != [1, 1]:
            attrs["dilations"] = dil
        if len([o for o in node.outputs if o]) > 1:
            raise _Unsupported("MaxPool with indices output")
    else:
        attrs["count_include_pad"] = bool(node.attr_int("count_include_pad", 0))
    imp.has_conv = True
    imp.emit(node, "MaxPool" if node.op_type == "MaxPool" else "AvgPool", [node.inputs[0]], attrs)


def h_global_pool(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    imp.has_conv = True
    kind = "ReduceMeanD" if node.op_type == "GlobalAveragePool" else "ReduceMaxD"
    imp.emit(node, kind, [node.inputs[0]], {"axes": list(range(2, len(x))), "keep_dims": True})


def h_batchnorm(imp: _Importer, node: _Node) -> None:
    if node.attr_int("training_mode", 0) or len([o for o in node.outputs if o]) > 1:
        raise _Unsupported("BatchNormalization in training mode (export the model in eval mode)")
    ins = _data_inputs(node)
    if len(ins) != 5:
        raise AoeError(f"node {node.name!r} (BatchNormalization) needs 5 inputs")
    # running statistics are buffers, not trained parameters
    for t in ins[3:5]:
        if imp.kind.get(t) == "param":
            imp.kind[t] = "const"
    imp.has_conv = imp.has_conv or len(imp.shape[ins[0]]) == 4
    imp.emit(node, "BNInfer", ins, {"epsilon": node.attr_float("epsilon", 1e-5),
                                    "momentum": node.attr_float("momentum", 0.9)})


def h_layernorm(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    axis = _axis(node.attr_int("axis", -1), len(x), node)
    ins = _data_inputs(node)
    imp.emit(node, "LayerNorm", ins, {"begin_norm_axis": axis, "begin_params_axis": axis,
                                      "epsilon": node.attr_float("epsilon", 1e-5)})


def h_softmax(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    default = -1 if imp.opset >= 13 else 1
    axis = _axis(node.attr_int("axis", default), len(x), node)
    # before opset 13 softmax ran over the flattened trailing dims
    axes = [axis] if imp.opset >= 13 else list(range(axis, len(x)))
    kind = {"Softmax": "SoftmaxV2", "LogSoftmax": "LogSoftmaxV2"}[node.op_type]
    imp.emit(node, kind, [node.inputs[0]], {"axes": axes})


def h_reduce(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    axes = _reduce_axes(imp, node, len(x))
    if axes == [] and node.attr_int("noop_with_empty_axes", 0):
        imp.emit(node, "Identity", [node.inputs[0]], {"view": True})
        return
    if not axes:
        axes = list(range(len(x)))
    imp.emit(node, REDUCE[node.op_type], [node.inputs[0]],
             {"axes": axes, "keep_dims": bool(node.attr_int("keepdims", 1))})


def h_argreduce(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    imp.emit(node, "ArgMaxV2" if node.op_type == "ArgMax" else "ArgMin", [node.inputs[0]],
             {"dimension": _axis(node.attr_int("axis", 0), len(x), node),
              "keep_dims": bool(node.attr_int("keepdims", 1))})


def h_transpose(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    perm = node.attr_ints("perm") or list(range(len(x)))[::-1]
    imp.emit(node, "Transpose", [node.inputs[0]], {"perm": perm})


def h_view(imp: _Importer, node: _Node) -> None:
    (shape, dtype), *rest = imp.infer(node)
    kind = {"Dropout": "Identity"}.get(node.op_type, node.op_type)
    attrs: dict[str, Any] = {"view": True, "shape": list(shape)}
    if node.op_type in ("Squeeze", "Unsqueeze"):
        x = imp.shape[node.inputs[0]]
        rank = len(shape) if node.op_type == "Unsqueeze" else len(x)
        axes = imp.ints_of(node, 1, "axes", "axes", required=False)
        attrs["axes"] = sorted(_axis(a, rank, node) for a in axes) if axes is not None else \
            [i for i, d in enumerate(x) if d == 1]
    if node.op_type == "Flatten":
        attrs["axis"] = node.attr_int("axis", 1)
    outs = [(node.outputs[0], shape, dtype)]
    imp.emit(node, kind, [node.inputs[0]], attrs, outs)
    # Dropout's mask (inference: all true) is a constant
    for o, (s, d) in zip(node.outputs[1:], rest):
        if o:
            imp.shape[o], imp.dtype[o], imp.kind[o] = s, d, "const"


def h_concat(imp: _Importer, node: _Node) -> None:
    ins = _data_inputs(node)
    rank = len(imp.shape[ins[0]])
    imp.emit(node, "Concat", ins, {"axis": _axis(node.attr_int("axis", 0), rank, node), "N": len(ins)})


def h_split(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    axis, sizes = _split_sizes(imp, node, x)
    imp.emit(node, "SplitV", [node.inputs[0]], {"split_dim": axis, "size_splits": sizes, "num_split": len(sizes)})


def h_slice(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    begin, end, stride, out = _slice_params(imp, node, x)
    if out == x:
        imp.emit(node, "Identity", [node.inputs[0]], {"view": True})
        return
    imp.emit(node, "StridedSliceD", [node.inputs[0]], {"begin": begin, "end": end, "strides": stride})


def h_gather(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    imp.emit(node, "Gather", node.inputs[:2], {"axis": _axis(node.attr_int("axis", 0), len(x), node)})


def h_pad(imp: _Importer, node: _Node) -> None:
    x = imp.shape[node.inputs[0]]
    pads = _pads_of(imp, node, len(x))
    attrs: dict[str, Any] = {"paddings": [[pads[i], pads[i + len(x)]] for i in range(len(x))],
                             "mode": node.attr_str("mode", "constant")}
    if len(node.inputs) > 2 and node.inputs[2]:
        v = imp.value(node.inputs[2])
        if v is None:
            raise _Unsupported("non-constant pad value")
        attrs["constant_value"] = float(v.reshape(-1)[0]) if v.size else 0.0
    imp.emit(node, "Pad", [node.inputs[0]], attrs)


def h_cast(imp: _Importer, node: _Node) -> None:
    (shape, to), = imp.infer(node)
    src = imp.dtype[node.inputs[0]]
    attrs: dict[str, Any] = {"dst_type": imp._ir_dtype(to)}
    if imp._ir_dtype(src) == imp._ir_dtype(to):
        attrs["view"] = True  # a no-op once fp32 runs as fp16
    imp.emit(node, "Cast", [node.inputs[0]], attrs)


def h_expand(imp: _Importer, node: _Node) -> None:
    (shape, _), = imp.infer(node)
    if shape == imp.shape[node.inputs[0]]:
        imp.emit(node, "Identity", [node.inputs[0]], {"view": True})
        return
    imp.emit(node, "BroadcastToD", [node.inputs[0]], {"shape": list(shape)})


def h_tile(imp: _Importer, node: _Node) -> None:
    reps = imp.ints_of(node, 1, "", "tile repeats")
    imp.emit(node, "Tile", [node.inputs[0]], {"multiples": reps})


def h_clip(imp: _Importer, node: _Node) -> None:
    lo: float | None = None
    hi: float | None = None
    if "min" in node.attrs or "max" in node.attrs:
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
    else:
        for idx in (1, 2):
            if idx < len(node.inputs) and node.inputs[idx]:
                v = imp.value(node.inputs[idx])
                if v is None or v.size != 1:
                    raise _Unsupported("non-constant clip bounds")
                if idx == 1:
                    lo = float(v.reshape(-1)[0])
                else:
                    hi = float(v.reshape(-1)[0])
    if lo == 0.0 and hi == 6.0:
        imp.emit(node, "Relu6", [node.inputs[0]], {})
        return
    if lo == 0.0 and hi is None:
        imp.emit(node, "Relu", [node.inputs[0]], {})
        return
    imp.emit(node, "ClipByValue", [node.inputs[0]],
             {"min": float("-inf") if lo is None else lo, "max": float("inf") if hi is None else hi})


_HANDLERS: dict[str, Handler] = {
    **{k: h_unary for k in UNARY}, **{k: h_binary for k in BINARY}, "Sum": h_sum, "Where": h_where,
    "MatMul": h_matmul, "Gemm": h_gemm, "Conv": h_conv, "ConvTranspose": h_conv,
    "MaxPool": h_pool, "AveragePool": h_pool, "GlobalAveragePool": h_global_pool,
    "GlobalMaxPool": h_global_pool, "BatchNormalization": h_batchnorm,
    "LayerNormalization": h_layernorm, "Softmax": h_softmax, "LogSoftmax": h_softmax,
    **{k: h_reduce for k in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd")},
    "ArgMax": h_argreduce, "ArgMin": h_argreduce, "Transpose": h_transpose,
    **{k: h_view for k in VIEWS}, "Concat": h_concat, "Split": h_split, "Slice": h_slice,
    "Gather": h_gather, "Pad": h_pad, "Cast": h_cast, "Expand": h_expand, "Tile": h_tile,
    "Clip": h_clip,
}
