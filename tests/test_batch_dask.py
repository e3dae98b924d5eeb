"""Batch tuning on Dask: a scheduler and two workers started from Dask's own command line on 127.0.0.1
(random ports, bounded lifetimes, always stopped) give the same banks and result figures as the serial
run, for OPAT and SGAT, also when a worker process is killed mid-batch; `local:N` over TLS refuses other
clients; a tls:// scheduler with certificate files; the list file; the CLI."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

import aoe
from aoe.batch import CaseFarm, ClusterWarning, TlsFiles, parse_list
from aoe.errors import AoeError
from conftest import import_extra, load_bench_module

pytestmark = pytest.mark.extra("dask")
distributed = import_extra("dask", "distributed")

MODELS = ["zoo:mobilenet_v2", "zoo:resnet50", "zoo:bert_base"]
BUDGET = 150
LIFETIME = "20 minutes"   # a worker or scheduler left behind by a killed test run stops by itself
_DASK_CLI = load_bench_module("_dask_cli")


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
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.json")) if p.is_file()}


def _figures(rs) -> list:
    # the result file's OPAT/SGAT objects (the product's figures), per model
    return [json.loads(json.dumps(r.section)) for r in rs]


@contextmanager
def dask_cli(tmp: Path, workers: int = 2, tls: tuple[str, ...] = ()) -> Iterator[str]:
    """`dask scheduler` and `workers` x `dask worker` on 127.0.0.1 (bench/_dask_cli.py, shared with the
    batch bench), ending by themselves after LIFETIME, always stopped; yields the scheduler address."""
    with _DASK_CLI.dask_cli(tmp, workers, tls=tls, lifetime=LIFETIME) as cluster:
        yield cluster.address


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory) -> Iterator[str]:
    """The address of a `dask scheduler` with two `dask worker` processes (plain tcp:// on 127.0.0.1)."""
    with dask_cli(tmp_path_factory.mktemp("dask")) as address:
        with distributed.Client(address, timeout="60s") as c:
            c.wait_for_workers(2, timeout=180)
        yield address


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serial")
    rs = _run(tmp)
    return _banks(tmp), _figures(rs)


@pytest.mark.timeout(900)
def test_cluster_batch_equals_the_serial_run(serial, scheduler, tmp_path):
    """aoe.tune_models(..., cluster="tcp://...") against `dask scheduler` / `dask worker` processes."""
    assert scheduler.startswith("tcp://127.0.0.1:")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rs = _run(tmp_path, scheduler)
    plain = [w for w in caught if issubclass(w.category, ClusterWarning)]
    assert len(plain) == 1 and "neither encrypted nor authenticated" in str(plain[0].message)
    assert [r.status for r in rs] == ["tuning successful"] * 3
    banks, figures = serial
    assert banks and _banks(tmp_path) == banks  # byte for byte, after the batch's compaction
    assert _figures(rs) == figures
    files = list((tmp_path / "work").glob("aoe_result_opat_*.json"))
    assert len(files) == 1  # one result file, one report key per model (written by this process)
    assert len(json.loads(files[0].read_text())) == 3


@pytest.mark.timeout(900)
def test_a_killed_worker_loses_nothing(serial, scheduler, tmp_path):
    with pytest.warns(ClusterWarning):
        farm = CaseFarm(scheduler)
    killed = {}

    def killer():
        deadline = time.time() + 300
        while time.time() < deadline:  # once the first group is back and others are still running
            if farm.stats["groups"] and farm.stats["worker_cpu_s"] > 0 and farm._group_keys:
                pids = farm.client.run(os.getpid)
                addr, pid = sorted(pids.items())[0]
                os.kill(pid, signal.SIGKILL)  # the worker process; its nanny starts a new one
                killed["pid"] = pid
                return
            time.sleep(0.05)

    t = threading.Thread(target=killer)
    t.start()
    try:
        with farm:
            rs = _run(tmp_path, farm)
            # the nanny restarted the worker: the cluster has its two workers again
            farm.client.wait_for_workers(2, timeout=120)
    finally:
        t.join()
    assert killed, "the batch ended before a worker could be killed"
    assert [r.status for r in rs] == ["tuning successful"] * 3
    banks, figures = serial
    assert _banks(tmp_path) == banks
    assert _figures(rs) == figures


def _sgat(tmp: Path, models: list, cluster=None):
    (tmp / "bank").mkdir(parents=True)
    (tmp / "work").mkdir()
    return aoe.tune_models(models, "subgraph", "Ascend910A", bank=tmp / "bank", work_path=tmp / "work", env={},
                           names=["a", "b", "c"], options=aoe.TuneOptions(lock=False, builtin=False),
                           cluster=cluster)


@pytest.mark.timeout(900)
def test_sgat_on_the_cluster_equals_the_serial_run(scheduler, tmp_path):
    """Subgraph searches run on the workers, de-duplicated across models (the third model is the first
    one again, as a graph object); the client writes the subgraph bank; banks and figures are serial's."""
    import aoe.graph

    models = ["zoo:mobilenet_v2", "zoo:bert_base", aoe.graph.load("zoo:mobilenet_v2")]
    rs_serial = _sgat(tmp_path / "serial", models)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClusterWarning)
        with CaseFarm(scheduler) as farm:
            rs = _sgat(tmp_path / "cluster", models, farm)
            st = dict(farm.stats)
    assert [r.status for r in rs] == ["tuning successful"] * 3
    assert st["cases_total"] == 0 and st["subgraph_hits"] == 0
    n1 = len(rs[0].report.records)  # mobilenet_v2's distinct subgraphs, all tuned (an empty bank)
    n2 = len(rs[1].report.records)
    assert st["subgraphs_total"] == 2 * n1 + n2 and st["subgraphs_distinct"] == st["sent"] == n1 + n2
    assert st["worker_cpu_s"] > 0 and 0 < st["groups"] <= st["sent"]
    serial_banks = _banks(tmp_path / "serial")
    assert "subgraph.json" in serial_banks and _banks(tmp_path / "cluster") == serial_banks
    assert _figures(rs) == _figures(rs_serial)
    # the third model found every subgraph in the bank the first one wrote, as in the serial run
    assert rs[2].section == rs_serial[2].section


