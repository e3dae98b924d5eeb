"""Graph IR: tensors with static shapes, operators with CANN operator types, and an exact JSON form.

Everything in a graph that came from a model file (names, attribute values) is plain data: nothing
here turns it into a path, a module name or code. Operator *types* are always from the project's own
vocabulary (CANN names); an operator the importer does not know becomes type ``Opaque`` with the
model's type kept as the ``onnx_type`` attribute.
"""
from __future__ import annotations

import hashlib
import heapq
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

from ..errors import AoeError
from .cost import summarize
from .shapes import MAX_DIM, MAX_RANK

TENSOR_KINDS = ("input", "const", "param", "activation")

# bytes per element; "string" has no fixed size and counts as 0
DTYPE_SIZE: dict[str, int] = {
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8,
    "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4,
    "int64": 8, "uint64": 8, "bool": 1, "complex64": 8, "complex128": 16, "string": 0,
    "float8e4m3fn": 1, "float8e4m3fnuz": 1, "float8e5m2": 1, "float8e5m2fnuz": 1,
    "uint4": 1, "int4": 1, "float4e2m1": 1, "float8e8m0": 1,
}

JSON_FORMAT = "aoe.graph"
_OP_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
JSON_VERSION = 1
# the JSON form's encoder (to_json's settings): the fingerprint encodes the same values with it
_JSON = json.JSONEncoder(ensure_ascii=True, allow_nan=False)


def _norm_attr(value: Any) -> Any:
    """Make an attribute value JSON-native so that the JSON form round-trips exactly.

    Tuples become lists, numpy scalars/arrays become Python values, bytes are decoded, and non-finite
    floats become the strings "inf", "-inf" and "nan" (strict JSON has no such numbers).
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return float(value)
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): _norm_attr(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_norm_attr(v) for v in value]
    # numpy scalars and arrays without importing numpy here
    if hasattr(value, "tolist"):
        return _norm_attr(value.tolist())
    raise TypeError(f"attribute value of type {type(value).__name__} is not representable in JSON")


@dataclass(slots=True)
class Tensor:
    """A tensor: static shape (a dim is -1 only downstream of an unsupported operator), dtype, format, kind."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    format: str = "ND"
    kind: str = "activation"

    def __post_init__(self) -> None:
        self.shape = tuple(int(d) for d in self.shape)
        if self.kind not in TENSOR_KINDS:
            raise ValueError(f"tensor kind must be one of {TENSOR_KINDS}, not {self.kind!r}")

    @property
    def is_static(self) -> bool:
        """True when every dimension is known."""
        return all(d >= 0 for d in self.shape)

    @property
    def numel(self) -> int:
        """Number of elements (0 when the shape is not static)."""
        if not self.is_static:
            return 0
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Size in bytes in its dtype (0 when unknown)."""
        return self.numel * DTYPE_SIZE.get(self.dtype, 0)

    def to_dict(self) -> dict[str, Any]:
        """JSON-native form."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "format": self.format, "kind": self.kind}


@dataclass(slots=True)
class Op:
    """One operator: CANN type, input/output tensor names in order, attributes (JSON-native values)."""

    name: str
    type: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.inputs = list(self.inputs)
        self.outputs = list(self.outputs)
        self.attrs = _norm_attr(dict(self.attrs))

    @property
    def is_view(self) -> bool:
        """A no-cost view (Reshape, Squeeze, ...): tuners skip it."""
        return bool(self.attrs.get("view", False))

    def to_dict(self) -> dict[str, Any]:
        """JSON-native form."""
        return {"name": self.name, "type": self.type, "inputs": list(self.inputs),
                "outputs": list(self.outputs), "attrs": self.attrs}


class TrackedList(list):
    """A list that counts its own changes (a graph's ``ops`` and ``outputs``), so per-graph indices are
    built once per revision.

    Every mutating list method bumps ``revision``; `Graph.links()` keys its memo on the list objects and
    those numbers instead of re-reading every operator on each call (which made describing a graph's
    operators quadratic in its size). Changing an ``Op`` in place is not seen.
    """

    __slots__ = ("revision",)

    def __init__(self, ops: Iterable[Op] = ()) -> None:
        super().__init__(ops)
        self.revision = 0

    def __reduce__(self) -> tuple[Any, ...]:
        return (TrackedList, (list(self),))


def _mutating(name: str) -> Any:
    base = getattr(list, name)

    def method(self: TrackedList, *args: Any) -> Any:
        self.revision += 1
        return base(self, *args)

    method.__name__ = name
    method.__doc__ = base.__doc__
    return method


