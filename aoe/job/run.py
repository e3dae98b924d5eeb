"""The tuning job: the device lock, the one run loop for both tuners, result files, resume.

    spec = JobSpec(mode=2, model="zoo:mobilenet_v2", soc="Ascend910B2")
    settings = settings_from_env(os.environ, soc=spec.soc, mode=spec.mode)
    result = run_job(spec, settings)          # writes aoe_result_opat_<ts>_pid<pid>.json

Operator tuning (`aoe.opat.tune_graph`) and subgraph tuning (`aoe.sgat.tune_graph`) follow one
contract (`aoe.tuning`), so one loop drives both: the job hands the tuner an events object and the
records of an interrupted run; after every case it rewrites the result file from the tuner's live
report (`"tuning incomplete"`, no `tuning_time(s)`) and the resume state from the records, so a job
killed at any instant leaves a valid file that says so. SIGINT/SIGTERM set a stop flag the tuner
asks between cases; the file is then written as interrupted and the job exits 130/143. `--reload`
finds the latest interrupted job of the same graph (same model fingerprint, SoC and mode) in the
work path and continues it in the same result file.
"""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import graph as g
from .. import opat
from ..bank.paths import check_bank_tree
from ..errors import AoeError
from ..safetext import safe_text
from ..graph.training import derive_training
from ..opat.graph_tune import case_executor
from ..opat.report import record_from_state as opat_record
from ..ops.coverage import format_counts, skipped_log_path, write_skipped_log
from ..soc import Soc
from ..tuning import FAILED, INCOMPLETE, SUCCESS, Events, Report
from .identity import find_resumable, graph_fingerprint, job_identity
from .inputs import check_inputs, model_bytes, selected_ops, task_name
from .lock import DeviceLock
from .progress import Progress, hit_lines, opat_summary, sgat_summary, skipped_entries
from .records import TaskRecord, soc_value
from .result import ResultFile, claim_result, hostname, read_journal, release_results, remove_stale_temps
from .settings import DEFAULT_SOC, JobSettings, JobSpec, _warn, memory_note, settings_from_env
from .signals import StopFlag
from .verification import write_tuned_model

KIND = {1: "sgat", 2: "opat"}
CHECKPOINT_S = 1.0  # the result file and resume state are rewritten at most this often (and at the end)
CHECKPOINT_SHARE = 0.1  # ... and at most this share of the job's time: a checkpoint of a 100k-operator graph
                        # takes a second, and rewriting it every second made the job's cost grow with its square
__all__ = ["JobResult", "JobSpec", "JobSettings", "run_job", "settings_from_env", "load_graph", "graph_fingerprint",
           "DEFAULT_SOC", "SUCCESS", "FAILED", "INCOMPLETE"]


def _say(out: Callable[[str], None] | None, text: str) -> None:
    if out is not None:
        out(safe_text(text, keep_newlines=True))


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
    skipped: list[dict[str, Any]] | None = None  # operators not priced: {"op", "op_type", "reason"}
    skipped_log: Path | None = None     # the same list in a file beside the result file
    report_html: Path | None = None     # the HTML report beside the result file (aoe.report)
    hits: dict[str, int] | None = None  # bank hits by provenance: builtin / custom / this run
    repeat_tune: bool = False

    @property
    def exit_code(self) -> int:
        if self.signal is not None:
            return 128 + self.signal
        if self.status == INCOMPLETE:
            return 1
        return 1 if self.status == FAILED else 0

    def summary_lines(self, top: int = 10) -> list[str]:
        """The console summary: top operators or subgraphs, counters, status, where the files are."""
        lines: list[str] = []
        if self.report is not None:
            summary = opat_summary if self.kind == "opat" else sgat_summary
            lines += summary(self.report, top, self.hits, self.repeat_tune) + hit_lines(self.report, self.hits, self.kind)
            skipped = self.skipped if self.skipped is not None else skipped_entries(self.report)
            if skipped:  # absent from every total above: say which, never only how many
                lines.append(f"skipped operators (not priced, in no total): {len(skipped)}: "
                             f"{format_counts(skipped)}")
        lines.append(f"{self.kind.upper()} {self.status} in {self.seconds:.2f} s"
                     + (f" (resumed, {self.resumed_from} operators kept)" if self.resumed_from else ""))
        lines.append(f"result file: {self.result_file}")
        if self.skipped_log is not None:
            lines.append(f"skipped operators (name, type, reason): {self.skipped_log}")
        if self.report_html is not None:
            lines.append(f"report: {self.report_html}")
        if self.bank_dir is not None:
            lines.append(f"custom bank: {self.bank_dir}")
        if self.output is not None:
            lines.append(f"tuned model: {self.output}")
        return lines


