"""The inner choices of an outer choice: the expanders that enumerate them (the matmul template: `stagings.py`).

An outer choice of a Schedule space (`space.py`) fixes the shape of the work: a matmul's core split
and base block, a convolution's core split and L0 block. Its inner choices only decide how that work
is staged: L1 steps and depths, ping-pong, iterate order, L2 tiling. Which stagings are legal depends
on a few numbers of the outer choice (its *class*), never on the whole row, so the expanders derive
each class's stagings once and gather them for many outer rows at a time. Both run natively
(`aoe._sim.ConvStagings`, `MatmulStagings`; csrc/space_conv.cpp and space_matmul.cpp): the search's
hot path builds its rows without a Python loop or array pass per class.
"""
from __future__ import annotations

import numpy as np

from .. import _sim
from ..sim import Conv2D, MatMul
from ..sim.heuristics import CONV_FIELDS, MM_FIELDS
from ..sim.ops import DTYPE_BYTES
from ..soc import Soc
from .bounds import _formats, conv_dims
from .stagings import MM_INNER, UP_A, UP_B

_F = {name: i for i, name in enumerate(MM_FIELDS)}
_C = {name: i for i, name in enumerate(CONV_FIELDS)}


MM_OUTER = [_F[f] for f in ("usedCoreNum", "singleCoreM", "singleCoreN", "singleCoreK", "baseM", "baseN", "baseK")]


def conv_shape(op: Conv2D) -> np.ndarray:
    """A convolution as the native spaces read it: direction (0 forward, 1 dX, 2 dW), N, C, H, W, Cout,
    kh, kw, strides, input and output element bytes, groups, output H and W, dilated window, bias."""
    d = conv_dims(op)
    direction = 2 if op.op_type.endswith("BackpropFilter") else 1 if op.op_type.endswith("BackpropInput") else 0
    return np.array([direction, d.n, d.c, d.h, d.w, d.cout, d.kh, d.kw, d.sh, d.sw, d.ea, DTYPE_BYTES[op.out_dtype],
                     d.g, d.ho, d.wo, d.ekh, d.ekw, int(bool(op.bias))], np.int64)


def matmul_shape(soc: Soc, op: MatMul) -> np.ndarray:
    """A matmul as the native spaces read it: M, N, K, batches, element bytes, NZ formats, bias, and
    whether its operands exceed half of L2 (then L2 tilings are part of its space)."""
    ea = DTYPE_BYTES[op.dtype]
    a_nz, b_nz, c_nz = _formats(op)
    l2 = (op.m * op.k + op.k * op.n) * ea > 0.5 * soc.l2
    return np.array([op.m, op.n, op.k, op.batch, op.batch_b or op.batch, ea, DTYPE_BYTES[op.out_dtype], a_nz, b_nz,
                     c_nz, bool(op.bias), l2], np.int64)


def matmul_impl_class(op: MatMul, rows: np.ndarray) -> np.ndarray:
    """Class of each matmul strategy: 0 standard, 1 A resident in L1, 2 B resident, 3 split-K.

    Split-K when the per-core K is below K; else A resident when stepM * baseM and stepKa * baseK
    cover the per-core M and K, B resident when stepN * baseN and stepKb * baseK cover N and K.
    """
    return _sim.matmul_impl_class(np.array([op.m, op.n, op.k], np.int64), rows)


