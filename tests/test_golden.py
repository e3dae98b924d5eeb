"""The renovation's promise: the same result sections and banks as the stored outcome of two real jobs.

`tests/golden/make_golden.py` wrote the stored files; regenerate them only for a deliberate change of
behaviour (and say so in the commit).
"""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent / "golden"
_spec = importlib.util.spec_from_file_location("make_golden", HERE / "make_golden.py")
make_golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_golden)  # type: ignore[union-attr]


def _close(a: Any, b: Any, where: str = "") -> list[str]:
    """Differences between two JSON values; floats equal to 1e-9 relative (libm may differ in the last bit)."""
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            return []
        return [f"{where}: {a!r} != {b!r}"]
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return [f"{where}: keys {sorted(set(a) ^ set(b))} differ"]
        return [d for k in a for d in _close(a[k], b[k], f"{where}/{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: {len(a)} items != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _close(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


@pytest.mark.parametrize("stem,model,kw", make_golden.CASES, ids=[c[0] for c in make_golden.CASES])
def test_job_outcome_matches_the_stored_one(stem: str, model: str, kw: dict[str, Any]) -> None:
    expected = json.loads((HERE / f"{stem}.json").read_text())
    got = json.loads(json.dumps(make_golden.outcome(model, kw)))
    diffs = _close(got, expected)
    assert not diffs, f"{len(diffs)} differences, first: " + "; ".join(diffs[:5])
