"""The bundled model zoo: real model structures (weights removed), loadable as ``zoo:NAME``.

Files are produced by ``scripts/export_zoo.py``; each has dynamic batch (and sequence) axes whose
defaults below are used unless ``--input_shape`` fixes them.
"""
from __future__ import annotations

from pathlib import Path

from ...errors import AoeError

_DIR = Path(__file__).resolve().parent

# name -> (file, default input shapes, description)
ZOO: dict[str, tuple[str, dict[str, tuple[int, ...]], str]] = {
    "resnet50": ("resnet50.onnx", {"input": (1, 3, 224, 224)}, "torchvision ResNet-50, 224x224"),
    "mobilenet_v2": ("mobilenet_v2.onnx", {"input": (1, 3, 224, 224)}, "torchvision MobileNetV2, 224x224"),
    "bert_base": ("bert_base.onnx", {"input_ids": (1, 128), "attention_mask": (1, 128)},
                  "transformers BERT-base (12 layers, hidden 768), sequence 128"),
    "gpt2": ("gpt2.onnx", {"input_ids": (1, 128)}, "transformers GPT-2 small (12 layers, hidden 768), sequence 128"),
}


def zoo_names() -> list[str]:
    """Names accepted after ``zoo:``."""
    return list(ZOO)


def zoo_model(name: str) -> tuple[Path, dict[str, tuple[int, ...]], str]:
    """File path, default input shapes and graph name of a zoo model; AoeError for unknown names."""
    entry = ZOO.get(name)  # the name is only ever a dictionary key, never part of a path
    if entry is None:
        raise AoeError(f"unknown zoo model {name!r}; available: {', '.join('zoo:' + n for n in ZOO)}")
    path = _DIR / entry[0]
    if not path.is_file():
        raise AoeError(f"zoo model file {entry[0]} is missing from the installation; "
                       "reinstall aoe or re-run scripts/export_zoo.py")
    return path, dict(entry[1]), name
