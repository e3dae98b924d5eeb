"""The scripts of bench/ and scripts/ stay runnable: each one's top level imports what it names from the
installed package (an API cut from a package face breaks them silently otherwise), and none puts the
repository root on sys.path (where the unbuilt source tree would shadow the installed aoe)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# run every script's top level (not its main) in one fresh interpreter, outside the checkout
LOADER = r"""
import os, runpy, sys
repo, paths = sys.argv[1], sys.argv[2:]
bad = []
optional = ("tensorflow", "keras", "torch", "torchvision", "transformers", "optuna", "cmaes", "matplotlib",
            "distributed", "dask")
for p in paths:
    before = list(sys.path)
    sys.path.insert(0, os.path.dirname(p))   # as `python bench/x.py` runs it
    try:
        runpy.run_path(p, run_name="aoe_script_check")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in optional:
            bad.append(f"{p}: {exc!r}")
    except Exception as exc:
        bad.append(f"{p}: {exc!r}")
    if repo in sys.path and repo not in before:
        bad.append(f"{p}: puts the repository root on sys.path")
    sys.path[:] = before
print("\n".join(bad))
"""


def test_every_bench_and_generator_script_imports(tmp_path):
    scripts = sorted(str(p) for p in (REPO / "bench").glob("*.py")) + \
        sorted(str(p) for p in (REPO / "scripts").glob("*.py"))
    assert len(scripts) > 10
    r = subprocess.run([sys.executable, "-c", LOADER, str(REPO), *scripts], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "", r.stdout
