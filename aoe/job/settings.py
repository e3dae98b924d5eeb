"""What a job tunes (`JobSpec`) and how it runs (`JobSettings`), validated from the environment.

    spec = JobSpec(mode=2, model="zoo:mobilenet_v2", soc="Ascend910B2")
    settings = settings_from_env(os.environ, soc=spec.soc, mode=spec.mode)

Every bad value raises `AoeError` naming the variable and what to set it to.
"""
from __future__ import annotations

import json

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..bank.decision import repeat_tune as env_repeat_tune
from ..ops import HIGH_PERFORMANCE, IMPL_MODES
from ..bank import resolve_op_bank_dir, resolve_subgraph_bank_dir
from ..bank.paths import check_dir, check_name
from ..errors import AoeError
from ..safeio import env_text
from ..safetext import safe_text
from ..soc import Soc, load_soc
from . import config as cfg
from .lock import lock_dir as default_lock_dir

DEFAULT_SOC = "Ascend910B2"


def _warn(text: str) -> None:
    print(f"aoe: warning: {safe_text(text, keep_newlines=True)}", file=sys.stderr, flush=True)


@dataclass
class JobSpec:
    """What one tuning task tunes."""

    mode: int                                   # 1 = subgraph (SGAT), 2 = operator (OPAT)
    model: str | None = None                    # .onnx / .json path, zoo:NAME, a TensorFlow model, ...
    framework: str | None = None                # aoe.graph.load's framework (None: from the file;
                                                # "singleop": a single-operator file, OPAT only)
    graph: Any = None                           # an aoe.graph.Graph instead of `model`
    input_shape: Any = None
    training: bool = False
    soc: str | Soc = DEFAULT_SOC                # a name, an .ini path or a Soc value
    tune_ops: cfg.TuneOps | None = None
    name: str | None = None                     # tuning_name (default: the graph's name)
    compute_dtype: str = "float16"
    output: Path | str | None = None            # write the tuned model description here ("DIR/": in DIR)

    def __post_init__(self) -> None:
        # the job's door: a SoC named by the caller becomes a value once, here; the run passes the value on
        self.soc_value: Soc = load_soc(self.soc)

    def describe(self) -> str:
        """What is tuned, for messages and the device lock."""
        if self.framework == "singleop":
            return f"single operators from {self.model}"
        if self.model:
            return str(self.model)
        return getattr(self.graph, "name", "graph")

    def record(self) -> dict[str, Any]:
        """The model spec as a run's record keeps it (plain values)."""
        shapes = self.input_shape
        if shapes is not None and not isinstance(shapes, (str, int, float, bool)):
            try:
                shapes = json.loads(json.dumps(shapes))
            except (TypeError, ValueError):
                shapes = str(shapes)
        return {"model": self.describe(), "path": str(self.model) if self.model else None,
                "framework": self.framework, "input_shape": shapes, "training": bool(self.training),
                "compute_dtype": self.compute_dtype, "in_memory_graph": self.graph is not None}


