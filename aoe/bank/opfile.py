"""The index of one operator bank file, built lazily: which line holds which case.

A process needs a few hundred cases of a bank that may hold a million, so loading a file must not
parse and check every record. A file is indexed in two steps:

- **Filing** (on load, and for every line appended later): a line that looks like aoe's own record —
  it starts with `{"id":N,` and ends with a flat `"aoe"` object as its last member — is filed under N
  without being parsed (aoe's records are indexed under their stored id). Any other line (CANN's
  records, which are indexed under aoe's hash of their key, hand-made lines, garbage) is parsed and
  checked at once, as are the lines of an id already resolved.
- **Resolving** an id: its filed lines are parsed and checked the first time the id is needed — a
  lookup or a save of a case with that id — and for every id by `resolve_all` (`entries()`, `aoe bank
  verify`), for the ids with several lines by `settle` (`duplicates()`, compaction). A damaged line
  (bad JSON, off-schema, out of range) is found then: it is warned about, listed in `lines.problems`,
  never a hit and never the incumbent a save compares against — what a full load did, done later.

Why filing by the prefix is sound: in a valid JSON line of that shape the first member of the
top-level object is "id" with the integer N, and the "aoe" object is a member of the top-level object
(the object holding it closes with the line's last character, and it has no brace inside, so its
own closing brace is the one before). The parse at resolution confirms it: a line that is not valid
JSON is damaged, and a record whose parsed id differs from N (a second "id" member) is damaged too.
"""
from __future__ import annotations

import bisect
import re
import struct
import warnings
from operator import itemgetter
from typing import Any, Callable

from .. import _sim
from . import jsonl
from .schema import IMPL_NAMES, KNOWLEDGE_MAX, MAX_PERF_US, BankKeyError, OpSchema, _attrs_bytes, extras_problem

HashFn = Callable[[bytes], int]
Key = tuple[int, bytes]  # (index id, packed key): one case

# aoe's record layout (orjson, fields in insertion order): '{"id":N,' ... ',"aoe":{...}}'
_AOE_LINE = re.compile(rb'\{"id":([0-9]{1,10}),.*,"aoe":\{[^{}]*\}\}', re.DOTALL)
_ID = itemgetter(1)
_NUM = (int, float)
_NO_AOE: dict[str, Any] = {}
_UNPARSED = jsonl.UNPARSED
_loads, _JSONError, _dumps = jsonl.parse_raw, jsonl.DecodeError, jsonl.dumps


RECORD_VERSION = 1


def _perf(v: Any) -> float | None:
    return float(v) if type(v) in (int, float) and 0 < v <= MAX_PERF_US else None


Case = tuple  # (packed key, id, version, knowledge, aoe fields, stored line): one cached winner


def case_of(rec: dict[str, Any], raw: bytes, packed: bytes) -> Case:
    """What the bank keeps of a winning record: one tuple and the two dicts callers read (plain numbers
    in the usual case), not the whole parsed record (a vector key alone holds a list per shape): few
    objects for the cyclic GC to scan in a process that has looked up many cases."""
    return (packed, rec["id"], rec.get("version", RECORD_VERSION), rec["knowledge"], rec.get("aoe") or {}, raw)


class Entry:
    """One stored case: key, strategy and (if known) the performance it achieved.

    A thin view of what the bank keeps of a case, made for each lookup that finds it: `knowledge` and
    `aoe` are the bank cache's own objects (treat them as read-only; `knowledge_copy` gives yours).
    The key (`info_dict`) and `record()` are parsed again from the stored line on each call: a cached
    key of a vector operator would hold a list per shape, objects for Python's cyclic GC to scan.
    """

    __slots__ = ("op", "source", "_c")

    def __init__(self, op: str, source: str, rec: dict[str, Any], raw: bytes | None = None,
                 packed: bytes = b"") -> None:
        self.op, self.source = op, source  # source: "custom" | "builtin"
        self._c: Case = case_of(rec, raw if raw is not None else _dumps(rec), packed)

    @property
    def id(self) -> int:
        """The record's uint32 id."""
        return self._c[1]  # type: ignore[no-any-return]

    @property
    def version(self) -> int:
        """The record's version field."""
        return self._c[2]  # type: ignore[no-any-return]

    @property
    def knowledge(self) -> dict[str, Any]:
        """The strategy."""
        return self._c[3]  # type: ignore[no-any-return]

    @property
    def aoe(self) -> dict[str, Any]:
        """aoe's own fields ({} for CANN's records)."""
        return self._c[4]  # type: ignore[no-any-return]

    @property
    def info_dict(self) -> dict[str, Any]:
        """The key (a fresh copy)."""
        return _loads(self._c[5])["info_dict"]  # type: ignore[no-any-return]

    @property
    def perf_us(self) -> float | None:
        """Time (µs) this strategy achieved when it was stored; None if unknown."""
        return _perf(self._c[4].get("perf_us"))

    @property
    def default_perf_us(self) -> float | None:
        """Time (µs) of the default strategy for this case when it was stored; None if unknown."""
        return _perf(self._c[4].get("default_perf_us"))

    def record(self) -> dict[str, Any]:
        """A copy of the JSON record of this entry."""
        return _loads(self._c[5])  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Entry) and (self.op, self.source, self.record()) ==
                (other.op, other.source, other.record()))

    def __repr__(self) -> str:
        return f"Entry(op={self.op!r}, source={self.source!r}, record={self.record()!r})"