def _on_cluster(kind: str) -> bool:
    """True when this context sends the job's tuning to a Dask cluster (`aoe.batch.open_batch`)."""
    if kind == "opat":
        return case_executor.get() is not None
    from ..sgat.tune import subgraph_executor  # an SGAT job has loaded the tuner already
    return subgraph_executor.get() is not None


def load_graph(spec: JobSpec) -> Any:
    """The graph to tune (model file, zoo model, Graph object or single-operator file)."""
    if spec.framework == "singleop" and spec.mode != 2:
        raise AoeError("--singleop is for operator tuning: use --job_type 2")
    if spec.graph is not None:
        graph = spec.graph
        if spec.training and not graph.training:
            graph = derive_training(graph)
        return graph
    if not spec.model:
        raise AoeError("no model given: pass --model/-m MODEL (an .onnx file, a .json graph or zoo:NAME) "
                       "or --singleop FILE")
    return g.load(spec.model, spec.input_shape, training=spec.training, compute_dtype=spec.compute_dtype,
                  framework=spec.framework)


# --- the tuners, as the job sees them ------------------------------------------------------------

@dataclass(frozen=True)
class _Tuner:
    kind: str                                     # "opat" | "sgat"
    unit: str                                     # what the progress bar counts
    tune: Callable[..., Any]                      # tune_graph(graph, soc, bank_dir, config, only=, events=, done=)
    from_state: Callable[[Any], Any]              # a record from its resume state
    config: Any
    bank_dir: Path | None
    section_on_error: bool                        # keep the partial section when tuning raised


def _tuner(kind: str, settings: JobSettings) -> _Tuner:
    if kind == "opat":
        budget = opat.Budget(evaluations=settings.budget) if settings.budget else None
        conf = opat.OpatConfig(budget=budget, repeat_tune=settings.repeat_tune, workers=settings.workers,
                               threads=settings.te_parallel, implmode=settings.implmode, builtin=settings.builtin,
                               inline_s=settings.inline_s)
        return _Tuner("opat", "case", opat.tune_graph, opat_record, conf, settings.op_bank_dir, True)
    from .. import sgat  # lazily: an OPAT job never needs the SGAT tuner
    from ..sgat.report import record_from_state

    return _Tuner("sgat", "subgraph", sgat.tune_graph, record_from_state,
                  sgat.SgatConfig(repeat_tune=settings.repeat_tune, builtin=settings.builtin), settings.subgraph_bank_dir,
                  False)


class _JobEvents(Events):
    """The tuner's events as the job handles them: progress bar, run record, result file, resume state, stop flag."""

    detail = True   # the run's record keeps every case's kernels (or subgraph's plans)

    def __init__(self, progress: Progress, stop: StopFlag, write: Callable[..., None], record: TaskRecord) -> None:
        self.report: Report | None = None
        self._progress, self._stop, self._write, self._record = progress, stop, write, record

    def start(self, n_cases: int, report: Report) -> None:
        self.report = report
        self._record.start(report)
        self._progress.start(n_cases)

    def case_done(self, records: Sequence[Any], hit: bool) -> None:
        label = records[0].label if records else ""
        self._record.case(self.report, records)
        self._progress.step(hit, label, sum(r.n_ops for r in records))
        self._write(self.report, False, new=records)

    def should_stop(self) -> bool:
        return self._stop()


# --- the run ----------------------------------------------------------------------------------

def run_job(spec: JobSpec, settings: JobSettings, *, out: Callable[[str], None] | None = print,
            result_file: ResultFile | None = None, install_signals: bool = True,
            graph: Any = None, report_html: bool | None = False, stop: StopFlag | None = None) -> JobResult:
    """Run one tuning task (see the module docstring). `result_file`: add the task to that file.

    `report_html`: also write the HTML report beside the result file (None: when matplotlib is installed).
    `stop`: a stop flag the caller installed for longer than this task (a batch); the job then leaves
    the signal handlers alone. Without one the job takes SIGINT/SIGTERM itself (`install_signals`)
    until its result file is final.
    """
    kind = KIND[spec.mode]
    soc = spec.soc_value      # resolved once, where the spec was made (a door): a value from here on
    if spec.mode == 1:
        from ..sgat import check_soc  # lazily: an OPAT job never needs the SGAT tuner

        check_soc(soc)
    graph = graph if graph is not None else load_graph(spec)
    check_inputs(graph, single_ops=spec.framework == "singleop")
    note = memory_note(model_bytes(spec, graph), settings.workers)
    if note:
        _warn(note)
    tuning_name = task_name(spec, graph)
    only = selected_ops(spec, graph, tuning_name)
    check_bank_tree(settings.op_bank_dir, settings.subgraph_bank_dir)  # a planted link: refused once, here

    lock = None
    if settings.lock:
        lock = DeviceLock(settings.device, settings.lock_dir, model=spec.describe(),
                          notice=lambda m: _warn(m)).acquire()
    try:
        res = _run_locked(spec, settings, soc, graph, _tuner(kind, settings), tuning_name, only, out,
                          result_file, install_signals, stop)
    finally:
        if lock is not None:
            lock.release()
    if spec.output is not None and res.status != INCOMPLETE:
        res.output = write_tuned_model(spec.output, graph, soc, spec.mode, settings, tuning_name)
    if report_html is not False and res.status != INCOMPLETE:
        from .. import report as rep  # lazily: matplotlib

        if report_html or rep.report_available():
            try:
                res.report_html = rep.write_report(res.result_file, task=res.report_key)
            except Exception as exc:  # noqa: BLE001 - the tuning is done and saved: say so, keep the exit code
                _warn(f"no HTML report: {exc}" if isinstance(exc, AoeError) else
                      f"no HTML report ({type(exc).__name__}: {exc}); the tuning result is complete")
    return res