@dataclass
class JobSettings:
    """How a job runs (the environment and aoe.ini, validated)."""

    work_path: Path
    device: int = 0
    n_devices: int = cfg.DEFAULT_DEVICE_COUNT
    te_parallel_asked: int | None = None        # TE_PARALLEL_COMPILER as set
    te_parallel: int = 1                        # simulator threads used
    tuning_parallel_asked: int = cfg.TUNING_PARALLEL_DEFAULT
    workers: int = 1                            # worker processes used
    repeat_tune: bool = False
    builtin: bool = True                        # consult the built-in banks after the custom bank
    implmode: str = HIGH_PERFORMANCE            # --op_select_implmode: what Impl tuning may choose
    op_bank_dir: Path | None = None
    subgraph_bank_dir: Path | None = None
    budget: int | None = None                   # evaluations per case (None: the tuner's default)
    inline_s: float | None = None               # aoe.ini inline_cpu_s (None: the tuner's default)
    lock: bool = True
    lock_dir: Path | None = None
    progress: bool = True
    progress_force: bool = False                # show the bar even when stderr is not a terminal
    reload: bool = False
    config_path: Path | None = None
    tune_ops_file: str | None = None            # from aoe.ini's aoe_config_file
    notes: list[str] = field(default_factory=list)

    def pricing_options(self, kind: str) -> dict[str, Any]:
        """The options that change a job's figures, as a run's record keeps them."""
        bank = self.op_bank_dir if kind == "opat" else self.subgraph_bank_dir
        return {"implmode": self.implmode, "builtin": self.builtin, "repeat_tune": self.repeat_tune,
                "budget": self.budget, "bank_dir": str(bank) if bank is not None else None}

    def describe(self, kind: str = "opat", cluster: bool = False) -> list[str]:
        """The job's settings as header lines, naming only what a `kind` ("opat" | "sgat") job uses;
        `cluster`: its tuning goes to a Dask cluster (aoe.batch), where the local device does not apply."""
        if cluster and kind == "opat":
            lines = [f"work path {self.work_path}",
                     f"operator cases tuned on the Dask cluster's workers; REPEAT_TUNE={self.repeat_tune}; "
                     f"op_select_implmode {self.implmode}"]
        elif cluster:   # the client partitions and prices the graph; the searches run remotely
            lines = [f"work path {self.work_path}",
                     f"subgraph searches run on the Dask cluster's workers; REPEAT_TUNE={self.repeat_tune}"]
        elif kind == "sgat":    # neither simulator threads nor worker processes: the jitted evaluator's threads
            lines = [f"device {self.device} of {self.n_devices}; work path {self.work_path}",
                     f"subgraph plans priced by the Numba-jitted evaluator in this process; "
                     f"REPEAT_TUNE={self.repeat_tune}"]
        else:
            lines = [f"device {self.device} of {self.n_devices}; work path {self.work_path}",
                     f"TE_PARALLEL_COMPILER {self.te_parallel_asked or cfg.TE_PARALLEL_DEFAULT} -> "
                     f"{self.te_parallel} simulator thread(s); TUNING_PARALLEL_NUM {self.tuning_parallel_asked} -> "
                     f"at most {self.workers} worker process(es), started when the work left is worth it; "
                     f"REPEAT_TUNE={self.repeat_tune}; "
                     f"op_select_implmode {self.implmode}"]
        if self.op_bank_dir is not None:
            lines.append(f"operator bank: {self.op_bank_dir}")
        if self.subgraph_bank_dir is not None:
            lines.append(f"subgraph bank: {self.subgraph_bank_dir}")
        return lines


def check_launch(env: Mapping[str, str]) -> None:
    """Refuse tuning inside a multi-device training launch, as the product does."""
    rank_size = env_text(str(env.get("RANK_SIZE", "") or ""))
    if rank_size and rank_size != "1":
        raise AoeError(f"RANK_SIZE={rank_size} says this is a multi-device training launch: tuning runs on one "
                       f"device only; unset RANK_SIZE (or set it to 1) and tune in a single-device run")
    for var in ("RANK_TABLE_FILE", "MINDSPORE_HCCL_CONFIG_PATH"):
        if env.get(var):
            raise AoeError(f"{var} is set ({env[var]}): tuning is not supported in a multi-device launch with a "
                           f"rank table; unset {var} and tune in a single-device run")


MIN_FREE_HOME = 1 << 30  # banks, result files and logs of a large job stay well under this


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_note(model_bytes: int, workers: int) -> str | None:
    """A warning when the model's size times the worker processes exceeds the available memory."""
    avail = _mem_available()
    need = model_bytes * max(1, workers)
    if avail is None or need <= avail:
        return None
    return (f"the model ({model_bytes >> 20} MiB) x {workers} worker process(es) needs about {need >> 20} MiB, more "
            f"than the {avail >> 20} MiB of memory available: lower tuning_parallel_num in aoe.ini")


