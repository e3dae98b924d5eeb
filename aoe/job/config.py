"""Job configuration: the environment variables and the `aoe.ini` file, validated.

Every bad value raises `AoeError` naming the variable, the value and what is allowed; the CLI turns
that into `aoe: error: ...` and exit code 2.

| name | rule | here |
|---|---|---|
| `AOE_MODE` | 1 (subgraph) or 2 (operator) | required when the job type is not given (`-j`) |
| `ASCEND_DEVICE_ID` | integer in [0, N-1], default 0 | N = `AOE_DEVICE_COUNT` (simulated devices, default 8, 1-1024) |
| `TE_PARALLEL_COMPILER` | integer 1-32, default 8 | simulator threads; capped at max(1, cores*80%/N) when tuning |
| `TUNING_PARALLEL_NUM` | integer 1-64, default 8 (config file) | worker processes; capped at the CPU count at run time |
| `REPEAT_TUNE` | True / False, default False | `aoe.bank.decision.repeat_tune` |
| `ASCEND_WORK_PATH` | result files | `--work_path` > `ASCEND_WORK_PATH` > `work_path` in aoe.ini > cwd |
| `TUNE_BANK_PATH`, `ASCEND_CACHE_PATH` | bank locations | `aoe.bank.resolve_*_bank_dir` |
| `AOE_SEARCH_BUDGET` | positive integer | strategy evaluations per operator case (default 100000); for tests |
| `AOE_BUILTIN_BANK` | on / off, default on | off: consult only the custom bank (tune every case afresh) |
| `AOE_LOCK_DIR` | directory | device locks (default `$TMPDIR/aoe-devices`) |
| `AOE_CONFIG` | file | the `aoe.ini` to read when `--config` is not given |

The config file (`aoe.ini`, INI syntax, keys case-insensitive, in any section — `[tuning]` is the
convention) is looked for in this order: `--config FILE`, `$AOE_CONFIG`, `./aoe.ini` in the working
directory. A file named by `--config` or `$AOE_CONFIG` must exist. Keys: `tuning_parallel_num`,
`work_path`, `aoe_config_file` (a tune_ops file, same as `--tune_ops_file`), `inline_cpu_s` (CPU
seconds of tuning a job does in its own process before it starts its worker processes; default 0.3).
"""
from __future__ import annotations

import configparser
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..errors import AoeError
from ..safeio import env_float, env_int, env_text, read_regular

DEFAULT_DEVICE_COUNT = 8
MAX_DEVICE_COUNT = 1024
TE_PARALLEL_DEFAULT, TE_PARALLEL_RANGE = 8, (1, 32)
TUNING_PARALLEL_DEFAULT, TUNING_PARALLEL_RANGE = 8, (1, 64)
DEFAULT_SEARCH_BUDGET = 100_000
MODES = {1: "subgraph", 2: "operator"}
MAX_TUNE_OPS_FILE = 16 * 1024 * 1024
MAX_CONFIG_FILE = 1 << 20


def _int_in(name: str, value: str, lo: int, hi: int, what: str = "") -> int:
    return env_int(name, value, lo, hi, what)


def parse_mode(value: object, source: str = "AOE_MODE") -> int:
    """1 (subgraph tuning) or 2 (operator tuning); anything else is an error naming `source`."""
    if isinstance(value, int) and not isinstance(value, bool) and value in MODES:
        return value
    if isinstance(value, str):
        v = env_text(value).lower()
        aliases = {"1": 1, "2": 2, "subgraph": 1, "sgat": 1, "op": 2, "operator": 2, "opat": 2}
        if v in aliases:
            return aliases[v]
    raise AoeError(f"{source}={value!r} is not valid; use 1 (subgraph tuning, SGAT) or 2 (operator tuning, OPAT)")


def env_mode(env: Mapping[str, str]) -> int:
    """AOE_MODE, required when the job is driven by the environment."""
    value = env.get("AOE_MODE")
    if value is None or value == "":
        raise AoeError("the tuning mode is not set: pass --job_type/-j 1 (subgraph) or 2 (operator), "
                       "or export AOE_MODE=1|2")
    if env_text(value) not in ("1", "2"):
        raise AoeError(f"AOE_MODE={value!r} is not valid; set it to 1 (subgraph tuning) or 2 (operator tuning)")
    return int(env_text(value))