@pytest.mark.timeout(300)
def test_local_cluster_speaks_tls_and_refuses_other_clients():
    """`local:N`: scheduler and workers on a temporary CA only this client holds; a plain-tcp client and a
    client with another CA's certificate are refused, by the scheduler and by the workers."""
    from distributed.security import Security

    with warnings.catch_warnings():
        warnings.simplefilter("error", ClusterWarning)  # no warning: this cluster is not plain tcp
        farm = CaseFarm("local:1")
    with farm:
        assert farm.address.startswith("tls://127.0.0.1:")
        workers = list(farm.client.scheduler_info()["workers"])
        assert workers and all(w.startswith("tls://127.0.0.1:") for w in workers)
        stranger = Security.temporary()
        for addr in (farm.address, workers[0]):
            with pytest.raises(OSError):  # distributed's CommClosedError: connection reset
                distributed.Client(addr.replace("tls://", "tcp://"), timeout="10s")
        with pytest.raises(OSError, match="TLS certificate does not match"):
            distributed.Client(farm.address, security=stranger, timeout="10s")
        # the cluster's own client still works
        assert farm.client.submit(sum, [1, 2], pure=False).result(timeout=60) == 3


def test_a_tls_scheduler_needs_certificates(tmp_path):
    """tls:// without certificate files or Dask config, missing files, or files with tcp:// are input errors."""
    with pytest.raises(AoeError, match="tls_ca_file"):
        CaseFarm("tls://127.0.0.1:1")
    with pytest.raises(AoeError, match="does not exist"):
        CaseFarm("tls://127.0.0.1:1", tls=TlsFiles(str(tmp_path / "ca.pem"), str(tmp_path / "c.pem")))
    (tmp_path / "ca.pem").write_text("x")
    with pytest.raises(AoeError, match="not tls://"):
        CaseFarm("tcp://127.0.0.1:1", tls=TlsFiles(str(tmp_path / "ca.pem")))


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
    import cloudpickle

    from aoe.batch.connect import _worker_probe, check_workers

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


