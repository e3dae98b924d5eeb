"""The HTML report (`aoe report`, written by the job) and `aoe explain`.

Reports of the four zoo models (OPAT on Ascend910B2, SGAT on Ascend910A) are written by real jobs
and loaded in headless Chromium (skipped only when no browser is installed): no console error, the
page's own self-test (sorting, filtering) passes, every chart drew. `aoe explain` is checked on
BERT's FFN matmul and ResNet-50's first convolution.
"""
from __future__ import annotations

import builtins
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import import_extra, isolated_environ

pytestmark = pytest.mark.extra("report")
import_extra("report", "matplotlib")

import aoe.graph
from aoe import cli, sgat
from aoe.errors import AoeError
from aoe.job.run import JobSpec, run_job
from aoe.job.settings import settings_from_env
from aoe.opat import apply_bank
from aoe.report import collect, explain_graph_op, explain_recorded, explain_single_op, read_record, \
    repriced_record, write_report
from aoe.report.data import read_result, record_ops, record_subgraphs
from aoe.report.record import record_path
from aoe.soc import load_soc

MODELS = ["resnet50", "bert_base", "mobilenet_v2", "gpt2"]
JOBS = [(m, 2, "Ascend910B2") for m in MODELS] + [(m, 1, "Ascend910A") for m in MODELS]
BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
FFN = "/bert/encoder/layer.0/intermediate/dense/MatMul"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], Any]:
    """One finished job per (model, job type), each with its report written by the job."""
    root = tmp_path_factory.mktemp("report_jobs")
    env = isolated_environ(root)
    out = {}
    for model, mode, soc in JOBS:
        settings = settings_from_env(env, soc=soc, mode=mode, work_path=root, progress=False, lock=False, cwd=root)
        res = run_job(JobSpec(mode=mode, model=f"zoo:{model}", soc=soc), settings, out=None,
                      install_signals=False, report_html=True)
        out[(model, mode)] = (res, settings)
    return out


@pytest.mark.parametrize("model,mode,soc", JOBS, ids=[f"{m}-{'opat' if j == 2 else 'sgat'}" for m, j, _ in JOBS])
def test_the_job_writes_a_self_contained_report(jobs: dict, model: str, mode: int, soc: str) -> None:
    res, _ = jobs[(model, mode)]
    path = res.report_html
    assert path is not None and path == res.result_file.with_suffix(".html")
    assert f"report: {path}" in res.summary_lines()
    text = path.read_text(encoding="utf-8")
    assert path.stat().st_size <= 5 * 1024 * 1024
    # nothing is fetched: no external script, stylesheet, font, image or frame
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", text, re.IGNORECASE)
    assert "<link" not in text and "@import" not in text and "@font-face" not in text
    # an SGAT run tunes fusion plans, not operator strategies: its page has no operator kernels to draw
    charts = ["roofline", "pipes", "waterfall"] if mode == 2 else ["waterfall", "fusion", "subgraph-gains"]
    for name in charts:
        m = re.search(rf'<svg[^>]*data-chart="{name}".*?</svg>', text, re.DOTALL)
        assert m, name
        assert len(re.findall(r"<(path|use)\b", m.group(0))) > 10, name
    n_rows = len(re.findall(r'<tr data-s="', text))
    data = collect(res.result_file)
    if mode == 2:  # the report's whole-model figures are the job's own, bit for bit
        assert n_rows == len(data.ops) > 0
        recs = [r for r in res.report.records if r.default_us is not None and r.after_us is not None]
        assert data.model_default_us == sum(r.default_us for r in recs)
        assert data.model_tuned_us == sum(r.after_us for r in recs) < data.model_default_us
    else:
        assert n_rows == 0 and len(data.subgraphs) == res.report.n_cases
        assert (data.model_default_us, data.model_tuned_us, data.model_unfused_us) == \
            (res.report.model_baseline_us, res.report.model_result_us, res.report.model_unfused_us)


