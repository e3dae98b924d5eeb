"""PyTorch frontend timing: capture + convert + tune of a training step, cold and warm, next to the ONNX route.

    python bench/frontend_torch_bench.py [--budget 2000] [--quick] [--capture-only] [--models resnet50,bert_base]

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
    p.add_argument("--capture-only", action="store_true", help="the capture figures only (no tuning, no ONNX)")
    p.add_argument("--models", default="resnet50,bert_base", help="comma-separated: resnet50, bert_base")
    args = p.parse_args()
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
