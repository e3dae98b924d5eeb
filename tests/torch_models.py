"""Models for the PyTorch frontend tests and bench, built from code with random weights.

torchvision cannot be installed on these machines beside the CPU torch wheel: PyPI's torchvision
fails to import with it ("operator torchvision::nms does not exist"), and the only torchvision build
that matches this torch is a multi-gigabyte CUDA one. So ResNet-50 is written out here by hand, as
torchvision's ResNet-50 v1.5: the same module tree and state-dict names (``layer1.0.downsample.0``
...), the stride on the 3x3 convolution of a Bottleneck, blocks [3, 4, 6, 3], the same initialisation,
25,557,032 parameters (tests/test_frontend_torch.py checks the count and the strides).
``resnet50()`` returns torchvision's own model instead where torchvision does import.
"""
from __future__ import annotations

import torch
from torch import nn


class Bottleneck(nn.Module):
    """1x1 -> 3x3 (stride) -> 1x1 x4, batch norm after each, identity or projected shortcut."""

    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        idt = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + idt)


class ResNet(nn.Module):
    """ResNet with Bottleneck blocks, torchvision's module layout and weight initialisation."""

    def __init__(self, layers: tuple[int, ...] = (3, 4, 6, 3), num_classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        cin = 64
        stages = []
        for i, (n, width) in enumerate(zip(layers, (64, 128, 256, 512))):
            stride = 1 if i == 0 else 2
            down = nn.Sequential(nn.Conv2d(cin, width * 4, 1, stride=stride, bias=False), nn.BatchNorm2d(width * 4))
            blocks = [Bottleneck(cin, width, stride, down)]
            cin = width * 4
            blocks += [Bottleneck(cin, width) for _ in range(n - 1)]
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2048, num_classes)
        # as torchvision initialises: He-normal convolutions (fan-out), batch norms at scale 1, shift 0
        for mod in self.modules():
            if isinstance(mod, nn.Conv2d):
                nn.init.kaiming_normal_(mod.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(mod, nn.BatchNorm2d):
                nn.init.ones_(mod.weight)
                nn.init.zeros_(mod.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet50(num_classes: int = 1000) -> nn.Module:
    """torchvision's ResNet-50 with random weights if torchvision imports, else the same network from above."""
    try:
        from torchvision.models import resnet50 as tv

        return tv(weights=None, num_classes=num_classes)
    except Exception:  # not installed, or its compiled ops do not match this torch build
        return ResNet(num_classes=num_classes)


def bert_config(layers: int = 2, hidden: int = 128, heads: int = 2, vocab: int = 1000, **kw):
    """A small BertConfig without dropout (eager and compiled losses then compare exactly).

    `problem_type` is fixed: transformers sets it on the first call otherwise, which makes dynamo recompile.
    """
    from transformers import BertConfig

    return BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      intermediate_size=4 * hidden, vocab_size=vocab, max_position_embeddings=512,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                      problem_type="single_label_classification", **kw)