@pytest.mark.skipif(BROWSER is None, reason="no headless browser installed (apt-get install chromium)")
@pytest.mark.parametrize("model,mode,soc", JOBS, ids=[f"{m}-{'opat' if j == 2 else 'sgat'}" for m, j, _ in JOBS])
def test_the_report_renders_in_a_real_browser(jobs: dict, model: str, mode: int, soc: str, tmp_path: Path) -> None:
    res, _ = jobs[(model, mode)]
    proc = subprocess.run(
        [BROWSER, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run", "--enable-logging=stderr",
         "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--window-size=1300,900", "--dump-dom",
         res.report_html.resolve().as_uri() + "#selftest"],
        capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [ln for ln in proc.stderr.splitlines() if "CONSOLE" in ln]
    assert console == []
    m = re.search(r'<pre id="js-status"[^>]*data-done="1"[^>]*>(.*?)</pre>', proc.stdout, re.DOTALL)
    assert m, "the page's script did not run to its end"
    status = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert status["errors"] == []
    if mode == 2:   # an SGAT page has no operator table to sort and filter
        assert status["sorted_desc"] is True
        assert status["filter_none"] == 0 and 1 <= status["filter_first"] <= status["rows"]
    expected = ["roofline", "pipes", "waterfall"] if mode == 2 else ["waterfall", "fusion", "subgraph-gains"]
    assert sorted(status["charts"]) == sorted(expected)
    for name, c in status["charts"].items():  # laid out with a size, and drawn
        assert c["w"] > 300 and c["h"] > 150 and c["paths"] > 10 and c["texts"] > 3, (name, c)


def test_repricing_agrees_with_the_apply_rooms(jobs: dict) -> None:
    """A result file without a record is re-priced (`repriced_record`) exactly as `aoe verify` prices."""
    _, settings = jobs[("mobilenet_v2", 2)]
    g = aoe.graph.load("zoo:mobilenet_v2")
    soc = load_soc("Ascend910B2")
    rows, cases = record_ops(repriced_record(g, soc, "opat", op_bank_dir=settings.op_bank_dir))
    ref, _ = apply_bank(g, soc, settings.op_bank_dir)
    assert [(r.name, r.default_us, r.tuned_us, r.source) for r in rows] == \
        [(o.op_name, o.default_us, o.tuned_us, o.source) for o in ref]
    assert sum(c.count for c in cases) == len(rows)
    _, settings1 = jobs[("mobilenet_v2", 1)]
    soc_a = load_soc("Ascend910A")
    rec = repriced_record(g, soc_a, "sgat", subgraph_bank_dir=settings1.subgraph_bank_dir)
    views, tuned = record_subgraphs(rec, set())
    t = sgat.apply_bank(g, soc_a, settings1.subgraph_bank_dir)
    assert (rec.baseline_us / 1000, tuned / 1000, rec.unfused_us / 1000) == pytest.approx(tuple(t), rel=1e-9)
    assert any(v.gain_us > 0 and len(v.tuned_groups) != len(v.default_groups) for v in views)


def test_a_result_file_of_another_model_or_no_result_file_is_refused(jobs: dict, tmp_path: Path) -> None:
    res, settings = jobs[("resnet50", 2)]
    old = tmp_path / "old.json"          # a result file an older aoe wrote: no record beside it
    old.write_bytes(res.result_file.read_bytes())
    assert cli.main(["report", str(old), "-m", "zoo:mobilenet_v2", "-o", str(tmp_path / "x.html")]) == 2
    with pytest.raises(AoeError, match="pass -m MODEL"):
        collect(old)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(AoeError, match="not a readable JSON"):
        read_result(bad)
    with pytest.raises(AoeError, match="not a regular file"):
        read_result(tmp_path)
    with pytest.raises(AoeError, match="no task"):
        read_result(res.result_file, task="report_nope")


def test_aoe_report_cli_writes_the_page(jobs: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    res, settings = jobs[("mobilenet_v2", 1)]
    out = tmp_path / "r.html"
    bank = str(settings.subgraph_bank_dir)
    assert cli.main(["report", str(res.result_file), "--bank", str(settings.work_path), "-o", str(out)]) == 0
    assert f"report: {out}" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    assert 'data-chart="fusion"' in page and "bank view (--bank" in page
    # a result file without a record is re-priced with -m: SGAT results need an SGAT SoC, the error says which
    old = tmp_path / "old_sgat.json"
    old.write_bytes(res.result_file.read_bytes())
    assert cli.main(["report", str(old), "-m", "zoo:mobilenet_v2", "--soc_version", "Ascend910A",
                     "--bank", bank, "-o", str(out)]) == 0
    assert cli.main(["report", str(old), "-m", "zoo:mobilenet_v2", "-o", str(out)]) == 2
    assert "not supported on Ascend910B2" in capsys.readouterr().err


def test_report_on_without_the_extra_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    real = builtins.__import__

    def no_mpl(name: str, *a: Any, **k: Any) -> Any:
        if name.split(".")[0] == "matplotlib":
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_mpl)
    for k, v in isolated_environ(tmp_path).items():
        monkeypatch.setenv(k, v)
    code = cli.main(["-m", "zoo:mobilenet_v2", "-j", "2", "--report", "on", "--work_path", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "aoe[report]" in err
    assert not list(tmp_path.glob("aoe_result_*"))  # refused before tuning anything
    from aoe.report import report_available

    assert report_available() is False


# --- aoe explain ------------------------------------------------------------------------------------

WEIGHT = {"█": 1.0, "▓": 0.75, "▒": 0.5, "░": 0.25, " ": 0.0}


def _rows(lines: list[str], which: str) -> dict[str, tuple[float, bool]]:
    """Filled cells and bound mark of each pipe row of one timeline in the text Gantt."""
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{which}:"))
    out = {}
    for ln in lines[start + 1:start + 8]:
        name, bar = ln.split("|")[0].strip(), ln.split("|")[1]
        out[name] = (sum(WEIGHT[c] for c in bar), ln.endswith("◀ bound"))
    return out


@pytest.mark.parametrize("model,name,shape", [("bert_base", FFN, "input_ids:8,128;attention_mask:8,128"),
                                              ("resnet50", "/conv1/Conv", None)])
def test_explain_shows_the_bound_pipe_and_what_changed(model: str, name: str, shape: str | None) -> None:
    exp = explain_graph_op(aoe.graph.load(f"zoo:{model}", shape), name, load_soc("Ascend910B2"), None, budget=2000)
    d, t = exp.default.kernel, exp.tuned.kernel
    assert t.time_us < d.time_us                      # tuning found a faster strategy
    width = 64
    lines = exp.gantt_lines(width)
    span = max(d.time_us, t.time_us)
    slack = 16 * 0.25 + 2                              # rounding of 16 slices into text cells
    for which, k in (("default", d), ("tuned", t)):
        rows = _rows(lines, which)
        bound = [p for p, (_, b) in rows.items() if b]
        assert bound == [k.bound]                      # the Gantt marks the bound pipe ...
        # ... and it is the fullest row; every row's length is its busy time
        assert rows[k.bound][0] == max(v for p, (v, _) in rows.items() if p != "Overhead") or k.bound == "Overhead"
        for p, (cells, _) in rows.items():
            assert cells == pytest.approx(k.busy_us[p] / span * width, abs=slack), p
        tl = (exp.default if which == "default" else exp.tuned).timeline()
        for p, segs in tl.items():
            assert sum(s for _, s in segs) == pytest.approx(min(k.busy_us[p], k.time_us), rel=1e-9)
            assert all(0 <= a and a + s <= k.time_us + 1e-9 for a, s in segs)
    # the tuned timeline differs from the default's exactly where the pipes' busy times say so
    rd, rt = _rows(lines, "default"), _rows(lines, "tuned")
    for p in rd:
        delta = (t.busy_us[p] - d.busy_us[p]) / span * width
        if abs(delta) > 2 * slack:
            assert (rt[p][0] - rd[p][0]) * delta > 0, p
        elif d.busy_us[p] == t.busy_us[p]:
            assert rt[p][0] == pytest.approx(rd[p][0], abs=2 * slack), p
    # one sentence per changed field, with simulated numbers
    changed = [f for f, a, b in exp.fields if a != b]
    reasons = exp.reasons
    if exp.default.sim_op != exp.tuned.sim_op:     # another kernel: its own sentence first
        assert reasons[0].startswith(f"kernel default→{t.label}") and "µs" in reasons[0]
        reasons = reasons[1:]
        if set(d.strategy) != set(t.strategy):
            assert reasons == []
            return
        base = exp.reasons[0]  # the fields are then explained against the new kernel at the default tiling
        changed = [f for f in changed if f in t.strategy] if "its own default" in base else changed
    assert reasons
    for r in reasons:  # one sentence per changed field, in field order, with simulated numbers
        f = r.split(" ", 1)[0]
        assert f in changed
        assert "µs" in r or "only valid together" in r or "a tie the search kept" in r
    text = "\n".join(exp.lines())
    assert "why:" in text and f"bound by {t.bound}" in text


def test_explain_uses_the_bank_and_agrees_with_the_report(jobs: dict) -> None:
    res, settings = jobs[("resnet50", 2)]
    g = aoe.graph.load("zoo:resnet50")
    exp = explain_graph_op(g, "/conv1/Conv", load_soc("Ascend910B2"), settings.op_bank_dir)
    rows, _ = record_ops(read_record(record_path(res.result_file)))
    row = next(r for r in rows if r.name == "/conv1/Conv")
    # the job tuned it ("this run" in its record); the bank now holds that strategy in the custom bank
    assert row.source == "this run" and exp.tuned.source == "custom bank"
    assert exp.tuned.total_us == pytest.approx(row.tuned_us, rel=1e-12)
    assert exp.default.total_us == pytest.approx(row.default_us, rel=1e-12)
    # from the record alone: the job's own figures, bit for bit
    rec = explain_recorded(read_record(record_path(res.result_file)), "/conv1/Conv")
    assert (rec.default.total_us, rec.tuned.total_us) == (row.default_us, row.tuned_us)
    assert rec.tuned.kernel.strategy == exp.tuned.kernel.strategy and rec.reasons == exp.reasons


def test_explain_cli_single_op_json_and_timeline_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    svg, png = tmp_path / "t.svg", tmp_path / "t.png"
    args = ["explain", "MatMulV2", "--shape", "4096,1024", "--shape", "1024,4096", "--budget", "1000"]
    assert cli.main(args + ["--json", "-o", str(svg)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tuned"]["time_us"] < d["default"]["time_us"] and set(d["default"]["timeline"]) >= {"MTE2", "Cube"}
    assert "◀ bound" in svg.read_text(encoding="utf-8")
    assert cli.main(args + ["-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "◀ bound" in out and "why:" in out
    exp = explain_single_op("SoftmaxV2", [[64, 128, 128]], load_soc("Ascend910A"), budget=500)
    assert exp.op_type == "SoftmaxV2" and exp.reasons


def test_explain_errors_say_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    g = aoe.graph.load("zoo:resnet50")
    with pytest.raises(AoeError, match="no operator"):
        explain_graph_op(g, "/no/such/op", load_soc("Ascend910B2"))
    with pytest.raises(AoeError, match="matches .* operators"):
        explain_graph_op(g, "Conv", load_soc("Ascend910B2"))
    assert cli.main(["explain", "MatMulV2"]) == 2
    assert "--shape" in capsys.readouterr().err
    assert cli.main(["explain", "MatMulV2", "--shape", "64,64", "--shape", "64,64", "-o", "x.txt"]) == 2
    assert ".svg or .png" in capsys.readouterr().err


def test_a_result_file_with_several_tasks_gets_one_report_per_task(jobs: dict, tmp_path: Path) -> None:
    res, settings = jobs[("mobilenet_v2", 2)]
    doc = json.loads(res.result_file.read_text())
    (key, parts), = doc.items()
    two = tmp_path / "aoe_result_opat_1_pid1.json"
    two.write_text(json.dumps({key: parts, key + "b": parts}))
    g = aoe.graph.load("zoo:mobilenet_v2")
    p = write_report(two, task=key, record=repriced_record(g, load_soc("Ascend910B2"), "opat",
                                                          op_bank_dir=settings.op_bank_dir, task=key))
    assert p == tmp_path / f"aoe_result_opat_1_pid1.{key}.html" and p.is_file()
