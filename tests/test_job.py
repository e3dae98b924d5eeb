"""The tuning job in-process: configuration, result files, locks, API, verify, crash safety."""
from __future__ import annotations

import io
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

import aoe
from aoe.cli import main
from aoe.errors import AoeError
from aoe.job import config as cfg
from aoe.job.lock import DeviceBusy, DeviceLock
from aoe.job.progress import Progress
from aoe.job.result import ResultFile, atomic_write_json
from aoe.job.schema import RESULT_FILE_NAME, REPORT_KEY, validate
from aoe.tuning import Events
from conftest import tiny_onnx

SOC = "Ascend910B2"


class Relay(Events):
    """Passes a tuner's events on to the job's; `after_case(n)` runs after the n-th case_done."""

    def __init__(self, inner: Events, after_case) -> None:
        self.inner, self.after_case, self.n = inner, after_case, 0

    def start(self, n_cases, report):
        self.inner.start(n_cases, report)

    def case_done(self, records, hit):
        self.inner.case_done(records, hit)
        self.n += 1
        self.after_case(self.n)

    def should_stop(self):
        return self.inner.should_stop()


def only_file(d: Path, kind: str = "opat") -> Path:
    files = sorted(d.glob(f"aoe_result_{kind}_*.json"))
    assert len(files) == 1, files
    return files[0]


def cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


# --- configuration -----------------------------------------------------------------------------

@pytest.mark.parametrize("var,value,needle", [
    ("AOE_MODE", "3", "AOE_MODE='3'"),
    ("AOE_MODE", "op", "AOE_MODE='op'"),
    ("ASCEND_DEVICE_ID", "8", "ASCEND_DEVICE_ID='8' is out of range"),
    ("ASCEND_DEVICE_ID", "-1", "ASCEND_DEVICE_ID='-1'"),
    ("ASCEND_DEVICE_ID", "zero", "ASCEND_DEVICE_ID='zero'"),
    ("AOE_DEVICE_COUNT", "0", "AOE_DEVICE_COUNT='0'"),
    ("TE_PARALLEL_COMPILER", "0", "TE_PARALLEL_COMPILER='0'"),
    ("TE_PARALLEL_COMPILER", "33", "TE_PARALLEL_COMPILER='33'"),
    ("TE_PARALLEL_COMPILER", "8x", "TE_PARALLEL_COMPILER='8x'"),
    ("REPEAT_TUNE", "yes", "REPEAT_TUNE='yes'"),
    ("AOE_SEARCH_BUDGET", "0", "AOE_SEARCH_BUDGET='0'"),
    ("TUNE_BANK_PATH", "/nonexistent/bank", "/nonexistent/bank does not exist"),
    ("AOE_CONFIG", "/nonexistent/aoe.ini", "config file /nonexistent/aoe.ini"),
    ("ASCEND_WORK_PATH", "/dev/null", "not a directory"),
])
def test_bad_environment_values_fail_cleanly(env, capsys, monkeypatch, var, value, needle):
    monkeypatch.setenv(var, value)
    monkeypatch.setenv("AOE_MODE", os.environ.get("AOE_MODE", "2") if var == "AOE_MODE" else "2")
    rc, out, err = cli(capsys, "-m", "zoo:mobilenet_v2")
    assert rc == 2, (out, err)
    assert err.startswith("aoe: error: ") and needle in err, err
    assert not list(env.glob("aoe_result_*"))


def test_a_missing_bank_argument_is_blamed_on_the_argument(tmp_path):
    """`aoe.tune(bank=...)` stands in for TUNE_BANK_PATH, but the message names what the caller gave."""
    with pytest.raises(AoeError) as exc:
        aoe.tune("zoo:mobilenet_v2", bank=tmp_path / "nope", work_path=tmp_path, env={},
                 options=aoe.TuneOptions(lock=False, budget=50))
    msg = str(exc.value)
    assert f"the bank argument '{tmp_path / 'nope'}'" in msg and "mkdir -p" in msg and "TUNE_BANK_PATH" not in msg


def test_job_type_required_without_aoe_mode(env, capsys):
    rc, _, err = cli(capsys, "-m", "zoo:mobilenet_v2")
    assert rc == 2 and "--job_type" in err and "AOE_MODE" in err
    rc, _, err = cli(capsys, "-m", "zoo:mobilenet_v2", "-j", "3")
    assert rc == 2 and "--job_type" in err


