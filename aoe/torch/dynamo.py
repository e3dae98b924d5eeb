"""The ``torch.compile`` backend: AOTAutograd's forward/backward graphs are tuned, then run unchanged.

Dynamo hands each captured graph to ``Backend.__call__``. Without a tuning mode (no ``mode`` option,
no ``AOE_MODE``) the graph runs as it is and nothing is written. Otherwise AOTAutograd splits it into a
forward and a backward graph; each is converted (``aoe.graph.fx``), tuned by the job (banks, counters,
REPEAT_TUNE, result file, log lines, device lock, tune_ops), and then runs exactly as AOTAutograd traced
it (eager ATen kernels), so training gives the same losses as eager. ``inductor=True`` runs Inductor
instead and tunes the graphs Inductor compiles (after its decompositions).
"""
from __future__ import annotations

import os
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import AoeError
from ..graph.fx.convert import import_torch


_BREAKS_LOCK = threading.Lock()
_BREAKS_SEEN: dict[str, int] = {}   # graph-break reason -> dynamo's count when last reported


@dataclass
class Options:
    """What ``aoe.torch.backend(**options)`` accepts (the session options of the product, as values)."""

    mode: str | int | None = None          # 2/"op" operator tuning, 1/"subgraph"; None: AOE_MODE
    soc_version: str = "Ascend910B2"
    bank: str | os.PathLike[str] | None = None            # TUNE_BANK_PATH-equivalent root
    work_path: str | os.PathLike[str] | None = None       # result files (ASCEND_WORK_PATH-equivalent)
    aoe_config_file: str | os.PathLike[str] | None = None  # a tune_ops file
    config: str | os.PathLike[str] | None = None          # an aoe.ini
    budget: int | None = None              # strategy evaluations per operator case
    repeat_tune: bool | None = None
    builtin: bool | None = None            # False: custom bank only (AOE_BUILTIN_BANK=off); None: the variable
    device: int | None = None
    lock: bool = True
    lock_dir: str | os.PathLike[str] | None = None
    inductor: bool = False                 # run with Inductor instead of eager
    verbose: bool = True                   # print the job's log lines
    progress: bool = False
    compute_dtype: str = "float16"
    name: str = "torch"                    # tuning-name prefix
    env: Mapping[str, str] | None = None   # environment to read (default os.environ)


def make_options(options: Mapping[str, Any]) -> Options:
    """Validate keyword options into ``Options`` (unknown keys are an AoeError listing the known ones)."""
    known = set(Options.__dataclass_fields__)
    bad = sorted(set(options) - known)
    if bad:
        raise AoeError(f"aoe.torch: unknown option(s) {', '.join(bad)}; known: {', '.join(sorted(known))}")
    if options.get("builtin") is not None and not isinstance(options["builtin"], bool):
        raise AoeError(f"aoe.torch: option builtin must be True or False, not {options['builtin']!r}")
    return Options(**dict(options))


