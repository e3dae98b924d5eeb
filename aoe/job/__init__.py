"""The `aoe` tuning job: configuration, device locks, result files, the run loop, resume, verification.

- `config`: SPEC §2 environment variables and the `aoe.ini` file, validated (`AoeError` on bad values).
- `lock`: one job per simulated device (`DeviceLock`).
- `result` / `schema`: result files (SPEC §4), atomic rewrites, the JSON Schema and semantic checks.
- `run`: `JobSpec`, `settings_from_env`, `run_job` (signals, `--reload`, progress, summary).
- `verify`: default strategies vs. the banks (SPEC §5).
- `api`: `tune`, `tune_models`, `verify` (also `aoe.tune` ...).
- `cli`: `aoe -m MODEL -j 1|2 ...` and `aoe verify`.
"""
from __future__ import annotations

from .api import result_files, tune, tune_models, verify
from .run import JobResult, JobSettings, JobSpec, run_job, settings_from_env

__all__ = ["tune", "tune_models", "verify", "result_files", "JobResult", "JobSettings", "JobSpec", "run_job",
           "settings_from_env"]
