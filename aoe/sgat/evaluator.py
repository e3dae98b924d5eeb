"""The fusion-plan evaluator: many plans of one subgraph per call, in Numba code (`_jit.py`).

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

How it runs: the formulas are `@njit(cache=True, nogil=True)` functions in `_jit.py`, imported on the
first call (`_jitted()`), never at import time: an OPAT job never loads Numba. Their machine code is
cached in `NUMBA_CACHE_DIR` when set (or numba.config.CACHE_DIR), else in `$XDG_CACHE_HOME/aoe/numba`
(`~/.cache/aoe/numba`), so an installed, read-only package directory is never written. The cache
directory is handed to Numba's config only while `_jit.py` is imported (Numba fixes each function's
cache path then) and restored right after: os.environ and the user's own Numba functions are left
alone. The GIL is released while pricing; batches of `PARALLEL_MIN` plans or more are spread over
Numba's threads (prange over chunks of plans; every plan is priced alone, so the bits are the same).
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

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

# the numbers _jit.py repeats (Numba's cache is keyed by that file alone): columns, plan fields, constants
_LAYOUT = {k: v for k, v in globals().items() if k.isupper() and type(v) in (int, float) and k != "INF"}

# batches at least this large are priced on Numba's threads: below it waking the threads costs more
# than they save (bench/sgat_bench.py's evaluator_small_batches, 2026-12-06 on a loaded 2-core VM:
# prange lost 6x at 4,096 plans and broke even near 16,384)
PARALLEL_MIN = 16384

_load_lock = threading.Lock()
_jit: ModuleType | None = None
_par_lock = threading.Lock()
_par_concurrent = False     # True once Numba's threading layer is known to take concurrent launches


def cache_dir() -> str:
    """Where the evaluator's compiled code is cached: NUMBA_CACHE_DIR (or numba.config.CACHE_DIR) when
    set, else $XDG_CACHE_HOME/aoe/numba (~/.cache/aoe/numba)."""
    import numba  # lazy: only SGAT needs it

    given = numba.config.CACHE_DIR or os.environ.get("NUMBA_CACHE_DIR", "")
    if given:
        return given
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return str(base / "aoe" / "numba")


def _jitted() -> ModuleType:
    """The compiled evaluator (`_jit.py`), imported on first use with its cache directory set."""
    global _jit
    if _jit is not None:
        return _jit
    with _load_lock:
        if _jit is None:
            import numba  # lazy: an OPAT job never loads Numba (tests/test_sgat_numba.py)

            where = cache_dir()
            before = numba.config.CACHE_DIR
            # Numba fixes each cached function's directory when it is decorated (at the import
            # below): the config is set for that moment only, never through os.environ
            numba.config.CACHE_DIR = where
            try:
                from . import _jit as mod
            finally:
                numba.config.CACHE_DIR = before
            theirs = {k: getattr(mod, k, None) for k in _LAYOUT}
            if theirs != _LAYOUT:
                # both files ship together: a mismatch is an edit of one of them, never a result
                raise ImportError("aoe/sgat/_jit.py and aoe/sgat/evaluator.py disagree on the SGAT array "
                                  "layout or model constants; make them the same")
            _jit = mod
    return _jit


def _checked(a: Any, name: str, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    """`a` after checking its dtype, shape (-1 = any length) and C order."""
    what = f"sgat evaluator: {name}"
    if not isinstance(a, np.ndarray) or a.dtype != np.dtype(dtype):
        got = str(a.dtype) if isinstance(a, np.ndarray) else type(a).__name__
        raise TypeError(f"{what} must be a numpy array of {np.dtype(dtype).name}, got {got}")
    if a.ndim != len(shape) or any(s >= 0 and d != s for d, s in zip(a.shape, shape)):
        want = ", ".join("?" if s < 0 else str(s) for s in shape) + ("," if len(shape) == 1 else "")
        raise ValueError(f"{what} must have shape ({want}), got {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"{what} must be C-contiguous")
    return a


def _array(a: Any, name: str, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    """A private copy of `a` after the checks of `_checked`."""
    # a copy (a few hundred bytes): nothing another thread does to the caller's array can move an index
    return _checked(a, name, dtype, shape).copy()


def _indices(a: np.ndarray, cols: int, n: int, what: str) -> None:
    bad = (a[:, :cols] < 0) | (a[:, :cols] >= n)
    if bad.any():
        v = int(a[:, :cols][bad][0])
        raise ValueError(f"sgat evaluator: {what} {v} is not an operator index (0..{n - 1})")


def _region(edges: Any, opf: Any, edgef: Any, tens: Any, tensf: Any, reach: Any, anc: Any,
            socp: Any) -> tuple[np.ndarray, ...]:
    """Checked copies of a subgraph's arrays; reach/anc may be None (kernel_costs needs none)."""
    opf = _array(opf, "opf", np.float64, (-1, N_OPF))
    n = opf.shape[0]
    if n > MAX_KERNELS:
        raise ValueError(f"sgat evaluator: {n} operators exceed the limit of {MAX_KERNELS}")
    edges = _array(edges, "edges", np.int64, (-1, 2))
    edgef = _array(edgef, "edgef", np.float64, (edges.shape[0], N_EDGEF))
    tens = _array(tens, "tens", np.int64, (-1, 2))
    tensf = _array(tensf, "tensf", np.float64, (tens.shape[0], 2))
    socp = _array(socp, "socp", np.float64, (N_SOCP,))
    if reach is not None:
        reach = _array(reach, "reach", np.int64, (n,))
        anc = _array(anc, "anc", np.int64, (n,))
    _indices(edges, 2, n, "edge end")
    _indices(tens, 1, n, "tensor producer")
    return edges, opf, edgef, tens, tensf, reach, anc, socp


