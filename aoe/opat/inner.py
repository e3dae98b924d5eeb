"""The inner choices of an outer choice: the expanders that enumerate them (the matmul template: `stagings.py`).

An outer choice of a Schedule space (`space.py`) fixes the shape of the work: a matmul's core split
and base block, a convolution's core split and L0 block. Its inner choices only decide how that work
is staged: L1 steps and depths, ping-pong, iterate order, L2 tiling. Which stagings are legal depends
on a few numbers of the outer choice (its *class*), never on the whole row, so the expanders here
derive each class's stagings once and gather them for many outer rows at a time: the search's hot
path builds rows with a handful of array operations per batch, not per row.
"""
from __future__ import annotations

import functools
import itertools
from typing import Callable

import numpy as np

from ..sim import Conv2D, MatMul
from ..sim.heuristics import CONV_FIELDS, MM_FIELDS
from ..sim.ops import DTYPE_BYTES
from ..soc import Soc
from .bounds import _al as _align
from .bounds import _cdiv, conv_l1_bytes
from .stagings import MM_INNER, STEP_MAX, UP_A, UP_B, k_stagings

_F = {name: i for i, name in enumerate(MM_FIELDS)}
_C = {name: i for i, name in enumerate(CONV_FIELDS)}


MM_OUTER = [_F[f] for f in ("usedCoreNum", "singleCoreM", "singleCoreN", "singleCoreK", "baseM", "baseN", "baseK")]


def _first_of_each(keys: np.ndarray) -> np.ndarray:
    """Indices of the first row of each distinct key row, in order (a hash pass, no sort)."""
    first: dict[bytes, int] = {}
    for i, k in enumerate(np.ascontiguousarray(keys)):
        first.setdefault(k.tobytes(), i)
    return np.fromiter(first.values(), np.int64, len(first))


def matmul_impl_class(op: MatMul, rows: np.ndarray) -> np.ndarray:
    """Class of each matmul strategy: 0 standard, 1 A resident in L1, 2 B resident, 3 split-K."""
    s_m = np.minimum(rows[:, _F["singleCoreM"]], op.m)
    s_n = np.minimum(rows[:, _F["singleCoreN"]], op.n)
    s_k = np.minimum(rows[:, _F["singleCoreK"]], op.k)
    a_res = (rows[:, _F["stepM"]] * rows[:, _F["baseM"]] >= s_m) & (rows[:, _F["stepKa"]] * rows[:, _F["baseK"]] >= s_k)
    b_res = (rows[:, _F["stepN"]] * rows[:, _F["baseN"]] >= s_n) & (rows[:, _F["stepKb"]] * rows[:, _F["baseK"]] >= s_k)
    cls = np.where(a_res, 1, np.where(b_res, 2, 0))
    return np.where(rows[:, _F["singleCoreK"]] < op.k, 3, cls)


# the inner fields a staging sets, in the order of `MatmulExpander._stagings`' columns
_MM_STAGING = [_F[f] for f in ("stepKa", "stepKb", "stepM", "stepN", "iterateOrder", "depthA1", "depthB1")]


