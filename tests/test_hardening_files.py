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
from aoe.job.run import JobSpec, task_name
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