def cpu_note(mode: int, tuning_parallel: int, explicit: bool, cpus: int) -> str | None:
    """A warning when the CPUs cannot run what the job is configured to run at once.

    The product sizes the host for CANN's compiler processes (operator tuning: processes x
    (TE_PARALLEL_COMPILER + TUNING_PARALLEL_NUM + min(cores / 2, 8) + 50) CPUs; subgraph tuning:
    processes x (2 x TUNING_PARALLEL_NUM + TE_PARALLEL_COMPILER)). A simulated device runs none of
    those: aoe runs the job plus `tuning_parallel_num` worker processes (operator tuning) or one
    process (subgraph tuning), so that is what is checked. The default of 8 workers is quietly
    capped at the CPUs; a value the user chose is named.
    """
    if mode == 1:
        if cpus < 2:
            return (f"subgraph tuning runs its plan search beside the simulator: {cpus} CPU is slow; "
                    f"use a machine with at least 2 CPUs")
        return None
    if explicit and tuning_parallel > cpus:
        return (f"tuning_parallel_num = {tuning_parallel} asks for {tuning_parallel} worker processes but this "
                f"machine lets this process use {cpus} CPU(s): {cpus} run; set tuning_parallel_num to {cpus} or "
                f"fewer in aoe.ini (TuneOptions(workers=...) from Python)")
    return None


def resource_notes(env: Mapping[str, str], workers: int, mode: int) -> list[str]:
    """Warnings (never errors) on free disk in the home directory and CPUs, each saying what to change."""
    notes = []
    home = env.get("HOME") or os.path.expanduser("~")
    try:
        st = os.statvfs(home)
        free = st.f_bavail * st.f_frsize
        if free < MIN_FREE_HOME:
            notes.append(f"only {free >> 20} MiB free in the home directory {home}: tuning writes banks, result files "
                         f"and logs; free at least {MIN_FREE_HOME >> 30} GiB or point TUNE_BANK_PATH and "
                         f"ASCEND_WORK_PATH at a larger disk")
    except OSError:
        pass
    if mode == 1:
        note = cpu_note(mode, workers, False, cfg.cpu_count())
        if note:
            notes.append(note)
    return notes