for _name in ("append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "__setitem__",
              "__delitem__", "__iadd__", "__imul__"):
    setattr(TrackedList, _name, _mutating(_name))
del _name


_TRACKED = frozenset({"ops", "outputs"})
_MEMOS = frozenset({"_links", "_memos"})   # derived data kept in a graph's __dict__ (never pickled)


def _fingerprint_body(graph: "Graph") -> bytes:
    """sha256 of the tensors and operators in the JSON form's values, one array per field (`Graph.fingerprint`)."""
    ts, ops = graph.tensors.values(), graph.ops
    columns = [[t.name for t in ts], [t.shape for t in ts], [t.dtype for t in ts], [t.format for t in ts],
               [t.kind for t in ts], [o.name for o in ops], [o.type for o in ops], [o.inputs for o in ops],
               [o.outputs for o in ops], [o.attrs for o in ops]]
    return hashlib.sha256(_JSON.encode(columns).encode("ascii")).digest()


class Links(NamedTuple):
    """A graph's index: tensor -> producing operator, tensor -> reading operators (graph order), outputs."""

    producers: dict[str, Op]
    consumers: dict[str, list[Op]]
    outputs: frozenset[str]


@dataclass
class Graph:
    """A whole model: tensors by name, operators in topological order, graph inputs and outputs.

    ``unsupported`` lists ``{"op": name, "onnx_type": type, "reason": text}`` for operators tuning skips.
    ``ops`` and ``outputs`` are kept as `TrackedList`s (lists that count their changes; a plain list
    assigned to them is copied into one).
    """

    name: str
    tensors: dict[str, Tensor]
    ops: list[Op]
    inputs: list[str]
    outputs: list[str]
    unsupported: list[dict[str, Any]] = field(default_factory=list)
    batch_size: int = 1
    compute_dtype: str = "float16"
    training: bool = False

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _TRACKED and not isinstance(value, TrackedList):
            value = TrackedList(value)
        object.__setattr__(self, name, value)

    def __getstate__(self) -> dict[str, Any]:
        # the memos are derived data: rebuilt on demand, never shipped to a worker
        return {k: v for k, v in self.__dict__.items() if k not in _MEMOS}

    # ---- queries -------------------------------------------------------------------------------
    def op_counts(self) -> dict[str, int]:
        """Number of operators per type, most frequent first (ties by name)."""
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.type] = counts.get(op.type, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def producers(self) -> dict[str, Op]:
        """Tensor name -> the operator producing it."""
        return {t: op for op in self.ops for t in op.outputs}

    def consumers(self) -> dict[str, list[Op]]:
        """Tensor name -> operators reading it, in graph order."""
        out: dict[str, list[Op]] = {}
        for op in self.ops:
            for t in op.inputs:
                out.setdefault(t, []).append(op)
        return out

    def links(self) -> Links:
        """Producers, consumers and the output set, built once per revision of ``ops`` and ``outputs``.

        The index is shared by every caller until the graph changes: treat it as read-only.
        """
        ops, outs = self.ops, self.outputs
        memo = self.__dict__.get("_links")
        if memo is None or memo[0] is not ops or memo[1] != ops.revision or memo[2] is not outs \
                or memo[3] != outs.revision:
            memo = (ops, ops.revision, outs, outs.revision, Links(self.producers(), self.consumers(), frozenset(outs)))
            self.__dict__["_links"] = memo
        return memo[4]

    def memo(self, name: str) -> dict[Any, Any]:
        """A dict for data derived from this graph under `name` (e.g. the catalogue's cases per operator),
        emptied when ``ops``, ``outputs`` or the ``tensors`` dict are replaced or change length.

        Like `links()`, changing an ``Op`` or a ``Tensor`` in place is not seen. Callers store values
        they never mutate; two threads filling it at once only compute an entry twice.
        """
        ops, outs, tensors = self.ops, self.outputs, self.tensors
        memos = self.__dict__.get("_memos")
        if memos is None or memos[0] is not ops or memos[1] != ops.revision or memos[2] is not outs \
                or memos[3] != outs.revision or memos[4] is not tensors or memos[5] != len(tensors):
            memos = (ops, ops.revision, outs, outs.revision, tensors, len(tensors), {})
            self.__dict__["_memos"] = memos
        found = memos[6].get(name)
        if found is None:
            found = memos[6].setdefault(name, {})
        return found

    def params(self) -> list[str]:
        """Names of trainable parameter tensors, in tensor order."""
        return [n for n, t in self.tensors.items() if t.kind == "param"]

    def summary(self) -> dict[str, Any]:
        """Operator counts, per-operator MACs/FLOPs/bytes and totals (see ``cost.CONVENTION``)."""
        return summarize(self)

    # ---- validation ----------------------------------------------------------------------------
    def validate(self) -> None:
        """Check references, single producers and topological order; raise AoeError if broken."""
        defined = {n for n, t in self.tensors.items() if t.kind != "activation"}
        produced: set[str] = set()
        for name, t in self.tensors.items():
            if name != t.name:
                raise AoeError(f"graph {self.name!r}: tensor key {name!r} names tensor {t.name!r}")
        for i in self.inputs:
            if i not in self.tensors:
                raise AoeError(f"graph {self.name!r}: input {i!r} has no tensor entry")
        seen_ops: set[str] = set()
        for op in self.ops:
            if not _OP_TYPE.fullmatch(op.type):
                # op types name bank files downstream: only identifier-like CANN names are accepted
                raise AoeError(f"graph {self.name!r}: operator {op.name!r} has invalid type {op.type!r} "
                               "(operator types are identifiers such as MatMulV2)")
            if op.name in seen_ops:
                raise AoeError(f"graph {self.name!r}: two operators are named {op.name!r}")
            seen_ops.add(op.name)
            for t in op.inputs:
                if t not in self.tensors:
                    raise AoeError(f"graph {self.name!r}: operator {op.name!r} reads unknown tensor {t!r}")
                if self.tensors[t].kind == "activation" and t not in produced:
                    raise AoeError(f"graph {self.name!r}: operator {op.name!r} reads {t!r} before it is "
                                   "produced (operators are not in topological order, or the graph has a cycle)")
            for t in op.outputs:
                if t not in self.tensors:
                    raise AoeError(f"graph {self.name!r}: operator {op.name!r} writes unknown tensor {t!r}")
                if t in produced or t in defined:
                    raise AoeError(f"graph {self.name!r}: tensor {t!r} is produced more than once")
                produced.add(t)
        for o in self.outputs:
            if o not in self.tensors:
                raise AoeError(f"graph {self.name!r}: output {o!r} has no tensor entry")

    # ---- JSON ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-native form (tensors and operators as ordered lists)."""
        return {
            "format": JSON_FORMAT,
            "version": JSON_VERSION,
            "name": self.name,
            "batch_size": self.batch_size,
            "compute_dtype": self.compute_dtype,
            "training": self.training,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "tensors": [t.to_dict() for t in self.tensors.values()],
            "ops": [op.to_dict() for op in self.ops],
            "unsupported": _norm_attr(self.unsupported),
        }

    def to_json(self, indent: int | None = None) -> str:
        """The JSON form; ``Graph.from_json(g.to_json()) == g`` and re-serialising gives the same text."""
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=True, allow_nan=False)

    def fingerprint(self) -> str:
        """sha256 hex digest identifying the JSON form: equal JSON forms, equal fingerprints; any other
        difference in a field of the form (a name, a shape, an attribute, the order) gives another.

        What `to_json` holds, encoded by the same JSON encoder, but each field of the tensors and of the
        operators as one array over all of them (no dict per object, no keys: a fraction of `to_json`'s
        cost). The header fields are encoded at every call, the tensors and operators once per graph
        revision (`memo`): as for the catalogue's cases, which the tuners read from that memo, an `Op` or
        `Tensor` changed in place is not seen (replace the operator in `ops`, the `tensors` dict by a new one).
        """
        # JSON text holds no raw newline: the header and the body are told apart without a length
        head = _JSON.encode([JSON_FORMAT, JSON_VERSION, self.name, self.batch_size, self.compute_dtype,
                             self.training, self.inputs, self.outputs, _norm_attr(self.unsupported)])
        memo = self.memo("graph.fingerprint")
        body = memo.get("body")
        if body is None:
            body = memo["body"] = _fingerprint_body(self)
        return hashlib.sha256(head.encode("ascii") + b"\n" + body).hexdigest()

    @classmethod
    def from_dict(cls, data: Any) -> "Graph":
        """Build from the JSON-native form, checking every field (the data is untrusted)."""
        if not isinstance(data, dict) or data.get("format") != JSON_FORMAT:
            raise AoeError(f"not an aoe graph: the JSON must be an object with \"format\": \"{JSON_FORMAT}\"")
        if data.get("version") != JSON_VERSION:
            raise AoeError(f"aoe graph JSON version {data.get('version')!r} is not supported "
                           f"(this aoe reads version {JSON_VERSION}); re-import the model")
        try:
            tensors: dict[str, Tensor] = {}
            for t in _list(data, "tensors"):
                tensor = Tensor(_str(t["name"]), tuple(_int(d) for d in _list(t, "shape")),
                                _str(t["dtype"]), _str(t["format"]), _str(t["kind"]))
                if tensor.name in tensors:
                    raise AoeError(f"aoe graph JSON: tensor {tensor.name!r} is listed twice")
                tensors[tensor.name] = tensor
            ops = [Op(_str(o["name"]), _str(o["type"]), [_str(x) for x in _list(o, "inputs")],
                      [_str(x) for x in _list(o, "outputs")], _dict(o, "attrs")) for o in _list(data, "ops")]
            unsupported = _list(data, "unsupported")
            if not all(isinstance(u, dict) for u in unsupported):
                raise AoeError("aoe graph JSON: every \"unsupported\" entry must be an object")
            graph = cls(
                name=_str(data["name"]), tensors=tensors, ops=ops,
                inputs=[_str(x) for x in _list(data, "inputs")],
                outputs=[_str(x) for x in _list(data, "outputs")],
                unsupported=unsupported, batch_size=_int(data["batch_size"]),
                compute_dtype=_str(data["compute_dtype"]), training=_bool(data["training"]),
            )
        except KeyError as exc:
            raise AoeError(f"aoe graph JSON: missing field {exc.args[0]!r}") from None
        except (TypeError, ValueError) as exc:
            raise AoeError(f"aoe graph JSON: malformed field ({exc})") from None
        except RecursionError:
            raise AoeError("aoe graph JSON: attributes nested too deeply") from None
        for t in tensors.values():
            if any(d < -1 or d > MAX_DIM for d in t.shape) or len(t.shape) > MAX_RANK:
                raise AoeError(f"aoe graph JSON: tensor {t.name!r} has an invalid shape {list(t.shape)}")
        graph.validate()
        return graph

    @classmethod
    def from_json(cls, text: str | bytes) -> "Graph":
        """Parse the JSON form written by ``to_json``; malformed input raises AoeError."""
        try:
            # NaN/Infinity are not JSON; accepting them would make to_json() fail later
            data = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise AoeError(f"the graph file is not valid JSON ({exc}); pass an .onnx model or a file "
                           "written by `aoe graph MODEL --json`") from None
        return cls.from_dict(data)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _list(d: Any, key: str) -> list:
    v = d[key]
    if not isinstance(v, list):
        raise TypeError(f"{key!r} must be a list")
    return v