@pytest.mark.parametrize("text,needle", [
    ("[tuning]\ntuning_parallel_num = 0\n", "TUNING_PARALLEL_NUM"),
    ("[tuning]\ntuning_parallel_num = 65\n", "TUNING_PARALLEL_NUM"),
    ("[tuning]\ntuning_parallel_num = many\n", "TUNING_PARALLEL_NUM"),
    ("[tuning]\ntuning_paralel_num = 4\n", "unknown key 'tuning_paralel_num'"),
    ("[tuning]\ninline_cpu_s = -1\n", "inline_cpu_s"),
    ("[tuning]\ninline_cpu_s = nan\n", "inline_cpu_s"),
    ("[tuning]\ninline_cpu_s = soon\n", "inline_cpu_s"),
    # configparser's DEFAULT section is not among sections(): its keys were read by no one, silently
    ("[DEFAULT]\ninline_cpu_s = -1\n", "inline_cpu_s"),
    ("[DEFAULT]\ninline_cpu_s = soon\n", "inline_cpu_s"),
    ("[DEFAULT]\ntuning_paralel_num = 4\n", "unknown key 'tuning_paralel_num'"),
    ("[DEFAULT]\ntuning_parallel_num = 65\n[tuning]\n", "TUNING_PARALLEL_NUM"),
])
def test_bad_config_file_fails_cleanly(env, capsys, text, needle):
    (env / "aoe.ini").write_text(text)
    rc, _, err = cli(capsys, "-m", "zoo:mobilenet_v2", "-j", "2")
    assert rc == 2 and needle in err, err


def test_config_file_search_order(env, monkeypatch):
    (env / "aoe.ini").write_text("tuning_parallel_num = 3\n")          # bare keys are accepted
    other = env / "other.ini"
    other.write_text("[tuning]\nTUNING_PARALLEL_NUM = 5   # as in `aoe --help`\n")
    assert cfg.read_config(cfg.find_config(None, {}, env)).tuning_parallel_num == 3
    assert cfg.read_config(cfg.find_config(None, {"AOE_CONFIG": str(other)}, env)).tuning_parallel_num == 5
    assert cfg.read_config(cfg.find_config(other, {"AOE_CONFIG": "x"}, env)).tuning_parallel_num == 5
    s = aoe.job.settings_from_env({"AOE_CONFIG": str(other), "TUNE_BANK_PATH": str(env / "bank")}, cwd=env)
    assert s.tuning_parallel_asked == 5 and s.workers == min(5, cfg.cpu_count())
    assert s.inline_s is None                                             # not set: the tuner's default
    other.write_text("[tuning]\ninline_cpu_s = 1.5\n")
    assert aoe.job.settings_from_env({"AOE_CONFIG": str(other), "TUNE_BANK_PATH": str(env / "bank")},
                                     cwd=env).inline_s == 1.5
    other.write_text("[DEFAULT]\ninline_cpu_s = 2.5\ntuning_parallel_num = 3\n")   # the DEFAULT section counts too
    s = aoe.job.settings_from_env({"AOE_CONFIG": str(other), "TUNE_BANK_PATH": str(env / "bank")}, cwd=env)
    assert s.inline_s == 2.5 and s.tuning_parallel_asked == 3


def test_ascend_cache_path_is_checked_when_tune_bank_path_is_unset(env, capsys, monkeypatch):
    monkeypatch.delenv("TUNE_BANK_PATH")
    monkeypatch.setenv("ASCEND_CACHE_PATH", str(env / "no_cache"))
    rc, _, err = cli(capsys, "-m", "zoo:mobilenet_v2", "-j", "2")
    assert rc == 2 and "ASCEND_CACHE_PATH" in err and "no_cache" in err
    (env / "cache").mkdir()
    monkeypatch.setenv("ASCEND_CACHE_PATH", str(env / "cache"))
    r = aoe.tune("zoo:mobilenet_v2", tune_ops={"tune_ops_type": ["ReduceMeanD"]})
    assert r.bank_dir == env / "cache" / "aoe_data" / SOC


def test_bank_without_permissions_fails_cleanly(env, capsys):
    bank = env / "bank"
    bank.chmod(0o555)   # refused for root as well (the bank layer checks the owner bits)
    try:
        rc, _, err = cli(capsys, "-m", "zoo:mobilenet_v2", "-j", "2")
    finally:
        bank.chmod(0o755)
    assert rc == 2 and str(bank) in err and "TUNE_BANK_PATH" in err and "permission" in err


def test_te_parallel_compiler_is_capped_by_cores_and_devices(env):
    assert cfg.te_parallel_cap(8, cpus=64) == 6
    assert cfg.te_parallel_cap(1, cpus=10) == 8
    assert cfg.te_parallel_cap(8, cpus=2) == 1          # never below one thread
    warnings = []
    s = aoe.job.settings_from_env({"TE_PARALLEL_COMPILER": "32", "AOE_DEVICE_COUNT": "1",
                                   "TUNE_BANK_PATH": str(env / "bank")}, cwd=env, warn=warnings.append)
    assert s.te_parallel_asked == 32 and s.te_parallel == cfg.te_parallel_cap(1)
    assert warnings and "exceeds CPU cores x 80%" in warnings[0]
    s = aoe.job.settings_from_env({"AOE_DEVICE_COUNT": "2", "ASCEND_DEVICE_ID": "1",
                                   "TUNE_BANK_PATH": str(env / "bank")}, cwd=env)
    assert s.device == 1 and s.n_devices == 2
    with pytest.raises(AoeError, match="from 0 to 1"):
        aoe.job.settings_from_env({"AOE_DEVICE_COUNT": "2", "ASCEND_DEVICE_ID": "2"}, cwd=env)


