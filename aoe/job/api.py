"""Python API for pipelines and batch tuning: `aoe.tune`, `aoe.tune_models`, `aoe.verify`.

    import aoe
    r = aoe.tune("zoo:mobilenet_v2", mode="op", bank="/data/banks", work_path="results")
    print(r.status, r.result_file, r.section["repo_summary"])
    rs = aoe.tune_models(["zoo:resnet50", "model.onnx"], bank="/data/banks")   # one result file
    v = aoe.verify("zoo:mobilenet_v2", bank="/data/banks"); print(v.improvement)

Explicit arguments win; what is not given comes from the environment as for the command line
(`env={}` ignores it completely). Nothing is printed unless `verbose=True`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import AoeError
from . import config as cfg
from .run import DEFAULT_SOC, JobResult, JobSpec, run_job, settings_from_env


def _spec(model: Any, mode: int, soc: str, input_shape: Any, training: bool, tune_ops: Any,
          singleop: str | None = None, name: str | None = None, compute_dtype: str = "float16",
          output: str | os.PathLike[str] | None = None) -> JobSpec:
    ops = None
    if tune_ops is not None:
        if isinstance(tune_ops, cfg.TuneOps):
            ops = tune_ops
        elif isinstance(tune_ops, Mapping):
            ops = cfg.tune_ops_from(dict(tune_ops), "tune_ops")
        elif isinstance(tune_ops, (str, os.PathLike)):
            ops = cfg.load_tune_ops(tune_ops)
        else:
            raise AoeError("tune_ops must be a dict {'tune_ops_name': [...], 'tune_ops_type': [...]} or a file path")
    graph = None
    if model is not None and not isinstance(model, (str, os.PathLike)):
        graph, model = model, None
    return JobSpec(mode=mode, model=os.fspath(model) if model is not None else None, graph=graph,
                   singleop=os.fspath(singleop) if singleop is not None else None, input_shape=input_shape,
                   training=training, soc=soc, tune_ops=ops, name=name, compute_dtype=compute_dtype,
                   output=Path(output) if output is not None else None)


def _printer(verbose: bool) -> Any:
    return (lambda line: print(line, flush=True)) if verbose else None


def tune(model: Any, mode: str | int = "op", soc: str = DEFAULT_SOC, bank: str | os.PathLike[str] | None = None,
         work_path: str | os.PathLike[str] | None = None, input_shape: Any = None, training: bool = False,
         repeat_tune: bool | None = None, tune_ops: Any = None, *, device: int | None = None,
         workers: int | None = None, budget: int | None = None, singleop: str | None = None,
         name: str | None = None, reload: bool = False, output: str | os.PathLike[str] | None = None,
         verbose: bool = False, progress: bool = False, lock: bool = True,
         lock_dir: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> JobResult:
    """Tune one model (path, `zoo:NAME` or an `aoe.graph.Graph`); writes a result file and returns its report.

    `mode`: "op" / 2 (operator tuning) or "subgraph" / 1. `bank`: the TUNE_BANK_PATH-equivalent root
    (operator bank in `<bank>/<soc>/`, subgraph bank in `<bank>/`); it must exist with rwx.
    `workers`: TUNING_PARALLEL_NUM (default 8, capped at the CPUs). `budget`: strategy evaluations per
    operator case. `device` / `lock_dir`: the simulated device locked for the job (`lock=False`: none).
    `env`: the environment to read what is not given (default `os.environ`; `{}` = none). The returned `JobResult` has `status`, `result_file`, `section` (the OPAT/SGAT
    object of the file) and `report` (the tuner's full report).
    """
    return tune_models([model], mode=mode, soc=soc, bank=bank, work_path=work_path, input_shape=input_shape,
                       training=training, repeat_tune=repeat_tune, tune_ops=tune_ops, device=device,
                       workers=workers, budget=budget, singleop=singleop, names=[name] if name else None,
                       reload=reload, output=output, verbose=verbose, progress=progress, lock=lock,
                       lock_dir=lock_dir, env=env)[0]


def tune_models(models: Sequence[Any], mode: str | int = "op", soc: str = DEFAULT_SOC,
                bank: str | os.PathLike[str] | None = None, work_path: str | os.PathLike[str] | None = None,
                input_shape: Any = None, training: bool = False, repeat_tune: bool | None = None,
                tune_ops: Any = None, *, device: int | None = None, workers: int | None = None,
                budget: int | None = None, singleop: str | None = None, names: Sequence[str] | None = None,
                reload: bool = False, output: str | os.PathLike[str] | None = None, verbose: bool = False,
                progress: bool = False, lock: bool = True, lock_dir: str | os.PathLike[str] | None = None,
                env: Mapping[str, str] | None = None, stop_on_error: bool = True) -> list[JobResult]:
    """Tune several models one after the other with one shared bank; one result file, one report key each.

    The device is locked once for the whole batch. `input_shape` may be one spec for all models or a
    list with one per model. Later models hit what earlier ones added (REPEAT_TUNE=False). With
    `stop_on_error=False` a model that cannot be loaded is skipped (its error is re-raised at the end
    if no model could be tuned).
    """
    m = cfg.parse_mode(mode, "mode")
    models = list(models)
    if singleop is not None:
        models = models or [None]
    if not models:
        raise AoeError("no models to tune")
    shapes = list(input_shape) if isinstance(input_shape, (list, tuple)) else [input_shape] * len(models)
    if len(shapes) != len(models):
        raise AoeError("input_shape must be one spec or a list with one spec per model")
    if names is not None and len(names) != len(models):
        raise AoeError("names must give one tuning name per model")
    settings = settings_from_env(env if env is not None else os.environ, soc=soc, mode=m, device=device,
                                 work_path=work_path, bank=bank, repeat_tune=repeat_tune, tuning_parallel=workers,
                                 budget=budget, progress=progress, reload=reload, lock=lock,
                                 lock_dir=lock_dir)
    if not verbose:
        settings.notes.clear()
    from .result import ResultFile
    from .run import KIND

    results: list[JobResult] = []
    lock_obj = None
    if settings.lock:
        from .lock import DeviceLock

        lock_obj = DeviceLock(settings.device, settings.lock_dir, model=f"{len(models)} model(s)").acquire()
    errors: list[Exception] = []
    try:
        rf = None if reload else ResultFile(settings.work_path, KIND[m])
        settings.lock = False  # held above for the whole batch
        for i, model in enumerate(models):
            spec = _spec(model, m, soc, shapes[i], training, tune_ops, singleop=singleop,
                         name=names[i] if names else None, output=output)
            try:
                res = run_job(spec, settings, out=_printer(verbose), result_file=rf)
            except AoeError as exc:
                if stop_on_error:
                    raise
                errors.append(exc)
                continue
            results.append(res)
            if res.signal is not None:
                break
    finally:
        if lock_obj is not None:
            lock_obj.release()
    if not results and errors:
        raise errors[0]
    return results


def verify(model: Any, mode: str | int = "op", soc: str = DEFAULT_SOC, bank: str | os.PathLike[str] | None = None,
           input_shape: Any = None, training: bool = False, *, singleop: str | None = None,
           cache_mode: str = "enable", builtin: bool = True, compute_dtype: str = "float16",
           env: Mapping[str, str] | None = None) -> Any:
    """Compile `model` with default strategies and with the banks; returns an `aoe.job.verify.VerifyReport`.

    `bank` is the TUNE_BANK_PATH-equivalent root (default: the environment, as for tuning).
    """
    from ..bank import resolve_op_bank_dir, resolve_subgraph_bank_dir
    from ..soc import load_soc
    from .run import load_graph
    from .verification import check_cache_mode, verify_graph

    m = cfg.parse_mode(mode, "mode")
    check_cache_mode(cache_mode)
    soc_obj = load_soc(soc)
    e = dict(os.environ if env is None else env)
    if bank is not None:
        e["TUNE_BANK_PATH"] = os.fspath(bank)
    if m == 1:
        from ..sgat import check_soc

        check_soc(soc_obj)
    op_dir = resolve_op_bank_dir(soc_obj.name, env=e) if m == 2 else None
    sg_dir = resolve_subgraph_bank_dir(soc_obj.name, env=e) if m == 1 else None
    spec = _spec(model, m, soc, input_shape, training, None, singleop=singleop, compute_dtype=compute_dtype)
    graph = load_graph(spec)
    return verify_graph(graph, soc_obj, mode=m, op_bank_dir=op_dir, subgraph_bank_dir=sg_dir, builtin=builtin,
                        cache_mode=cache_mode, model=spec.describe())


def result_files(work_path: str | os.PathLike[str], kind: str = "opat") -> list[Path]:
    """The result files of `kind` in a work path, oldest first."""
    return sorted(Path(work_path).glob(f"aoe_result_{kind}_*_pid*.json"))


__all__ = ["tune", "tune_models", "verify", "result_files"]