def _raise_for(err: np.ndarray) -> None:
    """The error the compiled code reported (by code), if any."""
    if not err.any():
        return
    jit = _jitted()
    code = int(err[np.flatnonzero(err)[0]])
    if code == jit.ERR_ZERO_DIVISION:
        raise ZeroDivisionError("sgat evaluator: division by zero (a zero byte count, core count or bandwidth)")
    raise ValueError("sgat evaluator: the kernels of a plan form a cycle (reach/anc disagree with edges)")


def evaluate_arrays(plans: Any, edges: Any, opf: Any, edgef: Any, tens: Any, tensf: Any, reach: Any, anc: Any,
                    socp: Any, parallel: bool | None = None) -> np.ndarray:
    """Times (µs, inf when invalid) of N plans (N x (E+3) int64) of the subgraph given by its arrays
    (`RegionData.arrays()`), every array checked; `parallel` None = on Numba's threads for large batches."""
    region = _region(edges, opf, edgef, tens, tensf, reach, anc, socp)
    # read once per plan by the compiled code (never copied: batches can be large)
    plans = _checked(plans, "plans", np.int64, (-1, region[0].shape[0] + 3))
    count = plans.shape[0]
    out = np.empty(count)
    err = np.zeros(count, dtype=np.int8)
    jit = _jitted()
    if parallel is None:
        parallel = count >= PARALLEL_MIN
    if parallel:
        _run_parallel(jit.evaluate_parallel, plans, *region, out, err)
    else:
        jit.evaluate(plans, *region, out, err)
    _raise_for(err)
    return out


def _run_parallel(fn: Any, *args: Any) -> None:
    """fn(*args) on Numba's threads; launches serialised unless the threading layer takes concurrent ones
    (Numba's workqueue layer aborts the process on a concurrent launch; omp and tbb do not)."""
    global _par_concurrent
    if _par_concurrent:
        fn(*args)
        return
    with _par_lock:
        fn(*args)
        import numba  # lazy: loaded by _jitted() already

        _par_concurrent = numba.threading_layer() in ("omp", "tbb")


def evaluate(rd: RegionData, plans: np.ndarray) -> np.ndarray:
    """Times (µs) of a batch of plans (N x plan_width ints) of one subgraph; inf when invalid."""
    plans = np.ascontiguousarray(plans, dtype=np.int64)
    if plans.ndim != 2 or plans.shape[1] != rd.plan_width:
        raise ValueError(f"plans must be rows of {rd.plan_width} ints, got shape {plans.shape}")
    return evaluate_arrays(plans, *rd.arrays())


def kernel_costs(rd: RegionData, masks: np.ndarray, split: int, tile: int, l2: int) -> np.ndarray:
    """Times (µs) of single kernels (op bitmasks) at one split axis, tile index and L2 flag (chain DP)."""
    edges, opf, edgef, tens, tensf, _, _, socp = _region(rd.edges, rd.opf, rd.edgef, rd.tens, rd.tensf, None, None,
                                                         rd.socp)
    split, tile, l2 = int(split), int(tile), int(l2)
    if not (0 <= split < N_SPLITS and 0 <= tile < N_TILES and 0 <= l2 <= 1):
        raise ValueError(f"sgat evaluator: split {split}, tile {tile}, l2 {l2} out of range (0..1, 0..7, 0..1)")
    masks = _checked(np.ascontiguousarray(masks, dtype=np.int64), "masks", np.int64, (-1,))
    out = np.empty(masks.shape[0])
    err = np.zeros(1, dtype=np.int8)
    _jitted().kernel_costs(masks, split, tile, l2, edges, opf, edgef, tens, tensf, socp, out, err)
    _raise_for(err)
    return out


def complete(plans: np.ndarray, k: int, edges: np.ndarray, n: int) -> np.ndarray:
    """Fill edges k.. of each plan: fused iff its ends are already in one kernel (in place when `plans`
    already is a C-contiguous int64 array); returns the plans."""
    plans = np.ascontiguousarray(plans, dtype=np.int64)
    edges = _array(np.ascontiguousarray(edges, dtype=np.int64), "edges", np.int64, (-1, 2))
    ne, k, n = edges.shape[0], int(k), int(n)
    if not 0 <= n <= MAX_KERNELS:
        raise ValueError(f"sgat evaluator: n = {n} operators, not 0..{MAX_KERNELS}")
    _indices(edges, 2, n, "edge end")
    if plans.ndim != 2:
        raise ValueError(f"sgat evaluator: plans must have shape (?, ?), got {plans.shape}")
    if plans.shape[1] < ne:
        raise ValueError("sgat evaluator: plans are narrower than the edge list")
    if not 0 <= k <= ne:
        raise ValueError(f"sgat evaluator: k must be in 0..{ne}")
    if not plans.flags.writeable:
        raise ValueError("sgat evaluator: plans must be writeable")
    _jitted().complete(plans, k, edges, n)
    return plans


def unfused_plan(rd: RegionData) -> np.ndarray:
    """The unfused plan: every kernel on its own (CANN default strategy), row split, no L2 residency.

    Not the SGAT baseline: that is the compiler's default fusion (`default_fusion.default_plan`).
    """
    return np.zeros(rd.plan_width, dtype=np.int64)
