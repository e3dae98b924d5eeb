"""The one registry of bank keys and knowledge per operator family, and the canonical key packing.

A *key* (`info_dict`) identifies one case of one operator; the *knowledge* is the strategy stored for it.

Packing (what the uint32 `id` hashes; stable across versions, never change without a migration):
- MatMul and Conv families: every key field in the registry order below as a little-endian signed
  int64 (`struct` format `<q`), nothing else. The op type is not packed: it is in the file name,
  like SoC and core count in CANN.
- Vector family (all other op types): the magic `b"AOEV"`, then
  the op type as a u32 byte length + UTF-8 bytes;
  `input_shapes` as a u32 count, then per shape a u32 rank + rank little-endian int64 dims;
  `input_dtypes`, `input_formats`, `output_dtypes`, `output_formats` each as a u32 count + int64 codes;
  `attrs` as u32 length + UTF-8 of its canonical JSON (keys sorted, no spaces, no NaN/Infinity).
Integers in keys are JSON integers; in MatMul/Conv keys a boolean counts as 0/1 (so a flag given
as `true` is the same case as `1`), while vector `attrs` keep `true` and `1` apart (their canonical
JSON differs). Dtype/format fields hold the codes of `aoe.codes`. `canonical_key` accepts
friendlier input (dtype/format names, bools for flags, numpy integers, defaults) and returns the
exact dict that is stored and packed.
"""
from __future__ import annotations

import json
import re
import operator
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import AoeError
from ..codes import dtype_code, format_code


class BankKeyError(AoeError):
    """A key or knowledge dict does not match the schema of its operator type."""


MATMUL_OPS = ("MatMul", "MatMulV2", "MatMulV3", "BatchMatMul", "BatchMatMulV2", "BatchMatMulV3")
CONV_OPS = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv2DBackpropInputD",
            "Conv2DBackpropFilterD", "DepthwiseConv2D", "DepthwiseConv2DBackpropInput",
            "DepthwiseConv2DBackpropFilter", "Conv2DTranspose")

# GemmInputArgs, in CANN's order.
MATMUL_KEY = (
    "m", "k", "n",
    "batch_a1", "batch_a2", "batch_a3", "batch_a4",
    "batch_b1", "batch_b2", "batch_b3", "batch_b4",
    "a_dtype", "b_dtype", "out_dtype", "a_format", "b_format", "out_format",
    "trans_a_flag", "trans_b_flag", "bias_flag", "m_align_flag", "k_align_flag", "n_align_flag",
)
# MatMulV3TunnerTiling, in CANN's order; the simulator's matmul strategy vector uses this order too.
MATMUL_KNOWLEDGE = (
    "usedCoreNum", "singleCoreM", "singleCoreN", "singleCoreK", "baseM", "baseN", "baseK",
    "depthA1", "depthB1", "stepM", "stepN", "iterateOrder", "stepKa", "stepKb",
    "dbL0A", "dbL0B", "dbL0C", "l2MTileCnt", "l2NTileCnt", "l2MTileBlock", "l2NTileBlock",
    "l2IterateOrder", "tilingEnable",
)
CONV_KEY = (
    "a_dtype", "b_dtype", "c_dtype",
    "a_shape_n", "a_shape_c", "a_shape_h", "a_shape_w",
    "b_shape_n", "b_shape_c", "b_shape_h", "b_shape_w",
    "c_shape_h", "c_shape_w",
    "a_format", "b_format", "c_format",
    "groups", "stride_h", "stride_w", "dilation_h", "dilation_w",
    "pad_top", "pad_bottom", "pad_left", "pad_right", "bias_flag",
)
CONV_KNOWLEDGE = (
    "singleCoreCi", "singleCoreCo", "singleCoreHo", "singleCoreWo", "hoL1", "woL1", "kAL1", "kBL1",
    "hoL0", "woL0", "kL0", "nL0", "pBufferFlag", "iterateMNOrder", "batchDim", "hoDim", "nDim",
    "groupDim",
)
VECTOR_KEY = ("op_type", "input_shapes", "input_dtypes", "input_formats", "output_dtypes",
              "output_formats", "attrs")