def test_work_path_priority(env, monkeypatch):
    e = {"TUNE_BANK_PATH": str(env / "bank"), "ASCEND_WORK_PATH": "from_env"}
    assert aoe.job.settings_from_env(e, cwd=env).work_path == env / "from_env"
    assert aoe.job.settings_from_env(e, cwd=env, work_path=env / "cli").work_path == env / "cli"
    assert aoe.job.settings_from_env({"TUNE_BANK_PATH": str(env / "bank")}, cwd=env).work_path == env
    (env / "afile").write_text("")
    with pytest.raises(AoeError, match="not a directory"):
        aoe.job.settings_from_env({"ASCEND_WORK_PATH": str(env / "afile")}, cwd=env)


def test_tune_ops_content_is_checked():
    ok = cfg.tune_ops_from({"tune_ops_name": ["a"], "tune_ops_type": ["Relu"]}, "f.json")
    assert (ok.names, ok.types, ok.source) == (["a"], ["Relu"], "f.json")
    for data, needle in (({"ops": ["x"]}, "unknown key"), ({"tune_ops_name": "mm"}, "list of non-empty strings"),
                         ({"tune_ops_type": [""]}, "list of non-empty strings"), ({}, "selects no operators"),
                         (["mm"], "JSON object")):
        with pytest.raises(AoeError, match=needle):
            cfg.tune_ops_from(data, "f.json")
    with pytest.raises(AoeError, match="tune_ops_name and tune_ops_type"):
        cfg.tune_ops_from({"ops": ["x"]}, "f.json")


def test_tune_ops_file_validation(env, capsys):
    for content, needle in (("[1]", "JSON object"), ('{"tune_ops_name": "mm"}', "list of non-empty strings"),
                            ("{}", "selects no operators"), ('{"ops": []}', "unknown key"), ("{", "not valid JSON")):
        (env / "ops.json").write_text(content)
        rc, _, err = cli(capsys, "-m", "zoo:mobilenet_v2", "-j", "2", "--tune_ops_file", "ops.json")
        assert rc == 2 and needle in err, (content, err)


# --- result files ------------------------------------------------------------------------------

def test_result_file_names_and_keys(env):
    rf = ResultFile(env, "opat")
    assert re.match(RESULT_FILE_NAME, rf.path.name) and rf.path.name.endswith(f"_pid{os.getpid()}.json")
    k1, k2 = rf.new_task(), rf.new_task()
    assert k1 != k2 and re.match(REPORT_KEY, k1) and k1.endswith(f"_{threading.get_native_id()}")
    rf.set_task(k1, "a", 1.4, None)
    rf.set_task(k2, "b", None, None)
    rf.write()
    data = json.loads(rf.path.read_text())
    assert data[k1] == [{"basic": {"tuning_name": "a", "tuning_time(s)": 1}}]
    assert data[k2] == [{"basic": {"tuning_name": "b"}}]


def test_atomic_rewrites_are_always_valid_json(env):
    path = env / "aoe_result_opat_20260101000000000_pid1.json"
    atomic_write_json(path, {"n": 0, "pad": "x"})
    stop, bad = threading.Event(), []

    def reader():
        while not stop.is_set():
            try:
                json.loads(path.read_text())
            except ValueError as exc:  # pragma: no cover - the failure this test looks for
                bad.append(exc)

    t = threading.Thread(target=reader)
    t.start()
    for i in range(120):
        atomic_write_json(path, {"n": i, "pad": "x" * (i * 97 % 20000)})
    stop.set()
    t.join()
    assert not bad
    assert not [p for p in env.iterdir() if p.name.endswith(".tmp")]


def test_schema_rejects_inconsistent_counters_and_improvements():
    good = {"report_20260101000000000_1": [
        {"basic": {"tuning_name": "m", "tuning_time(s)": 3}},
        {"OPAT": {"opat_tuning_result": "tuning successful",
                  "repo_modified_operators": [{"op_name": "a", "op_type": "SoftmaxV2", "tune_performance": {
                      "Format": {"performance_after_tune(us)": 26.876, "performance_before_tune(us)": 58.781,
                                 "performance_improvement": "118.71%", "update_mode": "add"}}}],
                  "repo_summary": {"repo_add_num": 1, "repo_hit_num": 10, "repo_reserved_num": 10,
                                   "repo_unsatisfied_num": 1, "repo_update_num": 0, "total_num": 12}}}]}
    validate(good, "opat")
    bad = json.loads(json.dumps(good))
    bad["report_20260101000000000_1"][1]["OPAT"]["repo_summary"]["total_num"] = 13
    with pytest.raises(ValueError, match="total_num"):
        validate(bad, "opat")
    bad = json.loads(json.dumps(good))
    bad["report_20260101000000000_1"][1]["OPAT"]["repo_modified_operators"][0]["tune_performance"]["Format"][
        "performance_improvement"] = "54.28%"   # the seed's 118.71% is (before/after - 1) x 100
    with pytest.raises(ValueError, match="118.71%"):
        validate(bad, "opat")
    bad = json.loads(json.dumps(good))
    bad["report_20260101000000000_1"][1]["OPAT"]["opat_tuning_result"] = "tuning failed"
    with pytest.raises(ValueError, match="tuning_failed_operators"):
        validate(bad, "opat")


