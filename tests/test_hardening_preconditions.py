"""The product's preconditions: no tuning in a multi-device launch, warnings that say what to change."""
from __future__ import annotations

import dataclasses

import pytest

import aoe
from aoe.errors import AoeError
from aoe.job import settings as st
from aoe.job.settings import settings_from_env
from aoe.soc import load_soc


@pytest.mark.parametrize("var,value", [("RANK_SIZE", "8"), ("RANK_TABLE_FILE", "/etc/hccl.json")])
def test_multi_device_launch_is_refused(env, var, value):
    with pytest.raises(AoeError, match=var):
        settings_from_env({"TUNE_BANK_PATH": str(env / "bank"), var: value}, cwd=env)
    with pytest.raises(AoeError, match=var):
        aoe.tune("zoo:mobilenet_v2", env={var: value, "TUNE_BANK_PATH": str(env / "bank")})
    settings_from_env({"TUNE_BANK_PATH": str(env / "bank"), "RANK_SIZE": "1"}, cwd=env)  # one device: fine


def test_tuning_parallel_num_in_the_environment_says_where_it_belongs(env):
    s = settings_from_env({"TUNE_BANK_PATH": str(env / "bank"), "TUNING_PARALLEL_NUM": "2"}, cwd=env, warn=None)
    assert any("belongs in the config file" in n for n in s.notes)


def test_work_path_argument_over_environment_is_said(env):
    s = settings_from_env({"TUNE_BANK_PATH": str(env / "bank"), "ASCEND_WORK_PATH": str(env / "a")}, cwd=env,
                          work_path=env / "b", warn=None)
    assert s.work_path == env / "b" and any("ASCEND_WORK_PATH" in n for n in s.notes)


def test_low_disk_in_home_and_memory_warn(env, monkeypatch):
    monkeypatch.setattr(st, "MIN_FREE_HOME", 1 << 62)
    notes = st.resource_notes({"HOME": str(env)}, 2, 2)
    assert any("free in the home directory" in n and "TUNE_BANK_PATH" in n for n in notes)
    monkeypatch.setattr(st, "_mem_available", lambda: 1 << 30)
    assert "tuning_parallel_num" in st.memory_note(600 << 20, 2)
    assert st.memory_note(100 << 20, 2) is None


def test_sgat_refused_by_characteristics_not_name(tmp_path):
    from aoe.sgat import check_soc

    a2 = load_soc("Ascend910B2")
    renamed = dataclasses.replace(a2, name="MyChip1")
    with pytest.raises(AoeError, match="cube_vector_split"):
        check_soc(renamed)
    check_soc(load_soc("Ascend910A"))   # coupled cores: subgraph tuning is fine


def test_cpu_checks_name_what_to_change(env, monkeypatch):
    from aoe.job import config as cfg

    monkeypatch.setattr(cfg, "cpu_count", lambda: 2)
    (env / "aoe.ini").write_text("[tuning]\ntuning_parallel_num = 6\n")
    s = settings_from_env({"TUNE_BANK_PATH": str(env / "bank")}, cwd=env, warn=None)
    assert s.workers == 2
    assert any("tuning_parallel_num = 6" in n and "set tuning_parallel_num to 2" in n for n in s.notes)
    (env / "aoe.ini").unlink()
    quiet = settings_from_env({"TUNE_BANK_PATH": str(env / "bank")}, cwd=env, warn=None)  # the default 8: capped quietly
    assert quiet.workers == 2 and not any("tuning_parallel_num" in n for n in quiet.notes)
    monkeypatch.setattr(cfg, "cpu_count", lambda: 1)
    one = settings_from_env({"TUNE_BANK_PATH": str(env / "bank")}, cwd=env, mode=1, soc="Ascend910A", warn=None)
    assert any("subgraph tuning" in n and "at least 2 CPUs" in n for n in one.notes)
