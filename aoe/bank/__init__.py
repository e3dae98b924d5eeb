"""Knowledge banks: where tuned strategies live and how compilers and tuners find them.

| file | what lives there |
|---|---|
| `paths.py` | where banks live (`TUNE_BANK_PATH` > `ASCEND_CACHE_PATH` > home), name checks, rwx checks |
| `jsonl.py` | the JSON Lines files: locked read-merge-write, damaged lines kept, atomic replace |
| `schema.py` | key and knowledge fields per operator family; CANN's packed key and its crc32 id |
| `store.py` | `OpBank` (custom, CANN's file format), `BuiltinBank` (shipped, read-only), `BankChain` |
| `opfile.py` | the lazily built index of one operator file; the record check; `Entry` |
| `subgraph.py` | `SubgraphBank`: `subgraph.json`, records keyed by `repo_key` |
| `decision.py` | `decide`: the add / update / reserved / unsatisfied rule both tuners follow |
| `query.py` | `query`: one operator case -> knowledge or None, for compilers |
| `cli.py` | `aoe bank ls / show / export / import / verify` |

Every bank has the same shape (`Bank`): `lookup` a case, `save` validated items (the one write verb:
merged under the file lock, a better strategy replaces a worse one, nothing is lost), `entries`.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Protocol

from .decision import decide
from .jsonl import BankWarning
from .paths import resolve_op_bank_dir, resolve_subgraph_bank_dir
from .query import query
from .store import BankChain, BuiltinBank, OpBank, make_pending
from .subgraph import SubgraphBank


class Bank(Protocol):
    """What `OpBank`, `BuiltinBank`, `BankChain` and `SubgraphBank` share.

    An operator bank is keyed by `(op_type, key)`, the subgraph bank by `repo_key`; a chain only
    reads (its custom bank is the one that saves).
    """

    def lookup(self, *key: Any) -> Any | None:
        """The stored entry of one case, or None."""


class WritableBank(Bank, Protocol):
    """A bank that can be written: the one write verb is `save`."""

    def save(self, items: Iterable[Any]) -> list[str]:
        """Merge validated items under the lock; one outcome ("added"/"replaced"/"kept") per item."""

    def entries(self) -> Iterator[Any]:
        """Every usable entry."""


# the face: what a compiler pipeline or a bank tool needs; the tuners' helpers (`decision.should_tune`,
# `decision.repeat_tune`, `subgraph.make_subgraph_pending`) and the entry types are imported from their modules
__all__ = ["Bank", "WritableBank", "OpBank", "BuiltinBank", "BankChain", "SubgraphBank", "make_pending", "decide",
           "query", "resolve_op_bank_dir", "resolve_subgraph_bank_dir", "BankWarning"]
