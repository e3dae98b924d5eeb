"""Torture run of the tuning job: concurrent jobs with workers killed at random instants, resumed, hostile inputs.

    python bench/torture.py [--rounds 10] [--jobs 3] [--seed 0] [--dir DIR]

Each round starts `--jobs` CLI jobs (2 worker processes each, one device each) into one shared bank and
work path, `kill -9`s one at a random instant, checks that its device lock is free and its workers gone
within 5 s, resumes it with `--reload`, and lets the others finish; then `aoe bank verify` must pass.
After the rounds every model is tuned once more (warm): a case added earlier that the warm run adds
again was lost. Every hostile input of `HOSTILE` is tried once per round. Prints JSON: jobs, kills,
hostile inputs, tracebacks, hangs, late locks, orphans, lost entries, failures, CPU and wall seconds.
`tests/test_torture.py` runs one small round in CI.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MODELS = ["zoo:mobilenet_v2", "zoo:resnet50"]
TIMEOUT = 600


def _ops(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        m, k, nn = (rng.choice([16, 64, 96, 128, 256, 384]) for _ in range(3))
        out.append({"op": "MatMulV2", "name": f"mm{i}", "input_desc": [{"shape": [m, k], "type": "float16"},
                    {"shape": [k, nn], "type": "float16"}], "output_desc": [{"shape": [m, nn], "type": "float16"}]})
    return out


def hostile_inputs(d: Path) -> list[list[str]]:
    """Argument lists of jobs that must end with a clean error (exit 2) or a normal run, never a traceback."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (d / "nan.json").write_text('[{"op":"MatMulV2","input_desc":[{"shape":[NaN,2]}]}]')
    (d / "zero_in.json").write_text(json.dumps([{"op": "MatMulV2", "name": "a", "input_desc": [],
                                                 "output_desc": [{"shape": [4, 4]}]}]))
    (d / "conv.json").write_text(json.dumps([{"op": "Conv2D", "name": "c", "input_desc": [
        {"shape": [1, 3, 8, 8]}, {"shape": [4, 5, 3, 3]}], "output_desc": [{"shape": [1, 4, 6, 6]}],
        "attr": {"strides": [1, 1], "pads": [0, 0, 0, 0]}}]))
    (d / "huge.json").write_text(json.dumps(_ops(1, 0)).replace("[", "[", 1).replace('"shape": [', '"shape": [1048576, ', 1))
    (d / "bad.ini").write_text("[tuning]\ntuning_parallel_num = banana\n")
    (d / "big.ini").write_text("[tuning]\n" + "#" * (2 << 20) + "\n")
    (d / "ops_evil.json").write_text('{"tune_ops_name": [' + "1," * 1000 + "1]}")
    fifo = d / "fifo.json"
    if not fifo.exists():
        os.mkfifo(fifo)
    return [["--singleop", str(d / "deep.json"), "-j", "2"], ["--singleop", str(d / "nan.json"), "-j", "2"],
            ["--singleop", str(d / "zero_in.json"), "-j", "2"], ["--singleop", str(d / "conv.json"), "-j", "2"],
            ["--singleop", str(d / "huge.json"), "-j", "2"], ["--singleop", str(fifo), "-j", "2"],
            ["--singleop", "/dev/zero", "-j", "2"], ["-m", "zoo:mobilenet_v2", "-j", "2", "--config", str(d / "bad.ini")],
            ["-m", "zoo:mobilenet_v2", "-j", "2", "--config", str(d / "big.ini")],
            ["-m", "zoo:mobilenet_v2", "-j", "2", "--tune_ops_file", str(fifo)],
            ["-m", "zoo:mobilenet_v2", "-j", "2", "--tune_ops_file", str(d / "ops_evil.json")],
            ["-m", "zoo:mobilenet_v2", "-j", "2", "--work_path", "w" * 300],
            ["-m", "zoo:resnet50", "-j", "2", "--input_shape", "input:1048576,3,224,224"],
            ["-m", "zoo:mobilenet_v2", "-j", "1", "--soc_version", str(d / "fifo.json")],
            ["-m", str(d / "deep.json"), "-j", "2"]]