def _run_locked(spec: JobSpec, settings: JobSettings, soc: Soc, graph: Any, tuner: _Tuner, tuning_name: str,
                only: set[str] | None, out: Callable[[str], None] | None, result_file: ResultFile | None,
                install_signals: bool, stop: StopFlag | None) -> JobResult:
    own_stop = stop is None
    if stop is None:
        stop = StopFlag()
        if install_signals:
            stop.install()
    try:   # the handlers stay until the result file is final: a signal while it is written sets the flag
        return _run_stoppable(spec, settings, soc, graph, tuner, tuning_name, only, out, result_file, stop)
    finally:
        release_results()
        if own_stop:
            stop.restore()


def _run_stoppable(spec: JobSpec, settings: JobSettings, soc: Soc, graph: Any, tuner: _Tuner, tuning_name: str,
                   only: set[str] | None, out: Callable[[str], None] | None, result_file: ResultFile | None,
                   stop: StopFlag) -> JobResult:
    kind = tuner.kind
    job_id = job_identity(kind, graph, soc.name)
    prev_state: dict[str, Any] = {}
    if settings.reload:
        for tmp in remove_stale_temps(settings.work_path, kind):
            _say(out, f"--reload: removed {tmp.name}, a temp file left by a killed job")
        found = find_resumable(settings.work_path, job_id, graph)
        found = found if found is None or claim_result(found[0]) else None  # not one another thread resumed
        if found is None:
            _say(out, f"--reload: no interrupted {kind.upper()} job of {tuning_name} on {soc.name} in "
                      f"{settings.work_path}; starting a new one")
        else:
            path, prev_state = found
            rf = ResultFile.open_existing(path, kind)
            key = str(prev_state["report_key"])
            # the cases finished after the last checkpoint are in the journal
            journal = [e for e in read_journal(rf.state_path) if e.get("key") == key]
            prev_state["done"] = list(prev_state.get("done", [])) + [d for e in journal for d in e["done"]]
            elapsed = [float(e.get("elapsed_s", 0.0)) for e in journal if isinstance(e.get("elapsed_s"), (int, float))]
            prev_state["elapsed_s"] = max([float(prev_state.get("elapsed_s", 0.0))] + elapsed)
    if not prev_state:
        rf = result_file if result_file is not None else ResultFile(settings.work_path, kind)
        key = rf.new_task()
    done = _restore(tuner, prev_state.get("done", []))
    if prev_state:
        # counted once each: a case finished after the last checkpoint is in both the state and the journal
        _say(out, f"--reload: resuming the interrupted job in {rf.path} ({len(done)} "
                  f"{'operators' if kind == 'opat' else 'subgraphs'} already done)")
    if graph.training and spec.graph is not None:
        # the product's line for a training framework handing its graph over (the TensorFlow and PyTorch
        # frontends, or an in-memory graph given to the API), not for a model file tuned with --training
        _say(out, "in tune mode, training graph handled by tools.")
    state_base = {"job": dict(job_id, model=spec.describe(), mode=spec.mode, tuning_name=tuning_name),
                  "report_key": key, "pid": os.getpid(), "host": hostname(),
                  "started": prev_state.get("started") or time.strftime("%Y%m%d%H%M%S"), "status": "running"}
    prev_elapsed = float(prev_state.get("elapsed_s", 0.0))
    t0 = time.perf_counter()

    last = [-CHECKPOINT_S, CHECKPOINT_S]   # when the last checkpoint was written, the gap before the next
    states: dict[str, Any] = {r.key: r.to_state() for r in done.values() if not getattr(r, "skipped", None)}

    def write(report: Report | None, final: bool, section: bool = True, new: Sequence[Any] = ()) -> None:
        # every case goes to the journal (one appended line); the result file and the state are rewritten
        # at most once per CHECKPOINT_S (longer when a checkpoint is slow: see CHECKPOINT_SHARE) and at the
        # end, so the cost does not grow with cases squared
        now = time.perf_counter()
        elapsed = prev_elapsed + now - t0
        fresh = [(r.key, r.to_state()) for r in new if not getattr(r, "skipped", None)]
        if fresh:
            rf.append_journal({"key": key, "elapsed_s": round(elapsed, 3), "done": [s for _, s in fresh]})
            states.update(fresh)   # each record's state is computed once, not at every checkpoint
        if not final and now - last[0] < last[1]:
            return
        last[0] = now
        rf.set_task(key, tuning_name, None, report.to_result_section() if report is not None and section else None)
        rf.write(pretty=final)
        if final:  # every record of the report, also those no case_done announced
            recs = report.records if report is not None else list(done.values())
            saved = [r.to_state() for r in recs if not getattr(r, "skipped", None)]
        else:
            saved = list(states.values())
        rf.write_state(dict(state_base, elapsed_s=elapsed, done=saved, status="interrupted" if final else "running"))
        last[1] = max(CHECKPOINT_S, (time.perf_counter() - now) / CHECKPOINT_SHARE)

    write(None, False)
    _say(out, "Aoe tuning graph.")
    # an aoe.batch run sends the operator cases or the subgraph searches to a Dask cluster: the local
    # device, simulator threads and worker processes do not apply
    header = settings.describe(kind, cluster=_on_cluster(kind))
    for line in header:
        _say(out, f"  {line}")
    progress = Progress(settings.progress, unit=tuner.unit, force=settings.progress_force)
    record = TaskRecord(rf, key, kind, {"tuning_name": tuning_name, "soc": soc_value(soc), "model": spec.record(),
                                        "options": settings.pricing_options(kind), "settings": header})
    events = _JobEvents(progress, stop, write, record)
    report = None
    try:
        report = tuner.tune(graph, soc, tuner.bank_dir, tuner.config, only=only, events=events, done=done)
    except KeyboardInterrupt:      # a second signal, or the grace period ran out
        if stop.signum is None:
            stop.signum = signal.SIGINT
    except BaseException:          # a crash: leave "tuning incomplete", then let it propagate
        progress.close()
        write(events.report, True, section=tuner.section_on_error)
        rf.close_journal()
        record.writer.close()
        raise
    finally:
        progress.close()
    seconds = prev_elapsed + time.perf_counter() - t0
    report = report if report is not None else events.report
    if report is None or stop.signum is not None or report.status == INCOMPLETE:
        if report is not None:
            report.status = INCOMPLETE
        write(report, True)
        rf.close_journal()
        record.end(report, INCOMPLETE, seconds)
        return JobResult(kind, INCOMPLETE, rf.path, key, tuning_name, report,
                         report.to_result_section() if report is not None else None, seconds, stop.signum,
                         tuner.bank_dir, len(done), **_skipped(rf.path, report, graph, tuning_name))
    _set_seconds(report, seconds)
    sec = report.to_result_section()
    rf.set_task(key, tuning_name, seconds, sec)
    rf.write()
    rf.remove_state()
    record.end(report, report.status, seconds)
    return JobResult(kind, report.status, rf.path, key, tuning_name, report, sec, seconds, None,
                     tuner.bank_dir, len(done), **_skipped(rf.path, report, graph, tuning_name),
                     hits=dict(record.hits), repeat_tune=settings.repeat_tune)


def _skipped(result_path: Path, report: Any, graph: Any, tuning_name: str) -> dict[str, Any]:
    """JobResult's skipped operators, written beside the result file (aoe_skipped_<kind>_<ts>_pid<pid>.log)."""
    entries = skipped_entries(report, graph) if report is not None else []
    if not entries:
        return {"skipped": entries, "skipped_log": None}
    path = skipped_log_path(result_path)
    try:
        return {"skipped": entries,
                "skipped_log": write_skipped_log(path, entries, title=f"operators of {tuning_name} tuning skipped")}
    except OSError as exc:
        raise AoeError(f"cannot write the skipped-operators log {path}: {exc.strerror or exc}") from None


def _restore(tuner: _Tuner, states: Any) -> dict[str, Any]:
    """Records of an interrupted run from its resume state; a damaged one is tuned again."""
    done: dict[str, Any] = {}
    for d in states if isinstance(states, list) else []:
        try:
            rec = tuner.from_state(d)
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        done[rec.key] = rec
    return done


def _set_seconds(report: Any, seconds: float) -> None:
    # the job's clock includes the time before an interruption
    if hasattr(report, "tuning_time_s"):
        report.tuning_time_s = seconds
    else:
        report.seconds = seconds
