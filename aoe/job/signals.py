"""Stopping a job cleanly: SIGINT/SIGTERM end it between cases, a second signal or a grace period at once."""
from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any

from ..errors import AoeError
from ..safeio import env_float


def _mp_children() -> list[Any]:
    """multiprocessing's live children of this process; none when it was never imported (no import for it:
    multiprocessing costs a job that starts no workers a few hundredths of a second)."""
    mp = sys.modules.get("multiprocessing")
    return mp.active_children() if mp is not None and hasattr(mp, "active_children") else []


class StopFlag:
    """SIGINT/SIGTERM set the flag (the tuner stops between cases); a second signal stops at once.

    If the operator being tuned does not finish within `grace` seconds of the first signal
    (`AOE_STOP_GRACE`, default 10), the job stops at once as well (SIGALRM): the result file is
    written as "tuning incomplete" either way.
    """

    def __init__(self, grace: float | None = None) -> None:
        self.signum: int | None = None
        self._prev: dict[int, Any] = {}
        self._pid = os.getpid()
        self._children_before: set[int | None] = set()
        if grace is None:
            try:
                grace = env_float("AOE_STOP_GRACE", os.environ.get("AOE_STOP_GRACE", "") or "10", 0.0, 1e6, "")
            except AoeError:
                grace = 10.0
        self.grace = max(0.0, grace)

    def __call__(self) -> bool:
        return self.signum is not None

    def _stop_now(self) -> None:
        # worker processes started by this job (not the caller's own children) may be stuck in a
        # case: end them, or the worker pool would wait for them forever
        killed = False
        for p in _mp_children():
            if p.pid not in self._children_before:
                p.kill()
                killed = True
        if killed:
            # CPython 3.11's pool manager thread then trips over the futures map() cancelled
            # (InvalidStateError in set_exception): harmless, but it would print a traceback
            from concurrent.futures import InvalidStateError

            prev_hook = threading.excepthook

            def hook(args: Any) -> None:
                if not issubclass(args.exc_type, InvalidStateError):
                    prev_hook(args)

            threading.excepthook = hook
        raise KeyboardInterrupt

    def _handler(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:      # a forked worker: its parent decides
            return
        if self.signum is not None:
            self._stop_now()
        self.signum = signum
        name = signal.Signals(signum).name
        try:
            sys.stderr.write(f"\naoe: {name} received: finishing the current operator and writing the result "
                             f"file (send it again to stop at once)\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        if self._prev and self.grace > 0:
            self._prev.setdefault(signal.SIGALRM, signal.signal(signal.SIGALRM, self._alarm))
            signal.setitimer(signal.ITIMER_REAL, self.grace)

    def _alarm(self, signum: int, frame: Any) -> None:
        if os.getpid() == self._pid and self.signum is not None:
            self._stop_now()

    def install(self) -> None:
        """Take over SIGINT/SIGTERM (main thread only; elsewhere the caller's handlers stay)."""
        self._pid = os.getpid()
        self._children_before = {p.pid for p in _mp_children()}
        if threading.current_thread() is not threading.main_thread():
            return
        early = None
        for s in (signal.SIGINT, signal.SIGTERM):
            self._prev[s] = signal.signal(s, self._handler)
            early = early or getattr(self._prev[s], "aoe_early_signal", None)
        if early is not None and self.signum is None:
            self._handler(early, None)  # it came before the job was ready (aoe.cli.EarlySignals)

    def restore(self) -> None:
        if signal.SIGALRM in self._prev:
            signal.setitimer(signal.ITIMER_REAL, 0)
        for s, h in self._prev.items():
            signal.signal(s, h)
        self._prev.clear()
