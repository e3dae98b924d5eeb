"""The walk over an ONNX graph: limits, the per-node dispatch (fold, map, or keep opaque) and the post passes.

One pass over the nodes in topological order does three things at once: it infers every tensor's
static shape (``shape_rules``), it folds nodes whose inputs are all constants (the Shape -> Gather
-> Concat -> Reshape chains exporters emit) into constants (``fold``), and it maps the remaining
nodes to CANN operators (``mapping``). Operators it does not know become ``Opaque`` (listed in
``graph.unsupported``); their output shapes come from ONNX's own shape inference when it knows them.
Afterwards the Erf/Tanh GELU formulas, decomposed LayerNorms (pre-opset-17 exports) and MatMul+bias
pairs are fused, and dead operators are dropped.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import AoeError
from ..fusion import fuse_gelu, fuse_layernorm
from ..ir import Graph, Op, Tensor, unique_name
from ..shapes import MAX_RANK, check_shape
from .fold import fold_node
from .inputs import read_initializers, read_inputs, sorted_nodes
from .mapping import HANDLERS
from .node import Node, Unsupported, check_arity, is_static, onnx_str
from .shape_rules import SHAPE_RULES
from .tables import NO_FOLD, NP_DTYPES, ONNX_DTYPES, VALUE_CAP

log = logging.getLogger("aoe.graph")

MAX_NODES = 1_000_000
# Protobuf cannot parse messages of 2 GiB or more; refuse before reading such a file into memory.
MAX_MODEL_BYTES = 2**31 - 1
# when true, an unexpected exception inside the importer propagates instead of becoming an AoeError
# (tests set it so that fuzzing finds real bugs rather than hiding them behind the safety net)
STRICT = False


def import_onnx_file(path: Path, shapes: dict[str, tuple[int, ...]], compute_dtype: str, name: str, *,
                     defaults: dict[str, tuple[int, ...]] | None = None) -> Graph:
    """Read an ONNX file (weights never loaded) and import it; every user-caused failure is an AoeError."""
    # onnx is imported here, not at module level: aoe.graph must import (and load JSON graphs or
    # single-operator files) without paying for protobuf and onnx until an ONNX model is loaded
    import onnx

    try:
        size = path.stat().st_size
    except OSError as exc:
        raise AoeError(f"cannot read model file {str(path)!r}: {exc.strerror}") from None
    if size > MAX_MODEL_BYTES:
        raise AoeError(f"model file {str(path)!r} is {size} bytes; ONNX files must be under 2 GiB "
                       "(store the weights as external data)")
    try:
        # external data is never followed: a model file cannot make aoe open other paths
        model = onnx.load(str(path), load_external_data=False)
    except Exception as exc:  # protobuf DecodeError, RecursionError, ... on corrupt bytes
        raise AoeError(f"{str(path)!r} is not a readable ONNX model ({type(exc).__name__}: "
                       f"{str(exc)[:200]}); pass a valid .onnx file") from None
    return import_onnx_model(model, shapes, compute_dtype, defaults, name)


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
    """The state of one import: shapes, dtypes, kinds and known values of every tensor, and the ops so far."""

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
        self.graph_inputs: list[str] = []

    # ---- driver --------------------------------------------------------------------------------
    def run(self) -> Graph:
        g = self.model.graph
        if not self.model.HasField("graph") or (len(g.node) == 0 and len(g.input) == 0):
            raise AoeError(f"model {self.name!r} is not an ONNX model with a graph (no nodes, no inputs); "
                           "pass a valid .onnx file")
        if len(g.node) > MAX_NODES:
            raise AoeError(f"model {self.name!r} has {len(g.node)} nodes, more than the {MAX_NODES} aoe accepts")
        for imp in self.model.opset_import:
            if onnx_str(imp.domain) in ("", "ai.onnx"):
                self.opset = max(1, int(imp.version))
        read_initializers(self, g)
        read_inputs(self, g)
        nodes = sorted_nodes(self, g)
        for node in nodes:
            self._node(node)
        outputs = [onnx_str(o.name) for o in g.output]
        for o in outputs:
            if o not in self.shape:
                raise AoeError(f"model {self.name!r}: graph output {o!r} is not produced by any node")
        self._fuse_gelu(outputs)
        self._fuse_bias(outputs)
        self._dead_code(outputs)
        return self._build(outputs)

    def ir_dtype(self, dtype: str) -> str:
        """The IR dtype of an ONNX dtype: mixed precision like ATC's default, fp32 tensors compute in fp16."""
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
            if len(shape) > MAX_RANK:  # the IR's own limit, which its JSON form enforces on the way back
                raise AoeError(f"tensor {n!r} of the model has rank {len(shape)}, more than the supported "
                               f"{MAX_RANK}; the model file is corrupt")
            fmt = "NCHW" if self.has_conv and len(shape) == 4 else "ND"
            tensors[n] = Tensor(n, shape, self.ir_dtype(self.dtype[n]), fmt, self.kind[n])
        batch = 1
        if inputs and self.shape[inputs[0]]:
            batch = max(1, self.shape[inputs[0]][0])
        graph = Graph(onnx_str(self.model.graph.name) or self.name, tensors, self.ops, inputs, outputs,
                      self.unsupported, batch, self.compute_dtype, False)
        graph.validate()
        return graph

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
        if self.dtype[name] not in NP_DTYPES:
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

    def need_value(self, node: Node, name: str, what: str) -> np.ndarray:
        """The constant value of a tensor; Unsupported (the node stays opaque) when it is not known."""
        v = self.value(name)
        if v is None:
            raise Unsupported(f"{what} ({name!r}) is not a constant")
        return v

    def ints_of(self, node: Node, idx: int, attr: str, what: str, required: bool = True) -> list[int] | None:
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
            raise Unsupported(f"{what} missing")
        return None

    # ---- one node ------------------------------------------------------------------------------
    def _node(self, node: Node) -> None:
        ins = [i for i in node.inputs if i]
        outs = [o for o in node.outputs if o]
        if not outs:
            return
        standard = node.domain in ("", "ai.onnx")
        foldable = (standard and node.op_type not in NO_FOLD and not node.has_graph
                    and (all(self.kind[i] == "const" for i in ins) or node.op_type in ("Shape", "Size")))
        if foldable:
            fold_node(self, node, outs)
            return
        if node.op_type == "Identity" and standard and len(ins) == 1 and self.kind[ins[0]] == "param":
            # exporters de-duplicate equal initial weights through Identity: each output is its own
            # parameter of the real model (it trains separately), not a runtime copy
            self.shape[outs[0]], self.dtype[outs[0]] = self.shape[ins[0]], self.dtype[ins[0]]
            self.kind[outs[0]] = "param"
            return
        if any(not is_static(self.shape[i]) for i in ins):
            src = next(i for i in ins if not is_static(self.shape[i]))
            self._opaque(node, f"input {src!r} has an unknown shape (downstream of an unsupported operator)")
            return
        handler = HANDLERS.get(node.op_type) if standard and not node.has_graph else None
        if handler is None:
            why = "control flow" if node.has_graph else (
                f"operator domain {node.domain!r}" if not standard else "operator not supported")
            self._opaque(node, why)
            return
        check_arity(node)
        try:
            handler(self, node)
        except Unsupported as exc:
            self._opaque(node, str(exc))

    def infer(self, node: Node) -> list[tuple[tuple[int, ...], str]]:
        """Output shapes and dtypes by this module's rules (raises Unsupported when it has none)."""
        rule = SHAPE_RULES.get(node.op_type)
        if rule is None:
            raise Unsupported("no shape rule")
        check_arity(node)
        res = rule(self, node)
        return [(check_shape(s, f"output {o!r} of node {node.name!r}"), d) for (s, d), o in zip(res, node.outputs)]

    def onnx_shapes(self, node: Node) -> list[tuple[tuple[int, ...], str]]:
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
            if onnx_str(vi.name) in self.graph_input_set and vi.type.HasField("tensor_type"):
                shape = vi.type.tensor_type.shape
                shape.ClearField("dim")
                for d in self.shape[onnx_str(vi.name)]:
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
                out[onnx_str(vi.name)] = ((-1,), dtype)
                continue
            dims = tuple(int(d.dim_value) if d.HasField("dim_value") and 0 <= d.dim_value <= 2**31 - 1 else -1
                         for d in tt.shape.dim)
            out[onnx_str(vi.name)] = (dims, dtype)
        return out

    @property
    def graph_input_set(self) -> set[str]:
        return set(self.graph_inputs)

    # ---- emitting operators --------------------------------------------------------------------
    def op_name(self, node: Node, suffix: str = "") -> str:
        name = unique_name(node.name, self.op_names, suffix, self.name_counters)
        self.op_names.add(name)
        return name

    def emit(self, node: Node, op_type: str, inputs: list[str], attrs: dict[str, Any],
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

    def _opaque(self, node: Node, reason: str) -> None:
        try:
            shapes = self.infer(node) if node.domain in ("", "ai.onnx") and not node.has_graph else None
        except (Unsupported, AoeError):
            shapes = None
        if shapes is None:
            shapes = self.onnx_shapes(node)
        outs = [(o, s, d) for o, (s, d) in zip(node.outputs, shapes) if o]
        for o, s, d in outs:
            self.shape[o] = s if not is_static(s) else check_shape(s, f"output {o!r} of node {node.name!r}")
            self.dtype[o] = d
            self.kind[o] = "activation"
        op = Op(self.op_name(node), "Opaque", [i for i in node.inputs if i], [o for o, _, _ in outs],
                {"onnx_type": node.op_type, "domain": node.domain})
        self.ops.append(op)
        self.note_unsupported(node, op.name, reason)

    def note_unsupported(self, node: Node, op_name: str, reason: str) -> None:
        """List an operator tuning must skip; warn once per operator type."""
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
                # keep the original operators: results name a fused operator by all of them
                mm.attrs["fused_names"] = [mm.name, op.name]
                mm.attrs["fused_ops"] = [mm.type, "Add"]
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