_new = object.__new__


def entry_of(op: str, source: str, c: Case) -> Entry:
    """The entry of a cached case (the hot path: no argument parsing, three slots set)."""
    e = _new(Entry)
    e.op, e.source, e._c = op, source, c
    return e


def shape_check(op_type: str) -> Callable[[Any], str | None]:
    """Why a parsed line is not a record of `op_type`'s file (None: it is; its schema is not checked)."""
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
        a = rec.get("aoe", _NO_AOE)
        if type(rec.get("version", 0)) is not int or type(a) is not dict:
            return "'version' is not an integer or 'aoe' is not an object"
        if a:
            for name in ("perf_us", "default_perf_us"):
                v = a.get(name)
                if v is not None and not (type(v) in _NUM and 0 < v <= MAX_PERF_US):
                    return f"'aoe.{name}' claims an impossible time {v!r} (must be in (0, {MAX_PERF_US:g}] µs)"
        return None
    return check


def record_checker(op_type: str, schema: OpSchema, hash_fn: HashFn) -> Callable[[Any], Key | str]:
    """A function: parsed line -> its case (index id, packed key) if it is a usable record, else why not.

    The same rules as `schema.pack` + `schema.record_problem`, with a fast path for the usual record:
    the knowledge fields' JSON holds only digits and commas (no sign, fraction, `true`, string or
    nesting) and none exceeds KNOWLEDGE_MAX; anything else gets the precise check and its message."""
    shape = shape_check(op_type)
    pack, problem = schema.pack, schema.record_problem
    kget = itemgetter(*schema.knowledge_fields)
    st, getter, n_key = schema._struct, schema._getter, len(schema.key_fields)
    family, n_know, know_set = schema.family, len(schema.knowledge_fields), frozenset(schema.knowledge_fields)

    def check(rec: Any) -> Key | str:
        why = shape(rec)
        if why is not None:
            return why
        info, know = rec["info_dict"], rec["knowledge"]
        try:
            vals = kget(know)
            ok = not _dumps(vals)[1:-1].translate(None, b"0123456789,") and max(vals) <= KNOWLEDGE_MAX
        except (KeyError, TypeError):  # (orjson's encode error is a TypeError: an int beyond 64 bits)
            ok = False
        packed = None
        if st is not None and len(info) == n_key:
            try:
                kv = getter(info)  # type: ignore[misc]
                packed = st.pack(*kv)
                if min(kv) < 0:
                    ok = False  # a negative key field: the precise check says so
            except (KeyError, TypeError, struct.error):
                packed = None
        if packed is None:
            try:
                packed = pack(op_type, info)
            except BankKeyError as exc:
                return f"does not fit the schema: {exc}"
        if not ok:
            why = problem(info, know)
            if why is not None:
                return f"does not fit the schema: {why}"
        elif len(know) != n_know:  # fields beyond the family's: each checked (record_problem does it too)
            why = extras_problem(family, know, know_set)
            if why is not None:
                return f"does not fit the schema: {why}"
        return (rec["id"] if "aoe" in rec else hash_fn(packed)), packed
    return check


_ATTRS_PACKED: dict[bytes, bytes] = {}  # attrs JSON text -> packed canonical attrs (native_checker's cache)
_scan, _case = _sim.bank_scan, _sim.bank_case
_ids_sync, _ids_discard, _ids_flush = _sim.bank_ids_sync, _sim.bank_ids_discard, _sim.bank_ids_flush
SLOW: Any = object()  # `resolve_fast`: not the usual case, nothing done


