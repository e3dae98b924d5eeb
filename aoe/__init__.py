"""aoe: Ascend Optimization Engine (OPAT/SGAT) re-created on a simulated Ascend AI Core.

Submodules are imported lazily so that `import aoe` and the `aoe` command start fast.
"""
from __future__ import annotations

import importlib
from typing import Any

from .errors import AoeError

__version__ = "0.1.0"

# public name -> "module:attribute" (module relative to this package)
_LAZY = {
    "sim": "sim",
    "soc": "soc",
    "graph": "graph",
    "bank": "bank",
    "job": "job",
    "ops": "ops",
    "opat": "opat",
    "sgat": "sgat",
    "tune_op": "opat:tune_op",
    "tune": "job.api:tune",
    "tune_models": "job.api:tune_models",
    "verify": "job.api:verify",
    "TuneOptions": "job.api:TuneOptions",
}


def __getattr__(name: str) -> Any:
    """Import public submodules on first use."""
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'aoe' has no attribute {name!r}")
    mod_name, _, attr = target.partition(":")
    mod = importlib.import_module(f".{mod_name}", __name__)
    return getattr(mod, attr) if attr else mod


__all__ = ["AoeError", "__version__", *_LAZY]
