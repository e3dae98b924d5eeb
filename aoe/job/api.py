"""Python API for pipelines and batch tuning: `aoe.tune`, `aoe.tune_models`, `aoe.verify`.

    import aoe
    r = aoe.tune("zoo:mobilenet_v2", mode="op", bank="/data/banks", work_path="results")
    print(r.status, r.result_file, r.section["repo_summary"])
    rs = aoe.tune_models(["zoo:resnet50", "model.onnx"], bank="/data/banks",
                         options=aoe.TuneOptions(workers=2, budget=20000))   # one result file
    v = aoe.verify("zoo:mobilenet_v2", bank="/data/banks"); print(v.improvement)

What to tune is given by arguments (model, mode, SoC, bank, work path, shapes); how the job runs is one
value, `TuneOptions`. Explicit values win; what is not given comes from the environment as for the
command line (`env={}` ignores it completely). Nothing is printed unless `TuneOptions(verbose=True)`.
"""
from __future__ import annotations

import os
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..bank import resolve_op_bank_dir, resolve_subgraph_bank_dir
from ..errors import AoeError
from ..soc import load_soc
from . import config as cfg
from .lock import DeviceLock
from .result import ResultFile
from .run import KIND, JobResult, load_graph, run_job
from .settings import DEFAULT_SOC, JobSpec, settings_from_env
from .signals import StopFlag
from .verification import VerifyReport, check_cache_mode, verify_graph

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class TuneOptions:
    """How a job runs from Python. A field left None comes from the environment, as for the command line."""

    repeat_tune: bool | None = None        # REPEAT_TUNE
    implmode: str | None = None            # op_select_implmode: high_performance (default) | high_precision
    workers: int | None = None             # TUNING_PARALLEL_NUM: worker processes (results identical to serial)
    budget: int | None = None              # strategy evaluations per operator case (AOE_SEARCH_BUDGET)
    builtin: bool | None = None            # consult the shipped built-in banks (AOE_BUILTIN_BANK, default on)
    device: int | None = None              # ASCEND_DEVICE_ID: the simulated device locked for the job
    reload: bool = False                   # continue the latest interrupted job of the same model
    output: PathLike | None = None         # also write the tuned model description here
    verbose: bool = False                  # print the job's log lines
    progress: bool = False                 # show the progress bar on stderr
    lock: bool = True                      # take the device lock (False: none)
    lock_dir: PathLike | None = None       # where device locks live (AOE_LOCK_DIR)
    stop_on_error: bool = True             # tune_models: a model that cannot be loaded stops the batch


def _tune_ops(tune_ops: Any) -> cfg.TuneOps | None:
    if tune_ops is None or isinstance(tune_ops, cfg.TuneOps):
        return tune_ops
    if isinstance(tune_ops, Mapping):
        return cfg.tune_ops_from(dict(tune_ops), "tune_ops")
    if isinstance(tune_ops, (str, os.PathLike)):
        return cfg.load_tune_ops(tune_ops)
    raise AoeError("tune_ops must be a dict {'tune_ops_name': [...], 'tune_ops_type': [...]} or a file path")


def _spec(model: Any, mode: int, soc: str, input_shape: Any, training: bool, tune_ops: cfg.TuneOps | None,
          framework: Any, name: str | None = None, output: PathLike | None = None,
          compute_dtype: str = "float16") -> JobSpec:
    graph = None
    if model is not None and not isinstance(model, (str, os.PathLike)):
        graph, model = model, None      # an aoe.graph.Graph
    return JobSpec(mode=mode, model=os.fspath(model) if model is not None else None, graph=graph,
                   framework=framework, input_shape=input_shape, training=training, soc=soc, tune_ops=tune_ops,
                   name=name, compute_dtype=compute_dtype,
                   output=os.fspath(output) if output is not None else None)  # a trailing "/" says: a directory


def _printer(verbose: bool) -> Any:
    return (lambda line: print(line, flush=True)) if verbose else None


