"""PyTorch frontend timing: capture + convert + tune of a training step, cold and warm, next to the ONNX route.

    python bench/frontend_torch_bench.py [--budget 2000] [--quick] [--capture-only] [--models resnet50,bert_base]
    python bench/frontend_torch_bench.py --issue26 [--budget 2000] [--only MODEL ...]

For ResNet-50 (batch 32, 224x224) and BERT-base (32 x 128), each built from code with random weights:

- torch route: ``aoe.torch.capture_train_step`` (AOTAutograd's joint forward + backward graph with fake
  tensors, converted to CANN operators, Adam as ``ApplyAdamD``) and operator tuning (OPAT) of that
  graph into a fresh bank (cold), then again into the same bank (warm: every case a bank hit);
- ONNX route: ``aoe.tune("zoo:...", training=True)`` the same way.

Prints one JSON line: wall seconds and CPU seconds (this process and its tuning workers) per phase,
the graphs' operator counts and MACs, and the bank counters of each run.

Capture against PyTorch's own, in the same run (``capture_vs_torch``):

- ``capture_train_step`` split into PyTorch's ``aot_export_module`` (the joint trace) and the rest (aoe's
  conversion, the optimizer's operators, validation);
- ``torch.compile``: the first training step (forward, ``sum`` of the outputs, backward) minus the second
  (the eager run, which both backends share), with ``backend="aot_eager"`` and with aoe's backend in a
  tuning mode whose tuning is left out (the graphs AOTAutograd hands it are converted and kept; tuning is
  timed above). Batch 2 there: the capture traces fake tensors, only the eager steps grow with the batch.
  ``aoe_over_aot_eager`` is the ratio of the two compile costs (goal: at most 1.5).

``--capture-only`` skips the tuning and the ONNX route.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))            # the ResNet-50 written out for torchvision-less machines

from _frontend_common import cpu, onnx_route, timed, tune  # noqa: E402 (bench/ is on the path of a script)


def _models(quick: bool) -> dict[str, tuple[Callable[[], Any], Callable[[], tuple], str, str]]:
    import torch

    from torch_models import resnet50

    def bert() -> Any:
        from transformers import BertConfig, BertModel

        return BertModel(BertConfig(attn_implementation="eager"))

    b = 2 if quick else 32
    return {
        "resnet50": (resnet50, lambda: (torch.randn(b, 3, 224, 224),), "zoo:resnet50", f"input:{b},3,224,224"),
        "bert_base": (bert, lambda: (torch.randint(0, 30522, (b, 128)),), "zoo:bert_base",
                      f"input_ids:{b},128;attention_mask:{b},128"),
    }


# ---- issue 26: models nobody here wrote ----------------------------------------------------------------
def _issue26_models() -> tuple[dict[str, tuple[Callable[[], Any], Callable[[], tuple], Any]], dict[str, str]]:
    """name -> (model, inputs, loss_fn) for the models that install here, and name -> why for those that do not."""
    import torch
    import torch.nn.functional as F

    models: dict[str, tuple[Callable[[], Any], Callable[[], tuple], Any]] = {}
    absent: dict[str, str] = {}

    def cnn() -> Any:
        return torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
                                   torch.nn.MaxPool2d(2), torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                   torch.nn.Dropout(0.2, inplace=True), torch.nn.Linear(64, 10))

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.TransformerDecoderLayer(256, 8, 1024, batch_first=True)

        def forward(self, tgt: Any, memory: Any) -> Any:
            return self.layer(tgt, memory, tgt_is_causal=True,
                              tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1]))

    class Lstm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(128, 256, num_layers=2, batch_first=True)
            self.fc = torch.nn.Linear(256, 10)

        def forward(self, x: Any) -> Any:
            return self.fc(self.lstm(x)[0][:, -1])

    ce = F.cross_entropy
    models["small_cnn"] = (cnn, lambda: (torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))), ce)
    models["transformer_encoder_layer"] = (
        lambda: torch.nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True),
        lambda: (torch.randn(16, 64, 256),), None)
    models["transformer_decoder_layer"] = (Decoder, lambda: (torch.randn(16, 64, 256), torch.randn(16, 64, 256)), None)
    models["lstm"] = (Lstm, lambda: (torch.randn(32, 50, 128), torch.randint(0, 10, (32,))), ce)
    try:
        import torchvision
        models["resnet18"] = (lambda: torchvision.models.resnet18(), lambda: (torch.randn(8, 3, 224, 224),
                                                                               torch.randint(0, 1000, (8,))), ce)
        models["mobilenet_v3_small"] = (lambda: torchvision.models.mobilenet_v3_small(),
                                        lambda: (torch.randn(8, 3, 224, 224), torch.randint(0, 1000, (8,))), ce)
    except Exception as exc:  # noqa: BLE001 - any import failure: say which and why
        absent["resnet18, mobilenet_v3_small"] = f"torchvision does not import here ({type(exc).__name__}: {exc})"
    try:
        import transformers as tr
    except Exception as exc:  # noqa: BLE001
        absent["bert, gpt2, vit, t5"] = f"transformers does not import here ({type(exc).__name__})"
        return models, absent

    class Loss(torch.nn.Module):
        """A Hugging Face model whose forward returns its own loss (labels given)."""

        def __init__(self, m: Any, kind: str) -> None:
            super().__init__()
            self.m, self.kind = m, kind

        def forward(self, x: Any, labels: Any) -> Any:
            key = "pixel_values" if self.kind == "vit" else "input_ids"
            return self.m(**{key: x, "labels": labels}).loss

    small = dict(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, intermediate_size=1024)
    ids = lambda v: lambda: (torch.randint(0, v, (8, 128)), torch.randint(0, v, (8, 128)))  # noqa: E731
    models["bert"] = (lambda: Loss(tr.BertForMaskedLM(tr.BertConfig(**small, attn_implementation="eager")), "bert"),
                      ids(30522), None)
    models["gpt2"] = (lambda: Loss(tr.GPT2LMHeadModel(tr.GPT2Config(n_layer=4, n_embd=256, n_head=4,
                                                                    attn_implementation="eager")), "gpt2"),
                      ids(50257), None)
    models["vit"] = (lambda: Loss(tr.ViTForImageClassification(tr.ViTConfig(**small, num_labels=10,
                                                                            attn_implementation="eager")), "vit"),
                     lambda: (torch.randn(8, 3, 224, 224), torch.randint(0, 10, (8,))), None)
    models["t5"] = (lambda: Loss(tr.T5ForConditionalGeneration(tr.T5Config(
        num_layers=4, num_decoder_layers=4, d_model=256, d_kv=64, d_ff=1024, num_heads=4, decoder_start_token_id=0,
        pad_token_id=0, attn_implementation="eager")), "t5"), ids(32128), None)
    return models, absent


def _capture_compiled(model: Any, inputs: tuple, loss_fn: Any) -> list[Any]:
    """The graphs ``torch.compile(backend=aoe)`` would tune for one training step (not tuned here)."""
    import torch

    import aoe.torch

    class Collect(type(aoe.torch.backend(mode="op"))):  # type: ignore[misc]
        def tune_graph(self, graph: Any, mode: int) -> Any:
            self.graphs.append(graph)

    be = Collect(aoe.torch.dynamo.make_options({"mode": "op", "verbose": False}))
    n = len(inputs) - (1 if loss_fn is not None else 0)
    out = torch.compile(model, backend=be, dynamic=False)(*inputs[:n])
    (loss_fn(out, *inputs[n:]) if loss_fn is not None else out if out.dim() == 0 else out.float().sum()).backward()
    return be.graphs


def _tune_case_counts(graphs: list[Any], tmp: Path, budget: int) -> dict[str, Any]:
    """Cold tuning with the built-in bank on into an empty custom bank (its hits are built-in ones), then again."""
    import aoe
    from aoe.job.api import TuneOptions

    def run() -> tuple[list[Any], float, float]:
        rs, wall, cpu_s = timed(lambda: [aoe.tune(g, mode="op", bank=tmp / "bank", work_path=tmp / "work", env={},
                                                  options=TuneOptions(budget=budget, lock=False))
                                         for g in graphs])
        return rs, wall, cpu_s

    first, wall, cpu_s = run()
    again, _, _ = run()
    s1 = [r.section["repo_summary"] for r in first]
    s2 = [r.section["repo_summary"] for r in again]
    builtin_hits = sum(s["repo_hit_num"] for s in s1)
    return {"tuning": {"wall_s": wall, "cpu_s": cpu_s}, "builtin_hits": builtin_hits,
            "new_cases": sum(s["repo_add_num"] for s in s1),
            "custom_hits_rerun": sum(s["repo_hit_num"] for s in s2) - builtin_hits,
            "status": sorted({r.status for r in first})}


def issue26(budget: int, only: list[str] | None = None) -> dict[str, Any]:
    """Ops seen / priced / skipped (with reasons), built-in / custom / new cases, capture and tuning CPU per model."""
    from collections import Counter

    import torch

    import aoe.torch
    from aoe.errors import AoeError
    from aoe.opat.apply import operator_cases

    models, absent = _issue26_models()
    rows: dict[str, Any] = {}
    for name, (build, inputs, loss_fn) in models.items():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        torch._dynamo.reset()
        model, xs = build(), inputs()
        n = len(xs) - (1 if loss_fn is not None else 0)
        route = "aoe.torch.capture_train_step"
        try:
            g, wall, cpu_s = timed(lambda: [aoe.torch.capture_train_step(model, xs[:n], loss_fn=loss_fn,
                                                                         targets=xs[n:], name=name)])
        except AoeError as exc:
            # (T5's tied embeddings: AOTAutograd's joint export refuses them; dynamo's route captures it)
            route = f"torch.compile(backend=aoe) (capture_train_step: {str(exc)[:120]})"
            try:
                g, wall, cpu_s = timed(lambda: _capture_compiled(model, xs, loss_fn))
            except Exception as exc2:  # noqa: BLE001 - a model that neither route captures: say why
                rows[name] = {"route": route, "error": f"{type(exc2).__name__}: {str(exc2).splitlines()[-1][:200]}"}
                continue
        priced, skipped, views = 0, Counter(), 0
        for graph in g:
            cases, unpriced = operator_cases(graph)
            priced += len(cases)
            skipped.update(f"{u['op_type']}: {u['reason']}" for u in unpriced)
            views += sum(1 for op in graph.ops if op.attrs.get("view"))
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            for d in ("bank", "work"):
                (t / d).mkdir()
            row = {"route": route, "graphs": len(g), "ops_seen": sum(len(x.ops) for x in g), "views": views,
                   "ops_priced": priced, "skipped": dict(skipped),
                   "capture_convert": {"wall_s": wall, "cpu_s": cpu_s}, **_tune_case_counts(g, t, budget)}
        rows[name] = row
        print(json.dumps({name: row}), file=sys.stderr, flush=True)
    return {"models": rows, "not_run": absent}


def _vector_flags() -> list[str]:
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return [f for f in ("avx2", "avx512f") if f in flags]


def _step_loss(out: Any) -> Any:
    """The sum of a model's floating outputs (a scalar to call backward on)."""
    import torch

    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    flat = out if isinstance(out, (tuple, list)) else (out,)
    return sum(t.float().sum() for t in flat if isinstance(t, torch.Tensor) and t.is_floating_point())


