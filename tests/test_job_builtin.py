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


def test_the_summary_gives_the_gain_over_canns_default_beside_a_hit_only_gain():
    """A case found in a bank is its own "before" (0.00% faster); the summary also prints the gain over
    CANN's default, what `aoe verify` reports, and only when hits made the two differ."""
    from aoe.job.progress import opat_summary
    from aoe.opat.report import OpRecord, record_from_state
    from aoe.tuning import Counters

    def summary(*recs):
        report = type("R", (), {"records": list(recs), "skipped": [], "failed": [], "counters": Counters()})()
        return "\n".join(opat_summary(report))

    hit = OpRecord("conv", "Conv2D", "reserved", 80.0, 80.0, default_us=100.0)
    tuned = OpRecord("mm", "MatMulV2", "add", 50.0, 40.0, default_us=50.0)
    out = summary(hit, tuned)
    assert "sum of times: 130.000 us -> 120.000 us (8.33% faster)" in out
    assert "over CANN's default strategies (bank hits included): 150.000 us -> 120.000 us (25.00% faster)" in out
    assert "CANN's default" not in summary(tuned)          # nothing found in a bank: one figure
    assert record_from_state(hit.to_state()) == hit         # kept across --reload
    assert record_from_state({**tuned.to_state(), "default_us": None}).default_us is None
