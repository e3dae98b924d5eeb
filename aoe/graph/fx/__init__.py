"""FX graphs of ATen operators (AOTAutograd's forward/backward graphs, joint train steps) -> aoe IR.

    from aoe.graph.fx import from_fx
    g = from_fx(gm, name="resnet50/forward", kinds={"primals_1": "param"})

Needs PyTorch (``pip install 'aoe[torch]'``); imported only when called.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..ir import Graph


def from_fx(gm: Any, name: str = "torch_graph", kinds: Mapping[str, str] | None = None,
            compute_dtype: str = "float16", training: bool = False, values: dict[str, str] | None = None) -> Graph:
    """Convert an FX GraphModule of ATen ops (nodes carrying fake-tensor ``meta['val']``) to a Graph.

    ``kinds`` maps placeholder names to ``param`` / ``const`` / ``input`` (default ``input``).
    Symbolic shapes raise AoeError naming the tensor; unknown ATen ops become ``Opaque`` (warned, and
    listed in ``graph.unsupported``). ``values``: a dict filled with graph-output node name -> IR tensor.
    """
    from .convert import Converter

    return Converter(gm, name, kinds or {}, compute_dtype, training, values).run()


__all__ = ["from_fx"]