def _dict(d: Any, key: str) -> dict:
    v = d[key]
    if not isinstance(v, dict):
        raise TypeError(f"{key!r} must be an object")
    return v


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise TypeError(f"expected a string, got {type(v).__name__}")
    return v


def _int(v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"expected an integer, got {type(v).__name__}")
    return v


def _bool(v: Any) -> bool:
    if not isinstance(v, bool):
        raise TypeError(f"expected true/false, got {type(v).__name__}")
    return v


def unique_name(base: str, taken: set[str] | dict, suffix: str = "", counters: dict[str, int] | None = None) -> str:
    """``base + suffix``, or with a counter appended, that is not in ``taken``.

    Pass the same ``counters`` dict on every call to keep naming linear when many names share a base
    (a hostile file can give a million nodes the same name).
    """
    name = base + suffix
    if name not in taken:
        return name
    key = base + suffix
    i = counters.get(key, 1) if counters is not None else 1
    name = f"{key}_{i}"
    while name in taken:
        i += 1
        name = f"{key}_{i}"
    if counters is not None:
        counters[key] = i + 1
    return name


def topo_order(ops: Iterable[Op], available: set[str]) -> list[Op]:
    """Order operators so each runs after the producers of its inputs (Kahn); raise AoeError on a cycle."""
    ops = list(ops)
    producer: dict[str, int] = {}
    for i, op in enumerate(ops):
        for t in op.outputs:
            producer[t] = i
    indeg = [0] * len(ops)
    users: list[list[int]] = [[] for _ in ops]
    for i, op in enumerate(ops):
        for t in set(op.inputs):
            j = producer.get(t)
            if j is not None and t not in available:
                indeg[i] += 1
                users[j].append(i)
    # a heap keyed by file position keeps the file's order whenever that order is already valid
    ready = [i for i in range(len(ops)) if indeg[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(ops):
        stuck = next(ops[i] for i in range(len(ops)) if indeg[i] > 0)
        raise AoeError(f"the graph has a cycle through operator {stuck.name!r}; a model graph must be acyclic")
    return [ops[i] for i in order]