class Backend:
    """A dynamo backend: ``torch.compile(model, backend=aoe.torch.backend(mode="op", bank=...))``.

    One instance writes one result file (a task per tuned graph); tuning is serialised per instance.
    """

    def __init__(self, options: Options | None = None, **kw: Any) -> None:
        self.options = options if options is not None else make_options(kw)
        self._lock = threading.Lock()
        self._count = 0
        self._result_file: Any = None
        self.results: list[Any] = []      # JobResult per tuned graph
        self.graphs: list[Any] = []       # the converted aoe graphs, in tuning order
        self.skipped: list[str] = []      # graphs not tuned, with the reason

    # ---- settings -----------------------------------------------------------------------------
    def _env(self) -> Mapping[str, str]:
        return self.options.env if self.options.env is not None else os.environ

    def mode(self) -> int | None:
        """1 or 2 when tuning is on (the ``mode`` option, else AOE_MODE), None when it is off."""
        from ..job import config as cfg

        if self.options.mode is not None:
            return cfg.parse_mode(self.options.mode, "mode")
        value = self._env().get("AOE_MODE")
        if value is None or value == "":
            return None
        return cfg.parse_mode(value, "AOE_MODE")

    def _settings(self, mode: int) -> tuple[Any, Any]:
        from ..job import config as cfg
        from ..job.run import settings_from_env

        o = self.options
        s = settings_from_env(self._env(), soc=o.soc_version, mode=mode, device=o.device, work_path=o.work_path,
                              config=o.config, bank=o.bank, repeat_tune=o.repeat_tune, budget=o.budget,
                              progress=o.progress, lock=o.lock, lock_dir=o.lock_dir, builtin=o.builtin)
        tune_ops = None
        path = o.aoe_config_file
        if path is None and s.tune_ops_file:
            path = s.tune_ops_file
            if not os.path.isabs(path) and s.config_path is not None:
                path = os.path.join(os.path.dirname(s.config_path), path)
        if path is not None:
            tune_ops = cfg.load_tune_ops(path)
        if not o.verbose:
            s.notes.clear()
        return s, tune_ops

    # ---- dynamo entry ---------------------------------------------------------------------------
    def __call__(self, gm: Any, example_inputs: list[Any]) -> Callable[..., Any]:
        """Compile one dynamo graph: tune its forward/backward graphs (when a mode is set), run unchanged."""
        torch = import_torch()
        mode = self.mode()
        if mode is None:
            if self.options.inductor:
                from torch._inductor.compile_fx import compile_fx

                return compile_fx(gm, example_inputs)
            return gm.forward
        with self._lock:
            self._count += 1
            index = self._count
        self._report_breaks()
        kinds = _input_kinds(gm, example_inputs, torch)
        tag = f"{self.options.name}_graph{index}"
        if self.options.inductor:
            return self._inductor(gm, example_inputs, mode, tag)
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        fw_kinds: dict[str, str] = {}

        def fw(fgm: Any, ex: Any) -> Any:
            fw_kinds.update(_placeholder_kinds(fgm, kinds))
            self._tune(fgm, f"{tag}_forward", fw_kinds, mode, training=True)
            return make_boxed_func(fgm.forward)

        def inference(fgm: Any, ex: Any) -> Any:
            self._tune(fgm, f"{tag}_inference", _placeholder_kinds(fgm, kinds), mode, training=False)
            return make_boxed_func(fgm.forward)

        def bw(bgm: Any, ex: Any) -> Any:
            # the backward's inputs are the forward's saved tensors (same names) and the gradients
            bk = {n.name: fw_kinds.get(n.name, "input") for n in bgm.graph.nodes if n.op == "placeholder"}
            self._tune(bgm, f"{tag}_backward", bk, mode, training=True)
            return make_boxed_func(bgm.forward)

        return aot_autograd(fw_compiler=fw, bw_compiler=bw, inference_compiler=inference)(gm, example_inputs)

    def _inductor(self, gm: Any, example_inputs: list[Any], mode: int, tag: str) -> Any:
        from torch._inductor.compile_fx import compile_fx, compile_fx_inner

        def inner(igm: Any, ex: Any, **kw: Any) -> Any:
            part = "backward" if kw.get("is_backward") else ("inference" if kw.get("is_inference") else "forward")
            kinds = {n.name: "input" for n in igm.graph.nodes if n.op == "placeholder"}
            self._tune(igm, f"{tag}_{part}", kinds, mode, training=part != "inference")
            return compile_fx_inner(igm, ex, **kw)

        return compile_fx(gm, example_inputs, inner_compile=inner)

    # ---- tuning ---------------------------------------------------------------------------------
    def _tune(self, fgm: Any, name: str, kinds: Mapping[str, str], mode: int, training: bool) -> None:
        from ..graph.fx import from_fx

        try:
            graph = from_fx(fgm, name, kinds, self.options.compute_dtype, training)
        except AoeError as exc:
            # the model still runs; the user learns why this graph was not tuned
            self.skipped.append(f"{name}: {exc}")
            warnings.warn(f"aoe: graph {name} is not tuned: {exc}", stacklevel=2)
            return
        if graph.unsupported:
            kinds_u = sorted({u["onnx_type"] for u in graph.unsupported})
            warnings.warn(f"aoe: graph {name}: {len(graph.unsupported)} operator(s) not supported, kept opaque "
                          f"and not tuned: {', '.join(kinds_u[:8])}{' ...' if len(kinds_u) > 8 else ''}",
                          stacklevel=2)
        self.tune_graph(graph, mode)

    def tune_graph(self, graph: Any, mode: int) -> Any:
        """Tune one aoe graph through the job into this backend's result file; returns the JobResult."""
        from ..job.result import ResultFile
        from ..job.run import KIND, JobSpec, run_job

        with self._lock:
            settings, tune_ops = self._settings(mode)
            if self._result_file is None or self._result_file.kind != KIND[mode]:
                self._result_file = ResultFile(settings.work_path, KIND[mode])
            spec = JobSpec(mode=mode, graph=graph, soc=self.options.soc_version, tune_ops=tune_ops, name=graph.name,
                           compute_dtype=self.options.compute_dtype)
            out = (lambda line: print(line, flush=True)) if self.options.verbose else None
            res = run_job(spec, settings, out=out, result_file=self._result_file)
            self.graphs.append(graph)
            self.results.append(res)
            if out is not None:
                for line in res.summary_lines(5):
                    out(line)
            if res.signal is not None:
                raise KeyboardInterrupt
            return res

    @property
    def result_file(self) -> Path | None:
        """The result file this backend writes (None before the first tuned graph)."""
        return None if self._result_file is None else Path(self._result_file.path)

    def _report_breaks(self) -> None:
        """Warn about graph breaks dynamo recorded since the last graph (each captured graph is tuned)."""
        try:
            from torch._dynamo.utils import counters
        except ImportError:
            return
        new = []
        with _BREAKS_LOCK:
            # dynamo's counters are per process, so what was already reported is too (a backend may be
            # created per graph, as torch.compile(backend="aoe") does)
            for reason, n in list(counters.get("graph_break", {}).items()):
                if n > _BREAKS_SEEN.get(reason, 0) or (n and n < _BREAKS_SEEN.get(reason, 0)):
                    new.append(str(reason).splitlines()[0][:200])
                _BREAKS_SEEN[reason] = n
        if new:
            warnings.warn(f"aoe: graph break ({'; '.join(new[:3])}): the model is captured as several graphs, "
                          "each tuned on its own", stacklevel=2)