def matmul_class_outer(soc: Soc, op: MatMul, cls: int, outer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The outer rows of implementation class `cls` and which rows of `outer` they are, each with its
    default staging first moved into the class where it can be (1 and 2: the resident operand's
    whole block and K panel in L1, the other streamed one block and one K step at a time, L1
    ping-pong of both where it fits; other classes: as it is), so the outer phase of a search prices
    a member of the class."""
    return _sim.matmul_class_outer(np.array([op.m, op.n, op.k], np.int64), DTYPE_BYTES[op.dtype], soc.l1, cls, outer)


class MatmulExpander:
    """Every inner variant of matmul outer rows (`aoe._sim.MatmulStagings`).

    The legal L1 stagings of an outer row depend only on its base block and its iteration counts
    (baseM/N/K, kIter, mIter/nIter up to the template's largest step, split-K or not): a handful of
    classes however many core splits share them. Each class's stagings are derived once from the
    `MM_INNER` template: its whole-panel and 256-element K codes resolved for the class's K block
    (kept only where they are not one of the powers of two already), the rows that are legal, fit
    L1 and step within the iteration counts, minus those dominated by the same staging with L1
    ping-pong of A or B; in template order. Operands beyond half of L2 add the L2 tilings (2 and 4
    tiles of M and/or N, both orders) after each outer row's plain rows. Outer rows of the same outer
    shape (its `MM_OUTER` fields) collapse to the first.
    """

    def __init__(self, soc: Soc, op: MatMul, impl: int | None = None) -> None:
        self.soc, self.op, self.impl = soc, op, impl
        shape = matmul_shape(soc, op)
        self.l2 = bool(shape[-1])   # operands beyond half of L2: the space has L2 tilings
        self._native = _sim.MatmulStagings(shape, soc.l1, MM_INNER, UP_A, UP_B, -1 if impl is None else impl)
        self._only: dict[int, MatmulExpander] = {}

    def only(self, impl: int) -> MatmulExpander:
        """An expander of the same rows restricted to one implementation class (`matmul_impl_class`)."""
        got = self._only.get(impl)
        if got is None:
            got = self._only[impl] = MatmulExpander(self.soc, self.op, impl)
        return got

    def count(self, outer: np.ndarray, limit: int | None = None) -> int:
        """Size of `expand(outer)` without building it (with `limit`: any total above it once passed)."""
        return int(self._native.count(outer, -1 if limit is None else limit))

    def __call__(self, outer: np.ndarray) -> np.ndarray:
        """Every inner variant of each outer row (duplicates of the same outer shape collapse first)."""
        return self._native.expand(outer)

    def many(self, groups: list[np.ndarray], l2: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """`self(group)` of every group at once: the rows, group after group, and where each group starts.

        `l2=False`: without the L2-tiling variants (each staging once, untiled)."""
        return self._native.expand_groups(groups, l2)

    def tilings(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The L2 tilings of untiled rows (none without L2 tiling) and the index of the row each comes from."""
        return self._native.tilings(rows)


class ConvExpander:
    """Every L1 staging of conv outer rows (hoL1 multiples, K chunks in whole windows, L1 ping-pong, order).

    The legal stagings of an outer row depend only on its L0 block, its rows per core and (dW) its
    channel split: each class's stagings are derived once (`aoe._sim.ConvStagings`) and reused, in
    the order hoL1, kAL1, kBL1, then ping-pong (L0 always) and iterate order. The values, and why:

    - hoL1: 1, 2, 4, 8 and 16 L0 blocks of rows, and all the rows of the core (its whole share in L1);
    - K chunks in whole kernel windows: 1, 2, 4, 8 windows of C0 channels and the whole K panel (the
      channel count need not be a power of two); A's and B's chunks separately, one dividing the
      other as the kernel requires (B's weights and A's feature map are re-read at different rates);
      dW: Cout chunks of 1, 2, 4 L0 blocks or all of Cout, channel chunks of 1, 2, 4 windows or all;
    - L1 ping-pong of A and of B: a staging without it is kept only where the same staging with it
      does not fit L1 (the model never runs slower with ping-pong: a dominance prune, exact). The
      L1 bytes are the simulator's (`l1_bytes`): the feature map as the patch its pixels read.
    """

    def __init__(self, soc: Soc, op: Conv2D) -> None:
        self.op = op
        self._native = _sim.ConvStagings(conv_shape(op), soc.l1)

    def __call__(self, outer: np.ndarray) -> np.ndarray:
        """Every staging of each outer row, row by row."""
        return self._native.expand(outer)[0]

    def many(self, groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """`self(group)` of every group at once: the rows, group after group, and where each group starts."""
        return self._native.expand_groups(groups)

    def count(self, outer: np.ndarray, limit: int | None = None) -> int:
        """Size of `self(outer)` without building it."""
        return int(self._native.count(outer))

    def keys(self, outer: np.ndarray) -> np.ndarray:
        """The class key of each outer row: hoL0, rows per core, kL0, nDim (dW; else 0), woL0, nL0."""
        return self._native.keys(outer)

    def stagings(self, key: tuple[int, ...]) -> np.ndarray:
        """The stagings of one class: hoL1, kAL1, kBL1, pBufferFlag, iterateMNOrder."""
        return self._native.stagings(tuple(int(v) for v in key))

    def l1_bytes(self, key: tuple[int, ...], stagings: np.ndarray) -> np.ndarray:
        """L1 bytes, as the simulator counts them, of stagings (hoL1, kAL1, kBL1, L1 ping-pong of A,
        of B) of the class `key`."""
        return self._native.l1_bytes(tuple(int(v) for v in key), stagings)
