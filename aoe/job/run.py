"""The tuning job: settings from the environment, device lock, the tuning run, result files, resume.

    spec = JobSpec(mode=2, model="zoo:mobilenet_v2", soc="Ascend910B2")
    settings = settings_from_env(os.environ, soc=spec.soc, mode=spec.mode)
    result = run_job(spec, settings)          # writes aoe_result_opat_<ts>_pid<pid>.json

One run walks the graph once (OPAT: `aoe.opat.tune_graph`; SGAT: `aoe.sgat.tune_graph`), rewriting
the result file after every operator case (or subgraph) with `"tuning incomplete"` and no
`tuning_time(s)`, so a job killed at any instant leaves a valid file that says so. SIGINT/SIGTERM set
a stop flag that the tuner polls between cases; the file is then written as interrupted and the
job exits 130/143. `--reload` finds the latest interrupted job of the same graph (same model
fingerprint, SoC and mode) in the work path and continues it in the same result file.
"""
from __future__ import annotations

import hashlib
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import AoeError
from . import config as cfg
from .result import ResultFile, find_interrupted

SUCCESS, FAILED, INCOMPLETE = "tuning successful", "tuning failed", "tuning incomplete"
DEFAULT_SOC = "Ascend910B2"
KIND = {1: "sgat", 2: "opat"}


def _say(out: Callable[[str], None] | None, text: str) -> None:
    if out is not None:
        out(text)


def _warn(text: str) -> None:
    print(f"aoe: warning: {text}", file=sys.stderr, flush=True)


# --- what to tune and how ----------------------------------------------------------------------

@dataclass
class JobSpec:
    """What one tuning task tunes."""

    mode: int                                   # 1 = subgraph (SGAT), 2 = operator (OPAT)
    model: str | None = None                    # .onnx / .json path or zoo:NAME
    graph: Any = None                           # an aoe.graph.Graph instead of `model`
    singleop: str | None = None                 # a single-operator JSON file (OPAT only)
    input_shape: Any = None
    training: bool = False
    soc: str = DEFAULT_SOC
    tune_ops: cfg.TuneOps | None = None
    name: str | None = None                     # tuning_name (default: the graph's name)
    compute_dtype: str = "float16"
    output: Path | None = None                  # write the tuned model description here

    def describe(self) -> str:
        if self.singleop:
            return f"single operators from {self.singleop}"
        if self.model:
            return str(self.model)
        return getattr(self.graph, "name", "graph")


@dataclass
class JobSettings:
    """How a job runs (SPEC §2 environment, validated)."""

    work_path: Path
    device: int = 0
    n_devices: int = cfg.DEFAULT_DEVICE_COUNT
    te_parallel_asked: int | None = None        # TE_PARALLEL_COMPILER as set
    te_parallel: int = 1                        # simulator threads used
    tuning_parallel_asked: int = cfg.TUNING_PARALLEL_DEFAULT
    workers: int = 1                            # worker processes used
    repeat_tune: bool = False
    op_bank_dir: Path | None = None
    subgraph_bank_dir: Path | None = None
    budget: int | None = None                   # evaluations per case (None: the tuner's default)
    lock: bool = True
    lock_dir: Path | None = None
    progress: bool = True
    progress_force: bool = False                # show the bar even when stderr is not a terminal
    reload: bool = False
    config_path: Path | None = None
    tune_ops_file: str | None = None            # from aoe.ini's aoe_config_file
    notes: list[str] = field(default_factory=list)

    def describe(self) -> list[str]:
        lines = [f"device {self.device} of {self.n_devices}; work path {self.work_path}",
                 f"TE_PARALLEL_COMPILER {self.te_parallel_asked or cfg.TE_PARALLEL_DEFAULT} -> "
                 f"{self.te_parallel} simulator thread(s); TUNING_PARALLEL_NUM {self.tuning_parallel_asked} -> "
                 f"{self.workers} worker process(es); REPEAT_TUNE={self.repeat_tune}"]
        if self.op_bank_dir is not None:
            lines.append(f"operator bank: {self.op_bank_dir}")
        if self.subgraph_bank_dir is not None:
            lines.append(f"subgraph bank: {self.subgraph_bank_dir}")
        return lines


