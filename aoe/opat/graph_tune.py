"""Graph-level operator tuning: walk the graph once, de-duplicate cases, consult the banks, tune misses.

For every operator: `aoe.ops.describe` gives its case (or a reason to skip it); identical cases are
tuned once and their result applies to every operator that shares them. A case found in the custom
or built-in bank is a *hit* and is not tuned again unless `repeat_tune`; everything else is tuned
and the decision add / update / reserved / unsatisfied (`aoe.bank.decide`) says what is written to
the custom bank. A failure inside one case marks its operators failed and tuning goes on.

The run follows the one tuner contract of `aoe.tuning`: events in, a live `OpatReport` out.
"""
from __future__ import annotations

import dataclasses
import numbers
import os
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

import numpy as np

from ..bank import BankChain, BuiltinBank, OpBank, decide, make_pending
from ..bank.decision import should_tune
from ..errors import AoeError
from ..graph import Graph
from ..ops import HIGH_PERFORMANCE, IMPL_MODES, OpCase, Unsupported, describe
from ..soc import Soc, require_soc
from ..tuning import FAILED, INCOMPLETE, SUCCESS, Events, restore
from .apply import fused_names, op_type_label, price
from .detail import case_detail
from .report import OpatReport, OpRecord
from .search import Budget, Measure, as_measure, simulator_measure
from .tune import KINDS, KindGain, TuneResult, chain_steps, tune_case


@dataclass(frozen=True)
class OpatConfig:
    """How operator tuning runs (a value: share it, copy it with `dataclasses.replace`)."""

    kinds: tuple[str, ...] = KINDS          # Schedule / Format / Impl
    budget: Budget | None = None            # per case (None: the drivers' default)
    implmode: str = HIGH_PERFORMANCE        # op_select_implmode
    repeat_tune: bool = False               # tune cases found in a bank again
    builtin: bool = True                    # consult the built-in bank
    workers: int = 1                        # worker processes (results identical to serial)
    # CPU seconds of tuning done in the job's own process before workers start (None: INLINE_CPU_S)
    inline_s: float | None = None
    threads: int = 1                        # simulator threads per process
    seed: int = 0
    measure: Measure | None = None          # None: the simulator

    def __post_init__(self) -> None:
        # an embedding program's values are checked here, not where a comparison would raise TypeError
        if isinstance(self.workers, bool) or not isinstance(self.workers, numbers.Integral) or self.workers < 1:
            raise AoeError(f"the number of tuning workers must be an integer of at least 1, got {self.workers!r}")
        if self.inline_s is not None and (isinstance(self.inline_s, bool) or not isinstance(self.inline_s, numbers.Real)
                                          or not self.inline_s >= 0):
            raise AoeError(f"inline_s must be a number of CPU seconds >= 0, got {self.inline_s!r}")
        unknown = set(self.kinds) - set(KINDS)
        if unknown or not self.kinds:
            raise AoeError(f"tuning kinds must be a non-empty subset of {', '.join(KINDS)}; got {list(self.kinds)}")
        if self.implmode not in IMPL_MODES:
            raise AoeError(f"op_select_implmode must be one of {', '.join(IMPL_MODES)}, got {self.implmode!r}")


# Starting worker processes costs CPU: a fork server (an interpreter importing numpy) and, in each
# worker, aoe's import and its own warm caches. That is more than a short job's whole tuning (a re-run
# that re-tunes a few cases, a small graph). So a job with workers tunes in its own process first, and
# once this much of its CPU time has gone into tuning it estimates what is left (the cases still to
# tune x the CPU per case so far) and starts workers only when that is worth their start-up CPU.
INLINE_CPU_S = 0.3
# Start-up CPU of the pool (fork server, each worker): bench/job_bench.py `worker_start` printed 0.36 s
# for one worker and 0.42 s for two (2-core Intel Xeon VM, 2026-12-06 06:16 UTC, shared, load 7); each
# worker also warms its own caches (spaces, default strategies) that the job's process already holds
WORKER_START_CPU_S = (0.3, 0.1)
# workers start when the estimated work left is at least this many times their start-up CPU: then they
# add at most a sixth to the job's CPU, and the wall time of the rest nearly divides by the workers. The
# estimate grows with the machine's load (CPU seconds stretch on a busy machine: the 161 cases a truly
# cold ResNet-50 b32 training job had left were estimated at 2.06 s under a load of 6 on 2 cores, just
# over 4x the start-up of two workers), the constants do not
WORKERS_WORTH = 6.0


