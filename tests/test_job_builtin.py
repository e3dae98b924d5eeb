"""The job's built-in bank switch: on by default, off by the environment, the CLI or TuneOptions."""
from __future__ import annotations

import pytest

import aoe
from aoe.errors import AoeError
from aoe.job.settings import settings_from_env


def test_the_switch_reads_the_environment_and_explicit_values(tmp_path):
    base = {"TUNE_BANK_PATH": str(tmp_path)}
    assert settings_from_env(base, cwd=tmp_path).builtin is True
    assert settings_from_env(dict(base, AOE_BUILTIN_BANK="off"), cwd=tmp_path).builtin is False
    assert settings_from_env(dict(base, AOE_BUILTIN_BANK="off"), builtin=True, cwd=tmp_path).builtin is True
    with pytest.raises(AoeError, match="AOE_BUILTIN_BANK"):
        settings_from_env(dict(base, AOE_BUILTIN_BANK="maybe"), cwd=tmp_path)


def test_builtin_hits_on_a_fresh_custom_bank_and_none_when_off(tmp_path):
    """The shipped bank holds the zoo's cases: a first job finds them; switched off, everything is tuned."""
    opts = dict(lock=False, budget=200)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    on = aoe.tune("zoo:mobilenet_v2", bank=tmp_path / "a", work_path=tmp_path / "wa",
                  options=aoe.TuneOptions(**opts), env={})
    off = aoe.tune("zoo:mobilenet_v2", bank=tmp_path / "b", work_path=tmp_path / "wb",
                   options=aoe.TuneOptions(builtin=False, **opts), env={})
    assert on.section["repo_summary"]["repo_reserved_num"] > 0
    assert off.section["repo_summary"]["repo_hit_num"] == 0
    assert on.section["repo_summary"]["total_num"] == off.section["repo_summary"]["total_num"]
