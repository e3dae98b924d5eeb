"""PyTorch frontend timing: capture + convert + tune of a training step, cold and warm, next to the ONNX route.

    python bench/frontend_torch_bench.py [--budget 2000] [--quick]
    python bench/frontend_torch_bench.py --issue26 [--budget 2000]

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=2000, help="strategy evaluations per operator case")
    p.add_argument("--quick", action="store_true", help="batch 2 instead of 32 (a smoke run)")
    p.add_argument("--issue26", action="store_true",
                   help="instead: the models of issue 26 (small CNN, Transformer layers, LSTM, torchvision and "
                        "Hugging Face models where they install): ops seen / priced / skipped, cases, CPU")
    p.add_argument("--only", nargs="*", help="with --issue26: these models only (e.g. lstm gpt2)")
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
