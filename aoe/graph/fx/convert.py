"""FX graph of ATen operators -> aoe IR: tensors from the nodes' fake-tensor metadata, operators by rule.

The walker keeps, for every FX node, a *value*: an IR tensor name, possibly seen through a pending
permutation (``t``/``transpose``/``permute`` are views in PyTorch; a matmul folds a swap of its last
two dimensions into ``transpose_x1``/``transpose_x2``, any other consumer materialises a
``Transpose``), a tuple of values (multi-output operators, read with ``getitem``), or a plain Python
value (an integer or float argument). The per-operator rules live in ``aten.py``.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ...errors import AoeError
from ..ir import Graph, Op, Tensor, unique_name

log = logging.getLogger("aoe.graph")

TORCH_EXTRA = "PyTorch is not installed: pip install 'aoe[torch]'"
_POOL_OR_CONV = {"convolution", "max_pool2d_with_indices", "avg_pool2d", "_adaptive_avg_pool2d",
                 "max_pool2d", "adaptive_avg_pool2d"}


def import_torch() -> Any:
    """The torch module, or an AoeError naming the extra to install."""
    try:
        import torch
    except ImportError:
        raise AoeError(TORCH_EXTRA) from None
    return torch


@dataclass(frozen=True)
class Val:
    """An IR tensor, read through a permutation ``perm`` of its dimensions (None: as it is)."""

    name: str
    perm: tuple[int, ...] | None = None


class Converter:
    """One conversion: call ``run()`` once."""

    def __init__(self, gm: Any, name: str, kinds: Mapping[str, str], compute_dtype: str, training: bool,
                 values: dict[str, str] | None = None) -> None:
        self.torch = import_torch()
        self.gm = gm
        self.name = name
        self.kinds = dict(kinds)
        self.compute_dtype = compute_dtype
        self.training = training
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.op_names: set[str] = set()
        self.counters: dict[str, int] = {}
        self.env: dict[str, Any] = {}
        self.inputs: list[str] = []
        self.unsupported: list[dict[str, Any]] = []
        self.warned: set[str] = set()
        self.has_conv = any(n.op == "call_function" and _packet(n.target) in _POOL_OR_CONV for n in gm.graph.nodes)
        self.node: Any = None  # the node being converted (for names and messages)
        self.elem: int | None = None  # the list element a _foreach_* rule is converting
        self.values = values          # filled with output node name -> IR tensor (permutations applied)
        self.adam: Any = None         # recognised optimizer steps (optim.Plan)

    # ---- driver ------------------------------------------------------------------------------
    def run(self) -> Graph:
        from .aten import RULES
        from .optim import recognise

        self.adam = recognise(self.gm, self)   # optimizer steps that become CANN apply operators
        outputs: list[str] = []
        for node in self.gm.graph.nodes:
            self.node = node
            if node.op == "placeholder":
                self.env[node.name] = self._placeholder(node)
            elif node.op == "get_attr":
                self.env[node.name] = self._get_attr(node)
            elif node.op == "call_function":
                self.env[node.name] = self._call(node, RULES)
            elif node.op == "output":
                outputs = self._outputs(node.args[0])
            else:  # call_module / call_method do not appear in ATen graphs
                raise AoeError(f"graph {self.name!r}: node {node.name!r} is a {node.op}; aoe converts FX graphs "
                               "of ATen operators (as AOTAutograd or torch.export produce them)")
        used = {t for op in self.ops for t in (*op.inputs, *op.outputs)} | set(self.inputs) | set(outputs)
        tensors = {n: t for n, t in self.tensors.items() if n in used}
        batch = 1
        for i in self.inputs:
            t = tensors.get(i)
            if t is not None and t.kind == "input" and t.shape:
                batch = max(1, t.shape[0])
                break
        g = Graph(self.name, tensors, self.ops, [i for i in self.inputs if i in tensors], outputs,
                  self.unsupported, batch, self.compute_dtype, self.training)
        g.validate()
        return g

    def _call(self, node: Any, rules: Mapping[str, Callable[..., Any]]) -> Any:
        import operator

        if node.target is operator.getitem:
            base = self.env.get(node.args[0].name)
            if isinstance(base, (tuple, list)):
                return base[node.args[1]]
            raise AoeError(f"graph {self.name!r}: getitem {node.name!r} reads a value that is not a tuple")
        if self.adam is not None:
            from .optim import PASS

            # part of a recognised optimizer step: computed by its apply operators (optim.py)
            handled = self.adam.handle(self, node)
            if handled is not PASS:
                return handled
        packet = _packet(node.target)
        if packet in ("sym_size", "sym_stride", "sym_numel", "sym_storage_offset") or not hasattr(node.target, "_schema"):
            self._symbolic_or_opaque(node, packet)
            return self._opaque(node, _op_label(node.target), "not an ATen operator")
        args = self.bind(node)
        rule = rules.get(packet)
        if rule is None and packet.startswith("_foreach_"):
            rule = rules.get("_foreach")
        if rule is None:
            return self._opaque(node, _op_label(node.target), "no CANN mapping for this ATen operator")
        try:
            return rule(self, node, args)
        except _NotMapped as exc:
            return self._opaque(node, _op_label(node.target), str(exc))

    def _symbolic_or_opaque(self, node: Any, packet: str) -> None:
        val = node.meta.get("val")
        if val is not None and not isinstance(val, (int, float, bool)) and self._is_symbolic(val):
            raise AoeError(f"graph {self.name!r}: {node.name!r} is a symbolic size ({val}); aoe tunes static shapes "
                           "only: compile with torch.compile(..., dynamic=False) so each input shape is its own graph")

    # ---- arguments -----------------------------------------------------------------------------
    def bind(self, node: Any) -> dict[str, Any]:
        """The operator's arguments by schema name, defaults filled, FX nodes replaced by their values."""
        schema = node.target._schema
        out: dict[str, Any] = {}
        for i, a in enumerate(schema.arguments):
            if i < len(node.args):
                v = node.args[i]
            elif a.name in node.kwargs:
                v = node.kwargs[a.name]
            elif a.has_default_value():
                v = a.default_value
            else:
                v = None
            out[a.name] = self._resolve(v)
        return out

    def _resolve(self, v: Any) -> Any:
        fx = self.torch.fx
        if isinstance(v, fx.Node):
            return self.env.get(v.name)
        if isinstance(v, (list, tuple)):
            return type(v)(self._resolve(x) for x in v)
        return v

    # ---- tensors -------------------------------------------------------------------------------
    def ir_dtype(self, dtype: Any) -> str:
        name = str(dtype).replace("torch.", "")
        name = {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32",
                "bool": "bool", "short": "int16"}.get(name, name)
        # mixed precision as ATC's default: fp32 tensors compute in fp16 (the ONNX route does the same)
        if name == "float32" and self.compute_dtype == "float16":
            return "float16"
        return name

    def _is_symbolic(self, v: Any) -> bool:
        if isinstance(v, self.torch.SymInt):
            return v.node.maybe_as_int() is None
        return False

    def static_shape(self, shape: Any, what: str) -> tuple[int, ...]:
        dims = []
        for i, d in enumerate(shape):
            if isinstance(d, self.torch.SymInt):
                c = d.node.maybe_as_int()
                if c is None:
                    raise AoeError(f"graph {self.name!r}: tensor {what!r} has a symbolic dimension {i} ({d}) in shape "
                                   f"{list(shape)}; aoe tunes static shapes only: compile with "
                                   "torch.compile(..., dynamic=False) so each input shape is a new static graph")
                d = c
            dims.append(int(d))
        return tuple(dims)

    def new_tensor(self, base: str, shape: tuple[int, ...], dtype: str, kind: str = "activation") -> str:
        """A fresh IR tensor named after ``base``."""
        name = unique_name(base, self.tensors, counters=self.counters)
        fmt = "NCHW" if self.has_conv and len(shape) == 4 else "ND"
        self.tensors[name] = Tensor(name, tuple(shape), dtype, fmt, kind)
        return name

    def out(self, node: Any, index: int | None = None, kind: str = "activation") -> str:
        """The IR tensor for output ``index`` of ``node`` (from its fake-tensor metadata)."""
        val = node.meta.get("val")
        if index is None and self.elem is not None and isinstance(val, (tuple, list)):
            index = self.elem
        if index is not None:
            val = val[index] if isinstance(val, (tuple, list)) else None
        if val is None or not hasattr(val, "shape"):
            raise AoeError(f"graph {self.name!r}: node {node.name!r} has no tensor metadata; trace the graph with "
                           "fake tensors (AOTAutograd, make_fx or torch.export do)")
        base = node.name if index is None else f"{node.name}:{index}"
        return self.new_tensor(base, self.static_shape(val.shape, base), self.ir_dtype(val.dtype), kind)

    def like(self, base: str, ref: str, shape: tuple[int, ...] | None = None, dtype: str | None = None) -> str:
        t = self.tensors[ref]
        return self.new_tensor(base, t.shape if shape is None else shape, dtype or t.dtype)

    def shape(self, v: Val | str) -> tuple[int, ...]:
        """Logical shape of a value (its permutation applied)."""
        if isinstance(v, str):
            return self.tensors[v].shape
        s = self.tensors[v.name].shape
        return s if v.perm is None else tuple(s[p] for p in v.perm)

    def dtype(self, v: Val | str) -> str:
        return self.tensors[v if isinstance(v, str) else v.name].dtype

    def mat(self, v: Any) -> str:
        """The IR tensor holding value ``v``, emitting a ``Transpose`` for a pending permutation."""
        if not isinstance(v, Val):
            raise _NotMapped(f"expected a tensor argument, got {type(v).__name__}")
        if v.perm is None or list(v.perm) == sorted(v.perm):
            return v.name
        key = (v.name, v.perm)
        cache = self.__dict__.setdefault("_materialised", {})
        if key not in cache:
            t = self.like(f"{v.name}/transpose", v.name, self.shape(v))
            self.emit(f"{self.node.name}/transpose", "Transpose", [v.name], [t], {"perm": list(v.perm)})
            cache[key] = t
        return cache[key]

    def emit(self, name: str, op_type: str, inputs: list[str], outputs: list[str],
             attrs: dict[str, Any] | None = None) -> Op:
        op = Op(unique_name(name, self.op_names, counters=self.counters), op_type, inputs, outputs, attrs or {})
        self.op_names.add(op.name)
        self.ops.append(op)
        return op

    def const(self, node: Any, index: int | None = None) -> Val:
        """A tensor created from nothing (zeros, ones, full, arange): a constant, as the graph compiler folds it."""
        return Val(self.out(node, index, kind="const"))

    # ---- placeholders, attributes, outputs ------------------------------------------------------
    def _placeholder(self, node: Any) -> Any:
        val = node.meta.get("val")
        if val is None or isinstance(val, (int, float, bool)):
            return val
        if isinstance(val, self.torch.SymInt):
            if self._is_symbolic(val):
                raise AoeError(f"graph {self.name!r}: input {node.name!r} is a symbolic size ({val}); aoe tunes static "
                               "shapes only: compile with torch.compile(..., dynamic=False) so each input shape "
                               "is a new static graph")
            return int(val)
        if not hasattr(val, "shape"):
            return None
        kind = self.kinds.get(node.name, "input")
        if kind == "activation":
            kind = "input"
        name = self.out(node, kind=kind)
        self.inputs.append(name)
        return Val(name)

    def _get_attr(self, node: Any) -> Any:
        obj = self.gm
        for part in str(node.target).split("."):
            obj = getattr(obj, part, None)
        if obj is None or not hasattr(obj, "shape"):
            return None
        shape = self.static_shape(obj.shape, node.name)
        kind = "param" if isinstance(obj, self.torch.nn.Parameter) else "const"
        name = self.new_tensor(node.name, shape, self.ir_dtype(obj.dtype), kind)
        self.inputs.append(name) if kind == "param" else None
        return Val(name)

    def _outputs(self, arg: Any) -> list[str]:
        flat: list[Any] = []

        def walk(a: Any) -> None:
            if isinstance(a, (list, tuple)):
                for x in a:
                    walk(x)
            elif isinstance(a, self.torch.fx.Node):
                flat.append(self.env.get(a.name))

        walk(arg)
        if self.values is not None:
            # the caller needs each output in its own layout (e.g. a weight gradient for the optimizer)
            for a in _flat_nodes(arg):
                v = self.env.get(a.name)
                if isinstance(v, Val):
                    self.values[a.name] = self.mat(v)
        names: list[str] = []
        for v in flat:
            # a saved permuted view is the same memory as its base: the base is the output
            if isinstance(v, Val) and v.name not in names:
                names.append(v.name)
        return names

    # ---- opaque ------------------------------------------------------------------------------
    def _opaque(self, node: Any, label: str, reason: str) -> Any:
        val = node.meta.get("val")
        ins = []
        for a in _flat_nodes(node.args) + _flat_nodes(list(node.kwargs.values())):
            v = self.env.get(a.name)
            for x in (v if isinstance(v, (list, tuple)) else [v]):
                if isinstance(x, Val) and x.name not in ins:
                    ins.append(x.name)
        if isinstance(val, (tuple, list)):
            outs: list[Any] = [self.out(node, i) if hasattr(v, "shape") else None for i, v in enumerate(val)]
            result: Any = tuple(Val(o) if o else None for o in outs)
            out_names = [o for o in outs if o]
        elif val is not None and hasattr(val, "shape"):
            o = self.out(node)
            result, out_names = Val(o), [o]
        else:
            result, out_names = None, []
        op = self.emit(node.name, "Opaque", ins, out_names, {"onnx_type": label, "aten_op": label})
        self.unsupported.append({"op": op.name, "onnx_type": label, "reason": reason})
        if label not in self.warned:
            self.warned.add(label)
            log.warning("aoe: graph %r: ATen operator %s is not supported (%s); it is kept as an opaque node "
                        "that tuning skips", self.name, label, reason)
        return result


class _NotMapped(Exception):
    """Raised by a rule that cannot map this use of an operator: the node becomes Opaque."""


NotMapped = _NotMapped


def _packet(target: Any) -> str:
    op = getattr(target, "overloadpacket", None)
    if op is not None:
        return str(getattr(op, "__name__", op)).split(".")[-1]
    return str(getattr(target, "__name__", target))


def _op_label(target: Any) -> str:
    """``aten.convolution.default``-style name of an operator (data, for messages)."""
    s = str(target)
    return s if s.startswith(("aten.", "prims.")) else f"{getattr(target, '__module__', '')}.{getattr(target, '__name__', s)}"


def _flat_nodes(args: Any) -> list[Any]:
    import torch.fx

    out = []
    for a in args if isinstance(args, (list, tuple)) else [args]:
        if isinstance(a, torch.fx.Node):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(_flat_nodes(a))
    return out


def packet(target: Any) -> str:
    """The ATen overload packet name of an FX call target (``convolution`` for ``aten.convolution.default``)."""
    return _packet(target)
