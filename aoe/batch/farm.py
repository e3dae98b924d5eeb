"""The case farm: operator cases and subgraph searches run on a Dask cluster, results handed back to the
one client.

`CaseFarm(cluster)` connects (`connect.py`) to a `dask.distributed.Client`, a scheduler address
(`tls://host:8786`, `tcp://...`) or `"local:N"` (a TLS `LocalCluster` of N single-threaded worker
processes on 127.0.0.1). `prefetch` walks a graph as OPAT does (describe every operator, de-duplicate by
case), resolves bank hits on the client and queues the misses; `prefetch_subgraphs` does the same for
SGAT (partition and price the graph, look each distinct subgraph up in the subgraph banks); `flush`
sends them in groups. `executor` is what `aoe.opat.graph_tune.case_executor` takes, `subgraphs` what
`aoe.sgat.tune.subgraph_executor` takes: the tuners' own loops then run unchanged on the client (bank
lookups, decisions, bank writes, result files) and take each tuned result from the farm instead of
computing it, in submission order — so the outcome is the serial run's.

Workers need only the aoe package: an operator task carries the `OpCase` and the SoC by value (its
native simulator twin is rebuilt in the worker) and returns the `TuneResult`; a subgraph task carries
the region's cost arrays (`RegionData`, the SoC's figures included) and returns the chosen plan and its
time (`SearchResult`). No bank, no file, no shared filesystem. A worker that dies mid-task is replaced
and its task rerun by Dask (tasks are pure).
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import sys
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Sequence

from ..bank import BankChain, BuiltinBank, OpBank
from ..bank.decision import should_tune
from ..errors import AoeError
from ..ops import Unsupported, describe
from ..opat.graph_tune import tune_job
from ..opat.search import Budget
from ..opat.tune import KINDS
from ..soc import Soc, require_soc
from .connect import TlsFiles, check_workers, connect

Job = tuple[Any, Soc, tuple[str, ...], Budget, str, int, int]  # what graph_tune hands its pool
SubgraphJob = tuple[Any, str]  # (RegionData, search method): what aoe.sgat.search takes

GROUPS_PER_WORKER = 4  # enough groups to balance the load, few enough that per-task overhead stays small
MIN_GROUP = 4          # a partial flush waits for at least this many jobs per group


def job_key(job: Job) -> tuple[Any, ...]:
    """The identity of one tuning job: same key, same result (the tuner is deterministic)."""
    case, soc, kinds, budget, implmode, seed, threads = job
    return (soc.name, soc.cube_cores, case.case_id, tuple(kinds), repr(budget), implmode, seed, threads)


def subgraph_key(soc: Soc, repo_key: str, rd: Any, method: str) -> tuple[Any, ...]:
    """The identity of one subgraph search: the SoC, the subgraph's bank key, the method and the bytes of
    its cost arrays (the search sees only those, so equal keys give equal plans)."""
    h = hashlib.sha256()
    for f in dataclasses.fields(rd):
        v = getattr(rd, f.name)
        h.update(f"{f.name}:{getattr(v, 'dtype', '')}:{getattr(v, 'shape', v)};".encode())
        if hasattr(v, "tobytes"):
            h.update(v.tobytes())
    return ("sgat", soc.name, soc.cube_cores, repo_key, method, h.hexdigest())


_malloc_lock = threading.Lock()
_malloc_done = False


def _worker_malloc() -> None:
    """Once per worker process: give glibc back adaptive-sized thresholds for large allocations.

    Dask's nanny starts every worker with MALLOC_TRIM_THRESHOLD_=65536 (config
    `distributed.nanny.pre-spawn-environ`, to hand memory back to the OS). Setting it turns glibc's
    dynamic mmap threshold off, so each of the simulator's batch arrays over 128 KiB is mmapped and
    unmapped anew and page-faults on every use: measured 1.55x the CPU of the same cases tuned in a plain
    process. Here the mmap threshold becomes 32 MiB and the trim threshold 64 MiB (mallopt), which
    costs a worker at most 64 MiB of freed memory kept for reuse. Nothing is changed elsewhere (no
    such variable, no glibc)."""
    global _malloc_done
    with _malloc_lock:
        if _malloc_done:
            return
        _malloc_done = True
        if "MALLOC_TRIM_THRESHOLD_" not in os.environ or not sys.platform.startswith("linux"):
            return
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(-3, 32 << 20)   # M_MMAP_THRESHOLD
            libc.mallopt(-1, 64 << 20)   # M_TRIM_THRESHOLD
        except (OSError, AttributeError):
            pass  # not glibc: nothing to undo


def run_group(jobs: Sequence[Job]) -> tuple[list[Any], float, list[dict[str, int] | None]]:
    """Worker side: tune a group of cases; (results in order, CPU seconds spent, each case's default
    strategy).

    The default strategy (CANN's heuristic, ~2.6 ms a case) is what tuning the case derived first, so it
    costs the worker a cache hit; sent back, it spares the client deriving it again to price the default."""
    from ..sim import default_strategy

    _worker_malloc()
    c0 = time.process_time()
    out = [tune_job(j) for j in jobs]
    defaults: list[dict[str, int] | None] = []
    for case, soc, *_ in jobs:
        try:
            defaults.append(default_strategy(soc, case.default.sim_op))
        except Exception:  # noqa: BLE001 - the client derives it itself (and reports what is wrong)
            defaults.append(None)
    return out, time.process_time() - c0, defaults


def run_subgraph_group(jobs: Sequence[SubgraphJob]) -> tuple[list[Any], float]:
    """Worker side: search a group of subgraphs; (SearchResults in order, CPU seconds spent, Numba's
    threads included)."""
    from ..sgat.search import search  # lazily: a worker that only tunes operators never loads Numba

    _worker_malloc()
    c0 = time.process_time()
    out = [search(rd, method) for rd, method in jobs]
    return out, time.process_time() - c0


class CaseFarm:
    """Distinct operator cases and subgraphs of a whole batch, tuned on a Dask cluster (module docstring)."""

    def __init__(self, cluster: Any, *, progress: bool = False, out: Callable[[str], None] | None = None,
                 tls: TlsFiles | None = None) -> None:
        self._bar: Any = None
        self.client, self._cluster, self._own_client = connect(cluster, tls)
        try:
            check_workers(self.client)
        except AoeError:
            self.close()
            raise
        self._lock = threading.Lock()
        self._queued: list[tuple[tuple[Any, ...], str, Any]] = []   # (key, "op" | "sg", job) to send
        self._queued_keys: set[tuple[Any, ...]] = set()
        self._where: dict[tuple[Any, ...], tuple[Any, int]] = {}  # key -> (group future, index)
        self._done: dict[tuple[Any, ...], Any] = {}
        self._defaults: dict[tuple[Any, ...], dict[str, int]] = {}  # job key -> default strategy (run_group)
        self._group_keys: dict[str, list[tuple[Any, ...]]] = {}  # group future key -> its job keys
        self._models: set[tuple[Any, ...]] = set()  # models already prefetched (counted once)
        self._loaded: dict[tuple[Any, ...], Any] = {}  # model source -> the graph its prefetch loaded
        # (graph fingerprint, SoC, cores) -> sgat Prepared: a job reloads its model from the file, so the
        # graph it tunes is equal to, not the same object as, the one prefetched
        self._prepared: dict[tuple[str, str, int], Any] = {}
        self.stats = {"cases_total": 0, "cases_distinct": 0, "bank_hits": 0, "subgraphs_total": 0,
                      "subgraphs_distinct": 0, "subgraph_hits": 0, "sent": 0, "groups": 0, "worker_cpu_s": 0.0}
        self._progress = progress
        self.bank_dirs: set[tuple[str, str, int]] = set()
        link = getattr(self.client, "dashboard_link", None)
        self.dashboard = link if link and self._dashboard_up() else None
        self.address = str(self.client.scheduler.address)
        if out is not None:
            n = len(self.client.scheduler_info().get("workers", {}))
            out(f"Dask: {n} worker(s) at {self.address}"
                + (f"; dashboard {self.dashboard}" if self.dashboard else ""))

    def _dashboard_up(self) -> bool:
        try:
            return "dashboard" in self.client.scheduler_info().get("services", {})
        except Exception:  # noqa: BLE001 - only decides whether a link is printed
            return False

    # ---- client side: what to send ------------------------------------------------------------

    def _queue(self, key: tuple[Any, ...], kind: str, job: Any) -> bool:
        """Queue one job unless it is already queued, sent or done; True if queued."""
        if key in self._where or key in self._done or key in self._queued_keys:
            return False
        self._queued.append((key, kind, job))
        self._queued_keys.add(key)
        return True

    def prefetch(self, graph: Any, soc: Soc, settings: Any) -> int:
        """Queue the bank misses of `graph` as OPAT will tune them (job settings: budget, repeat_tune,
        implmode, te_parallel, op_bank_dir); returns the number of new distinct cases queued."""
        soc = require_soc(soc, "Farm.prefetch")
        plain = dataclasses.replace(soc, _native=None)
        budget = Budget(evaluations=settings.budget) if settings.budget else Budget()
        custom = OpBank(settings.op_bank_dir, soc.name, soc.cube_cores) if settings.op_bank_dir else None
        if settings.op_bank_dir:
            self.bank_dirs.add((os.fspath(settings.op_bank_dir), soc.name, soc.cube_cores))
        # the same banks OPAT will look up: the built-in bank only when the job consults it
        chain = BankChain(custom, BuiltinBank(soc.name, soc.cube_cores) if settings.builtin else None)
        seen: set[Any] = set()
        queued = 0
        for op in graph.ops:
            if getattr(op, "is_view", False) or op.attrs.get("view"):
                continue
            try:
                case = describe(graph, op)
            except (Unsupported, AoeError):
                continue
            if case.case_id in seen:
                continue
            seen.add(case.case_id)
            self.stats["cases_total"] += 1
            job: Job = (case, plain, tuple(KINDS), budget, settings.implmode, 0, settings.te_parallel)
            key = job_key(job)
            if key in self._where or key in self._done or key in self._queued_keys:
                continue
            try:
                hit = chain.lookup(case.op_type, case.key) is not None
            except AoeError:
                hit = False
            if not should_tune(hit, settings.repeat_tune):
                self.stats["bank_hits"] += 1
                continue
            queued += self._queue(key, "op", job)
        self.stats["cases_distinct"] += queued
        return queued

    def prefetch_subgraphs(self, graph: Any, soc: Soc, settings: Any) -> int:
        """Queue the subgraph searches SGAT will run on `graph` (job settings: repeat_tune, builtin,
        subgraph_bank_dir): partition and price it once here (the job reuses that), look every distinct
        subgraph up in the banks as SGAT will; returns the number of new distinct searches queued."""
        from ..bank.subgraph import SubgraphBank
        from ..sgat.tune import SgatConfig, builtin_subgraph_bank, check_soc, prepare

        soc = require_soc(soc, "Farm.prefetch_subgraphs")
        check_soc(soc)
        prep = prepare(graph, soc)
        with self._lock:
            self._prepared[(graph.fingerprint(), soc.name, soc.cube_cores)] = prep
        bank = SubgraphBank(settings.subgraph_bank_dir) if settings.subgraph_bank_dir is not None else None
        builtin = builtin_subgraph_bank(soc) if bank is not None and settings.builtin else None
        method = SgatConfig().method  # the job's: its settings choose no other
        queued = 0
        for case in prep.cases:
            self.stats["subgraphs_total"] += 1
            key = subgraph_key(soc, case.key, case.rd, method)
            if key in self._where or key in self._done or key in self._queued_keys:
                continue
            try:
                in_bank = any(b is not None and b.lookup(case.key) is not None for b in (bank, builtin))
            except AoeError:
                in_bank = False  # the job reads the bank again and reports what is wrong with it
            if not should_tune(in_bank, settings.repeat_tune):
                self.stats["subgraph_hits"] += 1
                continue
            queued += self._queue(key, "sg", (case.rd, method))
        self.stats["subgraphs_distinct"] += queued
        return queued

    def prefetch_specs(self, specs: Sequence[Any], settings: Any, load: Callable[[Any], Any],
                       keep: bool = False) -> dict[int, Any]:
        """Load each job's graph (`load(spec)`) and queue its misses; {index: graph} of those loaded.

        `keep`: the caller drops the graphs; the farm keeps each until a later prefetch_specs of the same
        model file (e.g. tune_models on `aoe batch`'s farm) takes it for its job instead of loading again.

        A model that fails to load (or an SGAT job on a SoC SGAT refuses) is left out: the job loop
        loads it again and reports the error. tune_ops selections are not prefetched (their cases are
        sent when the tuner asks for them)."""
        graphs: dict[int, Any] = {}
        for i, spec in enumerate(specs):
            source = (spec.model, repr(spec.input_shape), spec.training, spec.compute_dtype, spec.framework)
            try:
                # a graph an earlier prefetch of this batch loaded from the same file is used (once) again
                kept = self._loaded.pop(source, None) if spec.model is not None and spec.graph is None else None
                graphs[i] = kept if kept is not None else load(spec)
            except AoeError:
                continue
            ident = (spec.mode, spec.soc, *source)
            if spec.tune_ops is not None or (spec.model is not None and ident in self._models):
                continue
            self._models.add(ident)
            if keep and spec.model is not None and spec.graph is None:
                self._loaded[source] = graphs[i]
            if spec.mode == 2:
                self.prefetch(graphs[i], spec.soc_value, settings)
            elif spec.mode == 1:
                try:
                    self.prefetch_subgraphs(graphs[i], spec.soc_value, settings)
                except AoeError:
                    continue
            self.flush(partial=True)  # the workers start while the next models are read
        return graphs

    def flush(self, partial: bool = False) -> None:
        """Send the queued jobs in contiguous groups (graph order: the first model's results come first).

        `partial` (between the models of a prefetch): only when enough are queued for groups of
        MIN_GROUP or more, so the workers start early without a flood of tiny tasks."""
        workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        with self._lock:
            if partial and len(self._queued) < workers * GROUPS_PER_WORKER * MIN_GROUP:
                return
            queued, self._queued = self._queued, []
            self._queued_keys.clear()
        if not queued:
            return
        if self._progress and self._bar is None:
            from tqdm import tqdm  # lazily: only a batch with a bar needs it
            self._bar = tqdm(total=0, unit="case", desc="batch (cluster)", dynamic_ncols=True)
        if self._bar is not None:
            self._bar.total += len(queued)
            self._bar.refresh()
        for kind in ("op", "sg"):
            jobs = [(k, j) for k, kd, j in queued if kd == kind]
            size = max(1, math.ceil(len(jobs) / (workers * GROUPS_PER_WORKER)))
            for start in range(0, len(jobs), size):
                self._submit(jobs[start:start + size], kind)

    def _submit(self, group: list[tuple[tuple[Any, ...], Any]], kind: str) -> Any:
        fn = run_group if kind == "op" else run_subgraph_group
        fut = self.client.submit(fn, [j for _, j in group], pure=False, retries=2)
        n = len(group)
        with self._lock:
            for i, (key, _) in enumerate(group):
                self._where[key] = (fut, i)
            self._group_keys[fut.key] = [k for k, _ in group]
            self.stats["groups"] += 1
            self.stats["sent"] += n
        if self._bar is not None:
            fut.add_done_callback(lambda f, n=n: self._bar.update(n))
        return fut

    def _collect(self, key: tuple[Any, ...], kind: str, job: Any) -> Any:
        """The result of one job: from a finished group, by waiting for its group, or sent now alone."""
        with self._lock:
            if key in self._done:
                return self._done[key]
            where = self._where.get(key)
            pending = where is None and key in self._queued_keys
        if pending:  # queued by a prefetch, not sent yet: send the queue now
            self.flush()
            where = self._where.get(key)
        if where is None:  # not prefetched (e.g. a tune_ops selection): send it alone
            where = (self._submit([(key, job)], kind), 0)
        fut = where[0]
        try:
            results, cpu, *extra = fut.result()
        except ModuleNotFoundError as exc:
            raise AoeError(f"a Dask worker cannot import {exc.name!r}: install aoe (the same version) "
                           f"on every worker") from None
        with self._lock:
            keys = self._group_keys.pop(fut.key, None)
            if keys is not None:  # first collection of this group: keep all its results
                self.stats["worker_cpu_s"] += cpu
                for i, (k, r) in enumerate(zip(keys, results)):
                    self._done[k] = r
                    if extra and extra[0][i] is not None:
                        self._defaults[k] = extra[0][i]
                    if self._where.get(k, (None,))[0] is fut:
                        del self._where[k]
            return self._done.get(key, results[where[1]])

    def result(self, job: Job) -> Any:
        """The tuned result of one operator job."""
        return self._collect(job_key(job), "op", job)

    def default_strategy(self, job: Job) -> dict[str, int] | None:
        """The default strategy of a job's case as its worker derived it (after `result`), or None."""
        with self._lock:
            found = self._defaults.get(job_key(job))
        return dict(found) if found is not None else None

    # ---- the SGAT face (aoe.sgat.tune.subgraph_executor) ----------------------------------------

    def prepared(self, graph: Any, soc: Soc) -> Any:
        """The partition and prices prefetch made of this graph (the same JSON form) on this SoC, or None."""
        if not self._prepared:
            return None
        with self._lock:
            return self._prepared.get((graph.fingerprint(), soc.name, soc.cube_cores))

    def search(self, soc: Soc, case: Any, method: str) -> Any:
        """What `aoe.sgat.search.search(case.rd, method)` returns, computed on the cluster."""
        key = subgraph_key(soc, case.key, case.rd, method)
        return self._collect(key, "sg", (case.rd, method))

    @property
    def executor(self) -> "FarmExecutor":
        """The object to set as `aoe.opat.graph_tune.case_executor`."""
        return FarmExecutor(self)

    def compact_banks(self) -> None:
        """The canonical rewrite of every operator bank the batch touched (one line per case)."""
        for root, soc, cores in sorted(self.bank_dirs):
            if os.path.isdir(root):
                OpBank(root, soc, cores).compact()

    def close(self) -> None:
        """Close the bar, and the client and cluster if this farm started them."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._prepared.clear()
        self._loaded.clear()
        self._defaults.clear()
        if self._own_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def __enter__(self) -> "CaseFarm":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class FarmExecutor:
    """The concurrent.futures face graph_tune uses: `map` in submission order, a no-op shutdown."""

    def __init__(self, farm: CaseFarm) -> None:
        self.farm = farm

    def map(self, fn: Callable[[Job], Any], jobs: Iterable[Job]) -> Iterator[Any]:
        """Results of `jobs` in order; `fn` must be graph_tune's worker (the farm runs that one)."""
        if fn is not tune_job:
            raise AoeError("the case farm runs OPAT's case worker only")
        jobs = list(jobs)
        for j in jobs:  # anything not prefetched is sent now, all at once
            key = job_key(j)
            self.farm._queue(key, "op", j)
        self.farm.flush()
        for j in jobs:
            yield self.farm.result(j)

    def default_strategy(self, job: Job) -> dict[str, int] | None:
        """The default strategy of `job`'s case from its worker (after its result was taken), or None."""
        return self.farm.default_strategy(job)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to stop: the farm outlives one graph (queued groups finish for the next models)."""

    def __enter__(self) -> "FarmExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None
