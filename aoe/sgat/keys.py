"""Subgraph bank keys and the stored plan (knowledge).

`repo_key` = the first 64 bits of the SHA-256 of a canonical JSON description of the subgraph, as a
decimal string: its kernels in order (operator type, the operator-bank key of the case — shapes,
dtypes, formats, attributes), how each input is wired (local producer index or external), which
outputs escape the subgraph, and the SoC (name and core counts). Operator names are not part of it,
so the twelve identical BERT layers share one key, and the key is the same in every process
(no `hash()`, no dict-order dependence).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np

from ..graph.ir import Graph, Op
from ..ops import describe
from ..soc import Soc
from .model import N_SPLITS, N_TILES, TILE_BASE, RegionData
from .partition import Subgraph

KEY_VERSION = 1


def _through_views(producer: dict[str, Op], t: str) -> tuple[Op | None, str]:
    p = producer.get(t)
    while p is not None and p.is_view and p.inputs:
        t = p.inputs[0]
        p = producer.get(t)
    return p, t


def describe_structure(graph: Graph, sub: Subgraph, soc: Soc, rd: RegionData,
                       producer: dict[str, Op] | None = None) -> dict[str, Any]:
    """The canonical, name-free description of a subgraph that its repo_key hashes."""
    if producer is None:
        producer = {t: op for op in graph.ops for t in op.outputs}
    local = {op.name: i for i, op in enumerate(sub.kernels)}
    kernels = []
    for op in sub.kernels:
        case = describe(graph, op)
        ins = []
        for t in op.inputs:
            p, _ = _through_views(producer, t)
            src = local.get(p.name, -1) if p is not None else -1
            out_idx = p.outputs.index(_through_views(producer, t)[1]) if src >= 0 else -1
            tt = graph.tensors[t]
            ins.append([src, out_idx, list(tt.shape), tt.dtype, tt.format, tt.kind])
        outs = [[list(graph.tensors[t].shape), graph.tensors[t].dtype, graph.tensors[t].format]
                for t in op.outputs]
        kernels.append({"type": op.type, "case": case.key, "inputs": ins, "outputs": outs})
    escapes = [[int(p), float(b), int(e)] for (p, _), (b, e) in zip(rd.tens.tolist(), rd.tensf.tolist())]
    return {"v": KEY_VERSION, "soc": soc.name, "cores": [soc.cube_cores, soc.vector_cores],
            "kernels": kernels, "edges": rd.edges.tolist(), "tensors": escapes}


def repo_key(structure: dict[str, Any]) -> str:
    """Stable decimal key of a subgraph description (first 64 bits of its SHA-256)."""
    text = json.dumps(structure, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return str(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big"))


def plan_knowledge(rd: RegionData, plan: np.ndarray, kernel_types: list[str]) -> dict[str, Any]:
    """The stored strategy of a subgraph: its plan vector and what the vector means."""
    e = rd.n_edges
    p = [int(v) for v in plan]
    fused = [[int(a), int(b)] for (a, b), bit in zip(rd.edges.tolist(), p[:e]) if bit]
    return {"plan": p, "edges": rd.edges.tolist(), "fused_edges": fused,
            "split_axis": ("rows", "columns")[p[e]], "tile_elems": TILE_BASE << p[e + 1],
            "l2_resident": bool(p[e + 2]), "op_types": list(kernel_types)}


def plan_from_knowledge(rd: RegionData, knowledge: Any) -> np.ndarray | None:
    """The plan vector of a stored strategy, or None when it does not fit this subgraph."""
    if not isinstance(knowledge, dict):
        return None
    p = knowledge.get("plan")
    if not isinstance(p, list) or len(p) != rd.plan_width or not all(type(v) is int for v in p):
        return None
    if knowledge.get("edges", rd.edges.tolist()) != rd.edges.tolist():
        return None
    e = rd.n_edges
    if (any(v not in (0, 1) for v in p[:e]) or not 0 <= p[e] < N_SPLITS or not 0 <= p[e + 1] < N_TILES
            or p[e + 2] not in (0, 1)):
        return None
    return np.array(p, dtype=np.int64)
