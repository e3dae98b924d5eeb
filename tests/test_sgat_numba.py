"""Numba in the SGAT evaluator: never loaded by an OPAT job; compiled code cached under the user's cache
directory (or NUMBA_CACHE_DIR), never in the installed package, without touching os.environ; several
processes compiling into one empty cache at once; no fused multiply-add in the compiled code.

Each case runs in a fresh interpreter with a fresh, empty cache directory (Numba reads its settings once
per process).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import aoe
from conftest import isolated_environ

# prices a hand-made two-operator subgraph (tests/test_sgat_evaluator.py's a -> b) and reports where
# Numba cached it, what the process's environment and Numba config say afterwards, and the compiled code
PRICE = """
import json, os, re, sys
import numpy as np
import numba
from aoe.sgat import evaluator
from aoe.sgat.evaluator import evaluate_arrays
op_a = [10.0, 3.0, 6.0, 1.0, 8192.0, 0.0, 2048.0, 0.0, 0.0, 4096.0, 1024.0, 2.0]
op_b = [8.0, 2.0, 4.0, 0.5, 8192.0, 0.0, 2048.0, 0.0, 0.0, 4096.0, 1024.0, 2.0]
socp = np.array([2.0, 1000.0, 4000.0, 1e6, 1e6, 1e6, 1e9, 0.01, 0.0, 0.5, 4.0, 8.0, 0.001, 0.1])
arrays = (np.array([[0, 1]]), np.array([op_a, op_b]), np.array([[4096.0, 0.0, 0.0, 0.0]]),
          np.array([[0, 2]]), np.array([[4096.0, 0.0]]), np.array([3, 2]), np.array([1, 3]), socp)
plans = np.array([[f, s, t, l2] for f in (0, 1) for s in (0, 1) for t in range(8) for l2 in (0, 1)])
times = evaluate_arrays(plans, *arrays, parallel=False)
fn = evaluator._jitted().evaluate
stats = fn.stats
asm = "" if stats.cache_hits else "".join(fn.inspect_asm(sig) for sig in fn.signatures)
print(json.dumps({"times": times.tolist(), "cache_dir": evaluator.cache_dir(), "hits": sum(stats.cache_hits.values()),
                  "misses": sum(stats.cache_misses.values()), "config": numba.config.CACHE_DIR,
                  "env": os.environ.get("NUMBA_CACHE_DIR"), "fma": len(re.findall(r"\\bvfn?m(add|sub)", asm)),
                  "asm": len(asm)}))
"""


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = isolated_environ(tmp_path)
    for k in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME", "PYTHONPATH"):
        env.pop(k, None)
    env.update(extra)
    return env


def _start(code: str, env: dict[str, str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _result(p: subprocess.Popen) -> dict:
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_an_opat_job_never_imports_numba(tmp_path: Path) -> None:
    code = """
    import json, sys
    import aoe
    from aoe import sgat  # the SGAT package itself loads Numba only when it prices a plan
    r = aoe.tune("zoo:mobilenet_v2", mode="op", tune_ops={"tune_ops_type": ["ReduceMeanD"]})
    print(json.dumps({"status": r.status, "numba": sorted(m for m in sys.modules if m.split(".")[0] == "numba")}))
    """
    got = _result(_start(code, _env(tmp_path), tmp_path))
    assert got["numba"] == [] and got["status"]


def test_cache_in_the_user_cache_dir_never_in_a_read_only_package(tmp_path: Path) -> None:
    # a copy of the installed package, made read-only: nothing may be written into it
    pkg = tmp_path / "site"
    shutil.copytree(Path(aoe.__file__).parent, pkg / "aoe")
    before = _files(pkg)
    subprocess.run(["chmod", "-R", "a-w", str(pkg)], check=True)
    xdg = tmp_path / "xdg"
    # (root may write into read-only directories: the file list below is the real check; Python's own
    # bytecode cache is not what this test is about)
    env = _env(tmp_path, XDG_CACHE_HOME=str(xdg), PYTHONPATH=str(pkg), PYTHONDONTWRITEBYTECODE="1")
    try:
        first = _result(_start(PRICE, env, tmp_path))
        again = _result(_start(PRICE, env, tmp_path))
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(pkg)], check=True)
    assert _files(pkg) == before
    assert first["cache_dir"] == str(xdg / "aoe" / "numba")
    assert any(p.suffix == ".nbi" for p in (xdg / "aoe" / "numba").rglob("*"))
    assert first["misses"] >= 1 and again["misses"] == 0 and again["hits"] >= 1
    assert first["times"] == again["times"] and first["times"][0] == 18.0
    # the config was set for the import only; os.environ never
    assert first["config"] == "" and first["env"] is None
    # no fused multiply-add: the formulas round as written (the C++ twin was built with -ffp-contract=off)
    assert first["asm"] > 0 and first["fma"] == 0


def test_numba_cache_dir_is_respected(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    got = _result(_start(PRICE, _env(tmp_path, NUMBA_CACHE_DIR=str(mine), XDG_CACHE_HOME=str(tmp_path / "xdg")),
                         tmp_path))
    assert got["cache_dir"] == str(mine) and got["env"] == str(mine)
    assert any(p.suffix == ".nbc" for p in mine.rglob("*")) and not (tmp_path / "xdg").exists()


def test_processes_compiling_into_one_empty_cache_at_once(tmp_path: Path) -> None:
    env = _env(tmp_path, NUMBA_CACHE_DIR=str(tmp_path / "shared"))
    runs = [_result(p) for p in [_start(PRICE, env, tmp_path) for _ in range(3)]]
    after = _result(_start(PRICE, env, tmp_path))
    assert all(r["times"] == runs[0]["times"] for r in runs + [after])
    assert after["misses"] == 0 and after["hits"] >= 1