def native_checker(op_type: str, schema: OpSchema, source: str | None = None) -> Any:
    """The native one-pass check of `op_type`'s lines (`_sim.bank_scan(spec, line)`): the case of a line
    in aoe's exact layout that passes every rule of `record_checker`, else None (the line then takes
    the Python path, which decides it). Vector attrs are packed by `schema._attrs_bytes`, once per text.
    With `source`, a lookup's native call (`_sim.bank_probe`) answers a hit with the `Entry` itself."""
    return _sim.bank_spec(op_type, schema.family == "vector", list(schema.key_fields),
                          list(schema.knowledge_fields), KNOWLEDGE_MAX, MAX_PERF_US, _ATTRS_PACKED,
                          lambda attrs: _attrs_bytes(op_type, attrs), _UNPARSED,
                          sorted(IMPL_NAMES) if schema.family != "vector" else [],
                          Entry if source is not None else None, source, _knowledge_proto(schema.knowledge_fields))


_PROTOS: dict[tuple[str, ...], dict[str, None]] = {}


def _knowledge_proto(fields: Any) -> dict[str, None]:
    """The dict the native pass copies for a line's knowledge: each field -> None, in order, made as an
    object's `__dict__` so that it shares its keys table (CPython's split dict, up to 30 keys) with
    every copy: a cached MatMul case then holds its 23 values (about 0.3 KB), not a table of its own
    (0.8 KB), which a growing cache of cases had to fault in page by page. A plain dict all the same."""
    key = tuple(fields)
    d = _PROTOS.get(key)
    if d is None:
        holder = type("_Knowledge", (), {})()
        for f in key:
            setattr(holder, f, None)
        d = _PROTOS.setdefault(key, holder.__dict__)
    return d