def device_count(env: Mapping[str, str]) -> int:
    """Number of simulated devices N (AOE_DEVICE_COUNT, default 8)."""
    value = env.get("AOE_DEVICE_COUNT", "")
    if value == "":
        return DEFAULT_DEVICE_COUNT
    return _int_in("AOE_DEVICE_COUNT", value, 1, MAX_DEVICE_COUNT,
                   f"set it to the number of simulated devices, an integer from 1 to {MAX_DEVICE_COUNT}")


def device_id(value: object, n_devices: int, source: str = "ASCEND_DEVICE_ID") -> int:
    """A logical device id in [0, N-1]."""
    what = (f"set it to a device id from 0 to {n_devices - 1} (this machine has {n_devices} simulated "
            f"device{'s' if n_devices != 1 else ''}; change that with AOE_DEVICE_COUNT)")
    if isinstance(value, int) and not isinstance(value, bool):
        if 0 <= value < n_devices:
            return value
        raise AoeError(f"{source}={value} is out of range; {what}")
    return _int_in(source, str(value), 0, n_devices - 1, what)


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def te_parallel_cap(n_devices: int, cpus: int | None = None) -> int:
    """TE_PARALLEL_COMPILER may not exceed CPU cores × 80% / number of devices (at least 1)."""
    cpus = cpu_count() if cpus is None else cpus
    return max(1, int(cpus * 0.8 / n_devices))


def te_parallel(env: Mapping[str, str]) -> int | None:
    """TE_PARALLEL_COMPILER as set (1-32), None when unset."""
    value = env.get("TE_PARALLEL_COMPILER", "")
    if value == "":
        return None
    return _int_in("TE_PARALLEL_COMPILER", value, *TE_PARALLEL_RANGE)


def search_budget(env: Mapping[str, str]) -> int | None:
    """AOE_SEARCH_BUDGET: strategy evaluations per operator case (None = the tuner's default)."""
    value = env.get("AOE_SEARCH_BUDGET", "")
    if value == "":
        return None
    return _int_in("AOE_SEARCH_BUDGET", value, 1, 10**12,
                   "set it to a positive integer (strategy evaluations per operator case)")


def builtin_bank(env: Mapping[str, str]) -> bool:
    """AOE_BUILTIN_BANK: on (default) consults the shipped built-in banks after the custom bank, off does not."""
    value = env_text(env.get("AOE_BUILTIN_BANK", "")).lower()
    if value in ("", "on", "1", "true"):
        return True
    if value in ("off", "0", "false"):
        return False
    raise AoeError(f"AOE_BUILTIN_BANK={value!r} is not valid; set it to on or off")


@dataclass
class IniConfig:
    """What an aoe.ini file says (None = not set) and where it came from."""

    path: Path | None = None
    tuning_parallel_num: int | None = None
    work_path: str | None = None
    aoe_config_file: str | None = None
    inline_cpu_s: float | None = None


def _seconds_in(name: str, value: str, hi: float) -> float:
    """A number of seconds from 0 to `hi`, else an error naming the key and the range."""
    return env_float(name, value, 0.0, hi, f"set it to a number of seconds from 0 to {hi:g}")


def find_config(explicit: str | os.PathLike[str] | None, env: Mapping[str, str],
                cwd: str | os.PathLike[str] | None = None) -> Path | None:
    """The config file to read: `--config` > `$AOE_CONFIG` > `./aoe.ini` (None if there is none)."""
    for value, source in ((explicit, "--config"), (env.get("AOE_CONFIG") or None, "AOE_CONFIG")):
        if value is not None:
            p = Path(value)
            if not p.is_absolute():
                p = Path(cwd or os.getcwd()) / p
            if not p.is_file():
                raise AoeError(f"config file {p} (from {source}) does not exist or is not a file")
            return p
    p = Path(cwd or os.getcwd()) / "aoe.ini"
    return p if p.is_file() else None