def settings_from_env(env: Mapping[str, str] | None = None, *, soc: str = DEFAULT_SOC, mode: int = 2,
                      device: int | str | None = None, work_path: str | os.PathLike[str] | None = None,
                      config: str | os.PathLike[str] | None = None, bank: str | os.PathLike[str] | None = None,
                      repeat_tune: bool | None = None, tuning_parallel: int | None = None,
                      te_parallel: int | None = None, budget: int | None = None, progress: bool = True,
                      reload: bool = False, lock: bool = True, lock_dir: str | os.PathLike[str] | None = None,
                      cwd: str | os.PathLike[str] | None = None,
                      warn: Callable[[str], None] | None = _warn) -> JobSettings:
    """Validate the environment (SPEC §2) and explicit overrides into `JobSettings`.

    `bank` plays the role of TUNE_BANK_PATH (it wins over the variable). Every bad value raises
    AoeError naming it.
    """
    from ..bank import repeat_tune as env_repeat_tune
    from ..bank import resolve_op_bank_dir, resolve_subgraph_bank_dir
    from ..bank.paths import check_name

    from ..soc import load_soc

    env = dict(os.environ if env is None else env)
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
    wp, _ = cfg.resolve_work_path(work_path, env, ini, cwd)
    bank_env = dict(env)
    if bank is not None:
        bank_env["TUNE_BANK_PATH"] = os.fspath(bank)
    op_dir = resolve_op_bank_dir(soc, env=bank_env, cwd=cwd) if mode == 2 else None
    sg_dir = resolve_subgraph_bank_dir(soc, env=bank_env, cwd=cwd) if mode == 1 else None
    if budget is None:
        budget = cfg.search_budget(env)
    elif not (isinstance(budget, int) and budget >= 1):
        raise AoeError(f"the search budget must be a positive integer, got {budget!r}")
    from .lock import lock_dir as default_lock_dir

    s = JobSettings(work_path=wp, device=dev, n_devices=n, te_parallel_asked=te_asked, te_parallel=te,
                    tuning_parallel_asked=tp, workers=workers, repeat_tune=repeat, op_bank_dir=op_dir,
                    subgraph_bank_dir=sg_dir, budget=budget, lock=lock,
                    lock_dir=Path(lock_dir) if lock_dir is not None else default_lock_dir(env),
                    progress=progress, reload=reload, config_path=ini.path, tune_ops_file=ini.aoe_config_file,
                    notes=notes)
    if warn is not None:
        for note in notes:
            warn(note)
    return s


# --- signals -----------------------------------------------------------------------------------

