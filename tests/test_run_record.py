"""The run's record beside each result file, and the readers that read it (issue 28; issue 26 item 6).

`aoe report RESULT.json` with no other argument shows the job's own figures, bit for bit (also after
the work directory moved: the record holds the SoC and the kernels by value); `aoe explain --result`
reads the same record; `aoe verify --result` re-prices and says where and why it differs; a result
file without a record gets one line naming -m; a damaged record is an AoeError. The SoC is resolved
from its name only in the door modules. Hits are split into built-in / custom / this run.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import frontend_options, import_extra, isolated_environ

import aoe
import aoe.tuning
from aoe import cli
from aoe.errors import AoeError
from aoe.job.result import ResultFile
from aoe.job.run import JobSpec, run_job
from aoe.job.settings import settings_from_env
from aoe.report.record import read_record, record_path

ROOT = Path(aoe.__file__).parent
BUDGET = 300

# the modules where a SoC named by the user becomes a value (aoe/soc/README.md, "Doors")
DOORS = {"job/settings.py", "job/api.py", "report/cli.py", "sim/cli.py", "sim/__init__.py", "opat/__init__.py",
         "sgat/__init__.py", "batch/listfile.py", "benchmark/harness.py", "calibration/match.py"}


def _job(root: Path, model: str, mode: int, soc: str, *, env: dict[str, str] | None = None,
         result_file: ResultFile | None = None, graph: Any = None, **spec: Any) -> Any:
    root.mkdir(parents=True, exist_ok=True)
    env = env if env is not None else isolated_environ(root)
    settings = settings_from_env(env, soc=soc, mode=mode, work_path=root / "wp", budget=BUDGET, progress=False,
                                 lock=False, cwd=root)
    return run_job(JobSpec(mode=mode, model=model, soc=soc, graph=graph, **spec), settings, out=None,
                   install_signals=False, result_file=result_file)


def _job_figures(res: Any) -> tuple[float, float, float | None]:
    """The job's whole-model figures as its own report objects hold them."""
    if res.kind == "opat":
        recs = [r for r in res.report.records if r.default_us is not None and r.after_us is not None]
        return sum(r.default_us for r in recs), sum(r.after_us for r in recs), None
    r = res.report
    return r.model_baseline_us, r.model_result_us, r.model_unfused_us