def workers_worth(cases_left: int, cpu_per_case: float, workers: int) -> bool:
    """Whether `cases_left` cases at `cpu_per_case` CPU seconds each are worth starting `workers` workers."""
    n = min(workers, cases_left)
    start = WORKER_START_CPU_S[0] + n * WORKER_START_CPU_S[1]
    return n > 1 and cases_left * cpu_per_case >= WORKERS_WORTH * start

# A pluggable case executor (e.g. aoe.batch's Dask farm): an object with the `map(fn, jobs)` /
# `shutdown(cancel_futures=)` / context-manager face of a concurrent.futures executor, returning results
# in submission order. Set for a context (thread- and task-local), so embedding code is not affected.
case_executor: ContextVar[Any] = ContextVar("aoe_opat_case_executor", default=None)


class InProcess:
    """The executor face of tuning in this process (no worker processes): `map` runs each call in this
    thread, lazily, so a job can still stop between cases."""

    def __enter__(self) -> "InProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Callable[..., Any], *iterables: Iterable[Any], timeout: float | None = None,
            chunksize: int = 1) -> Iterator[Any]:
        return map(fn, *iterables)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None


def worker_pool(workers: int) -> Any:
    """`aoe.opat.workers.worker_pool`, imported only when workers start: multiprocessing and
    concurrent.futures cost a job that starts none a few hundredths of a second."""
    from .workers import worker_pool as pool

    return pool(workers)


def tune_job(args: tuple[OpCase, Soc, tuple[str, ...], Budget, str, int, int]) -> TuneResult | str:
    """One case as a worker tunes it: (case, SoC, kinds, budget, implmode, seed, threads) -> the result,
    or the error as text (a case that fails must not stop the others). What a case executor runs."""
    case, soc, kinds, budget, implmode, seed, threads = args
    try:
        return tune_case(case, soc, kinds=kinds, budget=budget, implmode=implmode, seed=seed, threads=threads)
    except Exception as exc:  # noqa: BLE001 - one case failing must not stop the others
        return f"{type(exc).__name__}: {exc}"


