"""Export the bundled model zoo (aoe/graph/zoo/*.onnx) from the real model definitions.

The models are built from their definitions with random weights (nothing is downloaded from a model
hub), exported to ONNX with dynamic batch (and sequence) axes, and then the weights are removed: every
large initializer keeps its name, dims and dtype but its data is marked as external data in a file
that is deliberately not shipped. aoe loads the files with ``load_external_data=False``, so only the
structure is read, and each file stays well under 1 MB.

Re-run (torch/torchvision/transformers live in a separate venv so the main environment stays light):

    python3 -m venv /work/zoo-venv
    /work/zoo-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 transformers onnx
    /work/zoo-venv/bin/python scripts/export_zoo.py            # all models
    /work/zoo-venv/bin/python scripts/export_zoo.py bert_base  # one model

Exported with torch 2.14.1, torchvision 0.29.1, transformers 5.24.0, onnx 1.23.2, opset 17, the
TorchScript exporter (``dynamo=False``).
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent.parent / "aoe" / "graph" / "zoo"
OPSET = 17
# initializers at or below this many elements keep their data (shape constants, scalars, index
# buffers): the importer folds shape-computing subgraphs with them
KEEP_ELEMENTS = 64
NOT_SHIPPED = "weights_not_shipped.bin"


def _export(model, args: tuple, input_names: list[str], output_names: list[str],
            dynamic_axes: dict[str, dict[int, str]]) -> bytes:
    import torch

    buf = io.BytesIO()
    with torch.no_grad():
        # PRESERVE (with the model in eval mode) keeps BatchNormalization as its own node instead of
        # folding it into the preceding Conv: training graphs need the batch-norm operators
        torch.onnx.export(model, args, buf, input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, opset_version=OPSET, do_constant_folding=True,
                          training=torch.onnx.TrainingMode.PRESERVE, dynamo=False)
    return buf.getvalue()


def _strip_weights(data: bytes, name: str) -> bytes:
    """Drop the data of large initializers, keeping name/dims/dtype, and anything not needed for structure."""
    import onnx
    from onnx import TensorProto

    model = onnx.load_from_string(data)
    model.graph.ClearField("value_info")  # aoe infers shapes itself; stale entries only add size
    model.doc_string = ""
    model.graph.doc_string = ""
    model.graph.name = name
    offset = 0
    for init in model.graph.initializer:
        numel = 1
        for d in init.dims:
            numel *= d
        if numel <= KEEP_ELEMENTS and init.data_type != TensorProto.FLOAT:
            continue
        if numel <= KEEP_ELEMENTS:
            continue
        if init.data_type in (TensorProto.INT64, TensorProto.INT32) and numel <= 4096:
            continue  # index buffers such as position_ids are tiny and useful for folding
        length = len(init.raw_data) if init.HasField("raw_data") else numel * 4
        for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data"):
            init.ClearField(f)
        init.data_location = TensorProto.EXTERNAL
        del init.external_data[:]
        for k, v in (("location", NOT_SHIPPED), ("offset", str(offset)), ("length", str(length))):
            entry = init.external_data.add()
            entry.key, entry.value = k, v
        offset += length
    for node in model.graph.node:
        node.doc_string = ""
    return model.SerializeToString()


def resnet50() -> bytes:
    """torchvision ResNet-50, input [batch, 3, 224, 224]."""
    import torch
    import torchvision

    m = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    return _export(m, (x,), ["input"], ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}})


def mobilenet_v2() -> bytes:
    """torchvision MobileNetV2, input [batch, 3, 224, 224]."""
    import torch
    import torchvision

    m = torchvision.models.mobilenet_v2(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    return _export(m, (x,), ["input"], ["logits"], {"input": {0: "batch"}, "logits": {0: "batch"}})


def bert_base() -> bytes:
    """transformers BertModel(BertConfig()) (base: 12 layers, hidden 768), inputs [batch, sequence]."""
    import torch
    from transformers import BertConfig, BertModel

    cfg = BertConfig()
    cfg._attn_implementation = "eager"  # plain MatMul/Softmax attention, as a graph compiler sees it

    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = BertModel(cfg).eval()

        def forward(self, input_ids, attention_mask):
            out = self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)
            return out[0], out[1]

    ids = torch.ones(2, 128, dtype=torch.long)
    mask = torch.ones(2, 128, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    return _export(Wrap().eval(), (ids, mask), ["input_ids", "attention_mask"],
                   ["last_hidden_state", "pooler_output"],
                   {"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes,
                    "pooler_output": {0: "batch"}})


def gpt2() -> bytes:
    """transformers GPT2Model(GPT2Config()) (small: 12 layers, hidden 768), causal, input [batch, sequence]."""
    import torch
    from transformers import GPT2Config, GPT2Model

    cfg = GPT2Config()
    cfg._attn_implementation = "eager"

    class Wrap(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gpt2 = GPT2Model(cfg).eval()

        def forward(self, input_ids):
            # an explicit all-ones mask (built from the input's shape, so it folds to a constant) keeps
            # transformers off its packed-sequence detection, which uses aten::diff (no ONNX export)
            mask = torch.ones_like(input_ids)
            return self.gpt2(input_ids=input_ids, attention_mask=mask, use_cache=False, return_dict=False)[0]

    ids = torch.ones(2, 128, dtype=torch.long)
    axes = {0: "batch", 1: "sequence"}
    return _export(Wrap().eval(), (ids,), ["input_ids"], ["last_hidden_state"],
                   {"input_ids": axes, "last_hidden_state": axes})


MODELS = {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "bert_base": bert_base, "gpt2": gpt2}


def main(argv: list[str]) -> int:
    """Export the named models (default: all) into aoe/graph/zoo/."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", choices=[[], *MODELS], default=[])
    args = ap.parse_args(argv)
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for name in args.models or list(MODELS):
        data = _strip_weights(MODELS[name](), name)
        path = OUT_DIR / f"{name}.onnx"
        path.write_bytes(data)
        print(f"{path}: {len(data)} bytes")
        if len(data) >= 1 << 20:
            print(f"error: {name} is not under 1 MB", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
