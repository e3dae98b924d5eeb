"""`query`: the compiler's question "which strategy for this operator case?" (CANN's QueryBank).

Order: custom bank (from the environment as for tuning, or `bank_dir`), then the built-in bank, then None
(the compiler uses its default heuristic). Bank objects are cached per location; every call stats
the custom file (mtime_ns, size, inode), so an entry written by any process is seen by the next
query — no compile cache to flush. A missing or unusable custom bank directory only
costs a warning here: compiling must not fail because tuning was never run.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any, Mapping

from ..errors import AoeError
from .paths import BankNameError, resolve_op_bank_dir
from .schema import BankKeyError
from .store import BankChain, BuiltinBank, OpBank, knowledge_copy

_CHAINS: dict[tuple[Any, ...], BankChain] = {}
_WARNED: set[str] = set()


def _chain(soc: str, core_num: int | None, bank_dir: str | os.PathLike[str] | None) -> BankChain:
    env = os.environ
    if bank_dir is None:
        tune, cache = env.get("TUNE_BANK_PATH", ""), env.get("ASCEND_CACHE_PATH", "")
        rel = (tune or cache) and not os.path.isabs(tune or cache)
        ck: tuple[Any, ...] = (soc, core_num, tune, cache, env.get("HOME", ""), os.getcwd() if rel else "")
    else:
        ck = (soc, core_num, bank_dir)  # a Path caches its hash: no per-call str conversion
    chain = _CHAINS.get(ck)
    if chain is None:
        if bank_dir is not None:
            root = Path(bank_dir)
        else:
            try:
                root = resolve_op_bank_dir(soc, env)
            except BankNameError:
                raise
            except AoeError as exc:  # e.g. a TUNE_BANK_PATH typo: say so, compile on without it
                _warn_once(f"custom bank not used: {exc}")
                root = resolve_op_bank_dir(soc, env, check=False)
        chain = BankChain(OpBank(root, soc, core_num), BuiltinBank(soc, core_num))
        _CHAINS[ck] = chain
    return chain


def query(soc: str, op_type: str, key: Mapping[str, Any], core_num: int | None = None,
          bank_dir: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The knowledge for one operator case: custom bank, then built-in, else None (use the default)."""
    chain = _chain(soc, core_num, bank_dir)
    try:
        e = chain.custom.lookup(op_type, key) if chain.custom is not None else None
    except (BankKeyError, BankNameError):
        raise  # the caller's question is malformed: no bank can answer it
    except AoeError as exc:  # the custom bank is unreadable: say so once, use the built-in one
        _warn_once(f"custom bank skipped: {exc}")
        e = None
    if e is None and chain.builtin is not None:
        e = chain.builtin.lookup(op_type, key)
    return None if e is None else knowledge_copy(e)


def _warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        warnings.warn(msg, stacklevel=3)


def clear_cache() -> None:
    """Forget every cached bank (tests; a long-lived process after moving banks around)."""
    _CHAINS.clear()
    _WARNED.clear()
