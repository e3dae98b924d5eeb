"""A local job's fixed cost: what `import aoe.job` and a small job with workers allowed load.

Every module imported is CPU that every job pays (`bench/job_bench.py`); these are imported only when
they are used: aoe.batch and dask for a cluster, multiprocessing and concurrent.futures when worker
processes start, onnx when an ONNX model is read, socket never (the host name comes from uname).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

LAZY = ("aoe.batch", "dask", "distributed", "onnx", "multiprocessing", "concurrent.futures", "socket",
        "aoe.opat.workers", "aoe.sgat", "numba")


def _run_probe(code: str, cwd: Path, env: dict[str, str] | None) -> dict[str, bool]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {LAZY!r}}}))"
    p = subprocess.run([sys.executable, "-c", probe], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def _loaded(code: str, cwd: Path, env: dict[str, str] | None = None) -> dict[str, bool]:
    """Run `code` in a fresh interpreter; which of LAZY it left in sys.modules that an interpreter running
    nothing does not load already (a site hook of the environment may import some of them itself)."""
    before = _run_probe("", cwd, env)
    return {m: v and not before[m] for m, v in _run_probe(code, cwd, env).items()}


def test_import_aoe_job_loads_no_optional_or_worker_module(tmp_path: Path) -> None:
    loaded = _loaded("import aoe.job, aoe.cli", tmp_path)
    assert not any(loaded.values()), {m for m, v in loaded.items() if v}


def test_a_small_local_job_with_workers_allowed_starts_none(tmp_path: Path) -> None:
    """tuning_parallel_num = 2, but the cases left after inline_cpu_s are too little work for workers:
    they are tuned in the job's process and no worker module (nor aoe.batch) is ever imported."""
    graph = tmp_path / "g.json"   # a JSON graph: no onnx needed to read it
    sys.path.insert(0, str(Path(__file__).parent))
    try:
        from test_opat_graph import small_opat_graph
    finally:
        sys.path.pop(0)
    graph.write_text(small_opat_graph().to_json())
    bank = tmp_path / "bank"
    bank.mkdir()
    (tmp_path / "aoe.ini").write_text("[tuning]\ntuning_parallel_num = 2\ninline_cpu_s = 0.000001\n")
    env = dict(os.environ, TUNE_BANK_PATH=str(bank), AOE_LOCK_DIR=str(tmp_path / "locks"))
    for k in ("AOE_CONFIG", "ASCEND_WORK_PATH", "REPEAT_TUNE", "AOE_MODE"):
        env.pop(k, None)
    run = (f"import aoe\n"
           f"r = aoe.tune({str(graph)!r}, mode='op', work_path={str(tmp_path)!r}, "
           f"options=aoe.TuneOptions(builtin=False, budget=500, workers=2))\n"
           f"assert r.status == 'tuning successful', r.status\n"
           f"assert r.section['repo_summary']['repo_add_num'] + r.section['repo_summary']['repo_unsatisfied_num'] >= 2")
    loaded = _loaded(run, tmp_path, env)
    assert not any(loaded.values()), {m for m, v in loaded.items() if v}
