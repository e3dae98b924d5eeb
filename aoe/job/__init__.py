"""The `aoe` tuning job: settings, device locks, the one run loop, result files, resume, verification.

| file | what lives there |
|---|---|
| `config.py` | environment variables and the `aoe.ini` file, each value checked (`AoeError` on bad ones) |
| `settings.py` | `JobSpec` (what to tune) and `JobSettings` / `settings_from_env` (how the job runs) |
| `signals.py` | `StopFlag`: SIGINT/SIGTERM stop between cases; a second signal or the grace period at once |
| `lock.py` | one job per simulated device (`DeviceLock`), stale locks recovered |
| `result.py` | result files and the resume state beside them, rewritten atomically |
| `schema.py` | the result file's JSON Schema (from the tuners' section schemas) and the semantic checks |
| `run.py` | `run_job`: the one loop that drives both tuners through `aoe.tuning`'s contract |
| `progress.py` | the progress bar and the summary tables |
| `verification.py` | `aoe verify`: the model with default strategies vs. with the banks |
| `api.py` | `tune`, `tune_models`, `verify` (also `aoe.tune`, ...) |
| `cli.py` | `aoe -m MODEL -j 1|2 ...` and `aoe verify` |
"""
from __future__ import annotations

from .api import TuneOptions, result_files, tune, tune_models, verify
from .run import JobResult, run_job
from .settings import JobSettings, JobSpec, settings_from_env

__all__ = ["tune", "tune_models", "verify", "result_files", "TuneOptions", "JobResult", "JobSettings", "JobSpec", "run_job",
           "settings_from_env"]
