"""The case farm: operator cases tuned on a Dask cluster, results handed back to the one client.

`CaseFarm(cluster)` connects to a `dask.distributed.Client`, a scheduler address (`tcp://host:8786`)
or `"local:N"` (a `LocalCluster` of N single-threaded worker processes on 127.0.0.1). `prefetch`
walks a graph as OPAT does (describe every operator, de-duplicate by case), resolves bank hits on the
client and queues the misses; `flush` sends them in groups. `executor` is what
`aoe.opat.graph_tune.case_executor` takes: OPAT's own loop then runs unchanged on the client (bank
lookups, decisions, bank writes, result files) and takes each tuned result from the farm instead of
a local process pool, in submission order — so the outcome is the serial run's.

Workers need only the aoe package: a task carries the `OpCase` and the SoC by value (its native
simulator twin is rebuilt in the worker) and returns the `TuneResult`; no bank, no file, no shared
filesystem. A worker that dies mid-task is replaced and its task rerun by Dask (tasks are pure).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
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

Job = tuple[Any, Soc, tuple[str, ...], Budget, str, int, int]  # what graph_tune hands its pool

EXTRA_HINT = "batch tuning on a cluster needs Dask: pip install 'aoe[dask]' (dask[distributed])"
GROUPS_PER_WORKER = 4  # enough groups to balance the load, few enough that per-task overhead stays small


def job_key(job: Job) -> tuple[Any, ...]:
    """The identity of one tuning job: same key, same result (the tuner is deterministic)."""
    case, soc, kinds, budget, implmode, seed, threads = job
    return (soc.name, soc.cube_cores, case.case_id, tuple(kinds), repr(budget), implmode, seed, threads)


def run_group(jobs: Sequence[Job]) -> tuple[list[Any], float]:
    """Worker side: tune a group of cases; (results in order, CPU seconds spent)."""
    c0 = time.process_time()
    out = [tune_job(j) for j in jobs]
    return out, time.process_time() - c0


def _worker_probe() -> Callable[[], str]:
    """A function that reports what a worker imports as aoe: its version, or why the simulator is missing.

    Made inside a function so that Dask pickles it by value: a worker whose aoe is missing or broken can
    still run it (a function of this module would make the worker import aoe just to unpickle the probe,
    and a worker that fails to unpickle drops its connection instead of reporting an error)."""
    def probe() -> str:
        import importlib

        try:
            importlib.import_module("aoe._sim")
            return "ok " + str(importlib.import_module("aoe").__version__)
        except Exception as exc:  # noqa: BLE001 - reported to the client, which raises AoeError
            return f"{type(exc).__name__}: {exc}"
    return probe


def check_workers(client: Any) -> None:
    """AoeError unless every worker imports the same aoe as this process, with its compiled simulator."""
    from .. import __version__

    try:
        answers = client.run(_worker_probe())
    except Exception as exc:  # noqa: BLE001 - a cluster we cannot even probe is a setup error
        raise AoeError(f"cannot run a probe on the Dask workers ({type(exc).__name__}: {exc}); {EXTRA_HINT} "
                       f"and install this aoe on every worker") from None
    bad = {addr: a for addr, a in sorted(answers.items()) if a != f"ok {__version__}"}
    if bad:
        addr, why = next(iter(bad.items()))
        raise AoeError(f"{len(bad)} of {len(answers)} Dask worker(s) cannot run aoe {__version__} (e.g. {addr}: "
                       f"{why}); install the same aoe on every worker (pip install 'aoe[dask]'), and start "
                       f"the workers outside an aoe source checkout")


def _connect(cluster: Any) -> tuple[Any, Any, bool]:
    """(client, cluster we started or None, whether we own the client)."""
    try:
        import distributed
    except ImportError:
        raise AoeError(EXTRA_HINT) from None
    if isinstance(cluster, distributed.Client):
        return cluster, None, False
    if not isinstance(cluster, str) or not cluster.strip():
        raise AoeError(f"cluster must be a dask.distributed.Client, a scheduler address such as "
                       f"tcp://host:8786, or 'local:N'; got {cluster!r}")
    text = cluster.strip()
    if text.startswith("local:"):
        try:
            n = int(text[6:])
        except ValueError:
            n = 0
        if not 1 <= n <= 256:
            raise AoeError(f"'local:N' needs N worker processes between 1 and 256, got {text!r}")
        lc = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                                      dashboard_address="127.0.0.1:0", silence_logs=logging.ERROR)
        return distributed.Client(lc), lc, True
    try:
        return distributed.Client(text, timeout="30s"), None, True
    except (OSError, TimeoutError) as exc:
        raise AoeError(f"cannot reach the Dask scheduler at {text}: {exc}; start it with `dask scheduler` "
                       f"and check the address") from None


class CaseFarm:
    """Distinct operator cases of a whole batch, tuned on a Dask cluster (see the module docstring)."""

    def __init__(self, cluster: Any, *, progress: bool = False,
                 out: Callable[[str], None] | None = None) -> None:
        self._bar: Any = None
        self.client, self._cluster, self._own_client = _connect(cluster)
        try:
            check_workers(self.client)
        except AoeError:
            self.close()
            raise
        self._lock = threading.Lock()
        self._queued: list[tuple[tuple[Any, ...], Job]] = []
        self._where: dict[tuple[Any, ...], tuple[Any, int]] = {}  # key -> (group future, index)
        self._done: dict[tuple[Any, ...], Any] = {}
        self._group_keys: dict[str, list[tuple[Any, ...]]] = {}  # group future key -> its job keys
        self._models: set[tuple[Any, ...]] = set()  # models already prefetched (counted once)
        self.stats = {"cases_total": 0, "cases_distinct": 0, "bank_hits": 0, "sent": 0, "groups": 0,
                      "worker_cpu_s": 0.0}
        self._progress = progress
        self.bank_dirs: set[tuple[str, str, int]] = set()
        link = getattr(self.client, "dashboard_link", None)
        self.dashboard = link if link and self._dashboard_up() else None
        if out is not None:
            n = len(self.client.scheduler_info().get("workers", {}))
            out(f"Dask: {n} worker(s) at {self.client.scheduler.address}"
                + (f"; dashboard {self.dashboard}" if self.dashboard else ""))

    def _dashboard_up(self) -> bool:
        try:
            return "dashboard" in self.client.scheduler_info().get("services", {})
        except Exception:  # noqa: BLE001 - only decides whether a link is printed
            return False

    # ---- client side: what to send ------------------------------------------------------------

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
            if key in self._where or key in self._done or any(k == key for k, _ in self._queued):
                continue
            try:
                hit = chain.lookup(case.op_type, case.key) is not None
            except AoeError:
                hit = False
            if not should_tune(hit, settings.repeat_tune):
                self.stats["bank_hits"] += 1
                continue
            self._queued.append((key, job))
            queued += 1
        self.stats["cases_distinct"] += queued
        return queued

    def prefetch_specs(self, specs: Sequence[Any], settings: Any,
                       load: Callable[[Any], Any]) -> dict[int, Any]:
        """Load each job's graph (`load(spec)`) and queue its misses; {index: graph} of those loaded.

        A model that fails to load is left out (the job loop loads it again and reports the error);
        SGAT jobs and tune_ops selections are not prefetched (SGAT runs on the client; a selection's
        cases are sent when OPAT asks for them)."""
        graphs: dict[int, Any] = {}
        for i, spec in enumerate(specs):
            try:
                graphs[i] = load(spec)
            except AoeError:
                continue
            ident = (spec.model, spec.soc, repr(spec.input_shape), spec.training, spec.compute_dtype)
            if spec.mode == 2 and spec.tune_ops is None and (spec.model is None or ident not in self._models):
                self._models.add(ident)
                self.prefetch(graphs[i], spec.soc_value, settings)
        return graphs

    def flush(self) -> None:
        """Send the queued cases in contiguous groups (graph order: the first model's results come first)."""
        with self._lock:
            queued, self._queued = self._queued, []
        if not queued:
            return
        workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        size = max(1, math.ceil(len(queued) / (workers * GROUPS_PER_WORKER)))
        if self._progress and self._bar is None:
            from tqdm import tqdm  # lazily: only a batch with a bar needs it
            self._bar = tqdm(total=0, unit="case", desc="batch (cluster)", dynamic_ncols=True)
        if self._bar is not None:
            self._bar.total += len(queued)
            self._bar.refresh()
        for start in range(0, len(queued), size):
            self._submit(queued[start:start + size])

    def _submit(self, group: list[tuple[tuple[Any, ...], Job]]) -> Any:
        fut = self.client.submit(run_group, [j for _, j in group], pure=False, retries=2)
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

    def result(self, job: Job) -> Any:
        """The tuned result of one job: from a finished group, by waiting for its group, or sent now."""
        key = job_key(job)
        with self._lock:
            if key in self._done:
                return self._done[key]
            where = self._where.get(key)
        if where is None:  # not prefetched (e.g. a tune_ops selection): send it alone
            where = (self._submit([(key, job)]), 0)
        fut = where[0]
        try:
            results, cpu = fut.result()
        except ModuleNotFoundError as exc:
            raise AoeError(f"a Dask worker cannot import {exc.name!r}: install aoe (the same version) "
                           f"on every worker") from None
        with self._lock:
            keys = self._group_keys.pop(fut.key, None)
            if keys is not None:  # first collection of this group: keep all its results
                self.stats["worker_cpu_s"] += cpu
                for k, r in zip(keys, results):
                    self._done[k] = r
                    if self._where.get(k, (None,))[0] is fut:
                        del self._where[k]
            return self._done.get(key, results[where[1]])

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
            if key not in self.farm._done and key not in self.farm._where:
                self.farm._queued.append((key, j))
        self.farm.flush()
        for j in jobs:
            yield self.farm.result(j)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to stop: the farm outlives one graph (queued groups finish for the next models)."""

    def __enter__(self) -> "FarmExecutor":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None
