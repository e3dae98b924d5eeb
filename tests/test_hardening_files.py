"""Hostile and careless files: output paths from untrusted names, result-file names, special files, size caps."""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

import aoe
from aoe.errors import AoeError
from aoe.job.result import ResultFile
from aoe.job.inputs import task_name
from aoe.job.run import JobSpec
from conftest import mm_op, single_ops_graph, tiny_onnx


def _graph(name: str):
    return single_ops_graph([mm_op(128, 256, 128, "mm")], name=name)


@pytest.mark.parametrize("evil", ["/tmp/evil_abs", "../../escape", "..", "a/b", ".hidden", "x" * 300, "ta\nb"])
def test_output_dir_never_written_outside_by_a_graph_name(env, evil):
    out = env / "out"
    out.mkdir()
    r = aoe.tune(_graph(evil), options=aoe.TuneOptions(budget=200, output=out))
    assert r.output is not None and r.output.parent == out, r.output
    assert [p.name for p in out.iterdir()] == [r.output.name]
    assert not Path("/tmp/evil_abs_tuned.json").exists()
    assert not (env.parent / "escape_tuned.json").exists()


def test_output_with_a_trailing_slash_is_a_directory(env):
    r = aoe.tune(_graph("net"), options=aoe.TuneOptions(budget=200, output=str(env / "tuned") + "/"))
    assert (env / "tuned").is_dir() and r.output == env / "tuned" / "net_tuned.json"
    assert json.loads(r.output.read_text())["format"] == "aoe-tuned-model/1"


def test_generic_or_unsafe_graph_names_give_the_model_file_name(env):
    onnx = pytest.importorskip("onnx")
    a = tiny_onnx(env / "first_model.onnx")
    b = tiny_onnx(env / "second_model.onnx", m=32)
    for p in (a, b):
        m = onnx.load(p)
        m.graph.name = "torch_jit"
        onnx.save(m, p)
    rs = aoe.tune_models([str(a), str(b)], options=aoe.TuneOptions(budget=200, output=f"{env / 'out'}/"))
    assert [r.tuning_name for r in rs] == ["first_model", "second_model"]
    assert sorted(p.name for p in (env / "out").iterdir()) == ["first_model_tuned.json", "second_model_tuned.json"]
    assert task_name(JobSpec(mode=2, model="/x/y/m.onnx"), _graph("../../etc")) == "m"
    assert task_name(JobSpec(mode=2, model="/x/y/m.onnx"), _graph("resnet")) == "resnet"
    assert task_name(JobSpec(mode=2, graph=_graph("/abs")), _graph("/abs")) == "graph"


def test_result_files_of_threads_sharing_a_work_path_are_never_reused(tmp_path):
    """Many ResultFiles of one process in the same millisecond: every name created once (O_EXCL)."""
    names: list[Path] = []
    lock = threading.Lock()

    def make() -> None:
        for _ in range(50):
            rf = ResultFile(tmp_path, "opat")
            with lock:
                names.append(rf.path)

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(names) == len(set(names)) == 400
    assert len(list(tmp_path.glob("aoe_result_opat_*_pid*.json"))) == 400
    for p in names:
        assert p.name.startswith("aoe_result_opat_") and p.name.endswith(f"_pid{os.getpid()}.json")
        assert len(p.name.split("_")[3]) == 17 and json.loads(p.read_text()) == {}


def test_a_failed_batch_leaves_no_empty_result_file(env):
    with pytest.raises(AoeError):
        aoe.tune_models(["does_not_exist.onnx"], work_path=env / "w")
    assert not list((env / "w").glob("aoe_result_*"))


# --- special files and size caps (tune_ops, single ops, aoe.ini, SoC .ini, JSON graphs) --------------

def _no_hang(fn, *args):
    """fn(*args) in a thread: its exception or result, failing the test if it blocks (a FIFO)."""
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=60)
    assert not t.is_alive(), f"{fn.__name__} blocks on {args}"
    return out.get("error", out.get("value"))


def _readers():
    from aoe.graph import load
    from aoe.graph.singleop import load_single_ops
    from aoe.job.config import load_tune_ops, read_config
    from aoe.soc import load_soc

    return {"tune_ops": load_tune_ops, "singleop": load_single_ops, "ini": lambda p: read_config(Path(p)),
            "soc": lambda p: load_soc(str(p) if str(p).endswith(".ini") else f"{p}/../{Path(p).name}"),
            "graph": lambda p: load(str(p), framework="json")}


