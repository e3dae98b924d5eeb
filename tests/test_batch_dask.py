"""Batch tuning on a Dask LocalCluster (2 worker processes, 127.0.0.1): the same banks and result
figures as the serial run, also when a worker process is killed mid-batch; the list file; the CLI."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import aoe
from aoe.batch import CaseFarm, parse_list
from aoe.errors import AoeError
from conftest import import_extra

pytestmark = pytest.mark.extra("dask")
distributed = import_extra("dask", "distributed")

MODELS = ["zoo:mobilenet_v2", "zoo:resnet50", "zoo:bert_base"]
BUDGET = 150


def _opts(**kw):
    return aoe.TuneOptions(budget=BUDGET, lock=False, workers=1, **kw)


def _run(tmp: Path, cluster=None):
    (tmp / "bank").mkdir(parents=True)
    (tmp / "work").mkdir()
    rs = aoe.tune_models(MODELS, bank=tmp / "bank", work_path=tmp / "work", options=_opts(), env={},
                         cluster=cluster)
    return rs


def _banks(tmp: Path) -> dict[str, bytes]:
    root = tmp / "bank"
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*_runtime_kb.json"))}


def _figures(rs) -> list:
    # the result file's OPAT objects (the product's figures), per model
    return [json.loads(json.dumps(r.section)) for r in rs]


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serial")
    rs = _run(tmp)
    return _banks(tmp), _figures(rs)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                       dashboard_address=None)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def test_cluster_batch_equals_the_serial_run(serial, client, tmp_path):
    rs = _run(tmp_path, client)
    assert [r.status for r in rs] == ["tuning successful"] * 3
    banks, figures = serial
    assert banks and _banks(tmp_path) == banks  # byte for byte, after the batch's compaction
    assert _figures(rs) == figures
    files = list((tmp_path / "work").glob("aoe_result_opat_*.json"))
    assert len(files) == 1  # one result file, one report key per model (written by this process)
    assert len(json.loads(files[0].read_text())) == 3


def test_a_killed_worker_loses_nothing(serial, client, tmp_path):
    farm = CaseFarm(client)
    killed = {}

    def killer():
        deadline = time.time() + 120
        while time.time() < deadline:  # once the first group is back and others are still running
            if farm.stats["groups"] and farm.stats["worker_cpu_s"] > 0 and farm._group_keys:
                pids = client.run(os.getpid)
                addr, pid = sorted(pids.items())[0]
                os.kill(pid, signal.SIGKILL)
                killed["pid"] = pid
                return
            time.sleep(0.05)

    t = threading.Thread(target=killer)
    t.start()
    try:
        rs = _run(tmp_path, farm)
    finally:
        t.join()
    assert killed, "the batch ended before a worker could be killed"
    assert [r.status for r in rs] == ["tuning successful"] * 3
    banks, figures = serial
    assert _banks(tmp_path) == banks
    assert _figures(rs) == figures
    # the nanny restarted the worker: the cluster has its two workers again
    client.wait_for_workers(2, timeout=60)


def test_list_file_lines_and_errors():
    lines = parse_list("# batch\nzoo:resnet50 --training --input_shape x:1,3,224,224\n\n"
                       "m.onnx --soc_version Ascend910A -j 1  # subgraph\n")
    assert [(x.model, x.mode, x.soc, x.training, x.lineno) for x in lines] == [
        ("zoo:resnet50", 2, "Ascend910B2", True, 2), ("m.onnx", 1, "Ascend910A", False, 4)]
    assert lines[0].input_shape == "x:1,3,224,224"
    with pytest.raises(AoeError, match=r"list:1: .*unrecognized"):
        parse_list("zoo:resnet50 --bogus\n", "list")
    with pytest.raises(AoeError, match="no models"):
        parse_list("# nothing\n")


def test_bad_cluster_values_are_input_errors(tmp_path):
    for bad in ("local:0", "local:x", "", 42):
        with pytest.raises(AoeError):
            CaseFarm(bad)


CLIENT = """
import json, sys
import aoe
if __name__ == "__main__":
    bank, work, reload = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    rs = aoe.tune_models(%r, bank=bank, work_path=work, env={}, cluster="local:2",
                         options=aoe.TuneOptions(budget=%d, lock=False, workers=1, reload=reload))
    print(json.dumps([r.status for r in rs]), flush=True)
