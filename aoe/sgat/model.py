"""Per-subgraph cost data for the fusion evaluator, obtained once from the C++ simulator.

Each kernel of a subgraph is priced once with its CANN default strategy (`aoe.sim.simulate`); the
evaluator then only recombines these numbers, so millions of fusion plans cost no simulator calls.

Per operator i (row of `opf`):
    T      default time (µs, launch included) — an unfused plan costs exactly the sum of these
    C      compute time: max(Cube, MTE1, Vector) busy µs
    M      memory time: max(MTE2, MTE3/FixPipe, HBM bytes / HBM bandwidth) µs
    R      the rest: T - launch - max(C, M) (fill/drain, scalar set-up, latencies), >= 0
    BYTES  bytes of its distinct input and output tensors (what M moves)
    CUBE   1 on the Cube unit
    EMAIN  elements of its iteration space (largest tensor; a cube op's output)
    ROW    elements a tile must hold whole when fused (a Softmax/LayerNorm row), else 0
    RED    1 for cross-tile reductions (partials are accumulated atomically when fused)
    OUTB   bytes of its outputs
    CROWS  elements of one column of its main tensor (column = last axis of ND data, channel of NCHW)
    CRUN   contiguous bytes one column contributes per row (an element of ND data, an HxW plane of NCHW)
Per edge e (producer -> consumer inside the subgraph, through views): READB bytes the consumer reads
over it, BARRIER (1 = the data is a whole-tensor reduction result: the consumer cannot start before
every tile is done, so the edge can never fuse), MINTILE (a Cube consumer needs a whole K panel /
kh input rows on chip), HALO (elements re-computed per tile for a conv consumer's halo rows).
Per intermediate tensor: producer, mask of its in-subgraph readers, bytes, ESCAPES (read outside the
subgraph or a graph output: it must be written even when every reader here is fused).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import AbstractSet, Any

import numpy as np

from .. import sim
from ..graph.ir import Graph, Op
from ..ops import describe
from ..soc import Soc
from .partition import Subgraph, is_cube

# The array layout (column indices, plan fields) lives in evaluator.py, beside the evaluator it
# describes (its Numba code, _jit.py, holds the same numbers; evaluator.py refuses to load it if they
# differ). Re-exported from here.
from .evaluator import (  # noqa: F401 - the layout names the other modules and tests import from here
    BARRIER, BYTES, C, CROWS, CRUN, CUBE, EMAIN, HALO, M, MAX_KERNELS, MINTILE,
    N_EDGEF, N_OPF, N_SOCP, N_SPLITS, N_TILES, OUTB, READB, RED, ROW, S_CUBE_CORES, S_HANDOFF_US, S_HBM_BPUS,
    S_INSTR_US, S_L0C, S_L1, S_L2_BPUS, S_L2CAP, S_LAT_US, S_LAUNCH, S_SEPARATED, S_TILE_US, S_UB, S_VEC_CORES,
    TILE_BASE, R, T)

NORM_TYPES = frozenset({"SoftmaxV2", "SoftmaxGrad", "LayerNorm", "LayerNormGrad", "LayerNormV3", "LayerNormV4",
                        "Softmax"})
REDUCE_TYPES = frozenset({"ReduceSumD", "ReduceMeanD", "ReduceMaxD", "ReduceSum", "ReduceMean", "ReduceMax",
                          "BNTrainingReduce", "BNTrainingUpdateGrad", "SquareSumV1"})
GATHER_TYPES = frozenset({"Gather", "GatherV2", "EmbeddingDenseGrad", "UnsortedSegmentSum"})
SCATTER_TYPES = frozenset({"EmbeddingDenseGrad", "UnsortedSegmentSum"})
# operators whose smaller outputs may be reductions over rows (see _is_barrier)
REDUCING_TYPES = REDUCE_TYPES | {"LayerNorm", "LayerNormGrad", "BNTrainingUpdate", "BNTrainingReduceGrad"}


def soc_params(soc: Soc) -> np.ndarray:
    """The SoC numbers the evaluator needs, as one float64 vector."""
    p = np.zeros(N_SOCP)
    p[S_LAUNCH] = soc.launch_us
    p[S_HBM_BPUS] = soc.hbm_gbps * soc.hbm_efficiency * 1e3          # bytes per µs
    p[S_L2_BPUS] = (soc.l2_gbps or soc.hbm_gbps * 3) * 1e3
    p[S_UB] = soc.ub - soc.ub_reserved
    p[S_L0C] = soc.l0c
    p[S_L1] = soc.l1
    p[S_L2CAP] = soc.l2 * soc.l2_usable
    # per-tile cost of a fused kernel: one scalar chunk set-up (vector clock)
    p[S_TILE_US] = soc.scalar_chunk_cycles / soc.vec_freq_mhz
    p[S_SEPARATED] = float(soc.separated)
    p[S_HANDOFF_US] = soc.cv_handoff_us
    p[S_CUBE_CORES] = soc.cube_cores
    p[S_VEC_CORES] = soc.vector_cores
    p[S_INSTR_US] = soc.vec_instr_overhead_cycles / soc.vec_freq_mhz
    p[S_LAT_US] = 2.0 * soc.dma_latency_cycles / soc.vec_freq_mhz
    return p


@dataclass
class RegionData:
    """Everything the evaluator needs about one subgraph (numpy arrays, fixed layout above)."""

    n: int
    edges: np.ndarray       # int64 [E, 2] (producer, consumer) local kernel indices, sorted
    opf: np.ndarray         # float64 [n, N_OPF]
    edgef: np.ndarray       # float64 [E, N_EDGEF]
    tens: np.ndarray        # int64 [Tn, 2] (producer, reader mask)
    tensf: np.ndarray       # float64 [Tn, 2] (bytes, escapes)
    reach: np.ndarray       # int64 [n] descendants (self included) bitmask
    anc: np.ndarray         # int64 [n] ancestors (self included) bitmask
    socp: np.ndarray        # float64 [N_SOCP]

    @property
    def n_edges(self) -> int:
        """Number of internal edges (fusion decisions)."""
        return int(self.edges.shape[0])

    @property
    def plan_width(self) -> int:
        """Length of a plan vector: one bit per edge, the split axis, the tile index, the L2 flag."""
        return self.n_edges + 3

    @property
    def n_plans(self) -> int:
        """Size of the whole plan space."""
        return (1 << self.n_edges) * N_SPLITS * N_TILES * 2

    @property
    def is_chain(self) -> bool:
        """True when the kernels form one path 0 -> 1 -> ... -> n-1."""
        return self.n_edges == self.n - 1 and all(
            int(a) == i and int(b) == i + 1 for i, (a, b) in enumerate(self.edges))

    def unfused_us(self) -> float:
        """Time of the unfused plan: every kernel on its own with its default strategy."""
        return float(self.opf[:, T].sum())

    def arrays(self) -> tuple[Any, ...]:
        """Arguments of the evaluator (`evaluator.evaluate_arrays`) after the plans."""
        return (self.edges, self.opf, self.edgef, self.tens, self.tensf, self.reach, self.anc, self.socp)


class CostCache:
    """Default-strategy prices of simulator operators, computed once per distinct descriptor."""

    def __init__(self, soc: Soc) -> None:
        self.soc = soc
        self._cache: dict[Any, tuple[float, float, float, float]] = {}

    def price(self, sim_op: Any) -> tuple[float, float, float, float]:
        """(time, compute, memory, rest) in µs of `sim_op` under the default strategy."""
        hit = self._cache.get(sim_op)
        if hit is None:
            r = sim.simulate(self.soc, sim_op)
            if not r.valid:
                raise ValueError(f"default strategy of {sim_op} is invalid ({r.reason})")
            b = r.busy_us
            comp = max(b["Cube"], b["MTE1"], b["Vector"])
            bw = self.soc.hbm_gbps * self.soc.hbm_efficiency * 1e3
            mem = max(b["MTE2"], b["FixPipe/MTE3"], r.hbm_bytes / bw if bw > 0 else 0.0)
            rest = max(0.0, r.time_us - self.soc.launch_us - max(comp, mem))
            hit = (r.time_us, comp, mem, rest)
            self._cache[sim_op] = hit
        return hit


def _numel(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape)) if shape else 1


def _through_views(graph: Graph, producer: dict[str, Op], t: str) -> Op | None:
    p = producer.get(t)
    while p is not None and p.is_view and p.inputs:
        p = producer.get(p.inputs[0])
    return p


def region_data(graph: Graph, sub: Subgraph, soc: Soc, costs: CostCache,
                producer: dict[str, Op] | None = None, readers: dict[str, list[Op]] | None = None,
                outputs: AbstractSet[str] | None = None) -> RegionData:
    """Cost data of one subgraph (see the module docstring)."""
    if producer is None or readers is None or outputs is None:
        links = graph.links()  # the graph's index, built once (not per subgraph)
        producer = links.producers if producer is None else producer
        readers = links.consumers if readers is None else readers
        outputs = links.outputs if outputs is None else outputs
    ks = sub.kernels
    n = len(ks)
    if n > MAX_KERNELS:
        raise ValueError(f"subgraph of {n} kernels exceeds the evaluator's limit of {MAX_KERNELS}")
    local = {op.name: i for i, op in enumerate(ks)}
    opf = np.zeros((n, N_OPF))
    for i, op in enumerate(ks):
        case = describe(graph, op)
        t, c, m, r = costs.price(case.default.sim_op)
        ins = list(dict.fromkeys(op.inputs))
        outs = list(dict.fromkeys(op.outputs))
        in_t = [graph.tensors[x] for x in ins]
        out_t = [graph.tensors[x] for x in outs]
        if op.type in GATHER_TYPES:
            # random access into a table: only the rows actually touched stream through
            nb = sum(x.nbytes for x in out_t) * 2 + sum(x.nbytes for x in in_t if x.numel <= max(
                (o.numel for o in out_t), default=1))
        else:
            nb = sum(x.nbytes for x in in_t) + sum(x.nbytes for x in out_t)
        cube = is_cube(op)
        if cube:
            emain = max((x.numel for x in out_t), default=1)
            if op.type == "Conv2DBackpropFilter":  # iterates over output pixels of dy
                emain = max((x.numel for x in in_t), default=1)
        else:
            emain = max([x.numel for x in in_t if x.kind != "const"] + [x.numel for x in out_t] + [1])
        row = 0
        if op.type in NORM_TYPES and in_t:
            shape = in_t[0].shape
            if op.type.startswith("LayerNorm"):
                begin = int(op.attrs.get("begin_norm_axis", len(shape) - 1)) % max(1, len(shape))
                row = _numel(shape[begin:])
            else:
                axes = op.attrs.get("axes") or [len(shape) - 1]
                first = min(int(a) % len(shape) for a in axes) if shape else 0
                row = _numel(shape[first:])
        mt = max(out_t if cube else [x for x in in_t if x.kind != "const"] + out_t,
                 key=lambda x: x.numel, default=None)
        if op.type == "Conv2DBackpropFilter":
            mt = max(in_t, key=lambda x: x.numel)
        crows, crun = 1.0, 2.0
        if mt is not None and mt.shape:
            e = max(1, mt.nbytes // max(1, mt.numel))
            if len(mt.shape) == 4 and mt.format.startswith("NC"):
                crows, crun = mt.numel / max(1, mt.shape[1]), float(mt.shape[2] * mt.shape[3] * e)
            else:
                crows, crun = mt.numel / max(1, mt.shape[-1]), float(e)
        opf[i] = (t, c, m, r, max(nb, 1), float(cube), max(emain, 1), row,
                  float(op.type in REDUCE_TYPES), sum(x.nbytes for x in out_t), max(crows, 1.0), crun)

    # edges and intermediate tensors
    edge_read: dict[tuple[int, int], float] = {}
    edge_barrier: dict[tuple[int, int], float] = {}
    edge_mintile: dict[tuple[int, int], float] = {}
    edge_halo: dict[tuple[int, int], float] = {}
    tensors: dict[str, list[Any]] = {}
    for j, op in enumerate(ks):
        for x in dict.fromkeys(op.inputs):
            p = _through_views(graph, producer, x)
            if p is None or p.name not in local:
                continue
            i = local[p.name]
            key = (i, j)
            tx = graph.tensors[x]
            edge_read[key] = edge_read.get(key, 0.0) + tx.nbytes
            # the underlying tensor (views resolved) for write accounting
            base = x
            q = producer.get(base)
            while q is not None and q.is_view and q.inputs:
                base = q.inputs[0]
                q = producer.get(base)
            if _is_barrier(graph, p, base):
                edge_barrier[key] = 1.0
            if is_cube(op):
                if op.type.startswith("Conv") or op.type.startswith("Depthwise"):
                    shape = tx.shape
                    kh = int((op.attrs.get("kernel") or [1, 1])[0])
                    sh = int((op.attrs.get("strides") or [1, 1])[0])
                    rowel = _numel(shape[1:]) // max(1, shape[2] if len(shape) == 4 else 1)  # C*W
                    edge_mintile[key] = max(edge_mintile.get(key, 0.0), float(kh * rowel))
                    edge_halo[key] = max(edge_halo.get(key, 0.0), float(max(0, kh - sh) * rowel))
                elif len(tx.shape) >= 2:
                    # the on-chip operand must hold whole K panels: K is A's last axis, B's second
                    # last (swapped when transposed)
                    is_b = len(op.inputs) > 1 and op.inputs[1] == x
                    flag = bool(op.attrs.get("transpose_x2" if is_b else "transpose_x1"))
                    kdim = tx.shape[-2] if is_b != flag else tx.shape[-1]
                    edge_mintile[key] = max(edge_mintile.get(key, 0.0), float(kdim))
            ent = tensors.setdefault(base, [i, 0, graph.tensors[base].nbytes, 0.0])
            ent[1] |= 1 << j
    for base, ent in tensors.items():
        esc = base in outputs or _escapes(base, readers, outputs, local)
        ent[3] = 1.0 if esc else 0.0
    keys = sorted(edge_read)
    edges = np.array(keys, dtype=np.int64).reshape(-1, 2)
    edgef = np.zeros((len(keys), N_EDGEF))
    for e, key in enumerate(keys):
        edgef[e] = (edge_read[key], edge_barrier.get(key, 0.0), edge_mintile.get(key, 0.0),
                    edge_halo.get(key, 0.0))
    tlist = [tensors[k] for k in sorted(tensors, key=lambda k: (tensors[k][0], k))]
    tens = np.array([[e[0], e[1]] for e in tlist], dtype=np.int64).reshape(-1, 2)
    tensf = np.array([[e[2], e[3]] for e in tlist], dtype=np.float64).reshape(-1, 2)
    reach = np.zeros(n, dtype=np.int64)
    for i in range(n - 1, -1, -1):
        reach[i] = 1 << i
        for a, b in keys:
            if a == i:
                reach[i] |= reach[b]
    anc = np.zeros(n, dtype=np.int64)
    for i in range(n):
        anc[i] = 1 << i
        for a, b in keys:
            if b == i:
                anc[i] |= anc[a]
    return RegionData(n, edges, opf, edgef, tens, tensf, reach, anc, soc_params(soc))


def _is_barrier(graph: Graph, p: Op, tensor: str) -> bool:
    """True if `tensor` is complete only after every tile of its producer `p` has run.

    That is a scatter-add (embedding gradients), or a reduction result that is not row-local: BN
    statistics, bias / gamma gradients reduce over the rows, so no reader can fuse with them under the
    row split. A row-local result (LayerNorm mean, a reduction over trailing axes with or without
    kept dims) keeps a prefix of the input's shape and fuses fine.
    """
    if p.type in SCATTER_TYPES:
        return True
    if p.type not in REDUCING_TYPES:
        return False
    ins = [graph.tensors[x] for x in p.inputs if graph.tensors[x].kind != "const"]
    if not ins:
        return False
    main = max(ins, key=lambda x: x.numel)
    t = graph.tensors[tensor]
    if t.numel >= main.numel:
        return False
    shape = list(t.shape)
    while shape and shape[-1] == 1:
        shape.pop()
    return not (shape and tuple(shape) == tuple(main.shape[:len(shape)]))


def _escapes(t: str, readers: dict[str, list[Op]], outputs: AbstractSet[str], local: dict[str, int]) -> bool:
    """True if `t` (or a view of it) is read by an operator outside the subgraph."""
    stack, seen = [t], set()
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        if x in outputs:  # a set: a training graph has an output per parameter
            return True
        for r in readers.get(x, []):
            if r.is_view:
                stack.extend(r.outputs)
            elif r.name not in local:
                return True
    return False
