"""A small torture round for CI (`bench/torture.py` runs long ones): threads x workers, kill -9, hostile files.

One round: two jobs with two worker processes each share a bank and a work path; one is killed with
SIGKILL at a random instant (its device lock must be free and its workers gone within 5 s), resumed with
`--reload`; fifteen hostile inputs (FIFOs, /dev/zero, deep JSON, impossible shapes, bad configs) must end
in a clean error or a normal run; the bank verifies; a warm re-run adds nothing (no lost entry).
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from aoe.job import config as cfg

ROOT = Path(__file__).resolve().parents[1]


def _torture():
    spec = importlib.util.spec_from_file_location("aoe_torture", ROOT / "bench" / "torture.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not sys.platform.startswith("linux") or cfg.cpu_count() < 2,
                    reason="reads /proc; needs two CPUs for two worker processes")
def test_one_torture_round(tmp_path):
    out = _torture().run(rounds=1, jobs=2, seed=1, base=tmp_path, budget=500)
    assert out["jobs"] == 2 and out["hostile"] == 15
    bad = {k: out[k] for k in ("tracebacks", "hangs", "late_locks", "orphans", "failures", "bank_verify_failures",
                               "lost_entries")}
    assert not any(bad.values()), (bad, out["notes"])
