"""Generate the built-in operator bank shipped in aoe/bank/builtin/<soc>/unified_bank/.

    python scripts/gen_builtin_bank.py                     # the seed set (heuristic MatMulV3 tilings)
    python scripts/gen_builtin_bank.py --from tuned.jsonl  # plus records of `aoe bank export` files

The built-in bank is curated: the intended source is `aoe bank export` of custom banks produced by
tuning on the simulator (records there carry "aoe": {"soc", "core_num", "perf_us", ...}). Until the
tuners exist, the seed set holds a few MatMulV3 cases of BERT-base shapes with a tiling in the style
of CANN's default heuristic (base block 128x256x64 with 128 KB L0C, 256x256x64 with 256 KB). It is
kept small on purpose: a built-in hit is not re-tuned unless REPEAT_TUNE=True.

Output is deterministic (sorted records, regenerated from scratch) so the committed files only change
when their content does.
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from aoe.bank import jsonl  # noqa: E402
from aoe.bank.paths import CORE_NUMS  # noqa: E402
from aoe.bank.store import BUILTIN_ROOT, OpBank, Pending, RECORD_VERSION, make_pending  # noqa: E402
from aoe.bank.schema import schema_for  # noqa: E402

L0C_KB = {"Ascend910A": 256, "Ascend910B2": 128, "Ascend910B3": 128, "Ascend310P3": 256}
# (m, k, n) of BERT-base layers at batch 1 x seq 128: QKV/out projection, FFN up, FFN down
SEED_SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768)]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def heuristic_tiling(m: int, k: int, n: int, cores: int, l0c_kb: int) -> dict[str, int]:
    """A MatMulV3TunnerTiling in the style of CANN's default heuristic (fp16, ND, no split-K)."""
    bm, bn, bk = (256, 256, 64) if l0c_kb >= 256 else (128, 256, 64)
    bm, bn, bk = min(bm, _ceil(m, 16) * 16), min(bn, _ceil(n, 16) * 16), min(bk, _ceil(k, 16) * 16)
    mt, nt = _ceil(m, bm), _ceil(n, bn)
    mcores = min(mt, cores)
    ncores = max(1, min(nt, cores // mcores))
    scm, scn = _ceil(mt, mcores) * bm, _ceil(nt, ncores) * bn
    used = _ceil(m, scm) * _ceil(n, scn)
    return {"usedCoreNum": used, "singleCoreM": scm, "singleCoreN": scn, "singleCoreK": k,
            "baseM": bm, "baseN": bn, "baseK": bk, "depthA1": 2, "depthB1": 2, "stepM": 1,
            "stepN": 1, "iterateOrder": 0, "stepKa": 1, "stepKb": 1, "dbL0A": 1, "dbL0B": 1,
            "dbL0C": 0, "l2MTileCnt": 1, "l2NTileCnt": 1, "l2MTileBlock": mt, "l2NTileBlock": nt,
            "l2IterateOrder": 0, "tilingEnable": 1}


def seed_entries(soc: str) -> list[Pending]:
    """The seed set of one SoC."""
    out = []
    for m, k, n in SEED_SHAPES:
        key = {"m": m, "k": k, "n": n, "a_dtype": "DT_FLOAT16", "b_dtype": "DT_FLOAT16",
               "out_dtype": "DT_FLOAT16", "a_format": "FORMAT_ND", "b_format": "FORMAT_ND",
               "out_format": "FORMAT_ND"}
        out.append(make_pending("MatMulV3", key,
                                heuristic_tiling(m, k, n, CORE_NUMS[soc], L0C_KB[soc]), None,
                                extra={"origin": "gen_builtin_bank.py heuristic seed"}))
    return out


def from_export(path: Path, soc: str) -> list[Pending]:
    """Operator records of an `aoe bank export` file made for `soc`."""
    lines = jsonl.read_lines(path, lambda r: None if isinstance(r, dict) else "not an object")
    out = []
    for rec in lines.recs:
        if rec is None or "op" not in rec:
            continue
        aoe = dict(rec.get("aoe") or {})
        if aoe.pop("soc", soc) != soc or aoe.pop("core_num", CORE_NUMS[soc]) != CORE_NUMS[soc]:
            continue
        out.append(make_pending(rec["op"], rec["info_dict"], rec["knowledge"], aoe.pop("perf_us", None),
                                aoe.pop("default_perf_us", None), aoe))
    return out


def write_soc(soc: str, items: list[Pending], root: Path) -> int:
    """Write one SoC's built-in files from scratch; return the number of records."""
    bank = OpBank(root / soc, soc, readonly=True)
    shutil.rmtree(bank.root, ignore_errors=True)
    bank.dir.mkdir(parents=True)
    by_op: dict[str, dict[bytes, Pending]] = {}
    for it in items:  # the last record of a case wins
        packed = schema_for(it.op_type).pack(it.op_type, it.info_dict)
        by_op.setdefault(it.op_type, {})[packed] = it
    n = 0
    for op, cases in sorted(by_op.items()):
        lines = []
        for packed, it in sorted(cases.items()):
            lines.append(jsonl.dumps({"id": bank.hash_fn(packed), "op": op, "version": RECORD_VERSION,
                                      "info_dict": it.info_dict, "knowledge": it.knowledge,
                                      "aoe": it.aoe}) + b"\n")
        jsonl.atomic_write(bank.path_for(op), b"".join(lines))
        n += len(lines)
    return n


def main(argv: list[str] | None = None) -> int:
    """Regenerate aoe/bank/builtin/."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--from", dest="sources", action="append", default=[], type=Path,
                    help="an `aoe bank export` file to include (repeatable)")
    ap.add_argument("--out", type=Path, default=BUILTIN_ROOT, help="output root (default: the package's)")
    args = ap.parse_args(argv)
    for soc in CORE_NUMS:
        items = seed_entries(soc)
        for src in args.sources:
            items += from_export(src, soc)
        print(f"{soc}: {write_soc(soc, items, args.out)} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
