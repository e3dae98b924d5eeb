"""Knowledge banks: where tuned strategies live and how compilers and tuners find them.

- `resolve_op_bank_dir` / `resolve_subgraph_bank_dir`: locations per SPEC §2.
- `OpBank` (custom, CANN's file format), `BuiltinBank` (shipped, read-only), `BankChain` (custom →
  built-in), `SubgraphBank` (`subgraph.json` keyed by repo_key).
- `decide` / `Counters`: the add/update/reserved/unsatisfied rule and the six result counters.
- `query`: one operator case → knowledge dict or None, for compilers.
- `schema_for` / `codes`: key and knowledge fields per operator family; ge dtype/format codes.
"""
from __future__ import annotations

from .codes import DTYPES, FORMATS, dtype_code, dtype_name, format_code, format_name
from .decision import Counters, Outcome, decide, repeat_tune, should_tune
from .jsonl import BankWarning
from .paths import (CORE_NUMS, BankNameError, check_name, core_num_for, resolve_op_bank_dir,
                    resolve_subgraph_bank_dir)
from .query import query
from .schema import BankKeyError, OpSchema, schema_for
from .store import (BankChain, BuiltinBank, Entry, OpBank, Pending, better, default_hash,
                    make_pending)
from .subgraph import SubgraphBank, SubgraphEntry

__all__ = [
    "DTYPES", "FORMATS", "dtype_code", "dtype_name", "format_code", "format_name",
    "Counters", "Outcome", "decide", "repeat_tune", "should_tune", "BankWarning",
    "CORE_NUMS", "BankNameError", "check_name", "core_num_for", "resolve_op_bank_dir",
    "resolve_subgraph_bank_dir", "query", "BankKeyError", "OpSchema", "schema_for",
    "BankChain", "BuiltinBank", "Entry", "OpBank", "Pending", "better", "default_hash",
    "make_pending", "SubgraphBank", "SubgraphEntry",
]