# --- tuning through the CLI in-process ---------------------------------------------------------

def test_opat_job_repeat_tune_and_verify(env, capsys, monkeypatch):
    model = str(tiny_onnx(env / "tiny.onnx"))
    rc, out, err = cli(capsys, "-m", model, "-j", "2", "-f", "5", "--progress_bar", "off")
    assert rc == 0, err
    assert "Aoe tuning graph." in out and "in tune mode" not in out
    assert "top " in out and "result file:" in out
    f1 = only_file(env)
    d1 = json.loads(f1.read_text())
    validate(d1, "opat")
    sec = next(iter(d1.values()))[1]["OPAT"]
    assert sec["opat_tuning_result"] == "tuning successful"
    s1 = sec["repo_summary"]
    assert s1["repo_add_num"] >= 1 and s1["repo_hit_num"] == 0 and s1["total_num"] == 3
    names = {o["op_name"] for o in sec["repo_modified_operators"]}
    assert "mm" in names
    f1.unlink()

    # second run, REPEAT_TUNE unset (False): nothing tuned, the added cases are hits
    rc, out, _ = cli(capsys, "-m", model, "-j", "2")
    d2 = json.loads(only_file(env).read_text())
    validate(d2, "opat")
    s2 = next(iter(d2.values()))[1]["OPAT"]["repo_summary"]
    assert s2["repo_add_num"] == 0 and s2["repo_hit_num"] == s1["repo_add_num"] == s2["repo_reserved_num"]
    assert next(iter(d2.values()))[1]["OPAT"]["repo_modified_operators"] == []
    only_file(env).unlink()

    # REPEAT_TUNE=True with a much larger budget re-tunes the hits and updates what got better
    monkeypatch.setenv("REPEAT_TUNE", "True")
    monkeypatch.setenv("AOE_SEARCH_BUDGET", "100000")
    r = aoe.tune(model, mode="op", options=aoe.TuneOptions(repeat_tune=None))
    assert r.report.evaluations > 0 and r.report.cases_tuned == 3
    s3 = r.section["repo_summary"]
    assert s3["repo_hit_num"] == s1["repo_add_num"] and s3["total_num"] == 3
    validate(json.loads(r.result_file.read_text()), "opat")
    if s3["repo_update_num"]:
        modes = {p["update_mode"] for o in r.section["repo_modified_operators"] for p in o["tune_performance"].values()}
        assert "update" in modes
    r2 = aoe.tune(model, mode="op", options=aoe.TuneOptions(repeat_tune=False))   # only the unsatisfied case (not in a bank) is tuned
    assert r2.section["repo_summary"]["repo_hit_num"] == s1["repo_add_num"]
    assert r2.report.evaluations < r.report.evaluations

    # verification: the banks make it faster; the report lists per-operator times
    rc, out, _ = cli(capsys, "verify", "-m", model, "--op_compiler_cache_mode", "force")
    assert rc == 0 and "improvement" in out and "custom" in out
    v = aoe.verify(model)
    assert v.tuned_us < v.default_us and any(o.source == "custom" for o in v.ops)
    rc, _, err = cli(capsys, "verify", "-m", model, "--op_compiler_cache_mode", "sometimes")
    assert rc == 2 and "op_compiler_cache_mode" in err


def test_verify_sees_new_bank_entries_at_once(env):
    model = str(tiny_onnx(env / "tiny.onnx"))
    bank = env / "bank"
    v0 = aoe.verify(model, bank=bank, builtin=False)
    assert all(o.source == "default" for o in v0.ops) and v0.tuned_us == v0.default_us
    aoe.tune(model, bank=bank, tune_ops={"tune_ops_name": ["mm"]})
    v1 = aoe.verify(model, bank=bank, builtin=False)          # memo on ('enable'): still sees the entry
    assert {o.op_name for o in v1.ops if o.source == "custom"} == {"mm"}
    aoe.tune(model, bank=bank)
    v2 = aoe.verify(model, bank=bank, builtin=False)
    assert {o.op_name for o in v2.ops if o.source == "custom"} >= {"mm"}
    assert v2.tuned_us <= v1.tuned_us < v0.tuned_us


def test_tune_ops_file_limits_tuning(env, capsys):
    (env / "ops.json").write_text(json.dumps({"tune_ops_name": ["/features/features.0/features.0.2/Clip"],
                                              "tune_ops_type": ["ReduceMeanD"]}))
    rc, out, err = cli(capsys, "-m", "zoo:mobilenet_v2", "-j", "2", "--tune_ops_file", "ops.json")
    assert rc == 0, err
    d = json.loads(only_file(env).read_text())
    validate(d, "opat")
    sec = next(iter(d.values()))[1]["OPAT"]
    for o in sec["repo_modified_operators"]:
        assert o["op_name"] == "/features/features.0/features.0.2/Clip" or o["op_type"] == "ReduceMeanD"
    assert sec["repo_summary"]["total_num"] == 2      # the Clip (Relu6) case and the one ReduceMeanD case


