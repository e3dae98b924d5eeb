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
- When a file has several records with the same key, the last one counts: a save appends the new
  record (O(1) in the file's size) and `compact` (or `aoe bank compact`; also done by a save once the
  superseded lines outnumber the live ones) rewrites the file with one line per case, the winner at
  the place of the case's first line, damaged lines kept — CANN's format.
- Every record is validated before it is used: key fields in range, every knowledge field an integer
  in [0, 2^31), `perf_us` / `default_perf_us` finite and in (0, 1e12] µs. Anything else is a damaged
  line (skipped, reported by `aoe bank verify`), so an impossible claim such as 0 µs never wins. The
  index is lazy (`opfile.py`): aoe's lines are filed by id on load and checked when their id is first
  needed, so loading a million-record file costs a scan, not a million parses.
"""
from __future__ import annotations

import copy
import os
import re
import stat
import threading
import warnings
import weakref
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from .. import _sim
from ..errors import AoeError
from . import jsonl
from .opfile import RECORD_VERSION, SLOW, Entry, OpFile, _perf, entry_of, shape_check
from .paths import check_dir, check_name, core_num_for, ensure_dir, inside
from .schema import MAX_PERF_US, BankKeyError, schema_for

HashFn = Callable[[bytes], int]
_pack, _unchanged, _probe = _sim.bank_pack, _sim.bank_unchanged, _sim.bank_probe
BUILTIN_ROOT = Path(__file__).resolve().parent / "builtin"
_CONTAINERS = (dict, list)


# The uint32 id of a packed key: CRC-32 as computed by zlib (the builtin itself: no Python frame
# on the lookup hot path).
default_hash: HashFn = zlib.crc32


@dataclass(frozen=True)
class Pending:
    """A validated strategy waiting to be saved (see `make_pending`)."""

    op_type: str
    info_dict: dict[str, Any]
    knowledge: dict[str, Any]
    aoe: dict[str, Any]

    # (knowledge, µs): the stored strategy the tuner re-priced before deciding to replace it; when the
    # bank still holds exactly that strategy, the verified time is compared, not the stored claim
    over: tuple[dict[str, Any], float] | None = None

    @property
    def perf_us(self) -> float | None:
        """The performance the strategy achieved (µs), if known."""
        return _perf(self.aoe.get("perf_us"))


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
                raise AoeError(f"{name} must be a positive number of microseconds up to {MAX_PERF_US:g}, "
                               f"got {v!r}")
            aoe[name] = float(v)
    return jsonl.plain_json(aoe, "aoe extra fields")


def make_pending(op_type: str, key: Mapping[str, Any], knowledge: Mapping[str, Any],
                 perf_us: float | None, default_perf_us: float | None = None,
                 extra: Mapping[str, Any] | None = None,
                 over: tuple[Mapping[str, Any], float] | None = None) -> Pending:
    """Validate and canonicalise one strategy for `save`; raise AoeError when it is off-schema.

    `over`: (stored knowledge, its re-priced µs) when the caller measured the strategy it replaces."""
    check_name(op_type, "operator type")
    schema = schema_for(op_type)
    info = schema.canonical_key(op_type, key)
    know = jsonl.plain_json(dict(knowledge), f"{op_type} knowledge")
    schema.check_knowledge(op_type, know)
    schema.check_ranges(op_type, info, know)
    ov = (dict(over[0]), float(over[1])) if over is not None else None
    return Pending(op_type, info, know, aoe_fields(perf_us, default_perf_us, extra), ov)


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
        # op type -> (file path, stat signature when read, its index, a read descriptor or None): an
        # fstat of the open file (no path walk) tells an append or an in-place edit, and a link count
        # of 0 a replacement (compaction) or removal; without a descriptor the path is stat'ed
        self._cache: dict[str, tuple[str, jsonl.Signature | None, OpFile, int | None]] = {}
        self._fds: set[int] = set()
        self._mutex = threading.Lock()  # catching up (the slow path) is done by one thread at a time
        weakref.finalize(self, _close_all, self._fds)

    def path_for(self, op_type: str) -> Path:
        """The bank file of `op_type`; rejects names that could leave the bank directory."""
        check_name(op_type, "operator type")
        path = self.dir / f"{self.soc}_{self.core_num}_AiCore_{op_type}_runtime_kb.json"
        # the name check already rules out separators and '..'; this also catches a planted symlink. A
        # real directory entry (lstat: not followed) is inside the bank by construction, which spares the
        # two full realpath walks on every save; anything else (a link, a missing entry) is resolved.
        if not self._plain_dir() and self.dir.exists() and not inside(path.parent, self.root):
            raise AoeError(f"{self.dir} leads outside the bank directory {self.root} (a symbolic "
                           f"link?); remove it")
        return path

    def _plain_dir(self) -> bool:
        """True if the bank's `unified_bank` entry is a directory itself, not a symbolic link to one."""
        try:
            return stat.S_ISDIR(os.lstat(self.dir).st_mode)
        except OSError:
            return False

    def _load(self, op_type: str, path: Path) -> OpFile:
        lines = jsonl.read_lines(path, shape_check(op_type), lazy=True)
        return OpFile(lines, op_type, schema_for(op_type), self.hash_fn, self.source)

    def _catch_up(self, op_type: str, path: Path, f: OpFile | None, writing: bool = False) -> OpFile:
        """`f` brought up to date with the file: appended lines are parsed and indexed incrementally."""
        try:
            if f is None:
                f = self._load(op_type, path)
            else:
                lines, first = jsonl.refresh(f.lines, shape_check(op_type), lazy=True)
                if lines is f.lines:
                    f.extend(first)
                else:
                    f = OpFile(lines, op_type, f.schema, self.hash_fn, self.source)
        except jsonl.NotRegular as exc:
            if writing:
                raise
            # a planted FIFO / device / hard link: a reader skips it (a compile must not hang or fail)
            warnings.warn(f"{exc}; skipped", jsonl.BankWarning, stacklevel=4)
            f = OpFile(jsonl.Lines(path), op_type, schema_for(op_type), self.hash_fn, self.source)
            f.lines.sig = jsonl.current_signature(str(path))
        self._remember(op_type, path, f)
        return f

    def _remember(self, op_type: str, path: Path, f: OpFile) -> None:
        fd = None
        if self.revalidate and f.lines.sig is not None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
                if jsonl.signature(os.fstat(fd)) != f.lines.sig:  # changed already: the next call catches up
                    os.close(fd)
                    fd = None
            except OSError:
                fd = None
        old = self._cache.get(op_type)
        self._cache[op_type] = (str(path), f.lines.sig, f, fd)
        if fd is not None:
            self._fds.add(fd)
        if old is not None and old[3] is not None:
            self._fds.discard(old[3])
            os.close(old[3])

    def file(self, op_type: str) -> OpFile:
        """The current index of `op_type`'s file; new lines are read when its stat signature changed.

        The signature (mtime_ns, size, inode) changes with every append, compaction (a new inode) and
        in-place edit, so a cached index never hides a new entry; an append costs only its own lines.
        """
        hit = self._cache.get(op_type)
        if hit is not None:
            if not self.revalidate:
                return hit[2]
            fd = hit[3]
            if fd is not None:
                if _unchanged(fd, hit[1]):  # fstat: a link left and the same (mtime_ns, size, inode)
                    return hit[2]
            elif jsonl.current_signature(hit[0]) == hit[1]:
                return hit[2]
        with self._mutex:
            hit = self._cache.get(op_type)
            if hit is not None:
                return self._catch_up(op_type, Path(hit[0]), hit[2])
            return self._catch_up(op_type, self.path_for(op_type), None)

    def lookup(self, op_type: str, key: Mapping[str, Any]) -> Entry | None:
        """The stored strategy of one case, or None; a hit needs the id and the whole key to match."""
        hit = self._cache.get(op_type)
        r = None
        if hit is not None and (hit[3] is not None or not self.revalidate):
            # the usual call in one native step: `file`'s fstat, packing an exact key, hashing it, the
            # probe of the cached cases and, for a first question about an id, `resolve_fast` under
            # the lock; None when the file changed or the key needs the Python packer
            f = hit[2]
            r = _probe(f.spec, hit[3] if self.revalidate else -1, hit[1], key, self.hash_fn, f.hits, f.fast,
                       self._mutex)
            if type(r) is Entry:  # (made natively, as `entry_of` makes it)
                return r
        if r is not None:
            h, packed = r[0], r[1]  # no cached case of this key under its id; r[2]: its line tried
        else:
            f = self.file(op_type)
            packed = _pack(f.spec, key)  # an exact dict of plain values, natively; None: anything else
            if packed is None:
                schema = f.schema
                try:
                    packed = schema.pack(op_type, key)
                except BankKeyError:  # friendly input (names, defaults): canonicalise, then pack
                    packed = schema.pack(op_type, schema.canonical_key(op_type, key))
            h = self.hash_fn(packed)
        if h in f.pending:
            with self._mutex:  # the first question about this id: parse and check its lines
                e = SLOW if r is not None and len(r) == 3 else f.resolve_fast(h, packed)
                if e is not SLOW:
                    return e
                f.resolve(h)  # (called from here: its warnings name the caller of `lookup`)
        # (the cases now cached: also right when another thread resolved `h` since the probe)
        return f.get(h, packed)

    def checked(self, op_type: str) -> OpFile:
        """The index of `op_type`'s file with every line parsed and checked (`aoe bank verify`)."""
        f = self.file(op_type)
        with self._mutex:
            f.resolve_all()
        return f

    def _writable(self, op_type: str) -> Path:
        if self.readonly:
            raise AoeError(f"the {self.source} bank at {self.root} is read-only")
        self.path_for(op_type)  # refuse a bad name before creating anything
        ensure_dir(self.dir)
        # the same rwx rule as for TUNE_BANK_PATH (root included), before anything is written
        check_dir(self.dir, f"the {self.source} operator bank {self.root}")
        return self.path_for(op_type)  # again, now that the directory exists

    def _under_lock(self, op_type: str, path: Path) -> OpFile:
        hit = self._cache.get(op_type)
        return self._catch_up(op_type, path, hit[2] if hit is not None and hit[0] == str(path) else None,
                              writing=True)

    def save(self, items: Iterable[Pending]) -> list[str]:
        """Merge strategies into the bank under the lock, file by file; one outcome string per item.

        The new records are appended (cost independent of the file's size); the file is compacted
        when superseded lines outnumber the live ones (amortised O(1) per save)."""
        items = list(items)
        outcomes: list[str] = [""] * len(items)
        by_op: dict[str, list[int]] = {}
        for n, it in enumerate(items):
            by_op.setdefault(it.op_type, []).append(n)
        for op_type, idxs in by_op.items():
            path = self._writable(op_type)
            schema = schema_for(op_type)
            with self._mutex, jsonl.locked(path):
                f = self._under_lock(op_type, path)
                new: list[dict[str, Any]] = []
                placed: dict[tuple[int, bytes], int] = {}  # same case twice in one batch
                for n in idxs:
                    it = items[n]
                    packed = schema.pack(op_type, it.info_dict)
                    h = self.hash_fn(packed)
                    j = placed.get((h, packed))
                    e = f.find(packed, h)
                    if j is not None:
                        old = _perf(new[j]["aoe"].get("perf_us"))
                    elif e is not None:
                        old = e.perf_us
                        if it.over is not None and e.knowledge == it.over[0]:
                            old = it.over[1]  # the tuner re-priced the stored strategy: trust that
                    if (j is not None or e is not None) and not better(it.perf_us, old):
                        outcomes[n] = "kept"
                        continue
                    rec = {"id": h, "op": op_type, "version": RECORD_VERSION, "info_dict": it.info_dict,
                           "knowledge": it.knowledge, "aoe": it.aoe}
                    if j is not None:
                        new[j] = rec
                    else:
                        placed[(h, packed)] = len(new)
                        new.append(rec)
                    outcomes[n] = "added" if e is None and j is None else "replaced"
                if new:
                    start = len(f.lines.raw)
                    jsonl.append(f.lines, [jsonl.dumps(r) for r in new])
                    f.lines.recs[start:] = new
                    f.extend(start)
                    if f.dups_bound() > max(f.cases(), 1024):
                        f.settle()  # resolves the ids with several lines: the count is exact
                        if f.dups > max(f.cases(), 1024):
                            f = self._compact_locked(op_type, path, f)
                    self._remember(op_type, path, f)
        return outcomes

    def _compact_locked(self, op_type: str, path: Path, f: OpFile) -> OpFile:
        jsonl.remove_stale_temps(path)
        g = f.compacted()
        jsonl.rewrite(g.lines)
        self._remember(op_type, path, g)
        return g

    def duplicates(self, op_type: str) -> int:
        """Superseded lines of `op_type`'s file awaiting compaction."""
        f = self.file(op_type)
        with self._mutex:
            f.settle()
        return f.dups

    def compact(self, op_type: str | None = None) -> dict[str, int]:
        """Rewrite files with one line per case (CANN's format); {op type: lines removed}."""
        out: dict[str, int] = {}
        for op in [op_type] if op_type else self.op_types():
            path = self._writable(op)
            with self._mutex, jsonl.locked(path):
                f = self._under_lock(op, path)
                f.settle()
                if f.dups or f.lines.open_tail or (f.lines.sig and f.lines.sig[1] > f.lines.offset):
                    before = len(f.lines.raw)
                    out[op] = before - len(self._compact_locked(op, path, f).lines.raw)
                else:
                    out[op] = 0
        return out

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
            f = self.file(op)
            with self._mutex:
                found = f.winners()
            yield from found


def _close_all(fds: set[int]) -> None:
    for fd in list(fds):
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()


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
