"""Scaling benchmark: CPU seconds per phase on synthetic chains of 1k / 10k / 100k operators and a wide graph.

Run: python bench/scale_bench.py [--sizes 1000,10000,100000] [--wide 10000] [--budget 2000]
       [--phases load,describe,opat,sgat,training,opat_training] [--write DIR]

Prints one JSON object: per graph and phase the CPU seconds of this process (``time.process_time``; the
tuners run serially here, ``workers=1``, so no child process does work) and the wall seconds, and the
log-log slope of CPU against operator count between consecutive sizes (1.0 = linear, 2.0 = quadratic),
with the CPU model, its vector flags and the date. The graphs come from `chain()` and `wide()` below:
a chain repeats a block of Conv2D / Add / Relu / view / MatMulV2 / Add / Gelu / view over a few widths (so
a handful of distinct tuning cases: the cost measured is the per-operator handling, not the search); the
wide graph fans one tensor out to many short branches and sums them pairwise. Tuning uses no bank
directory (nothing is written), the built-in bank set aside (`--no_builtin` behaviour: every distinct case
is searched) and a strategy budget of ``--budget`` evaluations per case (AOE_SEARCH_BUDGET's meaning).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from aoe.graph import Graph, Op, Tensor

_WIDTHS = (32, 64)      # channels cycled by the chain's blocks: a few distinct cases, not one
_HW = 16                # spatial size of the 4-D activations; the matmul view is [C, H*W]


class _Gen:
    """Builds a graph operator by operator with unique tensor and operator names."""

    def __init__(self, name: str) -> None:
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.name = name

    def tensor(self, shape: tuple[int, ...], kind: str = "activation", fmt: str = "ND") -> str:
        name = f"t{len(self.tensors)}"
        self.tensors[name] = Tensor(name, shape, "float16", fmt, kind)
        return name

    def op(self, type_: str, inputs: list[str], out_shape: tuple[int, ...], fmt: str = "ND", **attrs: Any) -> str:
        out = self.tensor(out_shape, fmt=fmt)
        self.ops.append(Op(f"op{len(self.ops)}_{type_}", type_, inputs, [out], attrs))
        return out

    def block(self, x: str, c_in: int, c_out: int, budget: int) -> tuple[str, int]:
        """Up to `budget` operators of the chain's block from 4-D `x` of `c_in` channels."""
        hw = _HW * _HW
        steps: list[Callable[[str], str]] = [
            lambda t: self.op("Conv2D", [t, self.tensor((c_out, c_in, 3, 3), "param", "NCHW")],
                              (1, c_out, _HW, _HW), "NCHW", strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1],
                              groups=1, kernel=[3, 3], has_bias=False, data_format="NCHW"),
            lambda t: self.op("Add", [t, self.tensor((1, c_out, 1, 1), "param", "NCHW")], (1, c_out, _HW, _HW), "NCHW"),
            lambda t: self.op("Relu", [t], (1, c_out, _HW, _HW), "NCHW"),
            lambda t: self.op("Reshape", [t], (c_out, hw), view=True, shape=[c_out, hw]),
            lambda t: self.op("MatMulV2", [t, self.tensor((hw, hw), "param")], (c_out, hw),
                              transpose_x1=False, transpose_x2=False, has_bias=False),
            lambda t: self.op("Add", [t, self.tensor((hw,), "param")], (c_out, hw)),
            lambda t: self.op("Gelu", [t], (c_out, hw)),
            lambda t: self.op("Reshape", [t], (1, c_out, _HW, _HW), "NCHW", view=True, shape=[1, c_out, _HW, _HW]),
        ]
        steps = steps[:budget]
        for step in steps:
            x = step(x)
        return x, len(steps)

    def graph(self, inputs: list[str], outputs: list[str]) -> Graph:
        g = Graph(self.name, self.tensors, self.ops, inputs, outputs)
        g.validate()
        return g


def chain(n_ops: int) -> Graph:
    """A chain of `n_ops` operators (conv, matmul, elementwise and views), each reading its predecessor."""
    gen = _Gen(f"chain{n_ops}")
    c = _WIDTHS[0]
    x = gen.tensor((1, c, _HW, _HW), "input", "NCHW")
    inp, k = x, 0
    while len(gen.ops) < n_ops:
        c_out = _WIDTHS[k % len(_WIDTHS)]
        x, _ = gen.block(x, c, c_out, n_ops - len(gen.ops))
        c, k = c_out, k + 1
    return gen.graph([inp], [x])


def wide(n_ops: int, depth: int = 8) -> Graph:
    """About `n_ops` operators: one tensor read by many branches of `depth` operators, summed pairwise."""
    gen = _Gen(f"wide{n_ops}")
    c = _WIDTHS[0]
    x = gen.tensor((1, c, _HW, _HW), "input", "NCHW")
    stem = gen.op("Relu", [x], (1, c, _HW, _HW), "NCHW")
    n_branches = max(2, (n_ops - 1) // (depth + 1))
    ends = []
    for b in range(n_branches):
        y, _ = gen.block(stem, c, c, depth)
        ends.append(y)
    while len(ends) > 1:  # a balanced tree of Adds: every branch end is read once
        nxt = [gen.op("Add", [ends[i], ends[i + 1]], (1, c, _HW, _HW), "NCHW") for i in range(0, len(ends) - 1, 2)]
        ends = nxt + ([ends[-1]] if len(ends) % 2 else [])
    return gen.graph([x], ends)