def test_tune_ops_file_limits_subgraph_tuning(env, capsys):
    (env / "ops.json").write_text(json.dumps({"tune_ops_type": ["MaxPool"]}))
    rc, out, err = cli(capsys, "-m", "zoo:resnet50", "-j", "1", "--soc_version", "Ascend910A",
                       "--tune_ops_file", "ops.json")
    assert rc == 0, err
    d = json.loads(only_file(env, "sgat").read_text())
    sec = next(iter(d.values()))[1]["SGAT"]
    assert sec["repo_summary"]["total_num"] == 1     # only the subgraph holding the MaxPool
    rc, out, err = cli(capsys, "-m", "zoo:resnet50", "-j", "1", "--soc_version", "Ascend910A")
    assert rc == 0, err


def test_tune_models_share_one_bank_and_one_result_file(env):
    a = tiny_onnx(env / "a.onnx")
    g = aoe.graph.load(str(a))
    rs = aoe.tune_models([str(a), g], bank=env / "bank", work_path=env / "out", names=["first", "second"])
    assert [r.status for r in rs] == ["tuning successful"] * 2
    assert rs[0].result_file == rs[1].result_file
    data = json.loads(rs[0].result_file.read_text())
    validate(data, "opat")
    assert [v[0]["basic"]["tuning_name"] for v in data.values()] == ["first", "second"]
    s0, s1 = rs[0].section["repo_summary"], rs[1].section["repo_summary"]
    assert s1["repo_add_num"] == 0 and s1["repo_hit_num"] == s0["repo_add_num"] > 0


def test_parallel_and_serial_runs_give_the_same_bank(env):
    def bank_content(d):
        out = {}
        for f in sorted((d / SOC / "unified_bank").glob("*.json")):
            for line in f.read_text().splitlines():
                r = json.loads(line)
                out[(r["op"], r["id"])] = (r["info_dict"], r["knowledge"])
        return out

    for name in ("serial", "parallel"):
        (env / name).mkdir()
    r1 = aoe.tune("zoo:mobilenet_v2", bank=env / "serial", work_path=env / "w1", options=aoe.TuneOptions(workers=1))
    (env / "aoe.ini").write_text("inline_cpu_s = 0\n")   # every case on the workers
    r2 = aoe.tune("zoo:mobilenet_v2", bank=env / "parallel", work_path=env / "w2", options=aoe.TuneOptions(workers=2))
    assert r1.section == r2.section
    b1, b2 = bank_content(env / "serial"), bank_content(env / "parallel")
    assert b1 == b2 and len(b1) == r1.section["repo_summary"]["repo_add_num"]


def _distinct_cases(graph) -> int:
    """How many distinct operator cases a graph has (what OPAT's total_num counts)."""
    from aoe.ops import describe

    ids = set()
    for op in graph.ops:
        try:
            ids.add(describe(graph, op).case_id)
        except AoeError:      # views and operators without a kernel model
            pass
    return len(ids)


