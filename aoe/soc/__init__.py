"""SoC descriptions: CANN `platform_config`-style .ini files and their loader.

Shipped files live in `aoe/soc/data/<SoC>.ini`. A user may pass the path to their own file,
including a real CANN `platform_config/<SoC>.ini`: the CANN sections (`[SoCInfo]`, `[AICoreSpec]`,
`[AICoreMemoryRates]`, `[VectorCoreSpec]`) are read, and the simulator's own constants come from an
optional `[AOESimulator]` section with documented defaults.
"""
from __future__ import annotations

import configparser
import dataclasses
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AoeError
from ..safeio import read_regular

DATA_DIR = Path(__file__).with_name("data")

# (section, key, SoC attribute, type, required). Order matters only for readability.
_CANN_KEYS: list[tuple[str, str, str, type, bool]] = [
    ("SoCInfo", "ai_core_cnt", "cube_cores", int, True),
    ("SoCInfo", "vector_core_cnt", "vector_cores", int, False),
    ("SoCInfo", "l2_size", "l2", int, True),
    ("AICoreSpec", "cube_freq", "freq_mhz", float, True),
    ("AICoreSpec", "l0_a_size", "l0a", int, True),
    ("AICoreSpec", "l0_b_size", "l0b", int, True),
    ("AICoreSpec", "l0_c_size", "l0c", int, True),
    ("AICoreSpec", "l1_size", "l1", int, True),
    ("AICoreSpec", "ub_size", "ub", int, True),
    ("AICoreSpec", "cube_m_size", "cube_m", int, False),
    ("AICoreSpec", "cube_n_size", "cube_n", int, False),
    ("AICoreSpec", "cube_k_size", "cube_k", int, False),
    ("AICoreMemoryRates", "ddr_rate", "ddr_rate", float, False),
    ("AICoreMemoryRates", "l2_rate", "l2_rate", float, False),
    ("AICoreMemoryRates", "l1_to_l0_a_rate", "l1_to_l0a_rate", float, False),
    ("AICoreMemoryRates", "l1_to_l0_b_rate", "l1_to_l0b_rate", float, False),
    ("AICoreMemoryRates", "ub_to_ddr_rate", "ub_to_gm_rate", float, False),
    ("AICoreMemoryRates", "l1_to_ub_rate", "l1_to_ub_rate", float, False),
    ("VectorCoreSpec", "vec_freq", "vec_freq_mhz", float, False),
]

# [AOESimulator] key -> (SoC attribute, type). Defaults are the SoC dataclass defaults.
_SIM_KEYS: dict[str, tuple[str, type]] = {
    "hbm_bandwidth_gbps": ("hbm_gbps", float),
    "hbm_efficiency": ("hbm_efficiency", float),
    "l2_bandwidth_gbps": ("l2_gbps", float),
    "ub_reserved": ("ub_reserved", int),
    "fixpipe_rate": ("fixpipe_rate", float),
    "vec_bytes_per_cycle": ("vec_bytes_per_cycle", float),
    "l2_usable": ("l2_usable", float),
    "dma_overhead_bytes": ("dma_overhead_bytes", float),
    "nd2nz_efficiency": ("nd2nz_efficiency", float),
    "dma_latency_cycles": ("dma_latency_cycles", float),
    "mmad_overhead_cycles": ("mmad_overhead_cycles", float),
    "vec_instr_overhead_cycles": ("vec_instr_overhead_cycles", float),
    "scalar_iter_cycles": ("scalar_iter_cycles", float),
    "scalar_chunk_cycles": ("scalar_chunk_cycles", float),
    "scalar_task_cycles": ("scalar_task_cycles", float),
    "launch_us": ("launch_us", float),
    "cv_handoff_us": ("cv_handoff_us", float),
}