""" % (MODELS, BUDGET)


def test_an_interrupted_client_continues_with_reload(serial, tmp_path):
    import subprocess
    import sys

    (tmp_path / "bank").mkdir()
    (tmp_path / "work").mkdir()
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    args = [sys.executable, str(script), str(tmp_path / "bank"), str(tmp_path / "work")]
    p = subprocess.Popen(args + ["0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bank_files = lambda: list((tmp_path / "bank").rglob("*_runtime_kb.json"))  # noqa: E731
    deadline = time.time() + 300
    while not bank_files() and time.time() < deadline and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)  # the job stops between cases and writes "tuning incomplete"
    out, err = p.communicate(timeout=300)
    assert p.returncode in (0, 130), err[-2000:]
    first = json.loads(out.strip().splitlines()[-1]) if out.strip() else []
    assert "tuning incomplete" in first or first == [], (first, err[-1000:])
    r = subprocess.run(args + ["1"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == ["tuning successful"] * 3
    banks, _ = serial
    assert _banks(tmp_path) == banks


def test_workers_without_a_working_aoe_are_refused_with_a_clear_error():
    """A worker that cannot import aoe's simulator (aoe missing, or an unbuilt source tree on its path) is
    found by a probe when the farm connects: an input error, never a batch that waits forever."""
    import subprocess
    import sys

    import cloudpickle

    from aoe.batch.farm import _worker_probe, check_workers

    probe = _worker_probe()
    assert probe() == f"ok {aoe.__version__}"
    # pickled by value: a process where aoe cannot be imported still loads and runs the probe
    code = ("import pickle, sys; sys.modules['aoe'] = None; "
            "print(pickle.loads(sys.stdin.buffer.read())())")
    r = subprocess.run([sys.executable, "-c", code], input=cloudpickle.dumps(probe), capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-1000:]
    assert r.stdout.decode().startswith(("ModuleNotFoundError", "ImportError")), r.stdout

    class Client:  # what client.run answers for a mixed cluster
        def run(self, fn):
            return {"tcp://10.0.0.1:1": f"ok {aoe.__version__}", "tcp://10.0.0.2:1": r.stdout.decode().strip()}

    with pytest.raises(AoeError, match=r"1 of 2 Dask worker\(s\) cannot run aoe .*10\.0\.0\.2"):
        check_workers(Client())


def test_the_batch_command_end_to_end(tmp_path, job_env):
    """`aoe batch LIST --scheduler local:1`: an OPAT line and an SGAT line, their result files and banks;
    run again, every operator case is a bank hit and nothing is sent to the cluster."""
    import subprocess
    import sys

    from conftest import tiny_onnx

    tiny_onnx(tmp_path / "tiny.onnx")
    (tmp_path / "models.txt").write_text("# two jobs\ntiny.onnx\n"
                                         "zoo:mobilenet_v2 --job_type 1 --soc_version Ascend910A\n")
    argv = [sys.executable, "-m", "aoe.cli", "batch", "models.txt", "--scheduler", "local:1", "--work_path", "work",
            "--progress_bar", "off", "--search_budget", "300"]
    runs = [subprocess.run(argv, cwd=tmp_path, env=job_env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
        assert "batch: 2 of 2 models tuned successfully" in r.stderr
        # a result line per model; no local device / worker-process header for the cluster's OPAT run
        assert "batch: tiny (OPAT, Ascend910B2): tuning successful; cases " in r.stderr, r.stderr[-2000:]
        assert "batch: mobilenet_v2 (SGAT, Ascend910A): tuning successful" in r.stderr
        assert "operator cases tuned on the Dask cluster's workers" in r.stdout, r.stdout[-2000:]
    work = tmp_path / "work"
    opat_files = sorted(work.glob("aoe_result_opat_*.json"))
    assert len(opat_files) == 2 and len(list(work.glob("aoe_result_sgat_*.json"))) == 2
    first, second = ([task[1]["OPAT"]["repo_summary"] for task in json.loads(f.read_text()).values()][0]
                     for f in opat_files)
    assert first["repo_add_num"] > 0          # the second run finds what the first one added
    assert second["repo_add_num"] == 0 and second["repo_hit_num"] == first["repo_add_num"] + first["repo_hit_num"]
    assert list((tmp_path / "bank" / "Ascend910B2").rglob("*_runtime_kb.json"))


def test_prefetch_looks_up_the_banks_the_job_will(client, tmp_path):
    """With the built-in bank set aside, no case counts as a hit before it is sent (they were all held
    back as hits, then sent one task each when OPAT asked for them)."""
    import aoe.graph
    from aoe.job.settings import settings_from_env
    from aoe.soc import load_soc

    g = aoe.graph.load("zoo:mobilenet_v2")
    (tmp_path / "bank").mkdir()
    for builtin in (False, True):
        farm = CaseFarm(client)
        settings = settings_from_env({}, soc="Ascend910B2", mode=2, bank=tmp_path / "bank", builtin=builtin,
                                     lock=False)
        queued = farm.prefetch(g, load_soc("Ascend910B2"), settings)
        if builtin:
            assert farm.stats["bank_hits"] > 0 and queued < farm.stats["cases_total"]
        else:
            assert farm.stats["bank_hits"] == 0 and queued == farm.stats["cases_total"] > 0