def _page_equals_job(res: Any, result_file: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """`aoe report RESULT.json` alone: the page's figures are the job's, bit for bit."""
    from aoe.report import collect

    out = result_file.with_name("page.html")
    assert cli.main(["report", str(result_file), "-o", str(out)]) == 0, capsys.readouterr().err
    data = collect(result_file)
    default, tuned, unfused = _job_figures(res)
    assert (data.model_default_us, data.model_tuned_us) == (default, tuned)
    if unfused is not None:
        assert data.model_unfused_us == unfused
    if res.kind == "opat":
        rows = {r.name: (r.default_us, r.tuned_us) for r in data.ops}
        assert rows == {r.op_name: (r.default_us, r.after_us) for r in res.report.records
                        if r.default_us is not None and r.after_us is not None}
    else:
        assert {s.key: s.tuned_us for s in data.subgraphs} == {r.repo_key: r.after_us for r in res.report.records}
    page = out.read_text(encoding="utf-8")
    for us in (default, tuned):
        assert f"{us / 1000:.3f} ms" in page
    from aoe.soc import load_soc

    assert data.improvement in page and data.soc.to_dict() == load_soc(data.soc.name).to_dict()   # by value
    return out


pytestmark = pytest.mark.extra("report")
import_extra("report", "matplotlib")


@pytest.mark.parametrize("mode,soc", [(2, "Ascend910B2"), (1, "Ascend910A")], ids=["opat", "sgat"])
def test_report_of_a_zoo_job_needs_only_the_result_file_and_survives_a_move(
        tmp_path: Path, mode: int, soc: str, capsys: pytest.CaptureFixture[str]) -> None:
    res = _job(tmp_path / "a", "zoo:mobilenet_v2", mode, soc)
    rp = record_path(res.result_file)
    assert rp.is_file() and rp.name == res.result_file.stem + ".records.jsonl"
    json.loads(res.result_file.read_text())                       # the product's file, unchanged in form
    _page_equals_job(res, res.result_file, capsys)
    # the whole work directory (result, record, bank) moves elsewhere: the page is the same
    moved = tmp_path / "elsewhere"
    shutil.move(str(tmp_path / "a"), str(moved))
    _page_equals_job(res, moved / "wp" / res.result_file.name, capsys)
    # --bank only adds that bank's view of the run's cases; the figures stay the record's
    page = moved / "bank.html"
    assert cli.main(["report", str(moved / "wp" / res.result_file.name), "--bank", str(moved / "bank"),
                     "-o", str(page)]) == 0
    n = res.report.counters.repo_add_num
    what = "operator bank" if mode == 2 else "subgraph bank"
    assert re.search(rf"that {what} holds {n} of the run", page.read_text(encoding="utf-8"))
    # and `aoe explain --result` reads the same record (OPAT)
    if mode == 2:
        name = next(r.op_name for r in res.report.records if r.default_us is not None)
        capsys.readouterr()
        assert cli.main(["explain", name, "--result", str(moved / "wp" / res.result_file.name), "--json"]) == 0
        exp = json.loads(capsys.readouterr().out)
        rec = next(r for r in res.report.records if r.op_name == name)
        assert (exp["default"]["total_us"], exp["tuned"]["total_us"]) == (rec.default_us, rec.after_us)


def _onnx_file(path: Path) -> Path:
    onnx = import_extra("onnx", "onnx")
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np

    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.random((16, 8, 3, 3), dtype=np.float32), "w1")
    w2 = numpy_helper.from_array(rng.random((16 * 14 * 14, 64), dtype=np.float32), "w2")
    shape = numpy_helper.from_array(np.array([8, -1], dtype=np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], name="conv", pads=[0, 0, 0, 0]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "w2"], ["m"], name="fc"),
             helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=-1)]
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 64])], [w1, w2, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize("mode,soc", [(2, "Ascend910B2"), (1, "Ascend910A")], ids=["opat", "sgat"])
def test_report_of_an_onnx_file_job_needs_only_the_result_file(tmp_path: Path, mode: int, soc: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    model = _onnx_file(tmp_path / "small.onnx")
    res = _job(tmp_path, str(model), mode, soc, training=True)
    head = json.loads(record_path(res.result_file).read_text().splitlines()[0])
    assert head["model"]["path"] == str(model) and head["model"]["training"] is True
    assert head["soc"]["name"] == soc and len(head["soc"]["ini_sha256"]) == 64
    os.unlink(model)                                             # the model is not needed any more
    _page_equals_job(res, res.result_file, capsys)


@pytest.mark.extra("tensorflow")
def test_report_of_a_tf_saved_model_job(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import_extra("tensorflow", "tensorflow")
    from test_frontend_tf import small_model

    small_model().export(str(tmp_path / "sm"), verbose=False)
    res = _job(tmp_path, str(tmp_path / "sm"), 2, "Ascend910B2", framework="3", input_shape="image:2,16,16,3")
    shutil.rmtree(tmp_path / "sm")
    _page_equals_job(res, res.result_file, capsys)


@pytest.mark.extra("torch")
def test_report_of_a_torch_compile_run_and_this_run_hits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = import_extra("torch", "torch")
    import aoe.torch

    be = aoe.torch.backend(mode="op", **frontend_options(tmp_path, BUDGET, env={"AOE_BUILTIN_BANK": "off"}))
    torch._dynamo.reset()
    try:
        # square layers without bias: the backward graph's grad-input matmul is the forward's case
        model = torch.nn.Sequential(torch.nn.Linear(256, 256, bias=False), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 256, bias=False))
        torch.compile(model, backend=be)(torch.randn(64, 256)).sum().backward()
    finally:
        torch._dynamo.reset()
    rf = be.result_file
    tasks = json.loads(rf.read_text())
    assert len(tasks) == 2                                       # the forward and the backward graph
    for key in tasks:
        rec = read_record(record_path(rf), key)
        assert rec.kind == "opat" and rec.cases
    fwd, bwd = (read_record(record_path(rf), k) for k in tasks)
    # the backward graph's matmuls hit what its forward graph added a moment earlier: "this run"
    assert bwd.hits["this run"] > 0 and bwd.hits["builtin"] == bwd.hits["custom"] == 0
    from aoe.report import collect

    for key in tasks:
        data = collect(rf, task=key)
        assert data.model_default_us > 0 and data.hits == read_record(record_path(rf), key).hits
    assert cli.main(["report", str(rf)]) == 0


class _StopAfter(aoe.tuning.Events):
    """The job's events, passed through, with a stop after `n` cases (an interrupt at a known point)."""

    def __init__(self, inner: Any, n: int) -> None:
        self.inner, self.n, self.detail = inner, n, inner.detail

    def start(self, n_cases: int, report: Any) -> None:
        self.inner.start(n_cases, report)

    def case_done(self, records: Any, hit: bool) -> None:
        self.n -= 1
        self.inner.case_done(records, hit)

    def should_stop(self) -> bool:
        return self.n <= 0 or self.inner.should_stop()


@pytest.mark.parametrize("mode,soc", [(2, "Ascend910B2"), (1, "Ascend910A")], ids=["opat", "sgat"])
def test_an_interrupted_job_resumed_with_reload_reports_the_job_figures(
        tmp_path: Path, mode: int, soc: str, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import aoe.opat
    import aoe.sgat

    pkg = aoe.opat if mode == 2 else aoe.sgat
    real = pkg.tune_graph
    monkeypatch.setattr(pkg, "tune_graph", lambda *a, **kw: real(*a, **dict(kw, events=_StopAfter(kw["events"], 4))))
    env = isolated_environ(tmp_path)
    first = _job(tmp_path, "zoo:mobilenet_v2", mode, soc, env=env)
    assert first.status == "tuning incomplete"
    monkeypatch.setattr(pkg, "tune_graph", real)
    settings = settings_from_env(env, soc=soc, mode=mode, work_path=tmp_path / "wp", budget=BUDGET, progress=False,
                                 lock=False, cwd=tmp_path, reload=True)
    res = run_job(JobSpec(mode=mode, model="zoo:mobilenet_v2", soc=soc), settings, out=None, install_signals=False)
    assert res.result_file == first.result_file and res.status == "tuning successful"
    _page_equals_job(res, res.result_file, capsys)


def test_a_result_file_without_a_record_gets_one_line_naming_m(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    res = _job(tmp_path, "zoo:mobilenet_v2", 2, "Ascend910B2")
    os.unlink(record_path(res.result_file))
    assert cli.main(["report", str(res.result_file)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pass -m MODEL" in err[0] and "Traceback" not in err[0]
    # the old route still works for such files: the model given again, re-priced under the banks
    assert cli.main(["report", str(res.result_file), "-m", "zoo:mobilenet_v2", "--bank", str(tmp_path / "bank"),
                     "-o", str(tmp_path / "old.html")]) == 0
    assert (tmp_path / "old.html").is_file()


def test_verify_says_where_and_why_it_differs_from_the_record(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    env = isolated_environ(tmp_path)
    env.pop("AOE_BUILTIN_BANK")                                  # the run uses the built-in bank
    res = _job(tmp_path, "zoo:mobilenet_v2", 2, "Ascend910B2", env=env)
    args = ["verify", "-m", "zoo:mobilenet_v2", "--tune_bank_path", str(tmp_path / "bank"), "--result",
            str(res.result_file), "--top", "0"]
    assert cli.main(args) == 0
    assert "every operator's figures equal the record's" in capsys.readouterr().out
    assert cli.main(args + ["--no_builtin"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\d+ operators differ", out) and "the run had the built-in bank on" in out


def test_hits_are_split_by_origin_and_repeat_tune_is_said_plainly(tmp_path: Path) -> None:
    env = isolated_environ(tmp_path)
    first = _job(tmp_path, "zoo:mobilenet_v2", 2, "Ascend910B2", env=env)
    assert first.report.counters.repo_add_num > 0 and first.hits == {"builtin": 0, "custom": 0, "this run": 0}
    second = _job(tmp_path, "zoo:mobilenet_v2", 2, "Ascend910B2", env=env)
    c = second.report.counters
    assert second.hits["custom"] == c.repo_hit_num > 0 and second.hits["builtin"] == 0
    text = "\n".join(second.summary_lines())
    assert f"hits {c.repo_hit_num} (built-in 0, custom {c.repo_hit_num}, this run 0; updated" in text
    # every case re-tuned: the summary says so instead of leaving "added 0, hits N" unexplained
    again = _job(tmp_path, "zoo:mobilenet_v2", 2, "Ascend910B2", env=dict(env, REPEAT_TUNE="True"))
    text = "\n".join(again.summary_lines())
    ca = again.report.counters
    assert f"every one tuned again (REPEAT_TUNE): {ca.repo_hit_num} were in a bank" in text
    assert f"added {ca.repo_add_num}, hits" not in text
    # the record carries each case's provenance; the result file's counters stay the product's
    rec = read_record(record_path(second.result_file))
    assert {line["provenance"] for line in rec.cases.values() if line["outcome"] in ("update", "reserved")} == \
        {"custom"}
    assert json.loads(second.result_file.read_text()).popitem()[1][1]["OPAT"]["repo_summary"] == c.to_dict()


def test_two_tasks_of_one_result_file_are_one_run(tmp_path: Path) -> None:
    """A second graph tuned into the same result file (as a torch backward graph is) hits "this run"."""
    env = isolated_environ(tmp_path)
    (tmp_path / "wp").mkdir()
    rf = ResultFile(tmp_path / "wp", "opat")
    a = _job(tmp_path, "zoo:mobilenet_v2", 2, "Ascend910B2", env=env, result_file=rf)
    b = _job(tmp_path, "zoo:mobilenet_v2", 2, "Ascend910B2", env=env, result_file=rf)
    assert a.report.counters.repo_add_num > 0
    assert b.hits["this run"] == b.report.counters.repo_hit_num > 0 and b.hits["custom"] == 0
    assert "hits are on entries an earlier graph of this run added" in "\n".join(b.summary_lines())


def test_all_built_in_gains_are_said_so(tmp_path: Path) -> None:
    env = isolated_environ(tmp_path)
    env.pop("AOE_BUILTIN_BANK")
    res = _job(tmp_path, "zoo:mobilenet_v2", 2, "Ascend910B2", env=env)
    if res.report.counters.repo_add_num or res.report.counters.repo_update_num:
        pytest.skip("this budget found a gain over the built-in bank: nothing to check")
    text = "\n".join(res.summary_lines())
    assert "(0.00% faster)" not in text
    assert "this run's tuning gained nothing" in text and f"(built-in {res.hits['builtin']}, custom 0" in text
    from aoe.report import collect

    assert any("every gain on this page comes from bank hits (builtin)" in n for n in collect(res.result_file).notes)


# --- the record is untrusted input -------------------------------------------------------------

def _recorded(tmp_path: Path) -> Path:
    res = _job(tmp_path, "zoo:mobilenet_v2", 2, "Ascend910B2")
    return res.result_file


@pytest.mark.parametrize("damage,message", [
    (lambda lines: lines[:1] + ["{not json\n"] + lines[1:], "not valid JSON"),
    (lambda lines: lines[:1] + ['{"t": "case", "task": "%TASK%", "case": 1}\n'] + lines[1:], "damaged"),
    (lambda lines: [lines[0].replace('"cube_cores":24', '"cube_cores":"24"')] + lines[1:], "wrong type"),
    (lambda lines: [lines[0].replace('"cube_cores":24', '"cube_cores":1' + '0' * 30)] + lines[1:], "digits"),
    (lambda lines: lines[:1] + ['[' * 100000 + ']' * 100000 + "\n"] + lines[1:], "nested"),
    (lambda lines: lines[:1] + ['{"t": "other"}\n'] + lines[1:], "not a record line"),
], ids=["json", "field", "soc-type", "huge-int", "deep", "unknown-line"])
def test_a_damaged_record_is_one_aoe_error(tmp_path: Path, damage: Any, message: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    rf = _recorded(tmp_path)
    rp = record_path(rf)
    lines = rp.read_text().splitlines(keepends=True)
    task = json.loads(lines[0])["task"]
    rp.write_text("".join(damage(lines)).replace("%TASK%", task))
    with pytest.raises(AoeError, match=message):
        read_record(rp)
    assert cli.main(["report", str(rf)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_cut_last_line_is_skipped_and_a_fifo_refused(tmp_path: Path) -> None:
    rf = _recorded(tmp_path)
    rp = record_path(rf)
    whole = read_record(rp)
    rp.write_bytes(rp.read_bytes() + b'{"t": "case", "task": "x", "ca')       # a killed job's last write
    assert read_record(rp).cases.keys() == whole.cases.keys()
    os.unlink(rp)
    os.mkfifo(rp)
    with pytest.raises(AoeError, match="regular file"):
        read_record(rp)


# --- one SoC value --------------------------------------------------------------------------------

def test_load_soc_by_name_is_called_only_at_the_doors() -> None:
    """`grep -rn "load_soc(" aoe/ | grep -v "aoe/soc/"` lists only door modules, and the README names them."""
    found = set()
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("soc/"):
            continue
        if "load_soc(" in path.read_text(encoding="utf-8"):
            found.add(rel)
    assert found <= DOORS, f"load_soc outside the doors: {sorted(found - DOORS)}"
    for rel in ("job/run.py", "job/verification.py", "report/data.py", "report/explain.py", "sim/heuristics.py",
                "opat/graph_tune.py", "opat/tune.py", "opat/apply.py", "sgat/tune.py"):
        assert rel not in found
    readme = (ROOT / "soc" / "README.md").read_text(encoding="utf-8")
    for rel in DOORS:
        assert f"aoe/{rel}" in readme, rel


def test_inside_the_doors_a_soc_name_is_refused_with_what_to_do() -> None:
    import aoe.graph
    from aoe.opat.graph_tune import tune_graph
    from aoe.job.verification import verify_graph

    g = aoe.graph.load("zoo:mobilenet_v2")
    for call in (lambda: tune_graph(g, "Ascend910B2"), lambda: verify_graph(g, "Ascend910B2")):
        with pytest.raises(AoeError, match="takes a Soc value.*load_soc"):
            call()


def test_a_summary_whose_gains_are_all_the_banks_says_so() -> None:
    """Only bank hits (no case tuned better): not "X -> X (0.00% faster)" but where the gain came from."""
    from aoe.job.progress import hit_lines, opat_summary
    from aoe.opat.report import OpRecord
    from aoe.tuning import Counters, Outcome

    c = Counters()
    c.record(Outcome.RESERVED)
    hit = OpRecord("conv", "Conv2D", "reserved", 80.0, 80.0, default_us=100.0, source="builtin")
    report = type("R", (), {"records": [hit], "skipped": [], "failed": [], "counters": c})()
    text = "\n".join(opat_summary(report, hits={"builtin": 1, "custom": 0, "this run": 0})
                     + hit_lines(report, {"builtin": 1, "custom": 0, "this run": 0}, "opat"))
    assert "0.00% faster" not in text and "80.000 us -> 80.000 us" not in text
    assert "this run's tuning gained nothing over the strategies in use (80.000 us)" in text
    assert "100.000 us -> 80.000 us over CANN's defaults (25.00% faster)" in text
    assert "hits 1 (built-in 1, custom 0, this run 0; updated 0, reserved 1)" in text


def test_a_recurrent_kernel_descriptor_round_trips_through_the_record() -> None:
    """A recurrent kernel (its gate math nested as vector descriptors) is written as plain JSON and read back."""
    from aoe import sim
    from aoe.opat.detail import kernel_detail, op_from_dict, op_to_dict
    from aoe.soc import load_soc

    gates = (sim.VectorOp("Sigmoid", (8, 96), dtype="float16"), sim.VectorOp("Tanh", (8, 32), dtype="float16"))
    op = sim.RecurrentMatMul(m=8, n=128, k=64, dtype="float16", op_type="MatMulV2", steps=5, step_ops=gates)
    d = json.loads(json.dumps(op_to_dict(op)))
    assert op_from_dict(d) == op
    detail = kernel_detail(load_soc("Ascend910B2"), op, None, "default")
    assert detail["time_us"] > 0 and json.dumps(detail)
    bad = dict(d, step_ops=[op_to_dict(sim.MatMul(m=8, n=8, k=8))])
    with pytest.raises(AoeError, match="VectorOp"):
        op_from_dict(bad)
    with pytest.raises(AoeError, match="at most"):
        op_from_dict(dict(d, step_ops=[d["step_ops"][0]] * 65))
