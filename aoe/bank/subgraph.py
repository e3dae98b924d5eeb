"""The subgraph bank: `subgraph.json` at the subgraph bank root, JSON Lines keyed by `repo_key`.

Record: `{"repo_key": "<decimal string>", "version": 1, "knowledge": {...}, "aoe": {"perf_us": ...,
"default_perf_us": ...}}`. Same storage guarantees as the operator bank (locked merge, atomic
replace, damaged lines kept) and the same keep-the-better rule.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from ..errors import AoeError
from . import jsonl
from .paths import check_dir, ensure_dir
from .store import RECORD_VERSION, _perf, aoe_fields, better

SUBGRAPH_FILE = "subgraph.json"


@dataclass(frozen=True)
class SubgraphEntry:
    """One stored subgraph strategy."""

    repo_key: str
    version: int
    knowledge: dict[str, Any]
    perf_us: float | None
    default_perf_us: float | None
    aoe: dict[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """The JSON record of this entry."""
        return {"repo_key": self.repo_key, "version": self.version, "knowledge": self.knowledge,
                "aoe": self.aoe}


def _check(rec: Any) -> str | None:
    if type(rec) is not dict:
        return "not a JSON object"
    if type(rec.get("repo_key")) is not str or not rec["repo_key"]:
        return "'repo_key' is not a non-empty string"
    if type(rec.get("knowledge")) is not dict:
        return "'knowledge' is not an object"
    if type(rec.get("version", 0)) is not int or type(rec.get("aoe", {})) is not dict:
        return "'version' is not an integer or 'aoe' is not an object"
    return None


def _entry(rec: dict[str, Any]) -> SubgraphEntry:
    aoe = rec.get("aoe") or {}
    return SubgraphEntry(rec["repo_key"], rec.get("version", RECORD_VERSION), rec["knowledge"],
                         _perf(aoe.get("perf_us")), _perf(aoe.get("default_perf_us")), aoe)


def _index(lines: jsonl.Lines) -> dict[str, int]:
    # the last record of a key counts
    return {rec["repo_key"]: i for i, rec in enumerate(lines.recs) if rec is not None}


def make_subgraph_pending(repo_key: str, knowledge: Mapping[str, Any], perf_us: float | None,
                          default_perf_us: float | None = None,
                          extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A validated subgraph record for `SubgraphBank.save` (AoeError when a field is unusable)."""
    if not isinstance(repo_key, (str, int)) or isinstance(repo_key, bool) or str(repo_key) == "":
        raise AoeError(f"repo_key must be a non-empty string, got {repo_key!r}")
    if not isinstance(knowledge, Mapping):
        raise AoeError(f"subgraph knowledge must be an object, got {type(knowledge).__name__}")
    return {"repo_key": str(repo_key), "version": RECORD_VERSION,
            "knowledge": jsonl.plain_json(dict(knowledge), "subgraph knowledge"),
            "aoe": aoe_fields(perf_us, default_perf_us, extra)}


class SubgraphBank:
    """The custom subgraph bank in one directory."""

    def __init__(self, root_dir: str | os.PathLike[str]) -> None:
        self.root = Path(root_dir)
        self.path = self.root / SUBGRAPH_FILE
        self._cached: tuple[jsonl.Signature | None, jsonl.Lines, dict[str, int]] | None = None

    def _current(self) -> tuple[jsonl.Lines, dict[str, int]]:
        if self._cached is None or self._cached[0] != jsonl.current_signature(str(self.path)):
            try:
                lines = jsonl.read_lines(self.path, _check)
            except jsonl.NotRegular as exc:  # a planted FIFO / hard link: readers skip it, writers refuse
                warnings.warn(f"{exc}; skipped", jsonl.BankWarning, stacklevel=3)
                lines = jsonl.Lines(self.path)
                lines.sig = jsonl.current_signature(str(self.path))
            self._cached = (lines.sig, lines, _index(lines))
        return self._cached[1], self._cached[2]

    def lookup(self, repo_key: str) -> SubgraphEntry | None:
        """The stored strategy of one subgraph, or None."""
        lines, index = self._current()
        i = index.get(str(repo_key))
        return None if i is None else _entry(lines.recs[i])

    def entries(self) -> Iterator[SubgraphEntry]:
        """Every stored subgraph strategy."""
        lines, index = self._current()
        for i in sorted(index.values()):
            yield _entry(lines.recs[i])

    def problems(self) -> list[tuple[int, str]]:
        """Damaged lines of the file: (line number, reason)."""
        return list(self._current()[0].problems)

    def save(self, items: Iterable[dict[str, Any]]) -> list[str]:
        """Merge records (`make_subgraph_pending`) under the lock; "added"/"replaced"/"kept" per item.

        A record replaces the stored one of its repo_key only when it is faster.
        """
        recs = list(items)
        outcomes = [""] * len(recs)

        def merge(lines: jsonl.Lines) -> bool:
            index = _index(lines)
            changed = False
            for n, rec in enumerate(recs):
                i = index.get(rec["repo_key"])
                if i is not None and not better(_perf(rec["aoe"].get("perf_us")),
                                                _perf((lines.recs[i].get("aoe") or {}).get("perf_us"))):
                    outcomes[n] = "kept"
                    continue
                raw = jsonl.dumps(rec)
                if i is None:
                    index[rec["repo_key"]] = lines.add(raw, rec)
                else:
                    lines.raw[i], lines.recs[i] = raw, rec
                outcomes[n] = "added" if i is None else "replaced"
                changed = True
            return changed

        ensure_dir(self.root)
        check_dir(self.root, f"the subgraph bank {self.root}")
        lines = jsonl.update(self.path, _check, merge)
        self._cached = (lines.sig, lines, _index(lines))
        return outcomes