def _classes(keys: np.ndarray, stagings: Callable[[tuple[int, ...]], np.ndarray],
             prepare: Callable[[list[tuple[int, ...]]], None] | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """The stagings of each distinct class key among `keys` (one per row, non-negative ints; `stagings(key)`
    asked once per distinct key, after `prepare(distinct keys)` if given) and the index of each row's class."""
    radix = keys.max(axis=0) + 1 if len(keys) else np.ones(keys.shape[1], np.int64)
    if float(np.prod(radix.astype(np.float64))) < 2.0 ** 62:
        codes = np.zeros(len(keys), np.int64)      # one int per key: a 1-D unique is much cheaper
        for j in range(keys.shape[1]):
            codes = codes * radix[j] + keys[:, j]
        _, first, inv = np.unique(codes, return_index=True, return_inverse=True)
        uniq = keys[first]
    else:
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
    distinct = [tuple(k) for k in uniq.tolist()]
    if prepare is not None:
        prepare(distinct)
    return [stagings(k) for k in distinct], inv.ravel()


def _class_counts(keys: np.ndarray, stagings: Callable[[tuple[int, ...]], np.ndarray],
                  prepare: Callable[[list[tuple[int, ...]]], None] | None = None) -> np.ndarray:
    """How many stagings each row's class has."""
    tables, inv = _classes(keys, stagings, prepare)
    return np.fromiter((len(t) for t in tables), np.int64, len(tables))[inv]


def _by_class(keys: np.ndarray, stagings: Callable[[tuple[int, ...]], np.ndarray],
              prepare: Callable[[list[tuple[int, ...]]], None] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row's class stagings, gathered at once: (the stagings of every row, one after the other;
    how many each row has)."""
    tables, inv = _classes(keys, stagings, prepare)
    sizes = np.fromiter((len(t) for t in tables), np.int64, len(tables))
    counts = sizes[inv]
    total = int(counts.sum())
    if not total:
        return np.zeros((0, tables[0].shape[1] if tables else 0), np.int64), counts
    starts = np.zeros(len(sizes), np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    ends = np.cumsum(counts)
    # row r's stagings sit at starts[class of r] ... in the flat table; its output rows at ends[r] - counts[r] ...
    idx = np.repeat(starts[inv] - (ends - counts), counts) + np.arange(total)
    return np.concatenate(tables)[idx], counts


@functools.lru_cache(maxsize=65536)
def _block_stagings(bm: int, bn: int, bk: int, k_iter: int, ea: int, bias: bool, l1_cap: int
                    ) -> tuple[np.ndarray, np.ndarray]:
    """`k_stagings` of one base block, with the rows whose L1 buffers do not fit dropped from the mask."""
    table, legal = k_stagings(bk, k_iter)
    step_n, da, db = table[:, 3], table[:, 5], table[:, 6]
    l1 = (da * bm + db * bn) * bk * ea + (step_n * bn * 4 if bias else 0)
    ok = legal & (l1 <= l1_cap)
    ok.setflags(write=False)
    return table, ok


# the template's M (0) and N (1) steps: which rows step at most / at least m blocks, m up to STEP_MAX + 1
_STEP_UPTO = [{m: MM_INNER[:, 2 + d] <= m for m in range(1, STEP_MAX + 2)} for d in (0, 1)]
_STEP_FROM = [{m: MM_INNER[:, 2 + d] >= m for m in range(1, STEP_MAX + 2)} for d in (0, 1)]


class MatmulExpander:
    """Every inner variant of matmul outer rows.

    The legal L1 stagings of an outer row depend only on its base block and its iteration counts
    (baseM/N/K, kIter, mIter/nIter up to the largest step, split-K or not): a handful of classes
    however many core splits share them. Each class's stagings are derived once (from the
    `MM_INNER` template, see `k_stagings`) and reused, so a search that expands a few outer rows
    at a time does not pay the template's masks again for each of them.
    """

    def __init__(self, soc: Soc, op: MatMul, impl: int | None = None) -> None:
        self.soc, self.op, self.impl = soc, op, impl
        self.ea = DTYPE_BYTES[op.dtype]
        # operands beyond half of L2: L2 tiling variants too
        self.l2 = (op.m * op.k + op.k * op.n) * self.ea > 0.5 * soc.l2
        self._classes: dict[tuple[int, ...], np.ndarray] = {}
        self._only: dict[int, MatmulExpander] = {}

    def only(self, impl: int) -> MatmulExpander:
        """An expander of the same rows restricted to one implementation class (`matmul_impl_class`)."""
        got = self._only.get(impl)
        if got is None:
            got = self._only[impl] = MatmulExpander(self.soc, self.op, impl)
        return got

    def _stagings(self, key: tuple[int, ...]) -> np.ndarray:
        """The legal stagings of one class (rows of `_MM_STAGING` values, in template order)."""
        got = self._classes.get(key)
        if got is not None:
            return got
        bm, bn, bk, m_iter, n_iter, k_iter, split_k = key
        table, ok = _block_stagings(bm, bn, bk, k_iter, self.ea, bool(self.op.bias), self.soc.l1)
        ok = ok & _STEP_UPTO[0][m_iter] & _STEP_UPTO[1][n_iter]
        # dominated: the same staging with L1 ping-pong of A (or B) added fits too
        ok &= ~(((MM_INNER[:, 5] == 0) & ok[UP_A]) | ((MM_INNER[:, 6] == 0) & ok[UP_B]))
        if self.impl is not None:
            # `matmul_impl_class` of these rows: stepM * baseM >= min(singleCoreM, M) is stepM >= mIter, ...
            if split_k:
                ok = ok if self.impl == 3 else np.zeros_like(ok)
            else:
                a_res = _STEP_FROM[0][m_iter] & (table[:, 0] >= k_iter)
                b_res = _STEP_FROM[1][n_iter] & (table[:, 1] >= k_iter)
                ok = ok & {0: ~a_res & ~b_res, 1: a_res, 2: ~a_res & b_res}.get(self.impl, np.zeros_like(ok))
        got = self._classes[key] = table[ok]
        return got

    def _keys(self, outer: np.ndarray) -> np.ndarray:
        """The class key of each outer row (see `_stagings`)."""
        op = self.op
        bm, bn, bk = (outer[:, _F[f]] for f in ("baseM", "baseN", "baseK"))
        # the template's M/N steps are at most STEP_MAX: beyond one more, mIter and nIter make no difference
        return np.stack([bm, bn, bk,
                         np.minimum(_cdiv(np.minimum(outer[:, _F["singleCoreM"]], op.m), bm), STEP_MAX + 1),
                         np.minimum(_cdiv(np.minimum(outer[:, _F["singleCoreN"]], op.n), bn), STEP_MAX + 1),
                         _cdiv(np.minimum(outer[:, _F["singleCoreK"]], op.k), bk),
                         outer[:, _F["singleCoreK"]] < op.k], axis=1)

    def _l2_variants(self, mb: np.ndarray, nb: np.ndarray) -> np.ndarray:
        """How many L2 tilings each row has (1 without L2 tiling)."""
        if not self.l2:
            return np.ones(len(mb), np.int64)
        return 1 + sum(2 * ((cm <= mb) & (cn <= nb)) for cm, cn in itertools.product((1, 2, 4), repeat=2)
                       if (cm, cn) != (1, 1))

    def count(self, outer: np.ndarray, limit: int | None = None) -> int:
        """Size of `expand(outer)` without building it (with `limit`: any total above it once passed)."""
        outer = outer[_first_of_each(outer[:, MM_OUTER])]
        total = 0
        for i in range(0, len(outer), 2048):
            part = outer[i:i + 2048]
            per = _class_counts(self._keys(part), self._stagings)
            mb = _cdiv(self.op.m, part[:, _F["singleCoreM"]])
            nb = _cdiv(self.op.n, part[:, _F["singleCoreN"]])
            total += int((per * self._l2_variants(mb, nb)).sum())
            if limit is not None and total > limit:
                break
        return total

    def __call__(self, outer: np.ndarray) -> np.ndarray:
        """Every inner variant of each outer row (duplicates of the same outer shape collapse first)."""
        outer = outer[_first_of_each(outer[:, MM_OUTER])]
        return self._expand(outer, np.zeros(len(outer), np.int64))[0]

    def many(self, groups: list[np.ndarray], l2: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """`self(group)` of every group at once: the rows, group after group, and where each group starts.

        `l2=False`: without the L2-tiling variants (each staging once, untiled)."""
        gid = np.repeat(np.arange(len(groups)), [len(g) for g in groups])
        outer = np.concatenate(groups)
        first = _first_of_each(np.column_stack([gid, outer[:, MM_OUTER]]))  # duplicates collapse per group
        rows, rgid = self._expand(outer[first], gid[first], l2)
        if self.l2 and l2:  # the L2 variants come after their group's plain rows, as `self(group)` orders them
            order = np.argsort(rgid, kind="stable")
            rows, rgid = rows[order], rgid[order]
        return rows, np.searchsorted(rgid, np.arange(len(groups) + 1))

    def _expand(self, outer: np.ndarray, gid: np.ndarray, l2: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """The inner variants of distinct outer rows (and the group of each variant, from `gid`)."""
        op = self.op
        stagings, counts = _by_class(self._keys(outer), self._stagings)
        base = np.repeat(outer, counts, axis=0)
        bgid = np.repeat(gid, counts)
        if not len(base):
            return base, bgid
        base[:, _MM_STAGING] = stagings
        mb, nb = _cdiv(op.m, base[:, _F["singleCoreM"]]), _cdiv(op.n, base[:, _F["singleCoreN"]])
        base[:, _F["tilingEnable"]] = 0
        base[:, _F["l2MTileCnt"]] = base[:, _F["l2NTileCnt"]] = 1
        base[:, _F["l2MTileBlock"]], base[:, _F["l2NTileBlock"]] = mb, nb
        base[:, _F["l2IterateOrder"]] = 0
        if not (self.l2 and l2):
            return base, bgid
        variants, vgids = self._tilings(base, bgid, mb, nb)
        return np.concatenate([base] + variants), np.concatenate([bgid] + vgids)

    def tilings(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The L2 tilings of untiled rows (none without L2 tiling) and the index of the row each comes from."""
        if not (self.l2 and len(rows)):
            return rows[:0], np.zeros(0, np.int64)
        mb, nb = _cdiv(self.op.m, rows[:, _F["singleCoreM"]]), _cdiv(self.op.n, rows[:, _F["singleCoreN"]])
        variants, owners = self._tilings(rows, np.arange(len(rows)), mb, nb)
        return np.concatenate(variants), np.concatenate(owners)

    def _tilings(self, base: np.ndarray, bgid: np.ndarray, mb: np.ndarray, nb: np.ndarray
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """The L2-tiling variants of untiled rows `base` (with `mb` x `nb` blocks), and `bgid` of each."""
        variants, vgids = [], []
        for cm, cn in itertools.product((1, 2, 4), repeat=2):
            if (cm, cn) == (1, 1):
                continue
            sel = (cm <= mb) & (cn <= nb)
            for order in (0, 1):
                v = base[sel].copy()
                blm, bln = _cdiv(mb[sel], cm), _cdiv(nb[sel], cn)
                v[:, _F["tilingEnable"]] = 1
                v[:, _F["l2MTileBlock"]], v[:, _F["l2NTileBlock"]] = blm, bln
                v[:, _F["l2MTileCnt"]], v[:, _F["l2NTileCnt"]] = _cdiv(mb[sel], blm), _cdiv(nb[sel], bln)
                v[:, _F["l2IterateOrder"]] = order
                variants.append(v)
                vgids.append(bgid[sel])
        return variants, vgids


_CONV_STAGING = [_C[f] for f in ("hoL1", "kAL1", "kBL1", "pBufferFlag", "iterateMNOrder")]


class ConvExpander:
    """Every L1 staging of conv outer rows (hoL1 multiples, K chunks in whole windows, L1 ping-pong, order).

    The legal stagings of an outer row depend only on its L0 block, its rows per core and (dW) its
    channel split: each class's stagings are derived once and reused, in the order hoL1, kAL1,
    kBL1, then ping-pong (L0 always) and iterate order. The values, and why:

    - hoL1: 1, 2, 4, 8 and 16 L0 blocks of rows, and all the rows of the core (its whole share in L1);
    - K chunks in whole kernel windows: 1, 2, 4, 8 windows of C0 channels and the whole K panel (the
      channel count need not be a power of two); A's and B's chunks separately, one dividing the
      other as the kernel requires (B's weights and A's feature map are re-read at different rates);
      dW: Cout chunks of 1, 2, 4 L0 blocks or all of Cout, channel chunks of 1, 2, 4 windows or all;
    - L1 ping-pong of A and of B: a staging without it is kept only where the same staging with it
      does not fit L1 (the model never runs slower with ping-pong: a dominance prune, exact).
    """

    def __init__(self, soc: Soc, op: Conv2D, filt: bool, win: int, c0: int, k_al: int) -> None:
        self.op, self.l1 = op, soc.l1
        self.filt, self.win, self.k_al = filt, win, k_al
        _, c, h, _ = op.x
        self.c1_total = _cdiv(c // op.groups, c0)
        self.co_g = op.weight[0] // op.groups
        self.out_h = h if op.op_type.endswith("BackpropInput") else op.out_hw[0]
        self._classes: dict[tuple[int, ...], np.ndarray] = {}
        self._cands: dict[tuple[int, ...], np.ndarray] = {}

    def _candidates(self, key4: tuple[int, ...]) -> np.ndarray:
        """hoL1, kAL1, kBL1 of a class before the L1 check (they depend on hoL0, rows, kL0, nDim only)."""
        got = self._cands.get(key4)
        if got is None:
            ho_l0, ho_core, k_l0, n_dim = key4
            rows_core = max(ho_core, ho_l0)
            hm = sorted({m for m in (1, 2, 4, 8, 16) if ho_l0 * m <= rows_core} | {rows_core // ho_l0})
            if self.filt:
                co = _align(self.co_g, 16)
                ka = sorted({k_l0 * m for m in (1, 2, 4) if k_l0 * m <= co} | ({co} if co % k_l0 == 0 else set()))
                c1 = _cdiv(self.c1_total, n_dim)
                kb = sorted({self.win * m for m in (1, 2, 4) if m <= c1} | {self.win * c1})
                pairs = [(a, b) for a in ka for b in kb]
            else:
                whole = _cdiv(self.k_al, self.win) * self.win
                ks = sorted({self.win * m for m in (1, 2, 4, 8) if self.win * m <= whole} | {whole})
                ks = [k for k in ks if k % k_l0 == 0]
                pairs = [(a, b) for a in ks for b in ks if a % b == 0 or b % a == 0]
            got = self._cands[key4] = np.array([(ho_l0 * m, a, b) for m in hm for a, b in pairs],
                                               np.int64).reshape(-1, 3)
        return got

    def _stagings(self, key: tuple[int, ...]) -> np.ndarray:
        """The legal stagings of one class (rows of `_CONV_STAGING` values, in the expansion's order)."""
        got = self._classes.get(key)
        if got is None:
            self._derive([key])
            got = self._classes[key]
        return got

    def _prepare(self, keys: list[tuple[int, ...]]) -> None:
        """Derive the classes among `keys` not derived yet, in one pass."""
        missing = [k for k in keys if k not in self._classes]
        if missing:
            self._derive(missing)

    def _derive(self, keys: list[tuple[int, ...]]) -> None:
        """Derive the stagings of several classes: candidates, the L1 check of all four ping-pong
        combinations at once, and the dominance prune (L1 bytes are linear in each operand's depth)."""
        cands = [self._candidates(k[:4]) for k in keys]
        counts = [len(c) for c in cands]
        st = np.concatenate(cands) if cands else np.zeros((0, 3), np.int64)
        kcols = tuple(np.repeat(np.array(keys, np.int64).reshape(-1, 6), counts, axis=0).T)
        single = np.column_stack([st, np.zeros((len(st), 2), np.int64)])  # no ping-pong, order 0
        # single-buffered A and B bytes, and the bias: doubling a depth doubles its operand's bytes
        a1, b1, rest = (conv_l1_bytes(self.op, kcols, single, part=p) for p in ("a", "b", "bias"))
        f = [(1 + da) * a1 + (1 + db) * b1 + rest <= self.l1 for da in (0, 1) for db in (0, 1)]
        f00, f01, f10, f11 = f
        keep = np.stack([f00 & ~(f01 | f10), f01 & ~f11, f10 & ~f11, f11], axis=1)  # no ping-pong, B, A, both
        pb = np.array([28, 30, 29, 31], np.int64)
        r, c = np.nonzero(keep)  # row-major: each staging's kept variants in the order above
        got = np.repeat(np.column_stack([st[r], pb[c]]), 2, axis=0)
        got = np.column_stack([got, np.tile(np.array([0, 1], np.int64), len(r))])
        owner = np.repeat(np.arange(len(keys)), counts)[r]
        ends = np.cumsum(2 * np.bincount(owner, minlength=len(keys)))
        for key, part in zip(keys, np.split(got, ends[:-1])):
            self._classes[key] = part

    def __call__(self, outer: np.ndarray) -> np.ndarray:
        """Every staging of each outer row, row by row."""
        return self._expand(outer)[0]

    def many(self, groups: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """`self(group)` of every group at once: the rows, group after group, and where each group starts."""
        rows, counts = self._expand(np.concatenate(groups))
        per_row = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=per_row[1:])
        return rows, per_row[np.concatenate([[0], np.cumsum([len(g) for g in groups])])]

    def count(self, outer: np.ndarray, limit: int | None = None) -> int:
        """Size of `self(outer)` without building it."""
        return int(_class_counts(self._keys(outer), self._stagings, self._prepare).sum()) if len(outer) else 0

    def _keys(self, outer: np.ndarray) -> np.ndarray:
        """The class key of each outer row: L0 rows, rows per core, K block, channel split (dW), L0 width
        and N block (see `_candidates` and `_derive`)."""
        return np.stack([outer[:, _C["hoL0"]], _cdiv(self.out_h, outer[:, _C["hoDim"]]), outer[:, _C["kL0"]],
                         outer[:, _C["nDim"]] if self.filt else np.zeros(len(outer), np.int64),
                         outer[:, _C["woL0"]], outer[:, _C["nL0"]]], axis=1)

    def _expand(self, outer: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The stagings of each outer row, and how many each has."""
        if not len(outer):
            return outer.reshape(-1, len(CONV_FIELDS)), np.zeros(0, np.int64)
        stagings, counts = _by_class(self._keys(outer), self._stagings, self._prepare)
        out = np.repeat(outer, counts, axis=0)
        if len(out):
            out[:, _CONV_STAGING] = stagings
        return out, counts