def tune(model: Any, mode: str | int = "op", soc: str = DEFAULT_SOC, bank: PathLike | None = None,
         work_path: PathLike | None = None, *, input_shape: Any = None, training: bool = False,
         tune_ops: Any = None, framework: str | int | None = None, name: str | None = None,
         options: TuneOptions | None = None, env: Mapping[str, str] | None = None) -> JobResult:
    """Tune one model (path, `zoo:NAME` or an `aoe.graph.Graph`); writes a result file and returns its report.

    `mode`: "op" / 2 (operator tuning) or "subgraph" / 1. `bank`: the TUNE_BANK_PATH-equivalent root
    (operator bank in `<bank>/<soc>/`, subgraph bank in `<bank>/`); it must exist with rwx.
    `framework`: as `aoe.graph.load` (None: from the file; "singleop": a single-operator file).
    `tune_ops`: a dict {"tune_ops_name": [...], "tune_ops_type": [...]} or such a file: tune only those.
    The returned `JobResult` has `status`, `result_file`, `section` (the OPAT/SGAT object of the file)
    and `report` (the tuner's full report).
    """
    return tune_models([model], mode, soc, bank, work_path, input_shape=input_shape, training=training,
                       tune_ops=tune_ops, framework=framework, names=[name] if name else None, options=options,
                       env=env)[0]


def tune_models(models: Sequence[Any], mode: str | int = "op", soc: str = DEFAULT_SOC, bank: PathLike | None = None,
                work_path: PathLike | None = None, *, input_shape: Any = None, training: bool = False,
                tune_ops: Any = None, framework: str | int | None = None, names: Sequence[str] | None = None,
                options: TuneOptions | None = None, env: Mapping[str, str] | None = None,
                cluster: Any = None) -> list[JobResult]:
    """Tune several models one after the other with one shared bank; one result file, one report key each.

    The device is locked once for the whole batch. `input_shape` may be one spec for all models or a
    list with one per model. Later models hit what earlier ones added (REPEAT_TUNE=False). With
    `TuneOptions(stop_on_error=False)` a model that cannot be loaded is skipped (its error is raised
    at the end if no model could be tuned).
    `cluster` (a `dask.distributed.Client`, a scheduler address, "local:N" or an `aoe.batch.CaseFarm`;
    the extra `dask`): the distinct operator cases (OPAT) or subgraph searches (SGAT) of all models that
    miss the banks run on its workers; this process still writes every bank and result file, and the
    outcome is the serial run's (`aoe.batch`). "local:N" runs over TLS; tcp:// gets a ClusterWarning.
    """
    opt = options or TuneOptions()
    m = cfg.parse_mode(mode, "mode")
    models = list(models)
    if not models:
        raise AoeError("no models to tune")
    shapes = list(input_shape) if isinstance(input_shape, (list, tuple)) else [input_shape] * len(models)
    if len(shapes) != len(models):
        raise AoeError("input_shape must be one spec or a list with one spec per model")
    if names is not None and len(names) != len(models):
        raise AoeError("names must give one tuning name per model")
    ops = _tune_ops(tune_ops)
    settings = settings_from_env(env if env is not None else os.environ, soc=soc, mode=m, device=opt.device,
                                 work_path=work_path, bank=bank, repeat_tune=opt.repeat_tune,
                                 implmode=opt.implmode,
                                 tuning_parallel=opt.workers, budget=opt.budget, builtin=opt.builtin, progress=opt.progress,
                                 reload=opt.reload, lock=opt.lock, lock_dir=opt.lock_dir)
    if not opt.verbose:
        settings.notes.clear()
    results: list[JobResult] = []
    lock_obj = None
    if settings.lock:
        lock_obj = DeviceLock(settings.device, settings.lock_dir, model=f"{len(models)} model(s)").acquire()
    errors: list[Exception] = []
    rf = None
    stack = ExitStack()
    # one stop flag for the whole batch: a Ctrl-C between two models, while the cluster starts or
    # while a result file is written stops the batch as cleanly as one during a case
    stop = StopFlag()
    stop.install()
    try:
        rf = None if opt.reload else ResultFile(settings.work_path, KIND[m])
        settings.lock = False  # held above for the whole batch
        graphs: dict[int, Any] = {}
        if cluster is not None:  # load every model, send their bank misses, then run the usual loop
            from ..batch import open_batch  # only for a cluster: a local job does not import aoe.batch

            farm = stack.enter_context(open_batch(cluster, progress=opt.progress, out=_printer(opt.verbose)))
            graphs = farm.prefetch_specs([_spec(x, m, soc, shapes[i], training, ops, framework, output=opt.output)
                                          for i, x in enumerate(models)], settings, load_graph)
            farm.flush()  # every model's misses go out now: the workers run while the client writes results
        for i, model in enumerate(models):
            spec = _spec(model, m, soc, shapes[i], training, ops, framework, name=names[i] if names else None,
                         output=opt.output)
            try:
                res = run_job(spec, settings, out=_printer(opt.verbose), result_file=rf, graph=graphs.get(i),
                              stop=stop)
            except AoeError as exc:
                if opt.stop_on_error:
                    raise
                errors.append(exc)
                continue
            results.append(res)
            if res.signal is not None:
                break
    finally:
        # the cluster shuts down while the stop flag still holds the signals: a Ctrl-C landing in
        # Dask's close (it waits on its event loop) must not become a KeyboardInterrupt traceback
        try:
            stack.close()
        finally:
            stop.restore()
        if lock_obj is not None:
            lock_obj.release()
        if rf is not None:
            rf.discard_if_empty()
    if not results and errors:
        raise errors[0]
    return results