class OpFile:
    """The index of one bank file: case (id, packed key) -> line of its winning record, built lazily.

    Indexing by the pair makes the hit rule literal: a lookup hits only a record whose id AND whole
    packed key equal the query's, so a hash collision is never a hit, and the last line of a case
    wins. Resolution may run in any order, so each case keeps its last line (`index`) and, once it
    has several, its first (`first`, where compaction puts the winner) by line number.
    `lines.recs[i]` is UNPARSED (filed), None (damaged) or the line's case (a usable record; the
    record itself lives in the case's `Entry` when the line wins). Not thread-safe: the bank serialises every call that resolves or
    extends.
    """

    def __init__(self, lines: jsonl.Lines, op_type: str, schema: OpSchema, hash_fn: HashFn,
                 source: str, *, index_now: bool = True) -> None:
        self.lines, self.op_type, self.schema, self.hash_fn, self.source = (
            lines, op_type, schema, hash_fn, source)
        self.check = record_checker(op_type, schema, hash_fn)
        self.spec = native_checker(op_type, schema, source)
        self._index: dict[Key, int] = {}  # case -> line of its winning (last) record (read: `index`)
        # lines of the new cases a first lookup cached (`resolve_fast`), not in `_index` yet: `index`
        # adds them when it is next read (a lookup never reads it; hashing each packed key into a
        # dict of every case was a third of a first lookup's native call)
        self.quick: list[int] = []
        # case -> its first line, for the cases with several lines (of the others it is `index`'s line)
        self.first: dict[Key, int] = {}
        self.multi: set[Key] = set()  # cases with more than one line
        self.superseded: set[int] = set()  # lines of usable records that are not their case's first line
        self._pending: dict[int, int | list[int]] = {}  # id -> its filed line(s), not parsed yet (`pending`)
        # the same ids natively (`_sim.bank_ids_sync`): what a lookup's native call probes instead of the
        # dict (one slot in one cache line, where the dict costs four dependent misses); None: not made
        # yet, or ids it cannot hold (the native call then reads the dict)
        self._ids: Any = None
        self.pending_extra = 0  # filed lines beyond one per id: duplicates (or collisions) to come
        self.pending_multi: set[int] = set()  # the ids filed with several lines
        # resolved ids: a new line of one is indexed at once (an id with a cached case — in `hits` — is
        # resolved too: `resolve_fast` does not add it here)
        self.done: set[int] = set()
        # id -> the cached case of its winner (`case_of`), or a list of them (a hash collision): what a
        # lookup reads, one probe by id and one comparison of the packed key bytes (`case[0]`)
        self.hits: dict[int, Case | list[Case]] = {}
        self.warned = 0  # warnings given (at most MAX_WARNINGS_PER_FILE, then one summary)
        self.reported = len(lines.problems)  # problems up to here were warned about (or by the reader)
        self.fast: tuple[Any, ...] = ()  # what the native first lookup stores into (`renew_fast`)
        self._filed: list[int] | None = None  # the ids `extend` files (for the native table)
        self.renew_fast()
        if index_now:
            self.extend(0)

    @property
    def pending(self) -> dict[int, int | list[int]]:
        """Id -> its filed line(s), not parsed yet: the ids a lookup's native call resolved leave it first."""
        if self._ids is not None:
            _ids_flush(self._ids, self._pending)
        return self._pending

    @pending.setter
    def pending(self, value: dict[int, int | list[int]]) -> None:
        self._pending = value
        self._ids = _ids_sync(None, value, None)
        self.renew_fast()

    @property
    def index(self) -> dict[Key, int]:
        """Case -> line of its winning (last) record: every case resolved so far (the bank's lock held)."""
        q = self.quick
        if q:
            # each line in `quick` is the one line of a case new to the index (`resolve_fast`'s
            # conditions), so these are the stores it would have made, in the same order
            recs, index = self.lines.recs, self._index
            for i in q:
                index[recs[i]] = i
            q.clear()
        return self._index

    @index.setter
    def index(self, value: dict[Key, int]) -> None:
        self.quick.clear()
        self._index = value

    def renew_fast(self) -> None:
        """(pending, quick, recs, the lines read in one go): the containers a lookup's native call
        (`_sim.bank_probe`) resolves a first question in, as `resolve_fast` does; renewed whenever one
        is replaced (a line beyond them is left to `resolve_fast`)."""
        raw = self.lines.raw
        self.fast = (self.pending, self.quick, self.lines.recs, raw.bulk if type(raw) is jsonl.BulkLines else (),
                     self._ids)

    # ---- filing and resolving --------------------------------------------------------------------

    def extend(self, start: int) -> None:
        """File (or index at once) the lines from `start` on: a new file, or lines appended to it."""
        lines = self.lines
        raw, recs = lines.raw, lines.recs
        end = len(raw)
        if start >= end:
            return
        pending, done, hits = self.pending, self.done, self.hits
        filed = self._filed = []
        with jsonl.gc_paused():
            ms = list(map(_AOE_LINE.fullmatch, raw[start:end]))
            now: list[int] = []
            if (not pending and not done and not hits and None not in ms
                    and recs[start:end].count(_UNPARSED) == end - start):
                self._file_all(list(map(int, map(_ID, ms))), start)
            else:
                for i, m in enumerate(ms, start):
                    if m is not None and recs[i] is _UNPARSED:
                        h = int(m[1])
                        if h not in done and h not in hits:
                            self._file(h, i)
                            continue
                    now.append(i)
            for i in now:
                k = self._index_line(i, None)
                if k is not None:
                    if k[0] in pending:
                        self.resolve(k[0])
                    done.add(k[0])
        self._filed = None
        if filed:
            # the native table follows the dict: made whole on a fresh file, else the ids filed now
            ids = self._ids
            pending = self.pending  # (the ids resolved natively leave the dict before a table is dropped)
            self._ids = _ids_sync(ids, pending, None if ids is None else filed)
            self.renew_fast()
        if type(raw) is jsonl.BulkLines and raw.bulk is not self.fast[3]:
            self.renew_fast()  # (the first lines read into an empty file's index)
        self._warn()

    def _file_all(self, ids: list[int], start: int) -> None:
        # a fresh file whose every line is aoe's: one C-level dict build unless ids repeat
        d = dict(zip(ids, range(start, start + len(ids))))
        if len(d) == len(ids):
            self.pending.update(d)
            self._filed += ids  # type: ignore[operator]
            return
        for i, h in enumerate(ids, start):
            self._file(h, i)

    def _file(self, h: int, i: int) -> None:
        self._filed.append(h)  # type: ignore[union-attr]  # (`extend` brings the native table up to date)
        v = self.pending.get(h)
        if v is None:
            self.pending[h] = i
            return
        if type(v) is int:
            self.pending[h] = [v, i]
            self.pending_multi.add(h)
        else:
            v.append(i)
        self.pending_extra += 1

    def resolve(self, h: int) -> None:
        """Parse and index the lines filed under id `h` (nothing to do when there are none)."""
        self.done.add(h)
        v = self.pending.get(h)
        if v is None:
            return
        if type(v) is int:
            self._index_line(v, h)
        else:
            for i in v:
                self._index_line(i, h)
            self.pending_extra -= len(v) - 1
            self.pending_multi.discard(h)
        del self.pending[h]  # last: a reader that still sees `h` pending waits for the bank's lock
        if self._ids is not None:
            _ids_discard(self._ids, h)
        if len(self.lines.problems) > self.reported:
            self._warn()

    def resolve_fast(self, h: int, packed: bytes) -> Entry | None | object:
        """`resolve(h)` then `get(h, packed)` for the usual first question about an id — one line filed
        under `h`, in aoe's layout, passing every rule: checked and cached in one native pass
        (`bank_scan`), indexed with the stores `_index_line` makes for the first line of a new case
        (its cached case marks the id resolved; the index store waits in `quick`, see `index`). SLOW (nothing done) for any other; the caller holds
        the bank's lock. `OpBank.lookup`'s native call does the same itself (csrc/bank_lookup.cpp,
        `resolve_first`); this serves the lookups it leaves: a key the native packer does not take,
        a line appended since the load, a file that changed."""
        i = self.pending.get(h)
        if type(i) is int:
            lines = self.lines
            raw = lines.raw
            # (the line: from the tuple of those read in one go, without BulkLines' Python indexing)
            # (the query's id and packed key: a hit's case shares those objects)
            c = _scan(self.spec, raw.bulk[i] if type(raw) is jsonl.BulkLines and i < len(raw.bulk) else raw[i],
                      h, packed)
            if c is not None and c[1] == h and lines.recs[i] is _UNPARSED and h not in self.hits:
                lines.recs[i] = (h, c[0])
                self.quick.append(i)
                self.hits[h] = c  # (before the pending entry goes: a reader that sees neither misses)
                del self.pending[h]
                if self._ids is not None:
                    _ids_discard(self._ids, h)
                return entry_of(self.op_type, self.source, c) if c[0] == packed else None
        return SLOW

    def settle(self) -> None:
        """Resolve every id filed with several lines: `dups` is then exact."""
        for h in list(self.pending_multi):
            self.resolve(h)

    def resolve_all(self) -> None:
        """Resolve every id: each line is then a record or a listed damaged line."""
        for h in list(self.pending):
            self.resolve(h)

    def _index_line(self, i: int, expect: int | None) -> Key | None:
        recs = self.lines.recs
        rec, line = recs[i], self.lines.raw[i]
        c = None
        if rec is _UNPARSED:
            c = _scan(self.spec, line)  # aoe's own layout, every rule passed: its case in one native pass
            if c is None:
                try:
                    rec = _loads(line)
                except _JSONError:
                    return self._damaged(i, "not valid JSON (corrupt or truncated line)")
        if c is not None:
            k = (c[1], c[0])
        else:
            k = self.check(rec)
            if type(k) is str:
                return self._damaged(i, k)
        if expect is not None and k[0] != expect:
            return self._damaged(i, "its 'id' member is given twice (the record is ambiguous)")
        recs[i] = k  # a usable line now holds its case; the record lives in the entry (if it wins)
        w = self.index.get(k)  # type: ignore[arg-type]
        if w is None:
            self.index[k] = i  # type: ignore[index]
        elif w != i:
            self.multi.add(k)  # type: ignore[arg-type]
            f = self.first.get(k, w)  # type: ignore[arg-type]  # (a case with one line so far: that line)
            if i < f:
                self.superseded.add(f)
                self.first[k] = i  # type: ignore[index]
            else:
                self.superseded.add(i)
                self.first[k] = f  # type: ignore[index]
            if i < w:
                return k  # type: ignore[return-value]  # an older line of the case: not the winner
            self.index[k] = i  # type: ignore[index]
        if c is None:  # (the case the native pass would have made: an untracked tuple)
            c = _case(k[1], rec["id"], rec.get("version", RECORD_VERSION), rec["knowledge"],  # type: ignore[index]
                      rec.get("aoe") or {}, line)
        self._set_hit(k[0], c)  # type: ignore[index]
        return k  # type: ignore[return-value]

    def _set_hit(self, h: int, c: Case) -> None:
        v = self.hits.get(h)
        if v is None or (type(v) is tuple and v[0] == c[0]):
            self.hits[h] = c
        elif type(v) is tuple:
            self.hits[h] = [v, c]
        else:  # a new list, not an edit: a lookup may be reading the old one
            self.hits[h] = [x for x in v if x[0] != c[0]] + [c]

    def get(self, h: int, packed: bytes) -> Entry | None:
        """The winner of the resolved case (h, packed), or None."""
        v = self.hits.get(h)
        if v is None:
            return None
        if type(v) is tuple:
            return entry_of(self.op_type, self.source, v) if v[0] == packed else None
        for c in v:
            if c[0] == packed:
                return entry_of(self.op_type, self.source, c)
        return None

    def _damaged(self, i: int, why: str) -> None:
        self.lines.recs[i] = None
        self.lines.problems.append((self.lines.linenos[i], why))

    def _warn(self) -> None:
        new = self.lines.problems[self.reported:]
        self.reported = len(self.lines.problems)
        if not new:
            return
        room = jsonl.MAX_WARNINGS_PER_FILE - self.warned
        if room > 0:
            self.warned += min(room, len(new))
            jsonl.warn_problems(self.lines.path, new[:room], stacklevel=5)
        if len(new) > room and self.warned == jsonl.MAX_WARNINGS_PER_FILE:
            self.warned += 1  # one summary, then silence: `aoe bank verify` lists them all
            warnings.warn(f"{self.lines.path}: more damaged lines skipped without a warning; "
                          f"`aoe bank verify` lists them", jsonl.BankWarning, stacklevel=4)

    # ---- questions -------------------------------------------------------------------------------

    def find(self, packed: bytes, h: int) -> Entry | None:
        """The winner of the case with this packed key and id (its lines resolved first), or None."""
        if h in self.pending:
            self.resolve(h)
        return self.get(h, packed)

    @property
    def dups(self) -> int:
        """Superseded lines found so far (exact after `settle`)."""
        return len(self.superseded)

    def dups_bound(self) -> int:
        """An upper bound of the superseded lines, without resolving anything."""
        return len(self.superseded) + self.pending_extra

    def cases(self) -> int:
        """Cases in the file, counting each unresolved id once."""
        return len(self._index) + len(self.quick) + len(self.pending)

    def winners(self) -> list[Entry]:
        """Every usable entry (of a case's lines only the last), in order of the cases' first lines."""
        self.resolve_all()
        out = []
        first, index = self.first, self.index
        for k in sorted(index, key=lambda k: first.get(k, index[k])):
            e = self.get(*k)
            assert e is not None  # every indexed case has its winner's entry
            out.append(e)
        return out

    # ---- compaction ------------------------------------------------------------------------------

    def compacted(self) -> OpFile:
        """The canonical file, not written yet: one line per case (the winner at the place of the
        case's first line), damaged and unresolved lines verbatim; the index carries over."""
        self.settle()  # the unresolved ids left have one line each: a case of its own, or damage
        old = self.lines
        raw, recs, linenos = list(old.raw), list(old.recs), list(old.linenos)
        for k in self.multi:
            f, w = self.first[k], self.index[k]
            raw[f], recs[f] = old.raw[w], old.recs[w]
        drop = sorted(self.superseded)
        out = jsonl.Lines(old.path, jsonl.BulkLines(_without(raw, drop)), _without(recs, drop),
                          _without(linenos, drop), list(old.problems), old.sig)
        g = OpFile(out, self.op_type, self.schema, self.hash_fn, self.source, index_now=False)
        first = self.first
        keys = list(self.index)
        g.index = dict(zip(keys, _shifted([first.get(k, i) for k, i in self.index.items()], drop)))
        g.pending = dict(zip(self.pending, _shifted(list(self.pending.values()), drop)))  # type: ignore[arg-type]
        g.done, g.hits, g.warned, g.reported = set(self.done), dict(self.hits), self.warned, len(out.problems)
        g.renew_fast()
        return g


def _without(seq: list[Any], drop: list[int]) -> list[Any]:
    """`seq` without the (sorted) positions in `drop`, by slices."""
    if not drop:
        return seq
    out: list[Any] = []
    prev = 0
    for d in drop:
        out += seq[prev:d]
        prev = d + 1
    out += seq[prev:]
    return out


def _shifted(positions: list[int], drop: list[int]) -> list[int]:
    """Each position (none of them in `drop`) moved up by the dropped positions before it."""
    if not drop or not positions:
        return positions
    if len(positions) < 4096:
        return [i - bisect.bisect_left(drop, i) for i in positions]
    import numpy as np  # a million positions: vectorised

    p = np.asarray(positions, dtype=np.int64)
    return (p - np.searchsorted(np.asarray(drop, dtype=np.int64), p)).tolist()