def test_a_crash_leaves_tuning_incomplete(env, monkeypatch):
    import aoe.opat as opat

    real = opat.tune_graph

    def crash_after_three(n):
        if n == 3:
            raise RuntimeError("simulated crash")

    def crashing(*a, **kw):
        kw["events"] = Relay(kw["events"], crash_after_three)
        return real(*a, **kw)

    monkeypatch.setattr(opat, "tune_graph", crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        aoe.tune("zoo:mobilenet_v2", options=aoe.TuneOptions(workers=1))
    f = only_file(env)
    d = json.loads(f.read_text())
    validate(d, "opat")
    task = next(iter(d.values()))
    assert "tuning_time(s)" not in task[0]["basic"]
    assert task[1]["OPAT"]["opat_tuning_result"] == "tuning incomplete"
    assert task[1]["OPAT"]["repo_summary"]["total_num"] == 3
    # and --reload finishes it without re-tuning the three finished cases
    monkeypatch.setattr(opat, "tune_graph", real)
    r = aoe.tune("zoo:mobilenet_v2", options=aoe.TuneOptions(workers=1, reload=True))
    assert r.result_file == f and r.status == "tuning successful" and r.resumed_from >= 3
    cases = _distinct_cases(aoe.graph.load("zoo:mobilenet_v2"))
    assert cases > 3 and r.section["repo_summary"]["total_num"] == cases      # every distinct case once
    assert r.report.cases_tuned == cases - 3
    validate(json.loads(f.read_text()), "opat")
    assert not list(env.glob(".aoe_result_*.state"))


def test_nothing_tunable_has_no_opat_section(env):
    r = aoe.tune("zoo:mobilenet_v2", tune_ops={"tune_ops_name": ["no such op"]})
    d = json.loads(r.result_file.read_text())
    validate(d, "opat")
    assert len(next(iter(d.values()))) == 1 and r.section is None


def test_singleop_and_output(env, capsys):
    (env / "ops.json").write_text(json.dumps([{"op": "MatMulV2", "name": "mm0",
                                               "input_desc": [{"shape": [512, 1024], "type": "float16"},
                                                              {"shape": [1024, 256], "type": "float16"}],
                                               "output_desc": [{"shape": [512, 256], "type": "float16"}]}]))
    rc, out, err = cli(capsys, "--singleop", "ops.json", "-j", "2", "--output", "tuned.json")
    assert rc == 0, err
    validate(json.loads(only_file(env).read_text()), "opat")
    tuned = json.loads((env / "tuned.json").read_text())
    assert tuned["performance"]["operators"][0]["op_name"] == "mm0" and "graph" in tuned
    rc, _, err = cli(capsys, "--singleop", "ops.json", "-j", "1", "--soc_version", "Ascend910A")
    assert rc == 2 and "--singleop" in err


def test_training_graph_log_line_and_env_mode(env, capsys, monkeypatch):
    monkeypatch.setenv("AOE_MODE", "2")
    (env / "ops.json").write_text(json.dumps({"tune_ops_type": ["SoftmaxGrad", "SoftmaxV2"]}))
    model = str(tiny_onnx(env / "tiny.onnx"))
    rc, out, err = cli(capsys, "-m", model, "--training", "--tune_ops_file", "ops.json")
    assert rc == 0, err
    lines = out.splitlines()
    # a model file tuned with --training: no framework handed a graph over (the frontends' tests check that line)
    assert "Aoe tuning graph." in lines and "in tune mode, training graph handled by tools." not in lines


def test_sgat_job_and_refusal_on_a2(env, capsys):
    rc, _, err = cli(capsys, "-m", "zoo:mobilenet_v2", "-j", "1")
    assert rc == 2 and "Ascend910B2" in err and "not supported" in err
    model = str(tiny_onnx(env / "tiny.onnx"))
    rc, out, err = cli(capsys, "-m", model, "-j", "1", "--soc_version", "Ascend910A")
    assert rc == 0, err
    d = json.loads(only_file(env, "sgat").read_text())
    validate(d, "sgat")
    task = next(iter(d.values()))
    assert "tuning_time(s)" in task[0]["basic"] and "SGAT" in task[1]
    rc, out, _ = cli(capsys, "verify", "-m", model, "-j", "1", "--soc_version", "Ascend910A")
    assert rc == 0 and "subgraph bank" in out


# --- device locks ------------------------------------------------------------------------------

def test_device_lock_conflict_names_the_holder(env):
    d = env / "locks"
    with DeviceLock(0, d, model="m"):
        with pytest.raises(DeviceBusy, match=rf"device 0 is in use .*pid {os.getpid()} of user \S+"):
            DeviceLock(0, d).acquire()
        with DeviceLock(1, d):           # another device is free
            pass
    with DeviceLock(0, d):              # released: free again
        pass


def test_stale_lock_of_a_dead_process_is_recovered(env):
    d = env / "locks"
    d.mkdir()
    (d / "device3.lock").write_text(json.dumps({"pid": 2**22 + 12345, "user": "ghost", "host": os.uname().nodename}))
    notes = []
    with DeviceLock(3, d, notice=notes.append) as lk:
        assert lk.holder()["pid"] == os.getpid()
    assert notes and "ghost" in notes[0] and "no longer running" in notes[0]
    assert (d / "device3.lock").read_text() == ""      # a clean release empties the record


def test_api_job_conflicts_with_a_held_device(env):
    with DeviceLock(0, env / "locks"):
        with pytest.raises(DeviceBusy):
            aoe.tune("zoo:mobilenet_v2", tune_ops={"tune_ops_type": ["ReduceMeanD"]})
        r = aoe.tune("zoo:mobilenet_v2", tune_ops={"tune_ops_type": ["ReduceMeanD"]}, options=aoe.TuneOptions(device=1))
        assert r.status == "tuning successful"


# --- what the user sees ------------------------------------------------------------------------

def test_progress_bar_shows_hits_and_current_operator():
    buf = io.StringIO()
    p = Progress(True, stream=buf, force=True)
    p.start(2)
    p.step(True, "layer1/conv")
    p.step(False, "layer2/matmul")
    p.close()
    text = buf.getvalue()
    assert "2/2" in text and "hits 1" in text and "layer2/matmul" in text
    quiet = io.StringIO()
    p = Progress(True, stream=quiet)        # not a terminal: no bar
    p.start(1)
    p.step(False, "x")
    p.close()
    assert quiet.getvalue() == ""


def test_help_is_complete(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for word in ("--model", "--job_type", "--soc_version", "--tune_ops_file", "--reload", "--singleop",
                 "--progress_bar", "AOE_MODE", "TUNE_BANK_PATH", "TUNING_PARALLEL_NUM", "aoe.ini", "verify",
                 "simulate", "graph", "bank"):
        assert word in out, word
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    assert "op_compiler_cache_mode" in capsys.readouterr().out


def test_import_aoe_stays_lazy():
    import subprocess
    import sys

    code = "import sys, aoe; print(sorted(m for m in sys.modules if m.startswith('aoe.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/").stdout
    assert "aoe.job" not in out and "aoe.opat" not in out


def test_a_stuck_operator_still_stops_after_the_grace_period(env, monkeypatch):
    import signal as sig

    import aoe.opat as opat

    def stuck(graph, soc, *a, **kw):
        kw["events"].start(2, opat.OpatReport(graph.name, SOC, [op.name for op in graph.ops]))
        while True:          # an operator that never finishes and never polls should_stop
            time.sleep(0.01)

    monkeypatch.setattr(opat, "tune_graph", stuck)
    monkeypatch.setenv("AOE_STOP_GRACE", "0.3")
    threading.Timer(0.3, os.kill, (os.getpid(), sig.SIGTERM)).start()
    t0 = time.time()
    r = aoe.tune("zoo:mobilenet_v2", options=aoe.TuneOptions(workers=1))
    assert time.time() - t0 < 5
    assert r.signal == sig.SIGTERM and r.exit_code == 143 and r.status == "tuning incomplete"
    d = json.loads(r.result_file.read_text())
    validate(d, "opat")
    assert "tuning_time(s)" not in next(iter(d.values()))[0]["basic"]
    assert sig.getsignal(sig.SIGTERM) is sig.SIG_DFL or not callable(sig.getsignal(sig.SIGTERM)) \
        or sig.getsignal(sig.SIGTERM).__name__ != "_handler"


def test_sgat_interrupt_and_reload_restore_the_outcomes(env, monkeypatch):
    import signal as sig

    import aoe.sgat as sgat

    real = sgat.tune_graph

    def ctrl_c_after_three(n):
        if n == 3:
            os.kill(os.getpid(), sig.SIGINT)      # Ctrl-C after the third subgraph

    def interrupted(*a, **kw):
        kw["events"] = Relay(kw["events"], ctrl_c_after_three)
        return real(*a, **kw)

    monkeypatch.setattr(sgat, "tune_graph", interrupted)
    r = aoe.tune("zoo:bert_base", mode="subgraph", soc="Ascend910A")
    assert r.signal == sig.SIGINT and r.exit_code == 130 and r.status == "tuning incomplete"
    d = json.loads(r.result_file.read_text())
    validate(d, "sgat")
    task = next(iter(d.values()))
    assert "tuning_time(s)" not in task[0]["basic"] and task[1]["SGAT"]["repo_summary"]["total_num"] == 3
    monkeypatch.setattr(sgat, "tune_graph", real)
    r2 = aoe.tune("zoo:bert_base", mode="subgraph", soc="Ascend910A", options=aoe.TuneOptions(reload=True))
    assert r2.result_file == r.result_file and r2.status == "tuning successful"
    # uninterrupted, fresh bank, no built-in bank (as the job's environment says)
    ref = real(aoe.graph.load("zoo:bert_base"), "Ascend910A", env / "ref", sgat.SgatConfig(builtin=False))
    assert r2.section == ref.to_result_section()


def test_failed_operators_give_tuning_failed(env, capsys, monkeypatch):
    import aoe.opat.graph_tune as gt

    real = gt.tune_case

    def flaky(case, *a, **kw):
        if case.op_type == "SoftmaxV2":
            raise RuntimeError("kernel compile failed")
        return real(case, *a, **kw)

    monkeypatch.setattr(gt, "tune_case", flaky)
    (env / "aoe.ini").write_text("[tuning]\ntuning_parallel_num = 1\n")
    rc, out, err = cli(capsys, "-m", str(tiny_onnx(env / "tiny.onnx")), "-j", "2")
    assert rc == 1, err
    d = json.loads(only_file(env).read_text())
    validate(d, "opat")
    sec = next(iter(d.values()))[1]["OPAT"]
    assert sec["opat_tuning_result"] == "tuning failed" and sec["tuning_failed_operators"] == ["softmax"]
    assert "1 failed" in out


def test_model_errors_are_clean(env, capsys):
    (env / "broken.onnx").write_bytes(b"not a model")
    for argv, needle in ((["-m", "missing.onnx"], "does not exist"),
                         (["-m", "broken.onnx"], "broken.onnx"),
                         (["-m", "zoo:nope"], "nope"),
                         (["-m", "zoo:mobilenet_v2", "--input_shape", "input:1,x"], "input"),
                         (["-m", "zoo:mobilenet_v2", "-f", "3"], "bundled ONNX model"),
                         (["-m", "zoo:mobilenet_v2", "--device", "9"], "--device"),
                         (["-j", "2"], "no model given")):
        rc, _, err = cli(capsys, *argv, *(["-j", "2"] if "-j" not in argv else []))
        assert rc == 2 and err.startswith("aoe: error:") and needle in err, (argv, err)
    assert not list(env.glob("aoe_result_*"))


def test_json_graph_form(env, capsys):
    g = aoe.graph.load(str(tiny_onnx(env / "tiny.onnx")))
    (env / "tiny.json").write_text(g.to_json())
    rc, _, err = cli(capsys, "-m", "tiny.json", "-f", "json", "-j", "2")
    assert rc == 0, err
    validate(json.loads(only_file(env).read_text()), "opat")


def test_api_needs_no_environment(env, monkeypatch):
    monkeypatch.setenv("REPEAT_TUNE", "garbage")           # ignored with env={}
    monkeypatch.setenv("TUNE_BANK_PATH", "/nonexistent")
    (env / "b").mkdir()
    r = aoe.tune(str(tiny_onnx(env / "t.onnx")), "op", "Ascend910A", bank=env / "b", work_path=env / "w",
                 options=aoe.TuneOptions(budget=2000, lock_dir=env / "l"), env={})
    assert r.status == "tuning successful" and r.result_file.parent == env / "w"
    assert r.bank_dir == env / "b" / "Ascend910A" and (env / "l" / "device0.lock").exists()
    v = aoe.verify(str(env / "t.onnx"), soc="Ascend910A", bank=env / "b", env={})
    assert v.tuned_us < v.default_us


def _stuck_worker(args):          # a worker-process case that never finishes
    while True:
        time.sleep(0.01)


@pytest.mark.skipif(cfg.cpu_count() < 2, reason="needs two CPUs for two worker processes")
def test_stuck_worker_processes_do_not_hang_the_stop(env, monkeypatch):
    import signal as sig

    import aoe.opat.graph_tune as gt

    monkeypatch.setattr(gt, "tune_job", _stuck_worker)
    monkeypatch.setenv("AOE_STOP_GRACE", "0.5")
    (env / "aoe.ini").write_text("inline_cpu_s = 0\n")   # every case goes to the (stuck) workers
    threading.Timer(1.0, os.kill, (os.getpid(), sig.SIGTERM)).start()
    t0 = time.time()
    r = aoe.tune("zoo:mobilenet_v2", options=aoe.TuneOptions(workers=2))
    assert time.time() - t0 < 10
    assert r.exit_code == 143 and r.status == "tuning incomplete"
    import multiprocessing

    time.sleep(0.2)
    assert not multiprocessing.active_children()


def test_result_file_rewrite_reuses_encoded_tasks_byte_for_byte(tmp_path):
    """The final (indented) rewrite after each model keeps earlier tasks' text; the file must stay exactly
    what json.dumps(indent=4) gives, across replaced, added and empty tasks."""
    rf = ResultFile(tmp_path, "opat")
    rf.write()
    assert rf.path.read_text(encoding="utf-8") == "{}\n"
    k1 = rf.new_task()
    rf.set_task(k1, "m1", 1.2, {"a": [1, 2, {"x": "é\n\u2028"}], "b": {}, "c": []})
    rf.write()
    k2 = rf.new_task()
    rf.write(pretty=False)
    rf.write()
    rf.set_task(k2, "m2", None, {"z": 1.5, "nested": {"l": [[], [{}]]}})
    rf.write()
    assert rf.path.read_text(encoding="utf-8") == json.dumps(rf.reports, indent=4, ensure_ascii=False) + "\n"
    rf.set_task(k1, "m1 again", 3, None)  # a replaced task is encoded anew
    rf.write()
    assert rf.path.read_text(encoding="utf-8") == json.dumps(rf.reports, indent=4, ensure_ascii=False) + "\n"
    assert json.loads(rf.path.read_text(encoding="utf-8"))[k1][0]["basic"]["tuning_name"] == "m1 again"


@pytest.mark.parametrize("on_cluster", [False, True])
def test_an_sgat_job_header_says_where_its_searches_run(env, capsys, on_cluster):
    """On a cluster (aoe.batch sets the subgraph executor) SGAT's searches run on its workers: the header
    names them instead of the local device, simulator threads and worker processes."""
    from aoe.sgat.search import search
    from aoe.sgat.tune import subgraph_executor

    class Farm:     # the face aoe.batch's CaseFarm gives SGAT; this one searches here
        searched = 0

        def prepared(self, graph, soc):
            return None

        def search(self, soc, case, method):
            Farm.searched += 1
            return search(case.rd, method)

    token = subgraph_executor.set(Farm() if on_cluster else None)
    try:
        r = aoe.tune("zoo:mobilenet_v2", mode="subgraph", soc="Ascend910A",
                     options=aoe.TuneOptions(lock=False, verbose=True))
    finally:
        subgraph_executor.reset(token)
    out = capsys.readouterr().out
    assert r.status == "tuning successful" and (Farm.searched > 0) == on_cluster
    assert ("subgraph searches run on the Dask cluster's workers" in out) == on_cluster, out
    assert ("device 0 of" in out) != on_cluster, out
    # SGAT uses neither the simulator threads nor worker processes, here or there: the header says what it uses
    assert "worker process(es)" not in out and "simulator thread(s)" not in out, out
    assert ("priced by the Numba-jitted evaluator in this process" in out) != on_cluster, out