def tune_graph(graph: Graph, soc: Soc, bank_dir: str | os.PathLike[str] | None = None,
               config: OpatConfig | None = None, *, only: set[str] | None = None, events: Events | None = None,
               done: Mapping[str, OpRecord] | None = None) -> OpatReport:
    """Operator-tune every operator of `graph` once; write improvements to the custom bank in `bank_dir`.

    `bank_dir` is the operator bank directory of this SoC (`aoe.bank.resolve_op_bank_dir`), None for
    no custom bank (nothing is written). `only`: the operator names to tune (a tune_ops selection).
    `events` and `done` follow the tuner contract of `aoe.tuning`: `done` maps operator names of an
    interrupted run to their restored records, kept without tuning again.
    """
    t0 = time.perf_counter()
    soc = require_soc(soc, "aoe.opat.graph_tune.tune_graph")
    cfg = config or OpatConfig()
    events = events or Events()
    budget = cfg.budget or Budget()
    custom = OpBank(bank_dir, soc.name, soc.cube_cores) if bank_dir is not None else None
    chain = BankChain(custom, BuiltinBank(soc.name, soc.cube_cores) if cfg.builtin else None)
    user_measure = as_measure(cfg.measure) if cfg.measure is not None else None
    measure = user_measure or simulator_measure(soc, cfg.threads)
    done = restore(done)

    order = [op.name for op in graph.ops if not (only is not None and op.name not in only)
             and not (getattr(op, "is_view", False) or op.attrs.get("view"))]  # views cost nothing at run time
    report = OpatReport(graph.name, soc.name, order)
    wanted = set(order)
    cases: dict[tuple[str, str], tuple[OpCase, list[Any]]] = {}
    for op in graph.ops:
        if op.name not in wanted:
            continue
        if op.name in done:
            report.add(done[op.name])
            continue
        try:
            case = describe(graph, op)
        except Unsupported as exc:
            report.add(OpRecord(op.name, op_type_label(op), skipped=str(exc), fused_names=fused_names(op)))
            continue
        except AoeError as exc:
            # inconsistent attributes: no case can be built (no key, nothing a bank could hold), so it
            # is listed as failed but is not a case and not counted
            report.add(OpRecord(op.name, op_type_label(op), error=str(exc), fused_names=fused_names(op)))
            continue
        cases.setdefault(case.case_id, (case, []))[1].append(op)
    report.cases_tuned = len(cases)
    events.start(len(cases), report)

    pending_tune: list[tuple[tuple[str, str], OpCase, Any, float | None, float | None]] = []
    stopped = False
    extra_cache: dict[Any, float] = {}
    worker_defaults: dict[tuple[str, str], dict[str, int]] = {}  # cid -> default strategy from a farm worker
    invalid: set[tuple[str, str]] = set()  # cases whose bank strategy is invalid on this SoC: tuned as if REPEAT_TUNE

    def finish(cid: tuple[str, str], case: OpCase, entry: Any, in_use: float | None, default_t: float,
               result: TuneResult | str | None) -> None:
        ops = cases[cid][1]
        in_bank = entry is not None
        ident = repr(cid)
        source = entry.source if entry is not None else None
        if isinstance(result, str):
            # A failed case still counts: nothing is written, so it is reserved when a bank holds
            # it and unsatisfied otherwise (the counters' identities and "every case" both hold).
            outcome = decide(in_bank, False, in_use, None)
            recs = [OpRecord(op.name, op_type_label(op), outcome.value, in_use, in_use, error=result, case=ident,
                             fused_names=fused_names(op), source=source) for op in ops]
        else:
            tuned = result.after_us if result is not None else None
            if tuned is not None and in_use is not None and round(tuned, 3) >= round(in_use, 3):
                tuned = None  # a gain the result file cannot show (under 0.0005 us) is no gain
            outcome = decide(in_bank, cfg.repeat_tune or cid in invalid, in_use, tuned)
            kinds_out: dict[str, KindGain] = {}
            if result is not None:
                report.evaluations += result.evaluations
                if outcome.writes:
                    kinds_out = kinds_against(result, in_use)
                    if custom is not None:
                        # `over`: the stored strategy was re-priced, so a false claim in the bank
                        # (e.g. 0 us) cannot keep this improvement out
                        over = (entry.knowledge, in_use) if entry is not None and in_use is not None else None
                        custom.save([make_pending(case.op_type, case.key, result.knowledge, result.after_us,
                                                  default_t, {"soc": soc.name, "kinds": sorted(kinds_out)},
                                                  over)])
            after = tuned if outcome.writes else in_use
            detail = None
            if events.detail:
                # the kernels the job's record keeps: the strategy in use after (tuned, banked or default)
                knowledge = (result.knowledge if outcome.writes and result is not None
                             else entry.knowledge if entry is not None and cid not in invalid else None)
                detail = case_detail(soc, case, knowledge, worker_defaults.get(cid))
            recs = [OpRecord(op.name, op_type_label(op), outcome.value, in_use, after, kinds_out, case=ident,
                             fused_names=fused_names(op), default_us=default_t, source=source, detail=detail)
                    for op in ops]
        for rec in recs:
            report.add(rec)
        events.case_done(recs, in_bank)

    farm = case_executor.get()
    parallel = (cfg.workers > 1 or farm is not None) and user_measure is None
    # a farm (e.g. a Dask cluster) was asked for explicitly: every pending case goes to it
    inline_left = 0.0 if farm is not None else (INLINE_CPU_S if cfg.inline_s is None else cfg.inline_s)
    inline_cpu, inline_n = 0.0, 0   # CPU and cases tuned here: the estimate of the work left
    for cid, (case, ops) in cases.items():
        if events.should_stop():
            stopped = True
            break
        entry = None
        try:
            entry = chain.lookup(case.op_type, case.key)
            if entry is None and farm is not None and parallel and should_tune(False, cfg.repeat_tune):
                # a farm case with nothing in a bank: its default is priced when its result comes back,
                # with the default strategy the worker derived (the client need not derive it again)
                pending_tune.append((cid, case, None, None, None))
                continue
            # a case an earlier model of the batch sent to the farm: its worker's default strategy
            known = (farm.default_strategy((case, soc, tuple(cfg.kinds), budget, cfg.implmode, cfg.seed, cfg.threads))
                     if farm is not None and parallel and hasattr(farm, "default_strategy") else None)
            if known is not None:
                worker_defaults[cid] = known
            default_t = price(case, soc, None, measure, extra_cache, default=known)
            in_use = default_t
            usable = entry is not None
            if entry is not None:
                try:
                    in_use = price(case, soc, entry.knowledge, measure, extra_cache)
                except (AoeError, KeyError, ValueError, TypeError):
                    in_use = entry.perf_us  # a record aoe cannot re-price (e.g. from real CANN)
                if in_use is None or not np.isfinite(in_use):
                    # the stored strategy is invalid on this SoC: the compiler falls back to its default,
                    # and the record must not keep the case from being tuned (a better result replaces it)
                    in_use, usable = default_t, False
                    invalid.add(cid)
        except Exception as exc:  # noqa: BLE001 - a broken measure fails this case only
            in_use = entry.perf_us if entry is not None else None
            finish(cid, case, entry, in_use, 0.0, f"{type(exc).__name__}: {exc}")
            continue
        if not should_tune(usable, cfg.repeat_tune):
            finish(cid, case, entry, in_use, default_t, None)
            continue
        if parallel and inline_left <= 0.0:
            pending_tune.append((cid, case, entry, in_use, default_t))
            continue
        c0 = time.thread_time()   # this thread's CPU: other threads of an embedding program do not count
        try:
            result: TuneResult | str = tune_case(case, soc, kinds=cfg.kinds, budget=budget, measure=user_measure,
                                                 implmode=cfg.implmode, seed=cfg.seed, threads=cfg.threads)
        except Exception as exc:  # noqa: BLE001 - one case failing must not stop the others
            result = f"{type(exc).__name__}: {exc}"
        spent = time.thread_time() - c0
        inline_left -= spent
        inline_cpu, inline_n = inline_cpu + spent, inline_n + 1
        finish(cid, case, entry, in_use, default_t, result)

    if pending_tune and not stopped:
        # the cases left are tuned here after all when the estimate says workers would cost more CPU than
        # they are worth (never when none was tuned here: inline_s = 0 asks for workers from the start)
        here = farm is None and inline_n > 0 and not workers_worth(len(pending_tune), inline_cpu / inline_n,
                                                                    cfg.workers)
        # the SoC travels by value (its native twin is rebuilt in the worker), so a what-if SoC made with
        # Soc.replace is tuned as given, not reloaded from its file
        plain = soc if here else dataclasses.replace(soc, _native=None)
        jobs = [(case, plain, tuple(cfg.kinds), budget, cfg.implmode, cfg.seed, cfg.threads)
                for _, case, _, _, _ in pending_tune]
        with farm if farm is not None else InProcess() if here else worker_pool(cfg.workers) as pool:
            # results come back in submission order, so the run is identical to a serial one
            results = _worker_results(pool, jobs, report)
            for job, (cid, case, entry, in_use, default_t), result in zip(jobs, pending_tune, results):
                if default_t is None:  # a farm case priced now (above)
                    try:
                        strat = getattr(pool, "default_strategy", lambda _: None)(job)
                        if strat is not None:
                            worker_defaults[cid] = strat
                        default_t = in_use = price(case, soc, None, measure, extra_cache, default=strat)
                    except Exception as exc:  # noqa: BLE001 - a broken measure fails this case only
                        finish(cid, case, entry, None, 0.0, f"{type(exc).__name__}: {exc}")
                        continue
                finish(cid, case, entry, in_use, default_t, result)
                if events.should_stop():
                    stopped = True
                    pool.shutdown(cancel_futures=True)
                    break

    if stopped or not report.complete:
        report.status = INCOMPLETE
    elif report.failed:
        report.status = FAILED
    else:
        report.status = SUCCESS
    report.seconds = time.perf_counter() - t0
    return report