@pytest.mark.parametrize("reader", ["tune_ops", "singleop", "ini", "soc", "graph"])
def test_special_files_are_refused_without_blocking(tmp_path, reader):
    fifo = tmp_path / "fifo.ini"
    os.mkfifo(fifo)
    targets = [fifo] + ([Path("/dev/zero")] if reader in ("tune_ops", "singleop", "ini") else [])
    for target in targets:
        err = _no_hang(_readers()[reader], target)
        assert isinstance(err, AoeError), err
        assert "regular file" in str(err) or "not a file" in str(err) or "does not exist" in str(err), err


def test_aoe_ini_over_one_mib_is_refused_not_cut(tmp_path):
    from aoe.job.config import read_config

    p = tmp_path / "aoe.ini"
    p.write_text("[tuning]\n" + "# padding\n" * 110000 + "tuning_parallel_num = 2\n")
    with pytest.raises(AoeError, match="over the limit"):
        read_config(p)
    p.write_text("[tuning]\n" + "# padding\n" * 1000 + "tuning_parallel_num = 2\n")
    assert read_config(p).tuning_parallel_num == 2


def test_oversized_soc_and_tune_ops_files_are_refused(tmp_path):
    from aoe.job.config import load_tune_ops
    from aoe.soc import load_soc

    big = tmp_path / "big.ini"
    big.write_bytes(b"[SoCInfo]\n" + b";" * (2 << 20))
    with pytest.raises(AoeError, match="over the limit"):
        load_soc(str(big))
    ops = tmp_path / "ops.json"
    with open(ops, "wb") as fh:
        fh.truncate(17 << 20)  # sparse: no disk used
    with pytest.raises(AoeError, match="over the limit"):
        load_tune_ops(ops)


@pytest.mark.parametrize("reader", ["tune_ops", "singleop", "graph"])
def test_deeply_nested_json_is_an_error_not_a_traceback(tmp_path, reader):
    p = tmp_path / "deep.json"
    p.write_text("[" * 200000 + "]" * 200000)
    err = _no_hang(_readers()[reader], p)
    assert isinstance(err, AoeError), repr(err)


@pytest.mark.parametrize("state", ['{"version": 1, "pid": "x", "report_key": "k", "job": {}}',
                                   '{"version": 1, "pid": 1, "job": [], "done": 3}',
                                   '{"version": 1, "pid": 1e999, "report_key": "k"}',
                                   "[" * 100000, '{"version": 1, "report_key": {"a": 1}, "job": "s"}', "\xff\xfe"])
def test_malformed_reload_state_files_are_ignored(env, state):
    from aoe.job.run import graph_fingerprint

    g = _graph("net")
    job = json.dumps({"kind": "opat", "fingerprint": graph_fingerprint(g), "fingerprint_v": 2, "soc": "Ascend910B2"})
    state = state.replace('"job": {}', f'"job": {job}')   # the same job: only its damaged fields differ
    (env / ".aoe_result_opat_20260101000000000_pid1.json.state").write_text(state, encoding="latin-1")
    (env / "aoe_result_opat_20260101000000000_pid1.json").write_text("{}")
    r = aoe.tune(g, options=aoe.TuneOptions(budget=200, reload=True))
    assert r.status == "tuning successful" and r.result_file.name != "aoe_result_opat_20260101000000000_pid1.json"


def _forge_interrupted(work: Path, job: dict) -> Path:
    """An interrupted OPAT job's result file and resume state (no finished case) in `work`."""
    result = work / "aoe_result_opat_20260101000000000_pid1.json"
    result.write_text("{}")
    state = {"version": 1, "pid": 1, "report_key": "report_20260101000000000_1", "job": job, "done": [],
             "result_file": result.name, "started": "20260101000000", "status": "interrupted"}
    (work / f".{result.name}.state").write_text(json.dumps(state))
    return result


@pytest.mark.parametrize("same_graph", [True, False])
def test_a_state_written_before_the_fingerprint_changed_still_resumes(env, same_graph):
    """An interrupted job of an older aoe (its state names the graph by the sha256 of to_json(), no
    "fingerprint_v") is resumed by --reload when the graph is the same, and not otherwise."""
    import hashlib

    g = _graph("net")
    other = _graph("other")
    old = hashlib.sha256((g if same_graph else other).to_json().encode("utf-8")).hexdigest()
    result = _forge_interrupted(env, {"kind": "opat", "fingerprint": old, "soc": "Ascend910B2"})
    r = aoe.tune(g, options=aoe.TuneOptions(budget=200, reload=True))
    assert r.status == "tuning successful" and (r.result_file == result) == same_graph


