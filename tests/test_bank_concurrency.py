"""Many processes writing one bank: no lost update, no partial file, kill -9 at any instant is safe."""
import fcntl
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import aoe
from aoe.bank import BankWarning, OpBank, SubgraphBank, make_pending
from aoe.bank.schema import MATMUL_KNOWLEDGE

SOC, MM = "Ascend910B2", "MatMulV3"
# children import the same aoe as this test process (the installed package in CI)
AOE_PARENT = str(Path(aoe.__file__).resolve().parent.parent)

PRELUDE = """
import json, sys, warnings
from aoe.bank import OpBank, SubgraphBank, BankWarning, make_pending
from aoe.bank.subgraph import make_subgraph_pending
from aoe.bank.schema import MATMUL_KNOWLEDGE
def key(m):
    return {"m": m, "k": 64, "n": 64, "a_dtype": 1, "b_dtype": 1, "out_dtype": 1,
            "a_format": 2, "b_format": 2, "out_format": 2}
def know(v):
    return {f: v for f in MATMUL_KNOWLEDGE}
"""

WRITER = PRELUDE + """
root, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bank, sg = OpBank(root, "Ascend910B2"), SubgraphBank(root)
for i in range(n):
    bank.save([make_pending("MatMulV3", key(wid * 100000 + i), know(wid), 1.0)])[0]
    if i % 10 == 0:  # everybody also competes for one shared case; the fastest must win
        bank.save([make_pending("MatMulV3", key(10**9), know(wid * 1000 + i), 1000.0 - i - wid / 10)])[0]
        sg.save([make_subgraph_pending("shared", {"by": wid, "i": i}, 1000.0 - i - wid / 10)])[0]
print("done", flush=True)
"""

READER = PRELUDE + """
root, seconds = sys.argv[1], float(sys.argv[2])
import time
warnings.simplefilter("error", BankWarning)  # a partial file would show up as a damaged line
end, last, reads = time.time() + seconds, 0, 0
while time.time() < end:
    bank = OpBank(root, "Ascend910B2")
    count = sum(1 for _ in bank.entries())
    assert count >= last, (count, last)  # entries never disappear
    last, reads = count, reads + 1
print("reads", reads, "last", last, flush=True)
"""


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([AOE_PARENT, env.get("PYTHONPATH", "")])
    return env


def _spawn(code, cwd, *args):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            cwd=str(cwd))


def test_four_writers_lose_nothing(tmp_path):
    writers, n = 4, 200
    procs = [_spawn(WRITER, tmp_path, tmp_path, w, n) for w in range(writers)]
    reader = _spawn(READER, tmp_path, tmp_path, 3.0)
    for p in procs + [reader]:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    bank = OpBank(tmp_path, SOC)
    with warnings.catch_warnings():
        warnings.simplefilter("error", BankWarning)
        entries = list(bank.entries())
    assert len(entries) == writers * n + 1
    for w in range(writers):
        for i in range(n):
            e = bank.lookup(MM, {"m": w * 100000 + i, "k": 64, "n": 64, "a_dtype": 1, "b_dtype": 1,
                                 "out_dtype": 1, "a_format": 2, "b_format": 2, "out_format": 2})
            assert e is not None and e.knowledge == {f: w for f in MATMUL_KNOWLEDGE}, (w, i)
    shared = bank.lookup(MM, {"m": 10**9, "k": 64, "n": 64, "a_dtype": 1, "b_dtype": 1, "out_dtype": 1,
                              "a_format": 2, "b_format": 2, "out_format": 2})
    best = min((1000.0 - i - w / 10, w * 1000 + i) for w in range(writers) for i in range(0, n, 10))
    assert shared.perf_us == best[0] and shared.knowledge["baseM"] == best[1]
    sg = SubgraphBank(tmp_path).lookup("shared")
    assert sg.perf_us == best[0]
    # improvements of the shared case were appended; a compaction leaves one line per case
    assert len(bank.path_for(MM).read_text().splitlines()) == writers * n + 1 + bank.duplicates(MM)
    bank.compact()
    assert len(bank.path_for(MM).read_text().splitlines()) == writers * n + 1
    assert OpBank(tmp_path, SOC).lookup(MM, {"m": 10**9, "k": 64, "n": 64, "a_dtype": 1, "b_dtype": 1,
                                             "out_dtype": 1, "a_format": 2, "b_format": 2,
                                             "out_format": 2}).perf_us == best[0]
    leftovers = [p.name for p in bank.dir.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


KILLED = PRELUDE + """
root, start = sys.argv[1], int(sys.argv[2])
bank = OpBank(root, "Ascend910B2")
i = start
while True:  # keep saving batches of 200 new cases into a multi-megabyte file
    bank.save([make_pending("MatMulV3", key(m), know(m % 1000), 1.0) for m in range(i, i + 200)])
    print(i + 200, flush=True)  # everything below this is saved
    i += 200
"""


def test_kill_9_during_save_leaves_a_loadable_bank(tmp_path):
    bank = OpBank(tmp_path, SOC)
    bank.save([make_pending(MM, {"m": m, "k": 64, "n": 64, "a_dtype": 1, "b_dtype": 1, "out_dtype": 1,
                                 "a_format": 2, "b_format": 2, "out_format": 2},
                            {f: m % 1000 for f in MATMUL_KNOWLEDGE}, 1.0) for m in range(5000)])
    rng = random.Random(4)
    path = bank.path_for(MM)
    lock = path.with_name(f".{path.name}.lock")
    start, saved = 5000, 5000
    for _ in range(6):
        p = _spawn(KILLED, tmp_path, tmp_path, start)
        size0 = path.stat().st_size
        deadline = time.time() + 30
        while path.stat().st_size == size0 and time.time() < deadline:  # its first save landed
            time.sleep(0.01)
        time.sleep(rng.random() * 0.3)
        # kill it while it holds the bank lock, i.e. in the middle of a save
        deadline = time.time() + 20
        while time.time() < deadline:
            fd = os.open(lock, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(rng.random() * 0.03)  # somewhere inside read / merge / write / rename
                p.send_signal(signal.SIGKILL)
                break
            finally:
                os.close(fd)
            time.sleep(0.001)
        else:
            p.kill()
            raise AssertionError("the writer never took the lock")
        out, _ = p.communicate(timeout=30)
        printed = [int(x) for x in out.split()]
        with warnings.catch_warnings():
            warnings.simplefilter("error", BankWarning)  # no damaged line, ever
            fresh = OpBank(tmp_path, SOC)
            ms = sorted(e.info_dict["m"] for e in fresh.entries())
        # every save that returned is there; of the save that was killed (an append torn anywhere)
        # a prefix of whole records may be there, and no torn line is ever read as a record
        reported = max(printed, default=start)
        assert ms[:reported] == list(range(reported)), "a completed save was lost"
        assert len(ms) == len(set(ms)) and ms == list(range(len(ms))) and len(ms) <= reported + 200
        saved = max(saved, len(ms))
        start = len(ms)
    # a later save cleans the temp files of killed writers and keeps everything
    bank.save([make_pending(MM, {"m": 10**9, "k": 64, "n": 64, "a_dtype": 1, "b_dtype": 1, "out_dtype": 1,
                  "a_format": 2, "b_format": 2, "out_format": 2}, {f: 0 for f in MATMUL_KNOWLEDGE}, 1.0)])[0]
    assert not any(x.name.endswith(".tmp") for x in bank.dir.iterdir())
    assert sum(1 for _ in OpBank(tmp_path, SOC).entries()) == saved + 1
    assert saved > 5000  # the children did get work done between kills
