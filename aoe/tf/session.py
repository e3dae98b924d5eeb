"""Tuning settings of a training script and the one tuning run of its training step.

Settings come from a dict mirroring the product's session options or from the environment, the
dict winning key by key:

| dict key | environment | meaning |
|---|---|---|
| `aoe_mode` | `AOE_MODE` | 1 subgraph tuning, 2 operator tuning; unset in both: tuning is off |
| `work_path` | `ASCEND_WORK_PATH` | where the result file goes (default: the working directory) |
| `aoe_config_file` | `aoe_config_file` in `aoe.ini` | a tune_ops file limiting what is tuned |
| `soc_version` | `AOE_SOC_VERSION` | the simulated SoC (default Ascend910B2) |
| `tune_bank_path` | `TUNE_BANK_PATH` | the custom bank root |
| `builtin` | `AOE_BUILTIN_BANK` (on/off) | False: consult only the custom bank, not the shipped built-in banks |

Everything else (REPEAT_TUNE, TUNING_PARALLEL_NUM, AOE_SEARCH_BUDGET, ASCEND_DEVICE_ID, device
locks ...) is read by the job exactly as for the `aoe` command.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import AoeError

KEYS = ("aoe_mode", "work_path", "aoe_config_file", "soc_version", "tune_bank_path", "builtin")
_LOCK = threading.Lock()  # one tuning run at a time per process: the job rewrites signal handlers


@dataclass(frozen=True)
class Settings:
    """Validated tuning settings of one training script."""

    mode: int
    soc: str
    work_path: str | None
    tune_ops_file: str | None
    bank: str | None
    env: Mapping[str, str]
    builtin: bool | None = None   # None: AOE_BUILTIN_BANK decides (default on)


def resolve(config: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings | None:
    """The settings, or None when tuning is off (no ``aoe_mode`` and no ``AOE_MODE``)."""
    from ..job import JobSpec
    from ..job import config as jcfg

    env = dict(os.environ if env is None else env)
    cfg = dict(config or {})
    unknown = sorted(set(cfg) - set(KEYS))
    if unknown:
        raise AoeError(f"unknown tuning option(s) {', '.join(map(repr, unknown))}; use {', '.join(KEYS)}")
    mode_value = cfg.get("aoe_mode")
    source = "aoe_mode"
    if mode_value is None or mode_value == "":
        mode_value, source = env.get("AOE_MODE"), "AOE_MODE"
    if mode_value is None or str(mode_value).strip() == "":
        return None
    mode = jcfg.parse_mode(mode_value if isinstance(mode_value, int) else str(mode_value), source)
    soc = str(cfg.get("soc_version") or env.get("AOE_SOC_VERSION") or JobSpec(mode=mode).soc)
    s = Settings(mode=mode, soc=soc, work_path=_opt(cfg, "work_path"), tune_ops_file=_opt(cfg, "aoe_config_file"),
                 bank=_opt(cfg, "tune_bank_path"), env=env, builtin=_flag(cfg, "builtin"))
    job_settings(s, warn=False)  # validate now: a bad setting stops the script before training starts
    return s


def _opt(cfg: Mapping[str, Any], key: str) -> str | None:
    v = cfg.get(key)
    if v is None or v == "":
        return None
    if not isinstance(v, (str, os.PathLike)):
        raise AoeError(f"tuning option {key!r} must be a path, not {type(v).__name__}")
    return os.fspath(v)


def _flag(cfg: Mapping[str, Any], key: str) -> bool | None:
    v = cfg.get(key)
    if v is None or isinstance(v, bool):
        return v
    raise AoeError(f"tuning option {key!r} must be True or False, not {v!r}")


def job_settings(s: Settings, warn: bool = True) -> Any:
    """The job's settings (banks, work path, budget, locks ...) as the `aoe` command would build them."""
    from ..job import settings_from_env

    kw = {} if warn else {"warn": None}
    return settings_from_env(s.env, soc=s.soc, mode=s.mode, work_path=s.work_path, bank=s.bank, builtin=s.builtin,
                             **kw)


NPU_OPTIMIZER = "NpuOptimizer"


def session_config_options(config: Any) -> dict[str, str]:
    """The tuning keys of a session config's ``NpuOptimizer`` entry (``graph_options.rewrite_options.
    custom_optimizers``, the product's way): ``aoe_mode``, ``work_path``, ``aoe_config_file`` from its
    ``parameter_map`` (strings or integers); its other keys are NPU settings aoe does not use."""
    out: dict[str, str] = {}
    try:
        entries = list(config.graph_options.rewrite_options.custom_optimizers)
    except AttributeError:
        return out
    for entry in entries:
        if getattr(entry, "name", "") != NPU_OPTIMIZER:
            continue
        for key in ("aoe_mode", "work_path", "aoe_config_file"):
            if key not in entry.parameter_map:
                continue
            value = entry.parameter_map[key]
            kind = value.WhichOneof("value")
            if kind == "s":
                out[key] = value.s.decode("utf-8", "surrogateescape")
            elif kind == "i":
                out[key] = str(value.i)
            else:
                raise AoeError(f"the session config's {NPU_OPTIMIZER} parameter_map[{key!r}] must be a string "
                               f"(parameter_map[{key!r}].s = tf.compat.as_bytes(...)), not {kind}")
    return out


def from_session_config(config: Any, env: Mapping[str, str] | None = None) -> Settings | None:
    """The settings of a ``tf.compat.v1.Session(config=...)``: its NpuOptimizer keys over the environment;
    None when tuning is off in both."""
    return resolve(session_config_options(config) if config is not None else None, env)


def tune_graph(graph: Any, s: Settings, name: str | None = None, out: Any = None) -> Any:
    """Tune a converted training graph with the job's full behaviour; returns the JobResult."""
    from ..job import JobSpec, run_job
    from ..job import config as jcfg

    if out is None:
        def out(line: str) -> None:
            print(line, flush=True)
    with _LOCK:
        # worker processes never import the script again (aoe.opat.workers): no main guard is needed
        js = job_settings(s)
        path = s.tune_ops_file or js.tune_ops_file
        tune_ops = jcfg.load_tune_ops(path) if path else None
        spec = JobSpec(mode=s.mode, graph=graph, soc=s.soc, tune_ops=tune_ops, name=name or graph.name)
        install = threading.current_thread() is threading.main_thread()
        return run_job(spec, js, out=out, install_signals=install)
