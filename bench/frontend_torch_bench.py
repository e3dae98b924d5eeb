"""PyTorch frontend timing: capture + convert + tune of a training step, cold and warm, next to the ONNX route.

    python bench/frontend_torch_bench.py [--budget 2000] [--quick]

For ResNet-50 (batch 32, 224x224) and BERT-base (32 x 128), each built from code with random weights:

- torch route: ``aoe.torch.capture_train_step`` (AOTAutograd's joint forward + backward graph with fake
  tensors, converted to CANN operators, Adam as ``ApplyAdamD``) and operator tuning (OPAT) of that
  graph into a fresh bank (cold), then again into the same bank (warm: every case a bank hit);
- ONNX route: ``aoe.tune("zoo:...", training=True)`` the same way.

Prints one JSON line: wall seconds and CPU seconds (this process and its tuning workers) per phase,
the graphs' operator counts and MACs, and the bank counters of each run.
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

from _frontend_common import onnx_route, timed, tune  # noqa: E402 (bench/ is on the path of a script)


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=2000, help="strategy evaluations per operator case")
    p.add_argument("--quick", action="store_true", help="batch 2 instead of 32 (a smoke run)")
    args = p.parse_args()
    import torch

    import aoe.graph
    import aoe.torch

    torch.manual_seed(0)
    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    out: dict[str, Any] = {"bench": "frontend_torch", **machine(), "budget": args.budget, "torch": torch.__version__,
                           "models": {}}
    for name, (build, inputs, zoo, shape) in _models(args.quick).items():
        model = build()
        row: dict[str, Any] = {"shape": shape}
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            for d in ("bank_torch", "bank_onnx", "work"):
                (t / d).mkdir()
            g, wall, cpu = timed(lambda: aoe.torch.capture_train_step(model, inputs(), name=name))
            s = g.summary()
            row["torch"] = {"capture_convert": {"wall_s": wall, "cpu_s": cpu}, "ops": len(g.ops),
                            "gmacs": round(s["total_macs"] / 1e9, 2), "unsupported": len(g.unsupported),
                            "cold": tune(g, t / "bank_torch", t / "work", args.budget),
                            "warm": tune(g, t / "bank_torch", t / "work", args.budget)}
            row["onnx"] = onnx_route(zoo, shape, t, args.budget)
        out["models"][name] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