def verify(model: Any, mode: str | int = "op", soc: str = DEFAULT_SOC, bank: PathLike | None = None, *,
           input_shape: Any = None, training: bool = False, framework: str | int | None = None,
           cache_mode: str = "enable", builtin: bool = True, compute_dtype: str = "float16",
           env: Mapping[str, str] | None = None, result: PathLike | None = None) -> VerifyReport:
    """Compile `model` with default strategies and with the banks; returns a `VerifyReport`.

    `bank` is the TUNE_BANK_PATH-equivalent root (default: the environment, as for tuning). `result`:
    a job's result file; the report then says where its figures differ from that run's record, and why.
    """
    m = cfg.parse_mode(mode, "mode")
    check_cache_mode(cache_mode)
    soc_obj = load_soc(soc)
    e = dict(os.environ if env is None else env)
    if bank is not None:
        e["TUNE_BANK_PATH"] = os.fspath(bank)
    if m == 1:
        from .. import sgat  # lazily: an OPAT job never needs the SGAT tuner

        sgat.check_soc(soc_obj)
    op_dir = resolve_op_bank_dir(soc_obj.name, env=e) if m == 2 else None
    sg_dir = resolve_subgraph_bank_dir(soc_obj.name, env=e) if m == 1 else None
    spec = _spec(model, m, soc, input_shape, training, None, framework, compute_dtype=compute_dtype)
    graph = load_graph(spec)
    rep = verify_graph(graph, soc_obj, mode=m, op_bank_dir=op_dir, subgraph_bank_dir=sg_dir, builtin=builtin,
                       cache_mode=cache_mode, model=spec.describe())
    if result is not None:
        from ..report.data import read_result
        from ..report.record import read_record, record_path
        from .verification import compare_with_record

        rp = record_path(result)
        if not rp.exists():
            raise AoeError(f"{result} has no run record beside it ({rp.name}): an older aoe wrote it, so there is "
                           "nothing to compare with; drop --result")
        rec = read_record(rp, read_result(result)[0])
        rep.record_notes = compare_with_record(rep, rec, graph, soc_obj, builtin=builtin)
    return rep


def result_files(work_path: PathLike, kind: str = "opat") -> list[Path]:
    """The result files of `kind` in a work path, oldest first."""
    return sorted(Path(work_path).glob(f"aoe_result_{kind}_*_pid*.json"))


__all__ = ["tune", "tune_models", "verify", "result_files", "TuneOptions"]