def settings_from_env(env: Mapping[str, str] | None = None, *, soc: str = DEFAULT_SOC, mode: int = 2,
                      device: int | str | None = None, work_path: str | os.PathLike[str] | None = None,
                      config: str | os.PathLike[str] | None = None, bank: str | os.PathLike[str] | None = None,
                      repeat_tune: bool | None = None, tuning_parallel: int | None = None,
                      implmode: str | None = None, builtin: bool | None = None,
                      te_parallel: int | None = None, budget: int | None = None, progress: bool = True,
                      reload: bool = False, lock: bool = True, lock_dir: str | os.PathLike[str] | None = None,
                      cwd: str | os.PathLike[str] | None = None,
                      warn: Callable[[str], None] | None = _warn) -> JobSettings:
    """Validate the environment, the aoe.ini file and explicit overrides into `JobSettings`.

    `bank` plays the role of TUNE_BANK_PATH (it wins over the variable). Every bad value raises
    AoeError naming it.
    """
    env = dict(os.environ if env is None else env)
    check_launch(env)
    soc = load_soc(soc).name
    check_name(soc, "SoC version")
    n = cfg.device_count(env)
    if device is not None:
        dev = cfg.device_id(device, n, "--device" if not isinstance(device, int) else "device")
    else:
        dev = cfg.device_id(env.get("ASCEND_DEVICE_ID") or "0", n)
    ini = cfg.read_config(cfg.find_config(config, env, cwd))

    te_asked = te_parallel if te_parallel is not None else cfg.te_parallel(env)
    if te_asked is not None and not (isinstance(te_asked, int) and 1 <= te_asked <= 32):
        raise AoeError(f"TE_PARALLEL_COMPILER={te_asked!r} is out of range; set it to an integer from 1 to 32")
    cap = cfg.te_parallel_cap(n)
    te = min(te_asked or cfg.TE_PARALLEL_DEFAULT, cap)
    notes = []
    if te_asked is not None and te_asked > cap:
        notes.append(f"TE_PARALLEL_COMPILER={te_asked} exceeds CPU cores x 80% / number of devices = "
                     f"{cfg.cpu_count()} x 0.8 / {n} on this machine; using {cap}")

    tp = tuning_parallel if tuning_parallel is not None else ini.tuning_parallel_num
    if tp is None:
        tp = cfg.TUNING_PARALLEL_DEFAULT
    if not (isinstance(tp, int) and not isinstance(tp, bool) and 1 <= tp <= 64):
        raise AoeError(f"TUNING_PARALLEL_NUM={tp!r} is out of range; set it to an integer from 1 to 64")
    workers = min(tp, cfg.cpu_count())

    repeat = env_repeat_tune(env) if repeat_tune is None else bool(repeat_tune)
    mode_name = HIGH_PERFORMANCE if implmode is None else implmode
    if mode_name not in IMPL_MODES:
        raise AoeError(f"--op_select_implmode {implmode!r} is not valid; use high_performance (the default: "
                       f"every implementation) or high_precision (none that changes the rounding)")
    wp, _ = cfg.resolve_work_path(work_path, env, ini, cwd)
    if env.get("TUNING_PARALLEL_NUM"):
        notes.append(f"TUNING_PARALLEL_NUM={env['TUNING_PARALLEL_NUM']!r} is set in the environment, where it has no "
                     f"effect: it belongs in the config file (aoe.ini: tuning_parallel_num = N, or "
                     f"TuneOptions(workers=N)); using {tp}")
    if work_path is not None and env.get("ASCEND_WORK_PATH"):
        notes.append(f"--work_path {os.fspath(work_path)} is used; ASCEND_WORK_PATH={env['ASCEND_WORK_PATH']} is not "
                     f"(an explicit argument wins over the environment, as for every other setting)")
    notes += resource_notes(env, workers, mode)
    if mode == 2:
        note = cpu_note(mode, tp, tuning_parallel is not None or ini.tuning_parallel_num is not None, cfg.cpu_count())
        if note:
            notes.append(note)
    bank_env = dict(env)
    if bank is not None:
        bank_env["TUNE_BANK_PATH"] = given = os.fspath(bank)
        if isinstance(given, str) and given and "\0" not in given:
            # checked here so that a missing directory is blamed on the argument, not on TUNE_BANK_PATH
            base = Path(given) if os.path.isabs(given) else Path(cwd if cwd is not None else os.getcwd()) / given
            check_dir(base, f"the bank argument {given!r}")
    op_dir = resolve_op_bank_dir(soc, env=bank_env, cwd=cwd) if mode == 2 else None
    sg_dir = resolve_subgraph_bank_dir(soc, env=bank_env, cwd=cwd) if mode == 1 else None
    if budget is None:
        budget = cfg.search_budget(env)
    elif not (isinstance(budget, int) and budget >= 1):
        raise AoeError(f"the search budget must be a positive integer, got {budget!r}")
    s = JobSettings(work_path=wp, device=dev, n_devices=n, te_parallel_asked=te_asked, te_parallel=te,
                    tuning_parallel_asked=tp, workers=workers, repeat_tune=repeat, implmode=mode_name,
                    builtin=cfg.builtin_bank(env) if builtin is None else bool(builtin),
                    op_bank_dir=op_dir,
                    subgraph_bank_dir=sg_dir, budget=budget, inline_s=ini.inline_cpu_s, lock=lock,
                    lock_dir=Path(lock_dir) if lock_dir is not None else default_lock_dir(env),
                    progress=progress, reload=reload, config_path=ini.path, tune_ops_file=ini.aoe_config_file,
                    notes=notes)
    if warn is not None:
        for note in notes:
            warn(note)
    return s