def _compile_cost(model: Any, x: tuple, backend: Any) -> dict[str, Any]:
    """CPU and wall seconds of torch.compile's first training step beyond its second (the capture)."""
    import torch

    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)

    def step() -> None:
        _step_loss(compiled(*x)).backward()

    _, w1, c1 = timed(step)
    _, w2, c2 = timed(step)
    model.zero_grad(set_to_none=True)
    return {"cpu_s": round(c1 - c2, 2), "wall_s": round(w1 - w2, 2), "first_step_cpu_s": c1, "step_cpu_s": c2}


def capture_vs_torch(model: Any, small_inputs: tuple, split: dict[str, float]) -> dict[str, Any]:
    """aoe's capture costs next to PyTorch's own on the same model (see the top of this file)."""
    import aoe.torch
    from aoe.torch.dynamo import Backend, make_options

    class ConvertOnly(Backend):
        """aoe's backend with tuning on, minus the tuning job: graphs are converted and kept."""

        def tune_graph(self, graph: Any, mode: int) -> Any:
            self.graphs.append(graph)
            return None

    import torch

    aoe.torch.backend()  # imports torch's frontend pieces once, outside the timings
    # dynamo's and AOTAutograd's first use (imports, caches) on a small model with both backends, so
    # neither measured compile pays it
    warm = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(144, 2))
    for backend in ("aot_eager", ConvertOnly(make_options({"mode": "op", "verbose": False}))):
        _compile_cost(warm, (torch.randn(2, 3, 8, 8),), backend)
    eager = _compile_cost(model, small_inputs, "aot_eager")
    conv = ConvertOnly(make_options({"mode": "op", "verbose": False}))
    ours = _compile_cost(model, small_inputs, conv)
    torch_s = split["aot_export_module_cpu_s"]
    return {"capture_train_step": {**split, "aoe_rest_cpu_s": round(split["cpu_s"] - torch_s, 2)},
            "compile_aot_eager": eager,
            "compile_aoe": {**ours, "graphs": len(conv.graphs), "ops": sum(len(g.ops) for g in conv.graphs)},
            "aoe_over_aot_eager": round(ours["cpu_s"] / eager["cpu_s"], 2) if eager["cpu_s"] > 0 else None}