def test_a_tuning_job_never_serialises_the_whole_graph(env, monkeypatch):
    """The job's identity (and a --reload that finds only its own kind of state) costs no to_json()."""
    from aoe.graph import Graph

    g = _graph("net")
    monkeypatch.setattr(Graph, "to_json", lambda self, indent=None: pytest.fail("the job serialised the graph"))
    first = aoe.tune(g, options=aoe.TuneOptions(budget=200))
    again = aoe.tune(g, options=aoe.TuneOptions(budget=200, reload=True))
    assert first.status == again.status == "tuning successful"


# A pid no process can have (over the C long os.kill takes), or not a number at all: a damaged or hostile
# resume state, lock file or temp-file name means "no such process", never an OverflowError traceback.
BAD_PIDS = [10 ** 30, -(10 ** 30), "x", [1], 1e300]


@pytest.mark.parametrize("pid", BAD_PIDS)
def test_a_running_state_with_an_impossible_pid_is_resumed(env, pid):
    from aoe.job.identity import job_identity
    from aoe.job.result import hostname

    g = _graph("net")
    result = _forge_interrupted(env, job_identity("opat", g, "Ascend910B2"))
    state_path = env / f".{result.name}.state"
    state = json.loads(state_path.read_text())
    state.update(pid=pid, status="running", host=hostname())
    state_path.write_text(json.dumps(state))
    r = aoe.tune(g, options=aoe.TuneOptions(budget=200, reload=True))
    # a pid read_state cannot take as a number makes the state unreadable (a new job); else it is resumed
    assert r.status == "tuning successful" and (r.result_file == result) == isinstance(pid, (int, float))


@pytest.mark.parametrize("pid", BAD_PIDS)
def test_a_lock_file_left_with_an_impossible_pid_is_recovered(env, pid):
    from aoe.job.lock import DeviceLock
    from aoe.job.result import hostname

    locks = env / "locks"
    locks.mkdir(mode=0o700, exist_ok=True)
    (locks / "device0.lock").write_text(json.dumps({"pid": pid, "user": "x", "host": hostname()}))
    notes: list[str] = []
    lock = DeviceLock(0, locks, notice=notes.append).acquire()
    try:
        assert notes and "no longer running" in notes[0], notes
    finally:
        lock.release()


def test_a_temp_file_named_with_an_impossible_pid_is_removed_by_reload(env):
    g = _graph("net")
    temp = env / f".aoe_result_opat_20260101000000000_pid{10 ** 30}.json.state.tmp"
    temp.write_text("{}")
    r = aoe.tune(g, options=aoe.TuneOptions(budget=200, reload=True))
    assert r.status == "tuning successful" and not temp.exists()


def test_reload_in_another_thread_never_takes_over_a_running_job_of_this_process(env, monkeypatch):
    """A job of one thread is running (its state says so, with this process's pid); --reload of the same
    graph in another thread of the process must start its own job, not resume that one into the same
    result file and report key (one report overwrote the other, the run record held both)."""
    import aoe.job.run as run

    g = _graph("net")
    started, go_on = threading.Event(), threading.Event()
    res: dict[str, object] = {}
    real_tune = aoe.opat.graph_tune.tune_graph

    def tune_a(graph, soc, bank_dir=None, config=None, **kw):
        # thread A's job waits here, its state already written with status "running"
        if threading.current_thread().name == "A":
            started.set()
            assert go_on.wait(120)
        return real_tune(graph, soc, bank_dir, config, **kw)

    monkeypatch.setattr(run, "_tuner", _patched_tuner(run, tune_a))

    def job(name: str, device: int, reload: bool) -> None:
        try:
            res[name] = aoe.tune(g, options=aoe.TuneOptions(budget=200, device=device, reload=reload))
        except BaseException as exc:  # noqa: BLE001 - reported below
            res[name] = exc

    a = threading.Thread(target=job, args=("A", 0, False), name="A", daemon=True)
    a.start()
    assert started.wait(120)
    b = threading.Thread(target=job, args=("B", 1, True), name="B", daemon=True)
    b.start()
    b.join(120)
    go_on.set()
    a.join(120)
    ra, rb = res["A"], res["B"]
    assert getattr(ra, "status", ra) == getattr(rb, "status", rb) == "tuning successful", (ra, rb)
    assert ra.result_file != rb.result_file
    for r in (ra, rb):
        assert list(json.loads(r.result_file.read_text())) == [r.report_key]   # one job's report per file


def _patched_tuner(run, tune):
    """run._tuner with the OPAT tuner's `tune` replaced (the job holds the function, not the module attribute)."""
    import dataclasses

    real = run._tuner

    def make(kind, settings):
        t = real(kind, settings)
        return dataclasses.replace(t, tune=tune) if kind == "opat" else t

    return make
