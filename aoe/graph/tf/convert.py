"""A TensorFlow graph (tf.Graph / FuncGraph with static shapes) -> the aoe IR with CANN operator types.

One pass over the live TF operations (those feeding the outputs or a variable update): shape
arithmetic is folded away, name-scope regions (``scopes.py``) become their fused CANN operator, and
every other op maps by the table in ``ops.py``; ops it does not know become ``Opaque`` (listed in
``graph.unsupported`` and warned about once per TF type). Variables are tensors named after the
variable: trainable ones and optimizer state are ``param``, the rest ``const``; a ``ReadVariableOp`` is
the variable itself, an ``Assign*VariableOp`` writes ``<variable>/updated``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from ...errors import AoeError
from ..ir import Graph, Op, Tensor, topo_order, unique_name
from . import layout
from .scopes import Region, find_regions

log = logging.getLogger("aoe.graph")

MAX_OPS = 1_000_000
# ops with effects beyond their outputs: they and what feeds them are always converted
SIDE_EFFECTS = {"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceApplyAdam",
                "ResourceApplyAdamWithAmsgrad", "ResourceApplyKerasMomentum", "ResourceApplyMomentum",
                "ResourceApplyGradientDescent", "ResourceApplyRMSProp", "ResourceApplyAdagradV2",
                "ResourceScatterAdd", "ResourceScatterSub", "ResourceScatterUpdate", "AssignVariableXlaConcatND"}
# ops that never become IR operators (graph plumbing)
SKIP = {"NoOp", "Assert", "PrintV2", "Print", "VarHandleOp", "VarIsInitializedOp", "DestroyResourceOp",
        "Placeholder", "Const", "ReadVariableOp", "Identity", "IdentityN", "StopGradient", "Snapshot",
        "PreventGradient", "EnsureShape", "CheckNumerics", "CheckNumericsV2", "_Retval", "_Arg"}
# integer/shape arithmetic that folds when its inputs are known
FOLDABLE_ALWAYS = {"Shape", "ShapeN", "Size", "Rank", "BroadcastArgs", "BroadcastGradientArgs"}
_FLOAT = {"float16", "float32", "float64", "bfloat16"}


@dataclass
class Source:
    """What to convert: a graph, its data inputs, variables, outputs (all TF objects)."""

    graph: Any                                          # tf.Graph / FuncGraph
    inputs: list[Any]                                   # data placeholders (tf.Tensor)
    outputs: list[Any]                                  # tensors the step returns
    var_of: dict[str, str] = field(default_factory=dict)       # resource tensor name -> variable id
    var_names: dict[str, str] = field(default_factory=dict)    # variable id -> name (e.g. "dense/kernel")
    trainable: set[str] = field(default_factory=set)           # variable ids of trained weights
    state: set[str] = field(default_factory=set)               # variable ids of optimizer state (param kind)
    var_shapes: dict[str, tuple[tuple[int, ...], Any]] = field(default_factory=dict)  # id -> (shape, dtype)
    name: str = "model"
    training: bool = False
    input_names: list[str] | None = None                      # IR names of ``inputs`` (default: TF names)
    # a frozen SavedModel: the Const ops that hold a trainable variable (None: not known, as in a frozen
    # GraphDef, where every float constant with more than one element is taken for a weight)
    trainable_consts: set[str] | None = None


class Converter:
    """Holds the state of one conversion; ``run()`` returns the Graph."""

    def __init__(self, src: Source, compute_dtype: str = "float16") -> None:
        self.src = src
        self.compute_dtype = compute_dtype
        self.ops_tf = list(src.graph.get_operations())
        if len(self.ops_tf) > MAX_OPS:
            raise AoeError(f"graph {src.name!r} has {len(self.ops_tf)} operations, more than the {MAX_OPS} aoe accepts")
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.op_names: set[str] = set()
        self.counters: dict[str, int] = {}
        self.alias: dict[str, str] = {}          # TF tensor name -> IR tensor name
        self.fused_alias: set[str] = set()       # IR names that stand for several TF gradient pieces
        self.values: dict[str, Any] = {}
        self.folded: set[str] = set()            # TF tensor names known as constants
        self.unsupported: list[dict[str, Any]] = []
        self.warned: set[str] = set()
        self.extra_outputs: list[str] = []
        self.consumers: dict[str, list[Any]] = {}
        self.var_tensor: dict[str, str] = {}     # variable id -> IR tensor name
        self.var_version: dict[str, int] = {}
        self.conv = layout.is_conv_graph(self.ops_tf)
        self.filters = layout.filter_tensors(self.ops_tf, src.var_of) if self.conv else set()
        self.inputs_ir: list[str] = []
        self.handles: dict[str, Any] = {}

    # ---- driver --------------------------------------------------------------------------------
    def run(self) -> Graph:
        from . import ops as handlers

        live = self._live()
        for op in self.ops_tf:
            if op.name in live:
                for t in op.inputs:
                    self.consumers.setdefault(t.name, []).append(op)
        for i, t in enumerate(self.src.inputs):
            names = self.src.input_names
            self.inputs_ir.append(self._register(t, kind="input", name=names[i] if names else None))
        regions = find_regions(self.ops_tf, live, self.src.var_of, self.src.var_names)
        in_region: dict[str, Region] = {}
        for reg in regions:
            self._bind_region(reg)
            for n in reg.ops:
                in_region[n] = reg
        for op in self.ops_tf:
            if op.name not in live or op.name in in_region:
                continue
            if self._fold(op):
                continue
            if op.type == "Placeholder" and op.outputs and op.outputs[0].dtype.name == "resource":
                continue
            handlers.convert_op(self, op)
        for reg in regions:
            handlers.emit_region(self, reg)
        return self._build()

    def _live(self) -> set[str]:
        stack = [t.op for t in self.src.outputs]
        stack += [op for op in self.ops_tf if op.type in SIDE_EFFECTS]
        live: set[str] = set()
        while stack:
            op = stack.pop()
            if op.name in live:
                continue
            live.add(op.name)
            stack.extend(t.op for t in op.inputs)
        return live

    def _fold(self, op: Any) -> bool:
        """Shape arithmetic on known values becomes constants (no IR operator)."""
        if op.type in FOLDABLE_ALWAYS:
            if all(t.shape.is_fully_defined() for t in op.inputs) or op.type in ("BroadcastGradientArgs", "BroadcastArgs"):
                self.folded.update(t.name for t in op.outputs)
                return True
            return False
        if op.type == "Const":
            self.folded.update(t.name for t in op.outputs)
            return True
        if op.type in SKIP or op.type in SIDE_EFFECTS or not op.inputs:
            return False
        if any(t.dtype.name in ("resource", "variant") for t in op.inputs):
            return False
        if all(t.name in self.folded for t in op.inputs):
            if any(o.dtype.name in _FLOAT and o.shape.num_elements() not in (None,) and o.shape.num_elements() > 1
                   for o in op.outputs):
                return False  # float arrays computed from constants: real work at run time, keep it
            if op.type.startswith("Random") or op.type.startswith("Stateless"):
                return False
            self.folded.update(t.name for t in op.outputs)
            return True
        return False

    # ---- tensors -------------------------------------------------------------------------------
    def value(self, t: Any) -> Any:
        """The numpy value of a TF tensor known at conversion time, or None."""
        if t.name in self.values:
            return self.values[t.name]
        import tensorflow as tf

        v = None
        try:
            v = tf.get_static_value(t)
        except Exception:  # noqa: BLE001 - TF cannot evaluate it statically: not a constant
            v = None
        if v is None and t.op.type in ("Shape",) and t.op.inputs[0].shape.is_fully_defined():
            import numpy as np

            v = np.array(t.op.inputs[0].shape.as_list(), dtype=t.dtype.as_numpy_dtype)
        self.values[t.name] = v
        return v

    def ints(self, t: Any, what: str) -> list[int] | None:
        """An integer list input (axes, perm, multiples ...), or None when it is not a constant."""
        v = self.value(t)
        if v is None:
            return None
        return [int(x) for x in v.reshape(-1).tolist()]

    def tf_shape(self, t: Any) -> tuple[int, ...]:
        """Static TF shape (-1 for unknown dims); a tensor of unknown rank is an error for the caller."""
        if t.shape.rank is None:
            return ()
        return tuple(-1 if d is None else int(d) for d in t.shape.as_list())

    def is_act4(self, t: Any) -> bool:
        """A 4-D activation re-read as NCHW."""
        return self.conv and t.shape.rank == 4 and t.name not in self.filters

    def ir_shape(self, t: Any) -> tuple[int, ...]:
        s = self.tf_shape(t)
        if self.conv and len(s) == 4:
            return layout.oihw_shape(s) if t.name in self.filters else layout.nchw_shape(s)
        return s

    def axis(self, t: Any, a: int) -> int:
        """A TF axis of tensor ``t`` in the IR (non-negative, NCHW for 4-D activations)."""
        rank = t.shape.rank or 0
        a = a + rank if a < 0 else a
        if self.is_act4(t):
            return layout.NHWC_TO_NCHW_AXIS.get(a, a)
        return a

    def ir_dtype(self, dtype: Any) -> str:
        name = dtype.name if hasattr(dtype, "name") else str(dtype)
        if name == "float32" and self.compute_dtype == "float16":
            return "float16"
        return name

    def fmt(self, shape: tuple[int, ...]) -> str:
        return "NCHW" if self.conv and len(shape) == 4 else "ND"

    def new_tensor(self, base: str, shape: tuple[int, ...], dtype: str, kind: str = "activation") -> str:
        name = unique_name(base, self.tensors, counters=self.counters)
        self.tensors[name] = Tensor(name, tuple(shape), dtype, self.fmt(tuple(shape)), kind)
        return name

    def _register(self, t: Any, kind: str = "activation", name: str | None = None) -> str:
        base = name or (t.name.removesuffix(":0"))
        shape = self.ir_shape(t)
        dtype = self.ir_dtype(t.dtype)
        ir = self.new_tensor(base, shape, dtype, kind)
        self.alias[t.name] = ir
        return ir

    def out(self, t: Any) -> str:
        """IR tensor for an output of the op being converted."""
        if t.name in self.alias:
            return self.alias[t.name]
        return self._register(t)

    def inp(self, t: Any) -> str:
        """IR tensor for an input of the op being converted (constants and variables made on demand)."""
        ir = self.alias.get(t.name)
        if ir is not None:
            return ir
        op = t.op
        if op.type in ("Identity", "StopGradient", "Snapshot", "PreventGradient", "EnsureShape", "CheckNumerics",
                       "CheckNumericsV2") and op.inputs:
            ir = self.inp(op.inputs[0])
            self.alias[t.name] = ir
            return ir
        if op.type == "IdentityN":
            ir = self.inp(op.inputs[t.value_index])
            self.alias[t.name] = ir
            return ir
        if op.type == "ReadVariableOp":
            ir = self.variable(op.inputs[0], t)
            self.alias[t.name] = ir
            return ir
        if t.dtype.name == "resource":
            return self.variable(t, None)
        if t.name in self.folded or op.type == "Const":
            s = self.tf_shape(t)
            n = 1
            for d in s:
                n *= max(d, 0)
            weights = self.src.trainable_consts
            kind = "param" if (t.dtype.name in _FLOAT and n > 1 and not self.src.training
                               and (weights is None or op.name in weights)) else "const"
            return self._register(t, kind=kind)
        if op.type == "Placeholder":
            # a captured tensor that is not a variable: a constant of the step
            return self._register(t, kind="const")
        raise AoeError(f"graph {self.src.name!r}: tensor {t.name!r} is read before it is produced "
                       "(the TF graph is not in topological order)")

    def variable(self, handle: Any, read: Any | None) -> str:
        """The IR tensor of the variable behind a resource tensor (created at its first use)."""
        vid = self.src.var_of.get(handle.name, handle.name)
        ir = self.var_tensor.get(vid)
        if ir is not None:
            return ir
        name = self.src.var_names.get(vid, vid).split(":")[0]
        kind = "param" if vid in self.src.trainable or vid in self.src.state else "const"
        shape, dtype = self._var_shape(handle, read)
        if self.conv and len(shape) == 4:
            shape = layout.oihw_shape(shape) if f"var:{vid}" in self.filters else layout.nchw_shape(shape)
        ir = self.new_tensor(name, shape, self.ir_dtype(dtype), kind)
        self.var_tensor[vid] = ir
        return ir

    def _var_shape(self, handle: Any, read: Any | None) -> tuple[tuple[int, ...], Any]:
        if read is not None and read.shape.rank is not None:
            return self.tf_shape(read), read.dtype
        known = self.src.var_shapes.get(self.src.var_of.get(handle.name, handle.name))
        if known is not None:  # the captured variable object itself (e.g. optimizer slots never read)
            return known
        for c in self.consumers.get(handle.name, []) + list(handle.consumers()):
            if c.type == "ReadVariableOp" and c.outputs[0].shape.rank is not None:
                return self.tf_shape(c.outputs[0]), c.outputs[0].dtype
            if c.type in ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp") and len(c.inputs) > 1:
                return self.tf_shape(c.inputs[1]), c.inputs[1].dtype
        shapes = getattr(handle, "_handle_data", None)
        if shapes is None:  # a graph tensor keeps its resource's shape in the graph's handle data
            try:
                from tensorflow.python.ops import handle_data_util

                shapes = handle_data_util.get_resource_handle_data(handle)
            except Exception:  # noqa: BLE001 - TF internals that moved: the error below says what is unknown
                shapes = None
        try:
            sd = shapes.shape_and_type[0]
            import tensorflow as tf

            return tuple(d.size for d in sd.shape.dim), tf.dtypes.as_dtype(sd.dtype)
        except Exception:  # noqa: BLE001 - no shape recorded for the resource
            raise AoeError(f"graph {self.src.name!r}: the shape of variable {handle.name!r} is unknown") from None

    def updated(self, handle: Any) -> str:
        """A fresh IR tensor for the value an update op writes into a variable."""
        ir = self.variable(handle, None)
        k = self.var_version.get(ir, 0)
        self.var_version[ir] = k + 1
        t = self.tensors[ir]
        out = self.new_tensor(f"{ir}/updated" + (f"_{k}" if k else ""), t.shape, t.dtype)
        self.extra_outputs.append(out)
        return out

    # ---- operators -----------------------------------------------------------------------------
    def emit(self, tf_op: Any, op_type: str, inputs: list[str], attrs: dict[str, Any] | None = None,
             outputs: list[str] | None = None, name: str | None = None) -> Op:
        if outputs is None:
            outputs = [self.out(t) for t in tf_op.outputs]
        attrs = dict(attrs or {})
        if tf_op is not None and tf_op.type != op_type:
            attrs.setdefault("tf_type", tf_op.type)
        op = Op(unique_name(name or (tf_op.name if tf_op is not None else op_type), self.op_names,
                            counters=self.counters), op_type, inputs, outputs, attrs)
        self.op_names.add(op.name)
        self.ops.append(op)
        return op

    def opaque(self, tf_op: Any, reason: str) -> None:
        """Keep an op the mapping does not know as ``Opaque`` and warn once per TF type."""
        ins = [self.inp(t) for t in tf_op.inputs if t.dtype.name not in ("resource", "variant")
               and t.name not in self.folded]
        outs = [self.out(t) for t in tf_op.outputs if t.dtype.name not in ("resource", "variant")]
        if not outs:
            outs = [self.new_tensor(f"{tf_op.name}/effect", (), "float32")]
            self.extra_outputs.append(outs[0])
        op = self.emit(tf_op, "Opaque", ins, {"onnx_type": tf_op.type, "tf_type": tf_op.type}, outputs=outs)
        self.unsupported.append({"op": op.name, "onnx_type": tf_op.type, "tf_type": tf_op.type, "reason": reason})
        if tf_op.type not in self.warned:
            self.warned.add(tf_op.type)
            log.warning("aoe: model %r: TensorFlow operator %r is not supported (%s); it is kept as an opaque node "
                        "that tuning skips", self.src.name, tf_op.type, reason)

    # ---- regions -------------------------------------------------------------------------------
    def _bind_region(self, reg: Region) -> None:
        """Name the IR tensors a fused region writes before any consumer asks for them."""
        y = reg.roles.get("y")
        if y is not None and reg.kind != "softmax_grad":
            self._register(y)
        for t in reg.roles.get("outputs", ()):  # a recurrent layer's sequence / last output
            self._register(t)
        if reg.has_grad:
            x = reg.roles.get("x", reg.roles.get("y"))
            names: dict[str, str] = {}
            for tname, role in sorted(reg.grad_outputs.items()):
                if role not in names:
                    if role == "dx":
                        shape, dtype = self.ir_shape(x), self.ir_dtype(x.dtype)
                    else:
                        r = reg.roles[role[1:]]  # dgamma -> gamma, dbeta -> beta, dkernel -> kernel ...
                        p = self.tensors[self.variable_by_id(r) if isinstance(r, str) else self.inp(r)]
                        shape, dtype = p.shape, p.dtype
                    names[role] = self.new_tensor(f"{reg.scope}/grad/{role}", shape, dtype)
                self.alias[tname] = names[role]
                self.fused_alias.add(names[role])
            reg.attrs["_grad_names"] = names

    def region_grad(self, reg: Region, role: str, shape: tuple[int, ...], dtype: str) -> str:
        """The IR tensor a fused region writes its gradient ``role`` (dx, dgamma ...) to."""
        name = reg.attrs.get("_grad_names", {}).get(role)
        if name is None:
            # a gradient nobody reads outside the region (e.g. of a frozen parameter): still written
            return self.new_tensor(f"{reg.scope}/grad/{role}", shape, dtype)
        return name

    def variable_by_id(self, vid: str) -> str:
        """The IR tensor of a variable given its id."""
        ir = self.var_tensor.get(vid)
        if ir is not None:
            return ir
        if not self.handles:
            for op in self.ops_tf:
                for t in op.inputs:
                    v = self.src.var_of.get(t.name)
                    if v is not None:
                        self.handles.setdefault(v, t)
        return self.variable(self.handles[vid], None)

    def _dead_code(self, keep: set[str]) -> None:
        """Drop operators nothing reads (e.g. views a fused region no longer needs)."""
        while True:
            used = set(keep)
            for op in self.ops:
                used.update(op.inputs)
            alive = [op for op in self.ops if any(o in used for o in op.outputs)]
            if len(alive) == len(self.ops):
                return
            self.ops = alive

    def _build(self) -> Graph:
        outputs: list[str] = []
        for t in self.src.outputs:
            if t.name in self.folded or t.dtype.name in ("resource", "variant"):
                continue
            ir = self.alias.get(t.name)
            if ir is None:
                try:
                    ir = self.inp(t)
                except AoeError:
                    continue
            if ir not in outputs and self.tensors.get(ir) is not None and self.tensors[ir].kind == "activation":
                outputs.append(ir)
        for o in self.extra_outputs:
            if o not in outputs:
                outputs.append(o)
        self._dead_code(set(outputs))
        produced = {o for op in self.ops for o in op.outputs}
        available = {n for n, t in self.tensors.items() if t.kind != "activation"}
        ops = topo_order(self.ops, available)
        used = set(self.inputs_ir) | set(outputs)
        for op in ops:
            used.update(op.inputs)
            used.update(op.outputs)
        tensors = {n: t for n, t in self.tensors.items() if n in used}
        outputs = [o for o in outputs if o in produced or o in available]
        batch = 1
        if self.inputs_ir:
            s = self.tensors[self.inputs_ir[0]].shape
            batch = max(1, s[0]) if s else 1
        g = Graph(self.src.name, tensors, ops, list(self.inputs_ir), outputs, self.unsupported, batch,
                  self.compute_dtype, self.src.training)
        g.validate()
        return g
