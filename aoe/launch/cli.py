"""`aoe run [options] -- python train.py ARGS`: the training script as it is, tuned on its first step.

The command runs as a child process with the same stdin, stdout and stderr; `aoe run` exits with its
exit code (128 + N when a signal N ended it). The child's Python interpreters find aoe's bootstrap
first on PYTHONPATH (`boot/sitecustomize.py`), which installs `aoe.launch.hooks` before the script's
first line. The options become the environment the job reads (AOE_MODE, ASCEND_WORK_PATH, ...).
"""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import AoeError

BOOT = Path(__file__).resolve().parent / "boot"
CLAIM_ENV = "AOE_RUN_CLAIM"   # the file whose creation claims the run's one tuned step (aoe.launch.hooks.claim)


def parser() -> argparse.ArgumentParser:
    """The options of `aoe run`."""
    p = argparse.ArgumentParser(
        prog="aoe run", usage="aoe run [options] -- COMMAND [ARGS ...]",
        description="Run a training script unchanged with aoe's hooks: with a tuning mode (-j or AOE_MODE) "
                    "its first training step (Keras fit, a tf.function train step, a tf.compat.v1 session run, "
                    "a torch optimizer step) is tuned by the job, then training goes on untouched; without one "
                    "it is a plain run. Example: AOE_MODE=2 aoe run -- python train.py --epochs 3")
    p.add_argument("-j", "--job_type", choices=("1", "2"), help="1 subgraph tuning, 2 operator tuning (AOE_MODE)")
    p.add_argument("--work_path", help="where the result file goes (ASCEND_WORK_PATH)")
    p.add_argument("--soc_version", help="the simulated SoC (AOE_SOC_VERSION)")
    p.add_argument("--bank", help="the custom bank root (TUNE_BANK_PATH)")
    p.add_argument("--config", help="an aoe.ini (AOE_CONFIG)")
    p.add_argument("--device", type=int, help="the simulated device locked for the job (ASCEND_DEVICE_ID)")
    return p


def child_env(args: argparse.Namespace, env: dict[str, str]) -> dict[str, str]:
    """The child's environment: the options as the variables the job reads, the bootstrap on PYTHONPATH."""
    out = dict(env)
    for value, key in ((args.job_type, "AOE_MODE"), (args.work_path, "ASCEND_WORK_PATH"),
                       (args.soc_version, "AOE_SOC_VERSION"), (args.bank, "TUNE_BANK_PATH"),
                       (args.config, "AOE_CONFIG"), (args.device, "ASCEND_DEVICE_ID")):
        if value is not None:
            out[key] = os.path.abspath(value) if key in ("ASCEND_WORK_PATH", "TUNE_BANK_PATH", "AOE_CONFIG") \
                else str(value)
    parts = [str(BOOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    out["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return out


def main(argv: list[str]) -> int:
    """`aoe run`: run the command after `--` with the hooks; return its exit code."""
    if not argv or not argv[0].startswith("-"):
        opts, command = [], list(argv)     # no options: all of it is the command, its own `--` included
    elif "--" in argv:
        i = argv.index("--")
        opts, command = argv[:i], argv[i + 1:]
    elif argv[0] in ("-h", "--help"):
        opts, command = argv[:1], []
    else:
        raise AoeError("put the command after `--`: aoe run [options] -- python train.py ARGS")
    args = parser().parse_args(opts)
    if not command:
        raise AoeError("no command to run: aoe run [options] -- python train.py ARGS")
    env = child_env(args, dict(os.environ))
    if env.get("AOE_MODE", "").strip():
        from ..tf import session

        session.resolve(env=env)  # a bad mode or setting (an unusable work path ...): an error before the start
    claim_dir = tempfile.mkdtemp(prefix="aoe-run-")
    env[CLAIM_ENV] = os.path.join(claim_dir, "claimed")   # the one process of the run that tunes a step
    try:
        try:
            child = subprocess.Popen(command, env=env)
        except OSError as exc:
            raise AoeError(f"cannot run {command[0]!r}: {exc.strerror or exc}") from None
        rc = _wait(child)
    finally:
        shutil.rmtree(claim_dir, ignore_errors=True)
    return 128 - rc if rc < 0 else rc


# signals passed on to the child when a process sent them to `aoe run` (kill, a supervisor, a CI runner):
# without that the child would train on, or be left behind when `aoe run` dies
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


def _wait(child: subprocess.Popen) -> int:
    """Wait for the child; pass on each signal a process sent to `aoe run`, not a terminal's ^C or ^\\
    (the terminal sends those to the child as well: passed on, it would get them twice)."""
    if not hasattr(signal, "sigtimedwait"):   # no siginfo (macOS): SIGTERM passed on, ^C reaches the child
        prev = {signal.SIGINT: signal.signal(signal.SIGINT, signal.SIG_IGN),
                signal.SIGTERM: signal.signal(signal.SIGTERM, lambda signum, frame: child.send_signal(signum))}
        try:
            return child.wait()
        finally:
            for s, h in prev.items():
                signal.signal(s, h)
    watched = {*FORWARDED, signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        while (rc := child.poll()) is None:
            info = signal.sigtimedwait(watched, 1.0)
            # si_code <= 0: sent by a process (SI_USER, SI_QUEUE, SI_TKILL); > 0: by the kernel (a terminal)
            if info is not None and info.si_signo != signal.SIGCHLD and info.si_code <= 0:
                child.send_signal(info.si_signo)
        return rc
    finally:
        prev = {s: signal.signal(s, signal.SIG_IGN) for s in FORWARDED}   # what is still pending is dropped
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
        for s, h in prev.items():
            signal.signal(s, h)