def _input_kinds(gm: Any, example_inputs: list[Any], torch: Any) -> list[str]:
    """param / const / input for each input of AOTAutograd's forward graph.

    AOTAutograd lifts the dynamo graph's own parameters and buffers (e.g. a compiled optimizer step's
    parameters and state) to its first inputs, then come dynamo's inputs (a compiled module's
    parameters, buffers and the user's tensors).
    """
    kinds = ["param" for _ in gm.named_parameters(remove_duplicate=False)]
    # an optimizer's moments are persistent variables, trained state like parameters (as for ApplyAdamD)
    kinds += ["param" if "state" in n else "const" for n, _ in gm.named_buffers(remove_duplicate=False)]
    places = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, ex in enumerate(example_inputs):
        if isinstance(ex, torch.nn.Parameter):
            kinds.append("param")
            continue
        src = ""
        if i < len(places):
            ga = places[i].meta.get("grapharg")
            source = getattr(ga, "source", None)
            name = getattr(source, "name", "") if source is not None else ""
            try:
                src = name() if callable(name) else str(name or "")   # a method before torch 2.8, then a property
            except Exception:  # a source kind without a name: treat as a user input
                src = ""
            src = src or places[i].name
        kinds.append("const" if "_buffers" in src or "buffers_" in src else "input")
    return kinds


def _placeholder_kinds(fgm: Any, kinds: list[str]) -> dict[str, str]:
    """The forward graph's placeholders are AOTAutograd's inputs in order (see ``_input_kinds``)."""
    places = [n.name for n in fgm.graph.nodes if n.op == "placeholder"]
    return {p: kinds[i] for i, p in enumerate(places) if i < len(kinds)}
