"""The fusion-plan evaluator: many plans of one subgraph per call, in native code (`csrc/sgat.cpp`).

A plan is a row of ints: one bit per internal edge (1 = producer and consumer run in one fused
kernel, the data stays on chip), then the split axis (0 = rows: every tile holds whole rows of the
kernel's main tensor; 1 = columns: every tile holds whole columns — the last axis of ND data, the
channels of NCHW data — across all rows), then the tile-size index t (the fused kernels iterate in
tiles of `TILE_BASE << t` elements per core), then the L2 flag (1 = intermediates handed from one
kernel to another stay resident in L2). Kernels are the connected components of the fused edges.
Invalid plans get `inf`:

- a value out of range; an unfused edge inside one kernel (inconsistent bits); a kernel that is not
  convex (some path leaves it and comes back: it could not run as one launch);
- a fused barrier edge (the consumer needs a whole-tensor reduction result) under the row split;
  under the column split a tile holds whole columns, so the reduction finishes inside the tile;
- under the column split: a tile smaller than one whole column, a column block narrower than the
  32-byte UB alignment, or a Softmax/LayerNorm row operator (its rows would be cut);
- a fused kernel whose live tiles (inputs, outputs, intermediates, +25% temporaries) do not fit UB
  even single-buffered, whose Cube accumulator tile does not fit L0C, whose Softmax/LayerNorm rows do
  not fit one tile, or whose on-chip Cube operand (a fused vector -> Cube edge) misses a whole K
  panel / kh rows or does not fit L1;
- with the L2 flag, a peak of live hand-off bytes above the usable L2.

Time of a plan = sum over its kernels. A lone kernel costs its default time (less the HBM time of
hand-off reads served by L2). A fused kernel costs
    launch + max(Cube compute, Vector compute, memory, tiles * per-tile set-up)   (double-buffered)
      or   compute + memory + tiles * (per-tile set-up + GM latency)    (only single buffering fits UB)
    + shared fill/set-up (largest op's + 25% of the others')
with memory = sum of each op's memory time scaled by the share of its bytes that still go to HBM
(fused reads are free; a write is free when every reader is in the kernel and nothing outside needs
it), plus atomic partials of reductions fused under the row split; under the column split every
op's memory time is divided by the DMA burst efficiency of its strided runs (run / (run + 64 B)).
Small tiles cost Cube efficiency and per-tile set-up; big tiles leave cores idle on small tensors. On separated SoCs (Ascend910B*) a Cube -> Vector edge
goes through L2 (and pays the hand-off), never UB.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import _sim

if TYPE_CHECKING:
    from .model import RegionData

# opf columns
T, C, M, R, BYTES, CUBE, EMAIN, ROW, RED, OUTB, CROWS, CRUN = range(12)
N_OPF = 12
# edgef columns
READB, BARRIER, MINTILE, HALO = range(4)
N_EDGEF = 4
# socp entries
(S_LAUNCH, S_HBM_BPUS, S_L2_BPUS, S_UB, S_L0C, S_L1, S_L2CAP, S_TILE_US, S_SEPARATED, S_HANDOFF_US,
 S_CUBE_CORES, S_VEC_CORES, S_INSTR_US, S_LAT_US) = range(14)
N_SOCP = 14

N_SPLITS = 2           # split axis: 0 = rows (whole rows per tile), 1 = columns (whole columns per tile)
N_TILES = 8            # tile sizes TILE_BASE << 0 .. TILE_BASE << 7 elements per core tile
TILE_BASE = 512
MAX_KERNELS = 16       # bitmask width limit of the evaluator (partition caps subgraphs at 8)

INF = np.inf
CUBE_REF_TILE = 16384.0   # a 128x128 output block: smaller fused tiles cost Cube efficiency
UB_TMP = 1.25             # temporaries on top of the live tiles
DMA_OVERHEAD = 64.0       # bytes a DMA burst costs on top of its payload
UB_ALIGN = 32.0           # bytes: UB tiles (and strided column blocks) are 32-byte aligned


# the numbers csrc/sgat.cpp must share with this file: columns, plan fields, model constants
_LAYOUT = {k: v for k, v in globals().items() if k.isupper() and type(v) in (int, float) and k != "INF"}
if _sim.sgat_layout() != _LAYOUT:
    # the extension and this file are built together: a mismatch is a stale build, never a result
    raise ImportError("aoe._sim's SGAT evaluator was built for another array layout than aoe/sgat/evaluator.py; "
                      "reinstall aoe to rebuild the extension")


def evaluate(rd: RegionData, plans: np.ndarray) -> np.ndarray:
    """Times (µs) of a batch of plans (N x plan_width ints) of one subgraph; inf when invalid."""
    plans = np.ascontiguousarray(plans, dtype=np.int64)
    if plans.ndim != 2 or plans.shape[1] != rd.plan_width:
        raise ValueError(f"plans must be rows of {rd.plan_width} ints, got shape {plans.shape}")
    return _sim.sgat_evaluate(plans, *rd.arrays())


def kernel_costs(rd: RegionData, masks: np.ndarray, split: int, tile: int, l2: int) -> np.ndarray:
    """Times (µs) of single kernels (op bitmasks) at one split axis, tile index and L2 flag (chain DP)."""
    return _sim.sgat_kernel_costs(np.ascontiguousarray(masks, dtype=np.int64), int(split), int(tile), int(l2),
                                  rd.edges, rd.opf, rd.edgef, rd.tens, rd.tensf, rd.socp)


def unfused_plan(rd: RegionData) -> np.ndarray:
    """The unfused plan: every kernel on its own (CANN default strategy), row split, no L2 residency.

    Not the SGAT baseline: that is the compiler's default fusion (`default_fusion.default_plan`).
    """
    return np.zeros(rd.plan_width, dtype=np.int64)