def _worker_results(pool: Any, jobs: list[tuple[Any, ...]], report: OpatReport) -> Any:
    """`pool.map(tune_job, jobs)`, where a worker that could not start or died raises WorkersFailed."""
    try:
        yield from pool.map(tune_job, jobs)
    except Exception as exc:
        # BrokenProcessPool can only come from concurrent.futures.process, imported once a pool started
        cfp = sys.modules.get("concurrent.futures.process")
        if not isinstance(exc, OSError) and not (cfp is not None and isinstance(exc, cfp.BrokenProcessPool)):
            raise
        from .workers import WorkersFailed

        # the fork server, a fork or a pipe failed, or a worker was killed (out of memory): the job stops
        # with an error, never a quiet "incomplete" (a BrokenPipeError here is not a closed stdout)
        pool.shutdown(wait=False, cancel_futures=True)
        raise WorkersFailed(
            f"the worker processes of this job could not start or died ({type(exc).__name__}: {exc}); "
            f"{len(report.records)} operator(s) were done and are kept (run again with --reload to continue); "
            f"with TUNING_PARALLEL_NUM=1 (TuneOptions(workers=1)) the cases are tuned in this process") from exc


def kinds_against(result: TuneResult, in_use: float | None) -> dict[str, KindGain]:
    """The kinds of the final strategy chained from the time of the strategy in use.

    `in_use` is what the compiler would run before this tuning: the bank's strategy on a hit, else
    CANN's default (None: the tuner's own "before"). Steps that do not beat the running time are
    folded into the next, so the first step starts at `in_use`, each starts where the previous
    ended, the last ends at the tuned time, and only kinds the stored strategy uses appear.
    """
    start = result.before_us if in_use is None else in_use
    return chain_steps([(k, g.after_us) for k, g in result.helped_kinds().items()], start)