VECTOR_KNOWLEDGE = ("blockDim", "tileLen", "doubleBuffer", "impl")

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
KNOWLEDGE_MAX = (1 << 31) - 1  # CANN's tiling fields are int32/uint32: a larger value is damage
MAX_PERF_US = 1e12  # a stored time (µs) above this, or not above 0, is an impossible claim: damage
_INT_ONLY = {int}


# What a stored strategy may hold besides its family's fields: exactly what the tuner writes
# (aoe/opat/tune.py `_knowledge`). "impl" names the kernel of a MatMul/Conv case: the default one, a
# matmul implementation class (opat.tune.MATMUL_IMPLS), a catalogue kernel variant, or a vector kernel's
# class; "formats" the tensors' formats of a Format choice; "kernel" another kernel's own tiling.
IMPL_NAMES = frozenset({"default", "standard", "a_resident_l1", "b_resident_l1", "split_k", "cube", "vector_gemv",
                        "img2col_cube", "conv1x1_as_matmul", "depthwise_vector", *(f"impl{i}" for i in range(16))})
KNOWLEDGE_EXTRAS = ("impl", "formats", "kernel")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")


def _format_ok(v: object) -> bool:
    if type(v) is not str:
        return False
    try:
        format_code(v)
    except (AoeError, KeyError, ValueError, TypeError):
        return False
    return True


def extras_problem(family: str, knowledge: Mapping[str, Any], fields: frozenset[str]) -> str | None:
    """Why the fields of a stored strategy beyond its family's (`fields`) are not what aoe writes, or None."""
    for k, v in knowledge.items():
        if k in fields:
            continue
        if k == "impl" and family != "vector":
            if type(v) is not str or v not in IMPL_NAMES:
                return f"knowledge field 'impl' = {str(v)[:80]!r} names no kernel implementation of aoe's"
        elif k == "formats":
            if type(v) is not list or not 1 <= len(v) <= 8 or not all(map(_format_ok, v)):
                return f"knowledge field 'formats' = {str(v)[:80]!r} is not a list of tensor format names"
        elif k == "kernel":
            strat = v.get("strategy") if type(v) is dict else None
            if (type(v) is not dict or set(v) != {"op", "strategy"} or type(v["op"]) is not str
                    or not _NAME.fullmatch(v["op"]) or type(strat) is not dict or len(strat) > 64
                    or not all(type(f) is str and _NAME.fullmatch(f) and type(x) is int and 0 <= x <= KNOWLEDGE_MAX
                               for f, x in strat.items())):
                return f"knowledge field 'kernel' = {str(v)[:80]!r} is not a kernel name with its integer tiling"
        else:
            return f"knowledge has a field {str(k)[:40]!r} that {family} strategies do not have"
    return None