def _timed_capture(model: Any, x: tuple, name: str) -> tuple[Any, dict[str, float]]:
    """capture_train_step, with the CPU seconds spent inside PyTorch's aot_export_module counted apart."""
    import torch._functorch.aot_autograd as aa

    import aoe.torch

    real, spent = aa.aot_export_module, [0.0]

    def counted(*a: Any, **k: Any) -> Any:
        c = cpu()
        try:
            return real(*a, **k)
        finally:
            spent[0] += cpu() - c

    aa.aot_export_module = counted
    try:
        g, wall, secs = timed(lambda: aoe.torch.capture_train_step(model, x, name=name))
    finally:
        aa.aot_export_module = real
    return g, {"wall_s": wall, "cpu_s": secs, "aot_export_module_cpu_s": round(spent[0], 2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=2000, help="strategy evaluations per operator case")
    p.add_argument("--quick", action="store_true", help="batch 2 instead of 32 (a smoke run)")
    p.add_argument("--issue26", action="store_true",
                   help="instead: the models of issue 26 (small CNN, Transformer layers, LSTM, torchvision and "
                        "Hugging Face models where they install): ops seen / priced / skipped, cases, CPU")
    p.add_argument("--only", nargs="*", help="with --issue26: these models only (e.g. lstm gpt2)")
    p.add_argument("--capture-only", action="store_true", help="the capture figures only (no tuning, no ONNX)")
    p.add_argument("--models", default="resnet50,bert_base", help="comma-separated: resnet50, bert_base")
    args = p.parse_args()
    if args.issue26:
        import torch

        from job_bench import machine

        out = {"bench": "frontend_torch_issue26", **machine(), "vector_flags": _vector_flags(),
               "budget": args.budget, "torch": torch.__version__, **issue26(args.budget, args.only)}
        out["load_1min_end"] = round(__import__("os").getloadavg()[0], 2)
        print(json.dumps(out))
        return
    import torch

    import aoe.graph
    import aoe.torch

    torch.manual_seed(0)
    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    out: dict[str, Any] = {"bench": "frontend_torch", **machine(), "budget": args.budget, "torch": torch.__version__,
                           "models": {}}
    wanted = args.models.split(",")
    small = _models(True)
    for name, (build, inputs, zoo, shape) in _models(args.quick).items():
        if name not in wanted:
            continue
        model = build()
        row: dict[str, Any] = {"shape": shape}
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            for d in ("bank_torch", "bank_onnx", "work"):
                (t / d).mkdir()
            g, split = _timed_capture(model, inputs(), name)
            s = g.summary()
            row["torch"] = {"capture_convert": {"wall_s": split["wall_s"], "cpu_s": split["cpu_s"]}, "ops": len(g.ops),
                            "gmacs": round(s["total_macs"] / 1e9, 2), "unsupported": len(g.unsupported)}
            if not args.capture_only:
                row["torch"]["cold"] = tune(g, t / "bank_torch", t / "work", args.budget)
                row["torch"]["warm"] = tune(g, t / "bank_torch", t / "work", args.budget)
                row["onnx"] = onnx_route(zoo, shape, t, args.budget)
        row["capture_vs_torch"] = capture_vs_torch(model, small[name][1](), split)
        out["models"][name] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