@pytest.mark.timeout(900)
def test_the_batch_command_end_to_end(scheduler, tmp_path, job_env):
    """`aoe batch LIST --scheduler tcp://127.0.0.1:PORT` (the `dask scheduler` process, one warning), then
    the same list on `local:1` (TLS, no warning): an OPAT line and an SGAT line, their result files and
    banks; in the second run every operator case is a bank hit and nothing is sent to the cluster."""
    from conftest import tiny_onnx

    tiny_onnx(tmp_path / "tiny.onnx")
    (tmp_path / "models.txt").write_text("# two jobs\ntiny.onnx\n"
                                         "zoo:mobilenet_v2 --job_type 1 --soc_version Ascend910A\n")
    argv = [sys.executable, "-m", "aoe.cli", "batch", "models.txt", "--work_path", "work",
            "--progress_bar", "off", "--search_budget", "300", "--scheduler"]
    runs = [subprocess.run(argv + [where], cwd=tmp_path, env=job_env, capture_output=True, text=True, timeout=400)
            for where in (scheduler, "local:1")]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
        assert "batch: 2 of 2 models tuned successfully" in r.stderr
        # a result line per model; no local device / worker-process header for the cluster's runs
        assert "batch: tiny (OPAT, Ascend910B2): tuning successful; cases " in r.stderr, r.stderr[-2000:]
        assert "batch: mobilenet_v2 (SGAT, Ascend910A): tuning successful" in r.stderr
        assert "operator cases tuned on the Dask cluster's workers" in r.stdout, r.stdout[-2000:]
        assert "subgraph searches run on the Dask cluster's workers" in r.stdout, r.stdout[-2000:]
        assert "device 0 of" not in r.stdout
        assert "distinct subgraphs sent of" in r.stderr
    assert runs[0].stderr.count("aoe: warning: the Dask scheduler at tcp://127.0.0.1:") == 1
    assert f"Dask: 2 worker(s) at {scheduler}" in runs[0].stderr
    assert "aoe: warning" not in runs[1].stderr and "Dask: 1 worker(s) at tls://127.0.0.1:" in runs[1].stderr
    work = tmp_path / "work"
    opat_files = sorted(work.glob("aoe_result_opat_*.json"))
    assert len(opat_files) == 2 and len(list(work.glob("aoe_result_sgat_*.json"))) == 2
    first, second = ([task[1]["OPAT"]["repo_summary"] for task in json.loads(f.read_text()).values()][0]
                     for f in opat_files)
    assert first["repo_add_num"] > 0          # the second run finds what the first one added
    assert second["repo_add_num"] == 0 and second["repo_hit_num"] == first["repo_add_num"] + first["repo_hit_num"]
    assert list((tmp_path / "bank" / "Ascend910B2").rglob("*_runtime_kb.json"))


