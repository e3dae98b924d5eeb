"""Operator banks in CANN's on-disk format: custom (read/write), built-in (read-only), and their chain.

File: `<op bank dir>/unified_bank/<soc>_<core_num>_AiCore_<OpType>_runtime_kb.json`, JSON Lines:
`{"id": uint32, "op": OpType, "version": int, "info_dict": {key}, "knowledge": {strategy}, "aoe": {...}}`.

- `id` = `hash_fn(schema.pack(info_dict))`, default `zlib.crc32`. A hit needs the id AND the packed
  key bytes to be equal, so a hash collision is never a hit.
- The optional `"aoe"` object is aoe's own: `perf_us` (time of this strategy, µs), `default_perf_us`
  (the default heuristic's), anything else kept verbatim. Its presence also says the `id` was computed
  by aoe, so it is used as stored; records without it (CANN's own files, whose id comes from CANN's
  hash) are indexed under aoe's hash of their key, and are written back unchanged. Their
  performance is unknown.
- Replacing a case keeps the better strategy: a new record wins iff its `perf_us` is known and the
  existing one's is unknown or larger. Same rule for tuning writes and for `aoe bank import`.
- When a file has several records with the same key, the last one counts.
"""
from __future__ import annotations

import copy
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..errors import AoeError
from . import jsonl
from .paths import check_dir, check_name, core_num_for, ensure_dir, inside
from .schema import BankKeyError, OpSchema, schema_for

HashFn = Callable[[bytes], int]
BUILTIN_ROOT = Path(__file__).resolve().parent / "builtin"
RECORD_VERSION = 1
_CONTAINERS = (dict, list)


# The uint32 id of a packed key: CRC-32 as computed by zlib (the builtin itself: no Python frame
# on the lookup hot path).
default_hash: HashFn = zlib.crc32


class Entry:
    """One stored case: key, strategy and (if known) the performance it achieved.

    A thin view of the stored record, built on the lookup hot path. `info_dict`, `knowledge` and
    `aoe` are the bank cache's own objects: treat them as read-only (`knowledge_copy` gives yours).
    """

    __slots__ = ("op", "source", "_rec")

    def __init__(self, op: str, source: str, rec: dict[str, Any]) -> None:
        self.op, self.source, self._rec = op, source, rec  # source: "custom" | "builtin"

    @property
    def id(self) -> int:
        """The record's uint32 id."""
        return self._rec["id"]

    @property
    def version(self) -> int:
        """The record's version field."""
        return self._rec.get("version", RECORD_VERSION)

    @property
    def info_dict(self) -> dict[str, Any]:
        """The key."""
        return self._rec["info_dict"]

    @property
    def knowledge(self) -> dict[str, Any]:
        """The strategy."""
        return self._rec["knowledge"]

    @property
    def aoe(self) -> dict[str, Any]:
        """aoe's own fields ({} for CANN's records)."""
        return self._rec.get("aoe") or {}

    @property
    def perf_us(self) -> float | None:
        """Time (µs) this strategy achieved when it was stored; None if unknown."""
        return _perf(self.aoe.get("perf_us"))

    @property
    def default_perf_us(self) -> float | None:
        """Time (µs) of the default strategy for this case when it was stored; None if unknown."""
        return _perf(self.aoe.get("default_perf_us"))

    def record(self) -> dict[str, Any]:
        """A copy of the JSON record of this entry."""
        return copy.deepcopy(self._rec)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Entry) and (self.op, self.source, self._rec) ==
                (other.op, other.source, other._rec))

    def __repr__(self) -> str:
        return f"Entry(op={self.op!r}, source={self.source!r}, record={self._rec!r})"


@dataclass(frozen=True)
class Pending:
    """A validated strategy waiting to be saved (see `make_pending`)."""

    op_type: str
    info_dict: dict[str, Any]
    knowledge: dict[str, Any]
    aoe: dict[str, Any]

    @property
    def perf_us(self) -> float | None:
        """The performance the strategy achieved (µs), if known."""
        return _perf(self.aoe.get("perf_us"))


