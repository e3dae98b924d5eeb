"""Result files: `aoe_result_{opat|sgat}_<YYYYMMDDhhmmss><mmm>_pid<pid>.json`.

The file is an object `{"report_<timestamp>_<tid>": [{"basic": {...}}, {"OPAT": {...}}], ...}`, one
key per tuning task. It is rewritten after every tuned operator (or subgraph) by writing a temp file
in the same directory, fsyncing it and renaming it over the old one, so a reader always sees valid
JSON: the previous version or the new one.

What `--reload` needs is kept beside it in a hidden *state* file
`.aoe_result_<kind>_<ts>_pid<pid>.json.state` (same atomic writes): the job's identity (model
fingerprint, SoC, mode), the finished operators' records and counters, and the elapsed time. The
result file itself holds only the product's fields. The state file is removed when the job finishes.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from ..durable import AppendLog, atomic_replace
from ..errors import AoeError
from ..safeio import read_regular

RESULT_GLOB = "aoe_result_{kind}_*_pid*.json"
STATE_VERSION = 1
MAX_RESULT_FILE = 256 << 20  # result and state files of the largest models are a few MiB


def timestamp(now: float | None = None) -> str:
    """`YYYYMMDDhhmmss` + milliseconds (3 digits), local time."""
    t = time.time() if now is None else now
    d = _dt.datetime.fromtimestamp(t)
    return d.strftime("%Y%m%d%H%M%S") + f"{d.microsecond // 1000:03d}"


def claim_name(work_dir: Path, prefix: str, suffix: str) -> Path:
    """Create `<prefix><timestamp><suffix>` exclusively (O_EXCL) and return it.

    Threads of one process share the pid part of the name, so two tasks started within one millisecond
    would pick the same name: the file is created with O_EXCL and a taken name moves the timestamp one
    millisecond on, which keeps the product's naming scheme (a timestamp to the millisecond) and never
    reuses a name, whoever created it.
    """
    t = time.time()
    for _ in range(100000):
        path = work_dir / f"{prefix}{timestamp(t)}{suffix}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            t += 0.001
            continue
        except OSError as exc:
            raise AoeError(f"cannot create a result file in {work_dir}: {exc.strerror or exc}") from None
        try:
            os.write(fd, b"{}\n")  # valid JSON from the first instant
        finally:
            os.close(fd)
        return path
    raise AoeError(f"cannot find a free result-file name in {work_dir}")


def atomic_write_json(path: Path, data: Any, indent: int | None = 4) -> None:
    """Write JSON to `path` atomically and durably (`aoe.durable.atomic_replace`)."""
    text = json.dumps(data, indent=indent, ensure_ascii=False, allow_nan=False) + "\n"
    atomic_replace(path, text.encode("utf-8"))


class ResultFile:
    """One result file: several tasks (report keys), rewritten atomically on every update."""

    def __init__(self, work_dir: str | os.PathLike[str], kind: str, path: Path | None = None) -> None:
        if kind not in ("opat", "sgat"):
            raise ValueError(kind)
        self.kind = kind
        self.work_dir = Path(work_dir)
        if path is None:
            path = claim_name(self.work_dir, f"aoe_result_{kind}_", f"_pid{os.getpid()}.json")
        self.path = Path(path)
        self.reports: dict[str, list[dict[str, Any]]] = {}
        self._journal: AppendLog | None = None
        # key -> (the task value encoded, its indented JSON): a batch rewrites the whole file after every
        # model, and re-encoding the finished tasks each time grew quadratically (pure-Python indenting)
        self._encoded: dict[str, tuple[Any, str]] = {}

    @property
    def state_path(self) -> Path:
        """The hidden resume-state file beside the result file."""
        return self.path.with_name(f".{self.path.name}.state")

    @classmethod
    def open_existing(cls, path: Path, kind: str) -> "ResultFile":
        """Load a result file written earlier (for `--reload`)."""
        rf = cls(path.parent, kind, path)
        try:
            data = json.loads(read_regular(path, MAX_RESULT_FILE, "result file").decode("utf-8"))
        except AoeError:
            if path.exists() or path.is_symlink():
                raise
            data = {}
        except (ValueError, RecursionError) as exc:
            raise AoeError(f"cannot read result file {path}: {type(exc).__name__}: {exc}; run without --reload "
                           "to start a new job") from None
        if not isinstance(data, dict):
            raise AoeError(f"cannot resume into {path}: it is not a JSON object; run without --reload to start "
                           "a new job")
        if data:
            from .schema import validate  # the schema module loads both tuners' section schemas

            try:  # the file is untrusted input: resume only into a well-formed one
                validate(data, kind)
            except ValueError as exc:
                raise AoeError(f"cannot resume into {path}: {str(exc).splitlines()[0]} ({str(exc).splitlines()[-1].strip()}); "
                               "run without --reload to start a new job, or repair the file") from None
        rf.reports = dict(data)
        return rf

    def new_task(self) -> str:
        """A new report key `report_<timestamp>_<tid>` (unique within the file)."""
        tid = threading.get_native_id()
        key = f"report_{timestamp()}_{tid}"
        while key in self.reports:
            time.sleep(0.001)
            key = f"report_{timestamp()}_{tid}"
        self.reports[key] = []
        claim_result(self.path)   # this thread's job runs it (ended by release_results, aoe.job.run)
        return key

    def set_task(self, key: str, tuning_name: str, seconds: float | None, section: dict[str, Any] | None) -> None:
        """Set one task's value: `[{"basic": ...}, {"OPAT"|"SGAT": section}]` (no section when None)."""
        basic: dict[str, Any] = {"tuning_name": tuning_name}
        if seconds is not None:
            basic["tuning_time(s)"] = int(round(seconds))
        value: list[dict[str, Any]] = [{"basic": basic}]
        if section is not None:
            value.append({self.kind.upper(): section})
        self.reports[key] = value

    def write(self, pretty: bool = True) -> None:
        """Rewrite the whole file atomically (`pretty`: indented, as the final file; else compact and fast)."""
        try:
            # json's indenting encoder is pure Python (≈50x the C one): checkpoints are written compact
            if pretty:
                atomic_replace(self.path, self._pretty_text().encode("utf-8"))
            else:
                atomic_write_json(self.path, self.reports, indent=None)
        except OSError as exc:
            raise AoeError(f"cannot write result file {self.path}: {exc.strerror or exc}") from None

    def _pretty_text(self) -> str:
        """`json.dumps(self.reports, indent=4)` byte for byte, each task's value encoded once.

        set_task and new_task replace a task's value (never change it in place), so a value that is the
        same object as when it was encoded has the same text."""
        if not self.reports:
            return "{}\n"
        items = []
        for key, value in self.reports.items():
            hit = self._encoded.get(key)
            if hit is None or hit[0] is not value:
                text = json.dumps(value, indent=4, ensure_ascii=False, allow_nan=False).replace("\n", "\n    ")
                hit = self._encoded[key] = (value, text)
            items.append(f"    {json.dumps(key, ensure_ascii=False)}: {hit[1]}")
        for key in set(self._encoded) - set(self.reports):
            del self._encoded[key]
        return "{\n" + ",\n".join(items) + "\n}\n"

    def discard_if_empty(self) -> None:
        """Remove the file when no task was ever written to it (a batch that failed before its first job)."""
        if self.reports:
            return
        try:
            with open(self.path, "rb") as fh:
                empty = fh.read(16).strip() == b"{}"
            if empty:
                os.unlink(self.path)
        except OSError:
            pass

    # --- resume state ---------------------------------------------------------------------------
    def write_state(self, state: dict[str, Any]) -> None:
        """Write the resume state beside the result file."""
        state = dict(state, version=STATE_VERSION, result_file=self.path.name)
        try:
            atomic_write_json(self.state_path, state, indent=None)
        except OSError as exc:
            raise AoeError(f"cannot write resume state {self.state_path}: {exc.strerror or exc}") from None

    @property
    def journal_path(self) -> Path:
        """The append-only journal of finished cases beside the state (newer than the state's checkpoint)."""
        return self.path.with_name(f".{self.path.name}.journal")

    def append_journal(self, entry: dict[str, Any]) -> None:
        """Append one finished case (its records' states) to the journal: one JSON line, no rewrite.

        A line is written with one `write` on an O_APPEND descriptor, so a kill leaves whole lines and
        at most one cut last line (skipped when read). The page cache keeps it through a `kill -9`; the
        checkpoints (state and result file, fsynced) bound what a power loss can take.
        """
        if self._journal is None:
            self._journal = AppendLog(self.journal_path, "the resume journal")
        self._journal.append(entry)

    def close_journal(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None

    def remove_state(self) -> None:
        """Forget the resume state and its journal (the job finished)."""
        self.close_journal()
        for p in (self.state_path, self.journal_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def read_state(path: Path) -> dict[str, Any] | None:
    """A resume-state file, or None when it is missing or unreadable."""
    try:
        data = json.loads(read_regular(path, MAX_RESULT_FILE, "resume state").decode("utf-8"))
    except (AoeError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        return None
    try:  # the fields --reload relies on, with the types it relies on
        int(data.get("pid", 0))
        float(data.get("elapsed_s", 0.0))
        str(data["report_key"])
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
    if not isinstance(data.get("job", {}), dict) or not isinstance(data.get("done", []), list):
        return None
    return data


def read_journal(state_path: Path) -> list[dict[str, Any]]:
    """The journal entries beside a state file (`{"elapsed_s", "done": [record states]}`); damaged lines skipped."""
    journal = state_path.with_name(state_path.name[: -len(".state")] + ".journal")
    try:
        raw = read_regular(journal, MAX_RESULT_FILE, "resume journal")
    except AoeError:
        return []
    out = []
    for line in raw.splitlines():
        try:
            entry = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):
            continue  # the line a kill cut, or damage: its case is tuned again
        if isinstance(entry, dict) and isinstance(entry.get("done"), list):
            out.append(entry)
    return out


def remove_stale_temps(work_dir: Path, kind: str) -> list[Path]:
    """Temp files of atomic rewrites left in `work_dir` by killed jobs of this host (their pid is gone)."""
    removed = []
    for p in work_dir.glob(f".*aoe_result_{kind}_*_pid*.json*.tmp"):
        try:
            pid = int(p.name.split("_pid", 1)[1].split(".", 1)[0])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid() or pid_alive(pid):
            continue
        try:
            if p.is_file() and not p.is_symlink():
                os.unlink(p)
                removed.append(p)
        except OSError:
            pass
    return removed


def hostname() -> str:
    """This host's name, as `socket.gethostname()` gives it (uname's node name; no import of `socket`)."""
    return os.uname().nodename if hasattr(os, "uname") else __import__("socket").gethostname()


def pid_alive(pid: Any) -> bool:
    """True if a process with this pid exists (on this host). `pid` comes from a state or lock file or a
    file name (untrusted): one that is not a number, or beyond what a pid can be, is no process."""
    try:
        pid = int(pid)
    except (TypeError, ValueError, OverflowError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):   # OverflowError: over the C pid_t/long os.kill takes
        return False
    except PermissionError:
        return True
    return True


# Result files a job of this process runs now (-> the claiming thread). Its state says "running" with this
# process's pid, which `find_interrupted` cannot tell from a killed job whose pid this process got again (a
# container starts every run as the same pid): a --reload in another thread would take a live job over.
_RUNNING: dict[Path, int] = {}
_RUNNING_LOCK = threading.Lock()


def claim_result(path: Path) -> bool:
    """Mark the result file `path` as run by this thread's job; False when another thread's job runs it."""
    key, me = Path(os.path.abspath(path)), threading.get_ident()
    with _RUNNING_LOCK:
        if _RUNNING.setdefault(key, me) != me:
            return False
        return True


def release_results() -> None:
    """End this thread's `claim_result`s (its job finished, stopped or failed)."""
    me = threading.get_ident()
    with _RUNNING_LOCK:
        for key in [k for k, t in _RUNNING.items() if t == me]:
            del _RUNNING[key]


def find_interrupted(work_dir: Path, kind: str, match: dict[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """The latest interrupted job in `work_dir` whose state matches `match` (same model, SoC, ...).

    A state whose process is still running on this host is not interrupted and is ignored.
    """
    host = hostname()
    best: tuple[str, Path, dict[str, Any]] | None = None
    for state_path in work_dir.glob(f".aoe_result_{kind}_*_pid*.json.state"):
        state = read_state(state_path)
        if state is None:
            continue
        job = state.get("job", {})
        if any(job.get(k) != v for k, v in match.items()):
            continue
        if state.get("host") == host and state.get("status") == "running" and pid_alive(int(state.get("pid", 0))) \
                and int(state.get("pid", 0)) != os.getpid():
            continue
        result = work_dir / str(state.get("result_file", ""))
        if result.parent != work_dir or not result.name.startswith(f"aoe_result_{kind}_"):
            continue
        with _RUNNING_LOCK:
            if Path(os.path.abspath(result)) in _RUNNING:   # a job of another thread of this process runs it
                continue
        stamp = str(state.get("started", ""))
        if best is None or stamp > best[0]:
            best = (stamp, result, state)
    return (best[1], best[2]) if best else None