@pytest.mark.timeout(600)
def test_a_tls_scheduler_from_the_command_line(tmp_path, job_env):
    """`dask scheduler --protocol tls` and a `dask worker` with certificate files; `aoe batch --scheduler
    tls://... --tls_ca_file --tls_cert --tls_key` tunes on them without a warning; without the files the
    command says what to give (exit 2)."""
    from distributed.security import Security

    from conftest import tiny_onnx

    sec = Security.temporary()  # a CA and one certificate for all parties, written out as a team would
    pems = {"ca.pem": sec.tls_ca_file, "cert.pem": sec.tls_scheduler_cert, "key.pem": sec.tls_scheduler_key}
    for name, text in pems.items():
        (tmp_path / name).write_text(text)
    files = [str(tmp_path / n) for n in pems]
    tls = ("--tls-ca-file", files[0], "--tls-cert", files[1], "--tls-key", files[2])
    tiny_onnx(tmp_path / "tiny.onnx")
    (tmp_path / "models.txt").write_text("tiny.onnx\n")
    with dask_cli(tmp_path / "dask", workers=1, tls=tls) as address:
        assert address.startswith("tls://127.0.0.1:")
        argv = [sys.executable, "-m", "aoe.cli", "batch", "models.txt", "--work_path", "work", "--progress_bar",
                "off", "--search_budget", "300", "--scheduler", address]
        bare = subprocess.run(argv, cwd=tmp_path, env=job_env, capture_output=True, text=True, timeout=300)
        r = subprocess.run(argv + ["--tls_ca_file", files[0], "--tls_cert", files[1], "--tls_key", files[2]],
                           cwd=tmp_path, env=job_env, capture_output=True, text=True, timeout=300)
    assert bare.returncode == 2 and "--tls_ca_file" in bare.stderr and "Traceback" not in bare.stderr
    assert r.returncode == 0, r.stderr[-2000:]
    assert "batch: 1 of 1 models tuned successfully" in r.stderr and "aoe: warning" not in r.stderr
    assert f"Dask: 1 worker(s) at {address}" in r.stderr


def test_prefetch_looks_up_the_banks_the_job_will(scheduler, tmp_path):
    """With the built-in bank set aside, no case counts as a hit before it is sent (they were all held
    back as hits, then sent one task each when OPAT asked for them)."""
    import aoe.graph
    from aoe.job.settings import settings_from_env
    from aoe.soc import load_soc

    g = aoe.graph.load("zoo:mobilenet_v2")
    (tmp_path / "bank").mkdir()
    with distributed.Client(scheduler, timeout="60s") as client:
        for builtin in (False, True):
            with pytest.warns(ClusterWarning):  # a Client on a plain tcp:// scheduler is warned about too
                farm = CaseFarm(client)
            settings = settings_from_env({}, soc="Ascend910B2", mode=2, bank=tmp_path / "bank", builtin=builtin,
                                         lock=False)
            queued = farm.prefetch(g, load_soc("Ascend910B2"), settings)
            if builtin:
                assert farm.stats["bank_hits"] > 0 and queued < farm.stats["cases_total"]
            else:
                assert farm.stats["bank_hits"] == 0 and queued == farm.stats["cases_total"] > 0


def test_a_case_group_sends_back_each_cases_default_strategy(tmp_path):
    """The client prices a cold farm case's default with the strategy its worker derived (not deriving
    CANN's heuristic a second time): run_group must hand back exactly what the client would derive."""
    import dataclasses

    from aoe.batch import run_group
    from aoe.opat.search import Budget
    from aoe.opat.tune import KINDS
    from aoe.ops import Unsupported, describe
    from aoe.sim import default_strategy
    from aoe.soc import load_soc
    from conftest import tiny_onnx

    soc = load_soc("Ascend910B2")
    plain = dataclasses.replace(soc, _native=None)
    graph = aoe.graph.load(tiny_onnx(tmp_path / "tiny.onnx"))
    cases = {}
    for op in graph.ops:
        try:
            case = describe(graph, op)
        except (Unsupported, AoeError):
            continue
        cases[case.case_id] = case
    jobs = [(c, plain, tuple(KINDS), Budget(evaluations=50), "high_performance", 0, 1) for c in cases.values()]
    assert jobs
    results, cpu, defaults = run_group(jobs)
    assert len(results) == len(defaults) == len(jobs) and cpu >= 0.0
    assert defaults == [default_strategy(soc, c.default.sim_op) for c in cases.values()]