@dataclass(frozen=True)
class Soc:
    """One SoC's hardware description (all sizes in bytes, rates in bytes per cycle per core)."""

    name: str
    cube_cores: int
    vector_cores: int
    separated: bool
    freq_mhz: float
    vec_freq_mhz: float
    l0a: int
    l0b: int
    l0c: int
    l1: int
    ub: int
    l2: int
    ub_reserved: int = 0
    cube_m: int = 16
    cube_n: int = 16
    cube_k: int = 16
    hbm_gbps: float = 0.0
    hbm_efficiency: float = 0.9
    l2_gbps: float = 0.0
    ddr_rate: float = 64.0
    l2_rate: float = 128.0
    l1_to_l0a_rate: float = 512.0
    l1_to_l0b_rate: float = 256.0
    fixpipe_rate: float = 128.0
    ub_to_gm_rate: float = 64.0
    l1_to_ub_rate: float = 128.0           # MTE1 L1 -> UB (the Vector unit reading a Cube operand)
    vec_bytes_per_cycle: float = 256.0     # one Vector repeat: 8 blocks of 32 bytes
    l2_usable: float = 0.8
    dma_overhead_bytes: float = 64.0
    nd2nz_efficiency: float = 0.85
    dma_latency_cycles: float = 700.0
    mmad_overhead_cycles: float = 32.0
    vec_instr_overhead_cycles: float = 12.0
    scalar_iter_cycles: float = 40.0
    scalar_chunk_cycles: float = 120.0
    scalar_task_cycles: float = 1500.0
    launch_us: float = 3.0
    cv_handoff_us: float = 1.0
    source: str = ""
    ini_sha256: str = ""                  # fingerprint of the .ini it was read from ("" for none)
    _native: Any = field(default=None, compare=False, repr=False)

    @property
    def peak_flops(self) -> dict[str, float]:
        """Peak Cube FLOP/s per input dtype (2 FLOP per multiply-add)."""
        per_cycle = self.cube_m * self.cube_n * self.cube_k  # fp16 MACs per cycle per core
        base = 2.0 * per_cycle * self.cube_cores * self.freq_mhz * 1e6
        return {"float16": base, "bfloat16": base, "int8": 2 * base, "float32": base / 2}

    @property
    def hbm_bytes_per_s(self) -> float:
        """Chip-wide peak HBM (DRAM) bandwidth in bytes per second."""
        return self.hbm_gbps * 1e9

    @property
    def coupled(self) -> bool:
        """True when one core holds Cube and Vector (910A, 310P)."""
        return not self.separated

    def replace(self, **changes: Any) -> "Soc":
        """A copy with some numbers changed (e.g. more bandwidth for a what-if study)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise AoeError(f"unknown SoC field(s): {', '.join(sorted(unknown))}")
        new = dataclasses.replace(self, _native=None, **changes)
        _validate(new, self.source or self.name)
        return new

    @property
    def native(self) -> Any:
        """The C++ `aoe._sim.SoC` twin of this description (built once, then cached)."""
        if self._native is None:
            from .. import _sim  # lazily: reading a SoC file needs no compiled extension

            obj = _sim.SoC()
            for f in dataclasses.fields(self):
                if f.name in ("source", "ini_sha256", "_native"):
                    continue
                setattr(obj, f.name, getattr(self, f.name))
            # gm_to_ub shares the core's GM port with MTE2 into L1.
            obj.gm_to_ub_rate = self.ddr_rate
            object.__setattr__(self, "_native", obj)
        return self._native

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for JSON output)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "_native"}


def known_socs() -> list[str]:
    """Names of the SoC description files shipped with aoe."""
    return sorted(p.stem for p in DATA_DIR.glob("*.ini"))


_CACHE: dict[tuple[str, int, int], Soc] = {}
MAX_SOC_FILE = 1 << 20  # a platform_config .ini is a few KiB


def load_soc(name_or_path: str | os.PathLike[str] | Soc) -> Soc:
    """Load a shipped SoC by name (e.g. `Ascend910B2`) or any CANN-style .ini file by path."""
    if isinstance(name_or_path, Soc):
        return name_or_path
    text = os.fspath(name_or_path)
    if not isinstance(text, str) or not text or "\x00" in text:
        raise AoeError("SoC must be a name such as Ascend910B2 or a path to a platform_config .ini file")
    looks_like_path = text.endswith(".ini") or os.sep in text or (os.altsep and os.altsep in text)
    if looks_like_path:
        path = Path(text)
        if not path.is_file():
            raise AoeError(f"SoC description file {path} does not exist (give a path to a .ini file "
                           f"or one of the shipped SoCs: {', '.join(known_socs())})")
    else:
        path = DATA_DIR / f"{text}.ini"
        if text not in known_socs():
            raise AoeError(f"unknown SoC {text!r}; known SoCs: {', '.join(known_socs())} "
                           f"(or pass the path to a CANN platform_config .ini file)")
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    cached = _CACHE.get(key)
    if cached is None:
        cached = _parse(path, default_name=path.stem)
        _CACHE[key] = cached
    return cached


def _parse(path: Path, default_name: str) -> Soc:
    parser = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), strict=False,
                                       interpolation=None)
    parser.optionxform = str  # CANN keys are case-sensitive in spirit; keep them as written
    ini_bytes = read_regular(path, MAX_SOC_FILE, "SoC description")
    text = ini_bytes.decode("utf-8", errors="replace")
    try:
        parser.read_string(text, source=str(path))
    except (configparser.Error, UnicodeError) as exc:
        raise AoeError(f"cannot read SoC description {path}: {exc}") from None

    def get(section: str, key: str) -> str | None:
        if parser.has_section(section) and parser.has_option(section, key):
            return parser.get(section, key).strip()
        return None

    values: dict[str, Any] = {}
    for section, key, attr, typ, required in _CANN_KEYS:
        raw = get(section, key)
        if raw is None or raw == "":
            if required:
                raise AoeError(f"{path}: missing [{section}] {key}; a platform_config file needs it")
            continue
        values[attr] = _number(path, section, key, raw, typ)
    for key, (attr, typ) in _SIM_KEYS.items():
        raw = get("AOESimulator", key)
        if raw:
            values[attr] = _number(path, "AOESimulator", key, raw, typ)

    split_raw = get("AICoreSpec", "cube_vector_split") or get("SoCInfo", "cube_vector_split")
    vec = values.get("vector_cores", 0) or 0
    if split_raw is not None:
        separated = _number(path, "AICoreSpec", "cube_vector_split", split_raw, int) == 1
    else:  # CANN files without the flag: more vector cores than AI cores means AIC/AIV split
        separated = vec > values["cube_cores"]
    values["separated"] = separated
    if not vec:
        values["vector_cores"] = values["cube_cores"]
    values.setdefault("vec_freq_mhz", values["freq_mhz"])
    if "hbm_gbps" not in values:
        # A real CANN file has no chip bandwidth: the cores' GM ports at full rate are the bound.
        values["hbm_gbps"] = values.get("ddr_rate", 64.0) * values["cube_cores"] * values["freq_mhz"] / 1000.0
    name = get("version", "SoC_version") or default_name
    soc = Soc(name=name, source=str(path), ini_sha256=hashlib.sha256(ini_bytes).hexdigest(), **values)
    _validate(soc, str(path))
    return soc


def require_soc(soc: Any, where: str = "this function") -> Soc:
    """`soc` itself when it is a `Soc` value; else an AoeError: inside aoe the SoC travels as a value,
    resolved from a name once at a door (CLI, Python API, frontend) by `load_soc`."""
    if not isinstance(soc, Soc):
        raise AoeError(f"{where} takes a Soc value, got {type(soc).__name__} {soc!r}: resolve the name once with "
                       "aoe.soc.load_soc(name) (the command line and aoe.tune do it for you)")
    return soc


def soc_from_dict(d: Any, where: str = "a record") -> Soc:
    """A SoC carried by value (`Soc.to_dict()`, e.g. in a run's record): untrusted, checked field by field."""
    if not isinstance(d, dict):
        raise AoeError(f"{where}: the SoC must be an object of its fields")
    kinds = {f.name: f.type for f in dataclasses.fields(Soc) if f.name != "_native"}
    unknown = set(d) - set(kinds)
    missing = {f.name for f in dataclasses.fields(Soc) if f.name != "_native"
               and f.default is dataclasses.MISSING} - set(d)
    if unknown or missing:
        raise AoeError(f"{where}: SoC fields {sorted(unknown) or ''} unknown, {sorted(missing) or ''} missing")
    values: dict[str, Any] = {}
    for k, v in d.items():
        t = kinds[k]
        if t == "str":
            ok = isinstance(v, str) and len(v) <= 4096
        elif t == "bool":
            ok = isinstance(v, bool)
        elif t == "int":
            ok = isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 62
        else:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) != float("inf")
            v = float(v) if ok else v
        if not ok:
            raise AoeError(f"{where}: SoC field {k} has a value of the wrong type")
        values[k] = v
    soc = Soc(**values)
    _validate(soc, where)
    return soc


