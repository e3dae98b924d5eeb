"""Bank speed: load a 100,000-entry MatMulV3 bank, then 100,000 lookups. Prints one JSON line.

Figures (each the best of --rounds rounds, as the machine may be shared): `load_s` (open the bank and
index its file), `lookup_us` (mean `OpBank.lookup` of each of the 100,000 stored keys once, in random
order: the first touch of every entry is included; each lookup also stats the file), `lookup_warm_us`
(the same keys again), `lookup_nostat_us` (a bank without stat re-validation), `miss_us` (absent
keys), `query_us` (mean `aoe.bank.query`: custom bank with stat re-validation + a copy of the
knowledge), `bare_stat_us` (one os.stat of the bank file: the machine's syscall
cost), `file_mb`. Goals: load < 1 s, lookup < 5 µs.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

from aoe.bank import OpBank, query
from aoe.bank.jsonl import dumps
from aoe.bank.schema import MATMUL, MATMUL_KNOWLEDGE
from aoe.bank.query import clear_cache
from aoe.bank.store import default_hash

SOC, OP = "Ascend910B2", "MatMulV3"


def make_keys(n: int, seed: int) -> list[dict[str, int]]:
    """`n` distinct canonical MatMul keys with realistic field values."""
    rng = random.Random(seed)
    keys = []
    for i in range(n):
        k = MATMUL.canonical_key(OP, {
            "m": 16 * (i + 1), "k": rng.choice([64, 768, 1024, 4096]), "n": rng.choice([128, 1024, 3072]),
            "batch_a1": rng.choice([1, 8]), "a_dtype": 1, "b_dtype": 1, "out_dtype": rng.choice([0, 1]),
            "a_format": 2, "b_format": rng.choice([2, 29]), "out_format": 2,
            "trans_b_flag": rng.choice([0, 1])})
        keys.append(k)
    return keys


def write_bank(root: Path, keys: list[dict[str, int]], seed: int) -> Path:
    """Write the bank file directly in aoe's record format (what n put() calls would leave)."""
    rng = random.Random(seed)
    bank = OpBank(root, SOC)
    path = bank.path_for(OP)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for k in keys:
            know = {name: rng.choice([1, 2, 16, 64, 128, 256]) for name in MATMUL_KNOWLEDGE}
            rec = {"id": default_hash(MATMUL.pack(OP, k)), "op": OP, "version": 1, "info_dict": k,
                   "knowledge": know, "aoe": {"perf_us": rng.uniform(5, 500), "default_perf_us": 600.0}}
            f.write(dumps(rec) + b"\n")
    return path


def measure(root: Path, keys: list[dict[str, int]], seed: int) -> dict[str, float]:
    """One round: load, cold lookups of every key, misses, queries."""
    t0 = time.perf_counter()
    bank = OpBank(root, SOC)
    bank.file(OP)
    load_s = time.perf_counter() - t0

    order = keys[:]
    random.Random(seed).shuffle(order)
    t0 = time.perf_counter()
    hits = sum(bank.lookup(OP, k) is not None for k in order)
    lookup_us = (time.perf_counter() - t0) / len(order) * 1e6
    assert hits == len(order), hits

    t0 = time.perf_counter()
    hits = sum(bank.lookup(OP, k) is not None for k in order)
    warm_us = (time.perf_counter() - t0) / len(order) * 1e6

    frozen = OpBank(root, SOC, revalidate=False)  # what the stat re-validation costs
    frozen.file(OP)
    t0 = time.perf_counter()
    sum(frozen.lookup(OP, k) is not None for k in order)
    nostat_us = (time.perf_counter() - t0) / len(order) * 1e6
    del frozen
    path = str(bank.path_for(OP))
    t0 = time.perf_counter()
    for _ in range(20_000):
        os.stat(path)
    stat_us = (time.perf_counter() - t0) / 20_000 * 1e6

    misses = [dict(k, m=k["m"] + 1) for k in order[:20_000]]
    t0 = time.perf_counter()
    found = sum(bank.lookup(OP, k) is not None for k in misses)
    miss_us = (time.perf_counter() - t0) / len(misses) * 1e6
    assert found == 0
    del bank

    clear_cache()
    query(SOC, OP, order[0], bank_dir=root)  # the first call loads
    t0 = time.perf_counter()
    got = sum(query(SOC, OP, k, bank_dir=root) is not None for k in order)
    query_us = (time.perf_counter() - t0) / len(order) * 1e6
    assert got == len(order)
    clear_cache()
    return {"load_s": load_s, "lookup_us": lookup_us, "lookup_warm_us": warm_us,
            "lookup_nostat_us": nostat_us, "miss_us": miss_us, "query_us": query_us,
            "bare_stat_us": stat_us}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON line (each figure: best of --rounds)."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    keys = make_keys(args.entries, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path = write_bank(root, keys, args.seed)
        rounds = [measure(root, keys, args.seed + r) for r in range(args.rounds)]
        best = {k: round(min(r[k] for r in rounds), 3) for k in rounds[0]}
        print(json.dumps({"entries": args.entries, "file_mb": round(path.stat().st_size / 1e6, 1),
                          **best, "rounds": args.rounds, "load_avg_1min": os.getloadavg()[0],
                          "python": sys.version.split()[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