def _perf(v: Any) -> float | None:
    return float(v) if type(v) in (int, float) and v >= 0 else None


def better(new_perf: float | None, old_perf: float | None) -> bool:
    """True if a strategy with `new_perf` should replace one with `old_perf` (None = unknown)."""
    return new_perf is not None and (old_perf is None or new_perf < old_perf)


def aoe_fields(perf_us: float | None, default_perf_us: float | None,
               extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The record's `aoe` object: validated performances plus the caller's extra fields."""
    aoe: dict[str, Any] = dict(extra or {})
    for name, v in (("perf_us", perf_us), ("default_perf_us", default_perf_us)):
        if v is not None:
            if _perf(v) is None:
                raise AoeError(f"{name} must be a non-negative number of microseconds, got {v!r}")
            aoe[name] = float(v)
    return jsonl.plain_json(aoe, "aoe extra fields")


def make_pending(op_type: str, key: Mapping[str, Any], knowledge: Mapping[str, Any],
                 perf_us: float | None, default_perf_us: float | None = None,
                 extra: Mapping[str, Any] | None = None) -> Pending:
    """Validate and canonicalise one strategy for `save`; raise AoeError when it is off-schema."""
    check_name(op_type, "operator type")
    schema = schema_for(op_type)
    info = schema.canonical_key(op_type, key)
    know = jsonl.plain_json(dict(knowledge), f"{op_type} knowledge")
    schema.check_knowledge(op_type, know)
    return Pending(op_type, info, know, aoe_fields(perf_us, default_perf_us, extra))


def _check_record(op_type: str) -> Callable[[Any], str | None]:
    def check(rec: Any) -> str | None:
        if type(rec) is not dict:
            return "not a JSON object"
        i = rec.get("id")
        if type(i) is not int or not 0 <= i <= 0xFFFFFFFF:
            return "'id' is not a uint32"
        if rec.get("op") != op_type:
            return f"'op' is {rec.get('op')!r}, not {op_type!r} as the file name says"
        if type(rec.get("info_dict")) is not dict or type(rec.get("knowledge")) is not dict:
            return "'info_dict' or 'knowledge' is not an object"
        if type(rec.get("version", 0)) is not int or type(rec.get("aoe", {})) is not dict:
            return "'version' is not an integer or 'aoe' is not an object"
        return None
    return check


class OpFile:
    """The index of one bank file: (id, packed key) -> line, with lazily built entries.

    Indexing by the pair makes the hit rule literal: a lookup hits only a record whose id AND whole
    packed key equal the query's, so a hash collision is never a hit and same-key duplicates resolve
    to the last line. Records carrying "aoe" are indexed under their stored id (a wrong one can only
    cause a miss, which `verify` reports); CANN's records under aoe's hash of their key.
    """

    def __init__(self, lines: jsonl.Lines, op_type: str, schema: OpSchema, hash_fn: HashFn,
                 source: str) -> None:
        self.lines, self.op_type, self.schema, self.hash_fn, self.source = (
            lines, op_type, schema, hash_fn, source)
        self.index: dict[tuple[int, bytes], int] = {}
        self._kfields = frozenset(schema.knowledge_fields)
        self.unfit: list[tuple[int, str]] = []  # valid JSON records whose key/knowledge is off-schema
        with jsonl.gc_paused():
            for i, rec in enumerate(lines.recs):
                if rec is not None:
                    self._register(i, rec)
        if self.unfit:
            jsonl.warn_problems(lines.path, self.unfit)

    def _register(self, i: int, rec: dict[str, Any]) -> None:
        try:
            packed = self.schema.pack(self.op_type, rec["info_dict"])
            # presence only (cheap at load); field types are checked on write and by `verify`
            if not self._kfields <= rec["knowledge"].keys():
                self.schema.check_knowledge(self.op_type, rec["knowledge"])
        except BankKeyError as exc:
            self.unfit.append((self.lines.linenos[i], f"does not fit the schema: {exc}"))
            return
        h = rec["id"] if "aoe" in rec else self.hash_fn(packed)
        self.index[(h, packed)] = i

    def entry(self, i: int) -> Entry:
        """The entry of (indexed) line `i`."""
        return Entry(self.op_type, self.source, self.lines.recs[i])

    def find(self, packed: bytes, h: int) -> int | None:
        """Line index of the case with this packed key and id, or None."""
        return self.index.get((h, packed))

    def set_line(self, i: int | None, rec: dict[str, Any]) -> None:
        """Replace line `i` (or append when None) by `rec`, keeping the index current."""
        raw = jsonl.dumps(rec)
        if i is None:
            i = self.lines.add(raw, rec)
        else:
            self.lines.raw[i], self.lines.recs[i] = raw, rec
        self._register(i, rec)

    def entries(self) -> Iterator[Entry]:
        """Every usable entry (for same-key duplicates only the last), in file order."""
        for i in sorted(set(self.index.values())):
            yield self.entry(i)


_FILE_RE = re.compile(r"(?P<soc>[A-Za-z][A-Za-z0-9_]*)_(?P<core>[0-9]+)_AiCore_(?P<op>[A-Za-z][A-Za-z0-9_]*)_runtime_kb\.json")


class OpBank:
    """A directory of CANN-format operator bank files for one SoC and core count."""

    def __init__(self, root_dir: str | os.PathLike[str], soc: str, core_num: int | None = None, *,
                 hash_fn: HashFn = default_hash, readonly: bool = False, source: str = "custom",
                 revalidate: bool = True) -> None:
        self.root = Path(root_dir)
        self.soc = check_name(soc, "SoC version")
        self.core_num = core_num_for(soc, core_num)
        self.dir = self.root / "unified_bank"
        self.hash_fn, self.readonly, self.source, self.revalidate = hash_fn, readonly, source, revalidate
        # op type -> (file path, stat signature when read, its index)
        self._cache: dict[str, tuple[str, jsonl.Signature | None, OpFile]] = {}

    def path_for(self, op_type: str) -> Path:
        """The bank file of `op_type`; rejects names that could leave the bank directory."""
        check_name(op_type, "operator type")
        path = self.dir / f"{self.soc}_{self.core_num}_AiCore_{op_type}_runtime_kb.json"
        # the name check already rules out separators and '..'; this also catches a planted symlink
        if self.dir.exists() and not inside(path.parent, self.root):
            raise AoeError(f"{self.dir} leads outside the bank directory {self.root} (a symbolic "
                           f"link?); remove it")
        return path

    def _load(self, op_type: str, path: Path) -> OpFile:
        lines = jsonl.read_lines(path, _check_record(op_type))
        return OpFile(lines, op_type, schema_for(op_type), self.hash_fn, self.source)

    def file(self, op_type: str) -> OpFile:
        """The current index of `op_type`'s file, re-read only when its stat signature changed.

        The signature (mtime_ns, size, inode) changes with every aoe write (a new inode) and every
        in-place edit, so a cached index never hides a new entry.
        """
        hit = self._cache.get(op_type)
        if hit is not None and (not self.revalidate or jsonl.current_signature(hit[0]) == hit[1]):
            return hit[2]
        path = hit[0] if hit is not None else str(self.path_for(op_type))
        f = self._load(op_type, Path(path))  # reports whatever made the stat fail
        self._cache[op_type] = (path, f.lines.sig, f)
        return f

    def lookup(self, op_type: str, key: Mapping[str, Any]) -> Entry | None:
        """The stored strategy of one case, or None; a hit needs the id and the whole key to match."""
        f = self.file(op_type)
        schema = f.schema
        try:
            packed = schema.pack(op_type, key)
        except BankKeyError:  # friendly input (names, defaults): canonicalise, then pack
            packed = schema.pack(op_type, schema.canonical_key(op_type, key))
        i = f.index.get((self.hash_fn(packed), packed))
        return None if i is None else Entry(op_type, f.source, f.lines.recs[i])

    def save(self, items: Iterable[Pending]) -> list[str]:
        """Merge strategies into the bank under the lock, file by file; one outcome string per item."""
        if self.readonly:
            raise AoeError(f"the {self.source} bank at {self.root} is read-only")
        items = list(items)
        outcomes: list[str] = [""] * len(items)
        by_op: dict[str, list[int]] = {}
        for n, it in enumerate(items):
            by_op.setdefault(it.op_type, []).append(n)
        for op_type, idxs in by_op.items():
            self.path_for(op_type)  # refuse a bad name before creating anything
            ensure_dir(self.dir)
            # the same rwx rule as for TUNE_BANK_PATH (root included), before anything is written
            check_dir(self.dir, f"the {self.source} operator bank {self.root}")
            path = self.path_for(op_type)  # again, now that the directory exists
            schema = schema_for(op_type)
            holder: list[OpFile] = []

            def merge(lines: jsonl.Lines, op_type: str = op_type, idxs: list[int] = idxs,
                      schema: OpSchema = schema, holder: list[OpFile] = holder) -> bool:
                f = OpFile(lines, op_type, schema, self.hash_fn, self.source)
                holder.append(f)
                changed = False
                for n in idxs:
                    it = items[n]
                    packed = schema.pack(op_type, it.info_dict)
                    h = self.hash_fn(packed)
                    i = f.find(packed, h)
                    if i is not None and not better(it.perf_us, f.entry(i).perf_us):
                        outcomes[n] = "kept"
                        continue
                    f.set_line(i, {"id": h, "op": op_type, "version": RECORD_VERSION,
                                   "info_dict": it.info_dict, "knowledge": it.knowledge,
                                   "aoe": it.aoe})
                    outcomes[n] = "added" if i is None else "replaced"
                    changed = True
                return changed

            lines = jsonl.update(path, _check_record(op_type), merge)
            self._cache[op_type] = (str(path), lines.sig, holder[-1])
        return outcomes

    def op_types(self) -> list[str]:
        """Operator types that have a file for this SoC and core count."""
        try:
            names = os.listdir(self.dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for name in names:
            m = _FILE_RE.fullmatch(name)
            if m and m["soc"] == self.soc and int(m["core"]) == self.core_num:
                out.append(m["op"])
        return sorted(out)

    def entries(self, op_type: str | None = None) -> Iterator[Entry]:
        """Every usable entry of one operator type, or of all."""
        for op in [op_type] if op_type else self.op_types():
            yield from self.file(op).entries()


class BuiltinBank(OpBank):
    """The read-only bank shipped inside the package (`aoe/bank/builtin/<soc>/unified_bank/`).

    Package data does not change while a process runs, so its files are read once and not re-stat'ed.
    """

    def __init__(self, soc: str, core_num: int | None = None,
                 root: str | os.PathLike[str] | None = None, *, hash_fn: HashFn = default_hash) -> None:
        soc = check_name(soc, "SoC version")
        super().__init__(Path(root) if root is not None else BUILTIN_ROOT / soc, soc, core_num,
                         hash_fn=hash_fn, readonly=True, source="builtin", revalidate=False)


class BankChain:
    """Lookup in the custom bank first, then the built-in one (then the caller's default strategy)."""

    def __init__(self, custom: OpBank | None, builtin: OpBank | None) -> None:
        self.custom, self.builtin = custom, builtin

    def lookup(self, op_type: str, key: Mapping[str, Any]) -> Entry | None:
        """The entry in use for one case (`entry.source` says which bank), or None for the default."""
        for bank in (self.custom, self.builtin):
            if bank is not None:
                e = bank.lookup(op_type, key)
                if e is not None:
                    return e
        return None


def knowledge_copy(e: Entry) -> dict[str, Any]:
    """A caller-owned copy of an entry's knowledge (cheap when it has no nested containers)."""
    k = e.knowledge
    # schema fields are integers: only extra fields can hold containers
    if len(k) == len(schema_for(e.op).knowledge_fields) or not any(
            type(v) in _CONTAINERS for v in k.values()):
        return dict(k)
    return copy.deepcopy(k)