def _number(path: Path, section: str, key: str, raw: str, typ: type) -> Any:
    try:
        value = typ(float(raw)) if typ is int else float(raw)
    except ValueError:
        raise AoeError(f"{path}: [{section}] {key}={raw!r} is not a number") from None
    return value


def _validate(soc: Soc, where: str) -> None:
    positive = ["cube_cores", "vector_cores", "freq_mhz", "vec_freq_mhz", "l0a", "l0b", "l0c", "l1", "ub",
                "l2", "hbm_gbps", "ddr_rate", "l2_rate", "l1_to_l0a_rate", "l1_to_l0b_rate", "fixpipe_rate",
                "ub_to_gm_rate", "cube_m", "cube_n", "cube_k"]
    for name in positive:
        value = getattr(soc, name)
        if not value > 0:
            raise AoeError(f"{where}: {name} must be positive, got {value}")
    if soc.cube_cores > 1024 or soc.vector_cores > 2048:
        raise AoeError(f"{where}: core count {soc.cube_cores}/{soc.vector_cores} is not plausible")
    if not 0 <= soc.ub_reserved < soc.ub:
        raise AoeError(f"{where}: ub_reserved must be in [0, ub_size)")
    if not (0 < soc.l2_usable <= 1 and 0 < soc.nd2nz_efficiency <= 1 and 0 < soc.hbm_efficiency <= 1):
        raise AoeError(f"{where}: l2_usable, nd2nz_efficiency and hbm_efficiency must be in (0, 1]")
    for name in ("l2_gbps", "dma_overhead_bytes", "dma_latency_cycles", "mmad_overhead_cycles", "vec_instr_overhead_cycles",
                 "scalar_iter_cycles", "scalar_chunk_cycles", "scalar_task_cycles", "launch_us",
                 "cv_handoff_us"):
        if getattr(soc, name) < 0:
            raise AoeError(f"{where}: {name} must not be negative")


__all__ = ["Soc", "load_soc", "known_socs", "require_soc", "soc_from_dict", "DATA_DIR"]