def _tuple_getter(fields: tuple[str, ...]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    g = operator.itemgetter(*fields)
    return g if len(fields) > 1 else (lambda d: (g(d),))
_U32 = struct.Struct("<I")


def _is_int(v: object) -> bool:
    # bool is an int subclass, but a JSON `true` must not equal a key holding `1`
    return type(v) is int


def _as_int(name: str, v: object) -> int:
    if isinstance(v, (str, bytes, float)):
        raise BankKeyError(f"key field {name!r} must be an integer, got {v!r}")
    try:  # bools become 0/1 and numpy integers plain ints, so the stored JSON is plain
        return operator.index(v)  # type: ignore[arg-type]
    except TypeError:
        raise BankKeyError(f"key field {name!r} must be an integer, got {v!r}") from None


@dataclass(frozen=True)
class OpSchema:
    """Ordered key fields and knowledge fields of one operator family, with packing and checks."""

    family: str
    key_fields: tuple[str, ...]
    knowledge_fields: tuple[str, ...]
    # friendly-input defaults used by canonical_key only (never by pack)
    defaults: Mapping[str, int] = field(default_factory=dict)
    _struct: struct.Struct | None = field(default=None, compare=False, repr=False)
    _getter: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None = field(
        default=None, compare=False, repr=False)
    _kget: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_kget", _tuple_getter(self.knowledge_fields))

    def pack(self, op_type: str, info: Mapping[str, Any]) -> bytes:
        """Pack an exact (canonical) info_dict into the bytes the id hashes; raise BankKeyError if off-schema."""
        if self._struct is not None:
            # hot path of every lookup: C-level field gathering and int64 packing (struct rejects
            # floats and strings; accepts bools as 0/1, as documented)
            try:
                if len(info) == len(self.key_fields):
                    return self._struct.pack(*self._getter(info))  # type: ignore[misc]
            except (KeyError, TypeError, struct.error):
                pass
            return self._pack_slow(op_type, info)
        return _pack_vector(op_type, info)

    def _pack_slow(self, op_type: str, info: Mapping[str, Any]) -> bytes:
        """Pack with a precise error message (the fast path failed)."""
        fields = self.key_fields
        try:
            vals = [info[f] for f in fields]
        except KeyError as exc:
            raise BankKeyError(f"{op_type} key is missing field {exc.args[0]!r}; "
                               f"{self.family} keys need {', '.join(fields)}") from None
        except TypeError:
            raise BankKeyError(f"{op_type} key must be an object, got {type(info).__name__}") from None
        if len(info) != len(fields):
            extra = sorted(set(info) - set(fields))
            raise BankKeyError(f"{op_type} key has fields not in the {self.family} schema: {extra}")
        for f, v in zip(fields, vals):
            if not isinstance(v, int):
                raise BankKeyError(f"{op_type} key field {f!r} must be an integer, got {v!r}")
        try:
            return self._struct.pack(*vals)  # type: ignore[union-attr]
        except struct.error:
            raise BankKeyError(f"{op_type} key has a value outside the int64 range: {vals}") from None

    def canonical_key(self, op_type: str, key: Mapping[str, Any]) -> dict[str, Any]:
        """Return the exact stored form of a key: codes for dtype/format names, ints for flags, schema order."""
        if not isinstance(key, Mapping):
            raise BankKeyError(f"{op_type} key must be a mapping, got {type(key).__name__}")
        if self.family == "vector":
            return _canonical_vector(op_type, key)
        unknown = sorted(set(key) - set(self.key_fields))
        if unknown:
            raise BankKeyError(f"{op_type} key has fields not in the {self.family} schema: {unknown}; "
                               f"allowed: {', '.join(self.key_fields)}")
        out: dict[str, Any] = {}
        for f in self.key_fields:
            if f in key:
                v = key[f]
            elif f in self.defaults:
                v = self.defaults[f]
            else:
                raise BankKeyError(f"{op_type} key is missing field {f!r}")
            if f.endswith("_dtype"):
                v = dtype_code(v)
            elif f.endswith("_format"):
                v = format_code(v)
            out[f] = _as_int(f, v)
        self.pack(op_type, out)  # range check
        return out

    def check_knowledge(self, op_type: str, knowledge: Mapping[str, Any]) -> None:
        """Raise BankKeyError unless every schema knowledge field is present as an integer (extras are free)."""
        if not isinstance(knowledge, Mapping):
            raise BankKeyError(f"{op_type} knowledge must be an object, got {type(knowledge).__name__}")
        for f in self.knowledge_fields:
            if f not in knowledge:
                raise BankKeyError(f"{op_type} knowledge is missing field {f!r}; "
                                   f"{self.family} knowledge needs {', '.join(self.knowledge_fields)}")
            v = knowledge[f]
            if not _is_int(v) or not _INT64_MIN <= v <= _INT64_MAX:
                raise BankKeyError(f"{op_type} knowledge field {f!r} must be an int64 integer, got {v!r}")


    def record_problem(self, info: Mapping[str, Any], knowledge: Mapping[str, Any]) -> str | None:
        """Why a stored (packable) record is out of range, or None: every knowledge field an integer in
        [0, KNOWLEDGE_MAX], MatMul/Conv key fields non-negative. Fast: it runs on every loaded line."""
        try:
            vals = self._kget(knowledge)  # type: ignore[misc]
        except KeyError as exc:
            return f"knowledge is missing field {exc.args[0]!r}"
        except TypeError:
            return "knowledge is not an object"
        if set(map(type, vals)) != _INT_ONLY or min(vals) < 0 or max(vals) > KNOWLEDGE_MAX:
            bad = next((f, v) for f, v in zip(self.knowledge_fields, vals)
                       if type(v) is not int or not 0 <= v <= KNOWLEDGE_MAX)
            return f"knowledge field {bad[0]!r} = {bad[1]!r} is not an integer in [0, {KNOWLEDGE_MAX}]"
        if len(knowledge) != len(vals):
            why = extras_problem(self.family, knowledge, frozenset(self.knowledge_fields))
            if why is not None:
                return why
        if self._getter is not None:
            kv = self._getter(info)
            if min(kv) < 0:
                return f"a key field is negative: {dict(zip(self.key_fields, kv))}"
        return None

    def check_ranges(self, op_type: str, info: Mapping[str, Any], knowledge: Mapping[str, Any]) -> None:
        """Raise BankKeyError when `record_problem` finds one (what a save refuses to store)."""
        why = self.record_problem(info, knowledge)
        if why is not None:
            raise BankKeyError(f"{op_type}: {why}")

    def to_vector(self, knowledge: Mapping[str, Any]) -> list[int]:
        """The schema knowledge fields in registry order (the simulator's strategy vector)."""
        self.check_knowledge("knowledge", knowledge)
        return [knowledge[f] for f in self.knowledge_fields]

    def from_vector(self, values: Any, **extra: Any) -> dict[str, Any]:
        """A knowledge dict from a strategy vector in registry order (plus extra fields)."""
        try:  # operator.index: numpy integers become ints, floats are refused (no silent truncation)
            vals = [operator.index(v) for v in values]
        except TypeError:
            raise BankKeyError(f"a {self.family} strategy must hold integers, got {list(values)!r}") from None
        if len(vals) != len(self.knowledge_fields):
            raise BankKeyError(f"a {self.family} strategy has {len(self.knowledge_fields)} values "
                               f"({', '.join(self.knowledge_fields)}), got {len(vals)}")
        return {**dict(zip(self.knowledge_fields, vals)), **extra}


def _fixed(family: str, key: tuple[str, ...], knowledge: tuple[str, ...],
           defaults: Mapping[str, int]) -> OpSchema:
    return OpSchema(family, key, knowledge, dict(defaults), struct.Struct("<" + "q" * len(key)),
                    operator.itemgetter(*key))


MATMUL = _fixed("matmul", MATMUL_KEY, MATMUL_KNOWLEDGE, {
    **{f"batch_{s}{i}": 1 for s in "ab" for i in range(1, 5)},
    **{f: 0 for f in MATMUL_KEY if f.endswith("_flag")},
})
CONV = _fixed("conv", CONV_KEY, CONV_KNOWLEDGE, {
    "groups": 1, "stride_h": 1, "stride_w": 1, "dilation_h": 1, "dilation_w": 1,
    "pad_top": 0, "pad_bottom": 0, "pad_left": 0, "pad_right": 0, "bias_flag": 0,
})
VECTOR = OpSchema("vector", VECTOR_KEY, VECTOR_KNOWLEDGE)

_REGISTRY: dict[str, OpSchema] = {**{op: MATMUL for op in MATMUL_OPS}, **{op: CONV for op in CONV_OPS}}


def schema_for(op_type: str) -> OpSchema:
    """Return the schema of an operator type; unknown types use the vector schema."""
    return _REGISTRY.get(op_type, VECTOR)


# ---- vector family -------------------------------------------------------------------------

def _attrs_json(op_type: str, attrs: object) -> str:
    if not isinstance(attrs, dict) or not all(isinstance(k, str) for k in attrs):
        raise BankKeyError(f"{op_type} key field 'attrs' must be an object with string keys")
    try:
        return json.dumps(attrs, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise BankKeyError(f"{op_type} attrs are not plain JSON values: {exc}") from None


def _int_list(op_type: str, name: str, v: object) -> list[int]:
    if type(v) is not list or not all(type(x) is int for x in v):
        raise BankKeyError(f"{op_type} key field {name!r} must be a list of integers, got {v!r}")
    return v  # type: ignore[return-value]


def _pack_vector(op_type: str, info: Mapping[str, Any]) -> bytes:
    # hot path of every vector lookup: one cached struct per rank pattern, cached op-type and attrs
    # bytes, one- and two-input keys gathered in one expression; anything unusual (or wrong) goes the
    # precise way, which yields the same bytes
    try:
        if type(info) is dict and len(info) == 7:
            name, shapes, a, b, c, d, attrs = _VECTOR_GET(info)
            if (type(name) is str and type(shapes) is list and type(attrs) is dict and type(a) is list
                    and type(b) is list and type(c) is list and type(d) is list):
                n = len(shapes)
                if n == 1 and type(shapes[0]) is list:
                    s0 = shapes[0]
                    ranks: tuple[int, ...] = (len(s0), len(a), len(b), len(c), len(d))
                    args: tuple[Any, ...] = (1, ranks[0], *s0, ranks[1], *a, ranks[2], *b, ranks[3], *c,
                                             ranks[4], *d)
                elif n == 2 and type(shapes[0]) is list and type(shapes[1]) is list:
                    s0, s1 = shapes
                    ranks = (len(s0), len(s1), len(a), len(b), len(c), len(d))
                    args = (2, ranks[0], *s0, ranks[1], *s1, ranks[2], *a, ranks[3], *b, ranks[4], *c,
                            ranks[5], *d)
                else:
                    lists = [*shapes, a, b, c, d]
                    if not all(type(x) is list for x in lists):
                        return _pack_vector_slow(op_type, info)
                    ranks = tuple(map(len, lists))
                    gathered: list[Any] = [n]
                    for x in lists:
                        gathered.append(len(x))
                        gathered += x
                    args = tuple(gathered)
                if _INT_ONLY.issuperset(map(type, args)):
                    st = _STRUCTS.get(ranks)
                    if st is None:
                        if len(_STRUCTS) > 4096:
                            _STRUCTS.clear()
                        st = _STRUCTS[ranks] = struct.Struct("<I" + "".join(f"I{r}q" for r in ranks))
                    head = _NAMES.get(name)
                    if head is None:
                        if len(_NAMES) > 4096:
                            _NAMES.clear()
                        head = _NAMES[name] = b"AOEV" + _str_bytes(name)
                    return head + st.pack(*args) + (_attrs_bytes(op_type, attrs) if attrs else _EMPTY_ATTRS)
    except (KeyError, TypeError, struct.error):
        pass
    return _pack_vector_slow(op_type, info)


_STRUCTS: dict[tuple[int, ...], struct.Struct] = {}
_VECTOR_GET = operator.itemgetter(*VECTOR_KEY)
_NAMES: dict[str, bytes] = {}
_ATTRS: dict[bytes, bytes] = {}


def _attrs_bytes(op_type: str, attrs: dict[str, Any]) -> bytes:
    """The packed canonical JSON of `attrs`, cached by orjson's sorted dump (distinct values give
    distinct dumps: 1, 1.0 and true stay apart), computed with the json module as always."""
    if not attrs:
        return _EMPTY_ATTRS
    try:
        ident = _orjson_sorted(attrs)
    except Exception:  # noqa: BLE001 - orjson refuses what json may accept (e.g. huge ints): no cache
        return _str_bytes(_attrs_json(op_type, attrs))
    b = _ATTRS.get(ident)
    if b is None:
        b = _str_bytes(_attrs_json(op_type, attrs))
        if len(_ATTRS) > 65536:
            _ATTRS.clear()
        _ATTRS[ident] = b
    return b


def _pack_vector_slow(op_type: str, info: Mapping[str, Any]) -> bytes:
    if not isinstance(info, Mapping):
        raise BankKeyError(f"{op_type} key must be an object, got {type(info).__name__}")
    if len(info) != len(VECTOR_KEY) or any(f not in info for f in VECTOR_KEY):
        raise BankKeyError(f"{op_type} key must have exactly the fields {', '.join(VECTOR_KEY)}; "
                           f"got {sorted(info)}")
    name = info["op_type"]
    if type(name) is not str:
        raise BankKeyError(f"{op_type} key field 'op_type' must be a string")
    parts = [b"AOEV", _str_bytes(name)]
    shapes = info["input_shapes"]
    if type(shapes) is not list:
        raise BankKeyError(f"{op_type} key field 'input_shapes' must be a list of shapes")
    parts.append(_U32.pack(len(shapes)))
    for shape in shapes:
        _int_list(op_type, "input_shapes", shape)
        parts.append(_ints(shape, op_type))
    for f in ("input_dtypes", "input_formats", "output_dtypes", "output_formats"):
        parts.append(_ints(_int_list(op_type, f, info[f]), op_type))
    parts.append(_str_bytes(_attrs_json(op_type, info["attrs"])))
    return b"".join(parts)


def _str_bytes(s: str) -> bytes:
    b = s.encode("utf-8", "surrogatepass")
    return _U32.pack(len(b)) + b


_EMPTY_ATTRS = _str_bytes("{}")
try:
    import orjson as _oj

    def _orjson_sorted(v: Any) -> bytes:
        return _oj.dumps(v, option=_oj.OPT_SORT_KEYS)
except ImportError:  # pragma: no cover - orjson is a dependency
    def _orjson_sorted(v: Any) -> bytes:
        raise TypeError("no orjson")


def _ints(vals: list[int], op_type: str) -> bytes:
    try:
        return _U32.pack(len(vals)) + struct.pack(f"<{len(vals)}q", *vals)
    except struct.error:
        raise BankKeyError(f"{op_type} key has a value outside the int64 range: {vals}") from None


def _canonical_vector(op_type: str, key: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(key) - set(VECTOR_KEY))
    if unknown:
        raise BankKeyError(f"{op_type} key has fields not in the vector schema: {unknown}; "
                           f"allowed: {', '.join(VECTOR_KEY)}")
    name = key.get("op_type", op_type)
    if name != op_type:
        raise BankKeyError(f"key field op_type={name!r} does not match the operator type {op_type!r}")

    def seq(f: str, conv: Callable[[Any], int]) -> list[int]:
        v = key.get(f, [])
        if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
            raise BankKeyError(f"{op_type} key field {f!r} must be a list, got {v!r}")
        return [conv(x) for x in v]

    shapes = key.get("input_shapes", [])
    if isinstance(shapes, (str, bytes)) or not hasattr(shapes, "__iter__"):
        raise BankKeyError(f"{op_type} key field 'input_shapes' must be a list of shapes")
    attrs = key.get("attrs", {})
    out = {
        "op_type": op_type,
        "input_shapes": [[_as_int("input_shapes", d) for d in s] for s in shapes],
        "input_dtypes": seq("input_dtypes", dtype_code),
        "input_formats": seq("input_formats", format_code),
        "output_dtypes": seq("output_dtypes", dtype_code),
        "output_formats": seq("output_formats", format_code),
        # tuples -> lists etc.: store exactly what a JSON reader will give back
        "attrs": json.loads(_attrs_json(op_type, dict(attrs) if isinstance(attrs, Mapping) else attrs)),
    }
    _pack_vector(op_type, out)
    return out