def read_config(path: Path | None) -> IniConfig:
    """Parse an aoe.ini file; unknown keys are an error (a typo must not be silently ignored)."""
    out = IniConfig(path=path)
    if path is None:
        return out
    cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    raw = read_regular(path, MAX_CONFIG_FILE, "config file")  # over 1 MiB: refused, never cut
    try:
        text = raw.decode("utf-8")
        if text.strip() and not text.lstrip().startswith("["):
            text = "[tuning]\n" + text  # a file of bare key = value lines
        cp.read_string(text, source=str(path))
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        raise AoeError(f"cannot read config file {path}: {exc}") from None
    known = {"tuning_parallel_num", "work_path", "aoe_config_file", "inline_cpu_s"}
    # the DEFAULT section is not among sections() (configparser only merges it into the others): a file
    # with only [DEFAULT] must not have its keys ignored, and its typos must be errors too
    for section in [cp.default_section, *cp.sections()]:
        items = cp.defaults().items() if section == cp.default_section else cp.items(section)
        for key, value in items:
            if key not in known:
                raise AoeError(f"config file {path}: unknown key {key!r} in [{section}]; known keys: "
                               f"{', '.join(sorted(known))}")
            if key == "tuning_parallel_num":
                out.tuning_parallel_num = _int_in(f"TUNING_PARALLEL_NUM (in {path})", value, *TUNING_PARALLEL_RANGE)
            elif key == "work_path":
                out.work_path = value.strip() or None
            elif key == "inline_cpu_s":
                out.inline_cpu_s = _seconds_in(f"inline_cpu_s (in {path})", value, 3600.0)
            else:
                out.aoe_config_file = value.strip() or None
    return out


@dataclass
class TuneOps:
    """The operators selected by a tune_ops file: names and types are a union."""

    names: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"tune_ops_name": list(self.names), "tune_ops_type": list(self.types)}


def tune_ops_from(data: Any, source: str) -> TuneOps:
    """Validate `{"tune_ops_name": [...], "tune_ops_type": [...]}` (either list may be absent)."""
    if not isinstance(data, dict):
        raise AoeError(f"{source} must be a JSON object like "
                       '{"tune_ops_name": ["op/name"], "tune_ops_type": ["MatMulV2"]}')
    unknown = set(data) - {"tune_ops_name", "tune_ops_type"}
    if unknown:
        raise AoeError(f"{source}: unknown key(s) {', '.join(sorted(map(repr, unknown)))}; "
                       "use tune_ops_name and tune_ops_type")
    lists = {}
    for key in ("tune_ops_name", "tune_ops_type"):
        v = data.get(key, [])
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise AoeError(f"{source}: {key} must be a list of non-empty strings")
        lists[key] = v
    if not lists["tune_ops_name"] and not lists["tune_ops_type"]:
        raise AoeError(f"{source} selects no operators: list names in tune_ops_name or types in tune_ops_type")
    return TuneOps(lists["tune_ops_name"], lists["tune_ops_type"], source)


def load_tune_ops(path: str | os.PathLike[str]) -> TuneOps:
    """Read a tune_ops file (`--tune_ops_file` / `aoe_config_file`)."""
    p = os.fspath(path)
    raw = read_regular(p, MAX_TUNE_OPS_FILE, "tune_ops file")
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise AoeError(f"tune_ops file {p} is nested too deeply; it holds two flat lists") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise AoeError(f"tune_ops file {p} is not valid JSON: {exc}") from None
    return tune_ops_from(data, f"tune_ops file {p}")


def resolve_work_path(explicit: str | os.PathLike[str] | None, env: Mapping[str, str], ini: IniConfig,
                      cwd: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """Where result files go: `work_path` argument > ASCEND_WORK_PATH > aoe.ini work_path > cwd.

    The directory is created if missing; it must be a writable directory.
    """
    base = Path(cwd or os.getcwd())
    for value, source in ((explicit, "--work_path"), (env.get("ASCEND_WORK_PATH") or None, "ASCEND_WORK_PATH"),
                          (ini.work_path, f"work_path in {ini.path}")):
        if value is not None and str(value) != "":
            if "\0" in str(value):
                raise AoeError(f"{source} contains a NUL byte")
            p = Path(value)
            p = p if p.is_absolute() else base / p
            break
    else:
        p, source = base, "the working directory"
    try:
        return _check_work_path(p, source)
    except OSError as exc:  # e.g. a name over 255 characters, a loop of links
        raise AoeError(f"the work path {str(p)[:300]!r} (from {source}) cannot be used: {exc.strerror or exc}") from None


def _check_work_path(p: Path, source: str) -> tuple[Path, str]:
    if not p.exists():
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AoeError(f"cannot create the work path {p} (from {source}): {exc.strerror or exc}") from None
    if not p.is_dir():
        raise AoeError(f"the work path {p} (from {source}) is not a directory")
    if not os.access(p, os.W_OK | os.X_OK) or (os.geteuid() == 0 and (os.stat(p).st_mode & 0o300) != 0o300):
        raise AoeError(f"the work path {p} (from {source}) is not writable; result files cannot be written there")
    return p, source