def _aoe(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "aoe.cli", *args], cwd=cwd, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _descendants(pid: int) -> set[int]:
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(p.name))
    out, todo = set(), [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Tally:
    def __init__(self) -> None:
        self.c = dict(jobs=0, kills=0, reloads=0, hostile=0, tracebacks=0, hangs=0, late_locks=0, orphans=0,
                      failures=0, bank_verify_failures=0, lost_entries=0)
        self.notes: list[str] = []

    def finish(self, p: subprocess.Popen, what: str, ok: tuple[int, ...] = (0,)) -> tuple[str, str]:
        try:
            out, err = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            self.c["hangs"] += 1
            self.notes.append(f"hang: {what}")
            return out, err
        if "Traceback" in err:
            self.c["tracebacks"] += 1
            self.notes.append(f"traceback: {what}: {err.strip().splitlines()[-1][:200]}")
        elif p.returncode not in ok:
            self.c["failures"] += 1
            self.notes.append(f"exit {p.returncode}: {what}: {err.strip()[-200:]}")
        return out, err


def run(rounds: int, jobs: int, seed: int, base: Path, budget: int = 2000) -> dict[str, Any]:
    from aoe.job.lock import DeviceBusy, DeviceLock

    rng = random.Random(seed)
    t = Tally()
    base.mkdir(parents=True, exist_ok=True)
    (base / "bank").mkdir(exist_ok=True)
    (base / "work").mkdir(exist_ok=True)
    # workers from each job's first case (not after its first 0.3 s of tuning): every kill finds them
    (base / "aoe.ini").write_text("tuning_parallel_num = 2\ninline_cpu_s = 0\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AOE_", "ASCEND_", "TUNE_", "RANK_"))}
    # the built-in bank set aside: every job tunes, so a kill finds work in flight
    env.update(TUNE_BANK_PATH=str(base / "bank"), AOE_LOCK_DIR=str(base / "locks"), AOE_SEARCH_BUDGET=str(budget),
               ASCEND_WORK_PATH=str(base / "work"), HOME=str(base), AOE_BUILTIN_BANK="off")
    hostile = hostile_inputs(base / "hostile")
    c0, w0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    models: set[str] = set()
    for r in range(rounds):
        specs = []
        for j in range(jobs):
            if rng.random() < 0.5:
                ops = base / f"ops_{r}_{j}.json"
                ops.write_text(json.dumps(_ops(8, rng.randrange(1 << 30))))
                specs.append(["--singleop", str(ops), "-j", "2"])
            else:
                m = rng.choice(MODELS)
                specs.append(["-m", m, "-j", "2"] + (["--training"] if rng.random() < 0.5 else []))
        for s in specs:
            models.add(json.dumps(s))
        procs = [_aoe(base, dict(env, ASCEND_DEVICE_ID=str(j)), *s) for j, s in enumerate(specs)]
        t.c["jobs"] += len(procs)
        victim = rng.randrange(jobs)
        time.sleep(rng.uniform(0.2, 2.0))  # jobs take a second or a few: most kills land mid-run
        vp = procs[victim]
        if vp.poll() is None:
            workers = _descendants(vp.pid)
            os.kill(vp.pid, signal.SIGKILL)
            vp.communicate()
            t.c["kills"] += 1
            lock, got, end = DeviceLock(victim, base / "locks"), False, time.monotonic() + 5
            while not got and time.monotonic() < end:
                try:
                    lock.acquire()
                    got = True
                    lock.release()
                except DeviceBusy:
                    time.sleep(0.05)
            if not got:
                t.c["late_locks"] += 1
                t.notes.append(f"lock of device {victim} still held 5 s after kill -9")
            end = time.monotonic() + 5
            while time.monotonic() < end and any(_alive(p) for p in workers):
                time.sleep(0.05)
            orphans = [p for p in workers if _alive(p)]
            if orphans:
                t.c["orphans"] += len(orphans)
                for p in orphans:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            rp = _aoe(base, dict(env, ASCEND_DEVICE_ID=str(victim)), *specs[victim], "--reload")
            t.c["reloads"] += 1
            t.finish(rp, f"--reload {' '.join(specs[victim])}")
        for j, p in enumerate(procs):
            if j != victim or p.returncode is None:
                t.finish(p, " ".join(specs[j]))
        for h in hostile:
            t.c["hostile"] += 1
            t.finish(_aoe(base, env, *h), "hostile " + " ".join(h)[:120], ok=(0, 2))
        # cwd: `python -m` puts it first on the import path (from a source checkout: the unbuilt aoe/)
        v = subprocess.run([sys.executable, "-m", "aoe.cli", "bank", "--tune_bank_path", str(base / "bank"), "verify"],
                           capture_output=True, text=True, env=env, timeout=TIMEOUT, cwd=base)
        if v.returncode != 0:
            t.c["bank_verify_failures"] += 1
            t.notes.append(f"bank verify: {v.stdout.strip()[-300:]} {v.stderr.strip()[-300:]}")
    # lost entries: a warm run of every job adds nothing that an earlier run added
    for s in sorted(models):
        args = json.loads(s)
        p = _aoe(base, env, *args)
        out, err = t.finish(p, "warm " + " ".join(args))
        res = sorted((base / "work").glob("aoe_result_opat_*.json"), key=lambda f: f.stat().st_mtime)[-1]
        for task in json.loads(res.read_text()).values():
            if len(task) > 1:
                t.c["lost_entries"] += int(task[1]["OPAT"]["repo_summary"]["repo_add_num"])
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return dict(t.c, cpu_s=round(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime, 1),
                wall_s=round(time.perf_counter() - w0, 1), rounds=rounds, notes=t.notes[:50])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=int, default=2000)
    ap.add_argument("--dir", default=None, help="keep the files here (default: a temp dir, removed)")
    a = ap.parse_args()
    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    where = {"bench": "torture", **machine(), "seed": a.seed, "budget": a.budget}
    if a.dir:
        print(json.dumps({**where, **run(a.rounds, a.jobs, a.seed, Path(a.dir), a.budget)}, indent=1))
        return
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps({**where, **run(a.rounds, a.jobs, a.seed, Path(tmp), a.budget)}, indent=1))


if __name__ == "__main__":
    main()