class StopFlag:
    """SIGINT/SIGTERM set the flag (the tuner stops between cases); a second signal stops at once.

    If the operator being tuned does not finish within `grace` seconds of the first signal
    (`AOE_STOP_GRACE`, default 10), the job stops at once as well (SIGALRM): the result file is
    written as "tuning incomplete" either way.
    """

    def __init__(self, grace: float | None = None) -> None:
        self.signum: int | None = None
        self._prev: dict[int, Any] = {}
        self._pid = os.getpid()
        self._children_before: set[int | None] = set()
        if grace is None:
            try:
                grace = float(os.environ.get("AOE_STOP_GRACE", "") or 10)
            except ValueError:
                grace = 10.0
        self.grace = max(0.0, grace)

    def __call__(self) -> bool:
        return self.signum is not None

    def _stop_now(self) -> None:
        # worker processes started by this job (not the caller's own children) may be stuck in a
        # case: end them, or the worker pool would wait for them forever
        import multiprocessing
        from concurrent.futures import InvalidStateError

        killed = False
        for p in multiprocessing.active_children():
            if p.pid not in self._children_before:
                p.kill()
                killed = True
        if killed:
            # CPython 3.11's pool manager thread then trips over the futures map() cancelled
            # (InvalidStateError in set_exception): harmless, but it would print a traceback
            prev_hook = threading.excepthook

            def hook(args: Any) -> None:
                if not issubclass(args.exc_type, InvalidStateError):
                    prev_hook(args)

            threading.excepthook = hook
        raise KeyboardInterrupt

    def _handler(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:      # a forked worker: its parent decides
            return
        if self.signum is not None:
            self._stop_now()
        self.signum = signum
        name = signal.Signals(signum).name
        try:
            sys.stderr.write(f"\naoe: {name} received: finishing the current operator and writing the result "
                             f"file (send it again to stop at once)\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        if self._prev and self.grace > 0:
            self._prev.setdefault(signal.SIGALRM, signal.signal(signal.SIGALRM, self._alarm))
            signal.setitimer(signal.ITIMER_REAL, self.grace)

    def _alarm(self, signum: int, frame: Any) -> None:
        if os.getpid() == self._pid and self.signum is not None:
            self._stop_now()

    def install(self) -> None:
        import multiprocessing

        self._pid = os.getpid()
        self._children_before = {p.pid for p in multiprocessing.active_children()}
        if threading.current_thread() is not threading.main_thread():
            return
        for s in (signal.SIGINT, signal.SIGTERM):
            self._prev[s] = signal.signal(s, self._handler)

    def restore(self) -> None:
        if signal.SIGALRM in self._prev:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in self._prev.items():
            signal.signal(s, h)
        self._prev.clear()


# --- results -----------------------------------------------------------------------------------

@dataclass
class JobResult:
    """One finished (or interrupted) tuning task."""

    kind: str                           # "opat" | "sgat"
    status: str                         # tuning successful / failed / incomplete
    result_file: Path
    report_key: str
    tuning_name: str
    report: Any                         # aoe.opat.OpatReport | aoe.sgat.SgatReport | None
    section: dict[str, Any] | None      # the OPAT / SGAT object written to the file
    seconds: float
    signal: int | None = None
    bank_dir: Path | None = None
    resumed_from: int = 0               # operators kept from an interrupted run
    output: Path | None = None

    @property
    def exit_code(self) -> int:
        if self.signal is not None:
            return 128 + self.signal
        if self.status == INCOMPLETE:
            return 1
        return 1 if self.status == FAILED else 0

    def summary_lines(self, top: int = 10) -> list[str]:
        from .progress import opat_summary, sgat_summary

        lines: list[str] = []
        if self.report is not None:
            lines += opat_summary(self.report, top) if self.kind == "opat" else sgat_summary(self.report, top)
        lines.append(f"{self.kind.upper()} {self.status} in {self.seconds:.2f} s"
                     + (f" (resumed, {self.resumed_from} operators kept)" if self.resumed_from else ""))
        lines.append(f"result file: {self.result_file}")
        if self.bank_dir is not None:
            lines.append(f"custom bank: {self.bank_dir}")
        if self.output is not None:
            lines.append(f"tuned model: {self.output}")
        return lines


def graph_fingerprint(graph: Any) -> str:
    """sha256 of the graph's JSON form: the identity of a job for `--reload`."""
    return hashlib.sha256(graph.to_json().encode("utf-8")).hexdigest()


def load_graph(spec: JobSpec) -> Any:
    """The graph to tune (model file, zoo model, Graph object or single-operator file)."""
    from .. import graph as g

    if spec.singleop:
        if spec.mode != 2:
            raise AoeError("--singleop is for operator tuning: use --job_type 2")
        from ..opat.single import load_single_ops

        graph = load_single_ops(spec.singleop)
        if spec.training:
            raise AoeError("--training cannot be used with --singleop")
        return graph
    if spec.graph is not None:
        graph = spec.graph
        if spec.training and not graph.training:
            from ..graph.training import derive_training

            graph = derive_training(graph)
        return graph
    if not spec.model:
        raise AoeError("no model given: pass --model/-m MODEL (an .onnx file, a .json graph or zoo:NAME) "
                       "or --singleop FILE")
    return g.load(spec.model, spec.input_shape, training=spec.training, compute_dtype=spec.compute_dtype)


def _record_to_json(r: Any) -> dict[str, Any]:
    return {"op_name": r.op_name, "op_type": r.op_type, "outcome": r.outcome, "before_us": r.before_us,
            "after_us": r.after_us, "kinds": {k: [g.before_us, g.after_us] for k, g in r.kinds.items()},
            "skipped": r.skipped, "error": r.error, "case": r.case}


def _record_from_json(d: Mapping[str, Any]) -> Any:
    from ..opat import KindGain, OpRecord

    return OpRecord(d["op_name"], d["op_type"], d.get("outcome"), d.get("before_us"), d.get("after_us"),
                    {k: KindGain(float(v[0]), float(v[1])) for k, v in (d.get("kinds") or {}).items()},
                    d.get("skipped"), d.get("error"), d.get("case"))


# --- the run ----------------------------------------------------------------------------------

def run_job(spec: JobSpec, settings: JobSettings, *, out: Callable[[str], None] | None = print,
            result_file: ResultFile | None = None, install_signals: bool = True,
            graph: Any = None) -> JobResult:
    """Run one tuning task (see the module docstring). `result_file`: add the task to that file."""
    from ..soc import load_soc

    kind = KIND[spec.mode]
    soc = load_soc(spec.soc)
    if spec.mode == 1:
        from ..sgat import check_soc

        check_soc(soc)
    graph = graph if graph is not None else load_graph(spec)
    tuning_name = spec.name or graph.name or "graph"
    tune_ops = None
    if spec.tune_ops is not None:
        from ..opat import select_ops

        tune_ops = select_ops(graph, spec.tune_ops.names, spec.tune_ops.types) or set()
        unknown = sorted(set(spec.tune_ops.names) - {op.name for op in graph.ops})
        types = {t for op in graph.ops for t in ([op.type] + list(op.attrs.get("fused_ops") or []))}
        unknown_t = sorted(set(spec.tune_ops.types) - types)
        if unknown or unknown_t:
            _warn(f"{spec.tune_ops.source}: not in the graph: "
                  + ", ".join([f"operator {n!r}" for n in unknown[:5]] + [f"type {t!r}" for t in unknown_t[:5]])
                  + (" ..." if len(unknown) > 5 or len(unknown_t) > 5 else ""))
        if not tune_ops:
            _warn(f"{spec.tune_ops.source} selects no operator of {tuning_name}: nothing will be tuned")

    lock = None
    if settings.lock:
        from .lock import DeviceLock

        lock = DeviceLock(settings.device, settings.lock_dir, model=spec.describe(),
                          notice=lambda m: _warn(m)).acquire()
    try:
        return _run_locked(spec, settings, soc, graph, kind, tuning_name, tune_ops, out, result_file,
                           install_signals)
    finally:
        if lock is not None:
            lock.release()


def _run_locked(spec: JobSpec, settings: JobSettings, soc: Any, graph: Any, kind: str, tuning_name: str,
                tune_ops: set[str] | None, out: Callable[[str], None] | None, result_file: ResultFile | None,
                install_signals: bool) -> JobResult:
    fp = graph_fingerprint(graph)
    job_id = {"kind": kind, "fingerprint": fp, "soc": soc.name}
    prev_state: dict[str, Any] | None = None
    if settings.reload:
        found = find_interrupted(settings.work_path, kind, job_id)
        if found is None:
            _say(out, f"--reload: no interrupted {kind.upper()} job of {tuning_name} on {soc.name} in "
                      f"{settings.work_path}; starting a new one")
        else:
            path, prev_state = found
            rf = ResultFile.open_existing(path, kind)
            key = str(prev_state["report_key"])
            _say(out, f"--reload: resuming the interrupted job in {path} "
                      f"({len(prev_state.get('done', []))} {'operators' if kind == 'opat' else 'subgraphs'} "
                      f"already done)")
    if prev_state is None:
        rf = result_file if result_file is not None else ResultFile(settings.work_path, kind)
        key = rf.new_task()
    if graph.training:
        _say(out, "in tune mode, training graph handled by tools.")
    stop = StopFlag()
    if install_signals:
        stop.install()
    state_base = {"job": dict(job_id, model=spec.describe(), mode=spec.mode, tuning_name=tuning_name),
                  "report_key": key, "pid": os.getpid(), "host": socket.gethostname(),
                  "started": prev_state.get("started") if prev_state else time.strftime("%Y%m%d%H%M%S"),
                  "status": "running"}
    prev_elapsed = float(prev_state.get("elapsed_s", 0.0)) if prev_state else 0.0
    t0 = time.perf_counter()
    rf.set_task(key, tuning_name, None, None)
    rf.write()
    rf.write_state(dict(state_base, elapsed_s=prev_elapsed, done=prev_state.get("done", []) if prev_state else [],
                        counters=prev_state.get("counters") if prev_state else None))
    _say(out, "Aoe tuning graph.")
    for line in settings.describe():
        _say(out, f"  {line}")
    try:
        if kind == "opat":
            res = _run_opat(spec, settings, soc, graph, tune_ops, rf, key, tuning_name, state_base, prev_state,
                            prev_elapsed, t0, stop, out)
        else:
            res = _run_sgat(spec, settings, soc, graph, rf, key, tuning_name, state_base, prev_state,
                            prev_elapsed, t0, stop, out)
    finally:
        stop.restore()
    if spec.output is not None and res.status != INCOMPLETE:
        res.output = write_tuned_model(spec.output, graph, soc, spec.mode, settings, tuning_name)
    return res


class _Stopped(Exception):
    """Raised from the SGAT progress callback to stop between subgraphs."""


def _run_opat(spec: JobSpec, settings: JobSettings, soc: Any, graph: Any, tune_ops: set[str] | None,
              rf: ResultFile, key: str, tuning_name: str, state_base: dict[str, Any],
              prev_state: dict[str, Any] | None, prev_elapsed: float, t0: float, stop: StopFlag,
              out: Callable[[str], None] | None) -> JobResult:
    from ..bank import Counters, Outcome
    from ..opat import Budget, OpatReport, tune_graph
    from .progress import Progress

    order = {op.name: i for i, op in enumerate(graph.ops)}
    done = {d["op_name"]: _record_from_json(d) for d in (prev_state or {}).get("done", [])
            if d.get("op_name") in order}
    counters = Counters(**(prev_state or {}).get("counters") or {}) if prev_state else Counters()
    records: dict[str, Any] = dict(done)
    progress = Progress(settings.progress, unit="case", force=settings.progress_force)
    last_write = [0.0]

    def section(status: str, recs: list[Any]) -> dict[str, Any] | None:
        rep = OpatReport(graph.name, soc.name, recs, counters, status, 0.0, 0, 0)
        return rep.to_result_section()

    def write_partial(final: bool = False) -> None:
        recs = sorted(records.values(), key=lambda r: order.get(r.op_name, 0))
        rf.set_task(key, tuning_name, None, section(INCOMPLETE, recs))
        rf.write()
        rf.write_state(dict(state_base, elapsed_s=prev_elapsed + time.perf_counter() - t0,
                            done=[_record_to_json(r) for r in recs if not r.skipped],
                            counters=counters.to_dict(), status="interrupted" if final else "running"))
        last_write[0] = time.perf_counter()

    def on_case(recs: list[Any], hit: bool) -> None:
        for r in recs:
            records[r.op_name] = r
        if recs and recs[0].outcome:
            counters.record(Outcome(recs[0].outcome))
        progress.step(hit, recs[0].op_name if recs else "", len(recs))
        write_partial()

    budget = Budget(evaluations=settings.budget) if settings.budget else None
    report = None
    error: BaseException | None = None
    try:
        report = tune_graph(graph, soc, settings.op_bank_dir, repeat_tune=settings.repeat_tune, budget=budget,
                            threads=settings.te_parallel, tune_ops=tune_ops, workers=settings.workers,
                            on_start=lambda n: progress.start(n), on_case=on_case, should_stop=stop,
                            done_ops=done)
    except KeyboardInterrupt:
        if stop.signum is None:
            stop.signum = signal.SIGINT
    except BaseException as exc:  # a crash: leave "tuning incomplete", then let it propagate
        error = exc
    finally:
        progress.close()
    seconds = prev_elapsed + time.perf_counter() - t0
    if report is None:
        write_partial(final=True)
        if error is not None:
            raise error
        recs = sorted(records.values(), key=lambda r: order.get(r.op_name, 0))
        return JobResult("opat", INCOMPLETE, rf.path, key, tuning_name, None, section(INCOMPLETE, recs), seconds,
                         stop.signum, settings.op_bank_dir, len(done))
    report.counters = counters          # per case, also across a resume (see the job README)
    status = report.status
    if stop.signum is not None:
        status = INCOMPLETE
    report.status = status
    report.seconds = seconds
    sec = report.to_result_section()
    if status == INCOMPLETE:
        write_partial(final=True)
    else:
        rf.set_task(key, tuning_name, seconds, sec)
        rf.write()
        rf.remove_state()
    return JobResult("opat", status, rf.path, key, tuning_name, report, sec, seconds, stop.signum,
                     settings.op_bank_dir, len(done))


def _run_sgat(spec: JobSpec, settings: JobSettings, soc: Any, graph: Any, rf: ResultFile, key: str,
              tuning_name: str, state_base: dict[str, Any], prev_state: dict[str, Any] | None,
              prev_elapsed: float, t0: float, stop: StopFlag, out: Callable[[str], None] | None) -> JobResult:
    from ..bank import Counters, Outcome
    from ..sgat import tune_graph
    from .progress import Progress

    prev = {d["repo_key"]: d for d in (prev_state or {}).get("done", []) if isinstance(d, dict) and "repo_key" in d}
    progress = Progress(settings.progress, unit="subgraph", force=settings.progress_force)
    last: list[Any] = [None]
    started = [False]

    def patched_section(rep: Any) -> dict[str, Any]:
        sec = rep.to_result_section()
        c = Counters()
        for r in rep.records:
            c.record(r.outcome)
        sec["repo_summary"] = c.to_dict()
        return sec

    def write(rep: Any, final: bool = False) -> None:
        rf.set_task(key, tuning_name, None, patched_section(rep) if rep is not None else None)
        rf.write()
        rf.write_state(dict(state_base, elapsed_s=prev_elapsed + time.perf_counter() - t0,
                            done=[r.to_dict() for r in rep.records] if rep is not None else list(prev.values()),
                            status="interrupted" if final else "running"))

    def on_subgraph(rec: Any) -> None:
        p = prev.get(rec.repo_key)
        if p is not None and rec.outcome is Outcome.RESERVED and p.get("outcome") in ("add", "update", "unsatisfied"):
            # finished before the interruption; the bank hit now is our own earlier write
            rec.outcome = Outcome(p["outcome"])
            rec.before_us = float(p["before_us"])
            rec.method = p.get("method", rec.method)
            rec.evaluated = int(p.get("evaluated", rec.evaluated))

    def on_progress(rep: Any) -> None:
        last[0] = rep
        if not started[0]:
            progress.start(rep.n_cases)
            started[0] = True
        r = rep.records[-1]
        progress.step(r.outcome.hit, "+".join(r.op_types)[:60], r.count * len(r.op_types))
        write(rep)
        if stop():
            raise _Stopped

    report = None
    error: BaseException | None = None
    try:
        # a tune_ops file limits SGAT to the subgraphs holding a listed operator name or type
        report = tune_graph(graph, soc, settings.subgraph_bank_dir, repeat_tune=settings.repeat_tune,
                            on_subgraph=on_subgraph, on_progress=on_progress,
                            tune_ops=spec.tune_ops.to_json() if spec.tune_ops is not None else None)
    except _Stopped:
        pass
    except KeyboardInterrupt:
        if stop.signum is None:
            stop.signum = signal.SIGINT
    except BaseException as exc:
        error = exc
    finally:
        progress.close()
    seconds = prev_elapsed + time.perf_counter() - t0
    if report is None or stop.signum is not None:
        rep = report if report is not None else last[0]
        if error is not None:
            # SPEC §4: no SGAT section when subgraph tuning failed
            rf.set_task(key, tuning_name, None, None)
            rf.write()
            rf.write_state(dict(state_base, elapsed_s=seconds, done=list(prev.values()), status="interrupted"))
            raise error
        write(rep, final=True)
        return JobResult("sgat", INCOMPLETE, rf.path, key, tuning_name, rep,
                         patched_section(rep) if rep is not None else None, seconds, stop.signum,
                         settings.subgraph_bank_dir, len(prev))
    sec = patched_section(report)
    c = Counters()
    for r in report.records:
        c.record(r.outcome)
    report.counters = c
    report.tuning_time_s = seconds
    rf.set_task(key, tuning_name, seconds, sec)
    rf.write()
    rf.remove_state()
    return JobResult("sgat", SUCCESS, rf.path, key, tuning_name, report, sec, seconds, None,
                     settings.subgraph_bank_dir, len(prev))


def write_tuned_model(path: Path, graph: Any, soc: Any, mode: int, settings: JobSettings, name: str) -> Path:
    """`--output`: the graph with, per operator, the strategy in use after tuning and its simulated time."""
    from .result import atomic_write_json
    from .verification import verify_graph

    path = Path(path)
    if path.is_dir():
        path = path / f"{name}_tuned.json"
    rep = verify_graph(graph, soc, mode=mode, op_bank_dir=settings.op_bank_dir,
                       subgraph_bank_dir=settings.subgraph_bank_dir, model=name)
    data = {"format": "aoe-tuned-model/1", "soc_version": soc.name, "job_type": mode,
            "performance": rep.to_dict(), "graph": graph.to_dict()}
    try:
        atomic_write_json(path, data, indent=None)
    except OSError as exc:
        raise AoeError(f"cannot write --output {path}: {exc.strerror or exc}") from None
    return path
