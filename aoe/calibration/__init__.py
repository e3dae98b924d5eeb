"""The simulator held against public measured (or vendor-fitted) Ascend figures.

Every data file (`<source>.json`, the layout in README.md) lists figures of one public source; each
figure is matched to what aoe prints for the same operator, shape, dtype, format and SoC, and the
relative error is reported per source and operator family (median and worst |error|), with the
ranking of variants of one operator (`group`) checked against the source's order.

>>> from aoe import calibration
>>> report = calibration.run()                       # the data shipped with the package
>>> print(calibration.format_table(report))
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..errors import AoeError
from .match import aoe_value, family_of

WHATS = ("kernel_time", "host_wall_with_launch", "peak", "bandwidth", "fitted_cost", "head_cost", "model_time")
UNITS = ("us", "ms", "cycles", "TFLOPS", "GFLOPS", "GB/s")
_FIG_KEYS = {"id", "op", "shapes", "dtype", "format", "soc", "attrs", "what", "value", "unit", "where", "group",
             "variant", "note"}


@dataclass(frozen=True)
class Figure:
    """One public figure: what was measured (or fitted), on what, and its value."""

    source: str
    id: str
    op: str
    shapes: tuple[tuple[int, ...], ...]
    dtype: str
    format: str
    soc: str
    what: str
    value: float
    unit: str
    where: str
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    group: str | None = None
    variant: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class Source:
    """A public source: an id, its citation and where to read it."""

    id: str
    citation: str
    url: str


def data_dirs() -> list[Path]:
    """Where the data files are looked for: the installed package's copy, then a checkout's bench/."""
    here = Path(__file__).resolve().parent
    dirs = [here / "data"]
    checkout = here.parents[1] / "bench" / "calibration" / "data"  # running from a source tree
    if checkout.is_dir():
        dirs.append(checkout)
    return [d for d in dirs if d.is_dir()]


def _check_fig(raw: Any, where: str) -> None:
    if not isinstance(raw, dict):
        raise AoeError(f"{where}: a figure must be a JSON object")
    missing = {"id", "op", "shapes", "dtype", "format", "soc", "what", "value", "unit", "where"} - set(raw)
    if missing:
        raise AoeError(f"{where}: figure {raw.get('id')!r} lacks {sorted(missing)}")
    extra = set(raw) - _FIG_KEYS
    if extra:
        raise AoeError(f"{where}: figure {raw.get('id')!r} has unknown keys {sorted(extra)}")
    if raw["what"] not in WHATS:
        raise AoeError(f"{where}: figure {raw['id']!r}: what must be one of {', '.join(WHATS)}")
    if raw["unit"] not in UNITS:
        raise AoeError(f"{where}: figure {raw['id']!r}: unit must be one of {', '.join(UNITS)}")
    if not isinstance(raw["value"], (int, float)) or not raw["value"] > 0:
        raise AoeError(f"{where}: figure {raw['id']!r}: value must be a positive number")
    if not isinstance(raw["shapes"], list) or not all(isinstance(s, list) for s in raw["shapes"]):
        raise AoeError(f"{where}: figure {raw['id']!r}: shapes must be a list of shape lists")


def load_file(path: str | os.PathLike[str]) -> tuple[Source, list[Figure]]:
    """Read one data file (untrusted: every field is checked)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AoeError(f"calibration data {p}: cannot read it ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("source"), dict) or not isinstance(doc.get("figures"), list):
        raise AoeError(f"calibration data {p}: needs {{\"source\": {{id, citation, url}}, \"figures\": [...]}}")
    s = doc["source"]
    if not all(isinstance(s.get(k), str) and s.get(k) for k in ("id", "citation", "url")):
        raise AoeError(f"calibration data {p}: source needs non-empty id, citation and url")
    src = Source(s["id"], s["citation"], s["url"])
    figs = []
    for raw in doc["figures"]:
        _check_fig(raw, str(p))
        figs.append(Figure(
            source=src.id, id=str(raw["id"]), op=str(raw["op"]),
            shapes=tuple(tuple(int(d) for d in sh) for sh in raw["shapes"]), dtype=str(raw["dtype"]),
            format=str(raw["format"]), soc=str(raw["soc"]), what=raw["what"], value=float(raw["value"]),
            unit=raw["unit"], where=str(raw["where"]), attrs=dict(raw.get("attrs") or {}),
            group=raw.get("group"), variant=raw.get("variant"), note=raw.get("note")))
    return src, figs


def load(dirs: Sequence[str | os.PathLike[str]] | None = None) -> tuple[list[Source], list[Figure]]:
    """Every `*.json` of the data directories; a file name seen twice is read once (the first dir wins)."""
    seen: set[str] = set()
    sources: list[Source] = []
    figures: list[Figure] = []
    for d in (data_dirs() if dirs is None else [Path(x) for x in dirs]):
        if not Path(d).is_dir():
            raise AoeError(f"calibration data directory {d} does not exist")
        for p in sorted(Path(d).glob("*.json")):
            if p.name in seen:
                continue
            seen.add(p.name)
            src, figs = load_file(p)
            sources.append(src)
            figures.extend(figs)
    if not figures:
        raise AoeError("no calibration figures found (pass the directory of the <source>.json files)")
    return sources, figures


def _median(v: Iterable[float]) -> float:
    vals = list(v)
    return statistics.median(vals) if vals else float("nan")


def run(dirs: Sequence[str | os.PathLike[str]] | None = None) -> dict[str, Any]:
    """Match every figure, then summarise: rows, per (source, family) median / worst |error|, rankings."""
    sources, figures = load(dirs)
    rows = []
    cache: dict[Any, Any] = {}
    for f in figures:
        try:
            aoe, how = aoe_value(f, cache)
        except AoeError as exc:  # an operator, dtype or SoC the simulator does not model: reported, not fatal
            aoe, how = None, f"no match: {exc}"
        err = None if aoe is None else aoe / f.value - 1.0
        rows.append({"source": f.source, "id": f.id, "op": f.op, "family": family_of(f), "soc": f.soc,
                     "what": f.what, "unit": f.unit, "value": f.value,
                     "aoe": None if aoe is None else round(aoe, 4),
                     "error": None if err is None else round(err, 4), "aoe_how": how,
                     "group": f.group, "variant": f.variant, "used_to_fit": bool(f.attrs.get("used_to_fit"))})
    matched = [r for r in rows if r["error"] is not None]
    groups: dict[tuple[str, str], list[float]] = {}
    for r in matched:
        groups.setdefault((r["source"], r["family"]), []).append(abs(r["error"]))
        groups.setdefault((r["source"], "*"), []).append(abs(r["error"]))
        groups.setdefault(("*", "*"), []).append(abs(r["error"]))
        if not r["used_to_fit"]:  # figures no model constant was set from: the out-of-sample error
            groups.setdefault(("*", "held_out"), []).append(abs(r["error"]))
    summary = [{"source": s, "family": fam, "n": len(v), "median_abs_error": round(_median(v), 4),
                "worst_abs_error": round(max(v), 4)} for (s, fam), v in sorted(groups.items())]
    return {"sources": [s.__dict__ for s in sources], "rows": rows, "summary": summary,
            "ranking": ranking(rows), "matched": len(matched), "figures": len(rows),
            "peaks_within_5pct": all(abs(r["error"]) <= 0.05 for r in matched if r["what"] == "peak")}


def ranking(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pair of variants of one group (same source): does aoe order them as the source does?"""
    by_group: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r["group"] and r["aoe"] is not None:
            by_group.setdefault((r["source"], r["group"]), []).append(r)
    pairs = []
    for (src, g), rs in sorted(by_group.items()):
        for i in range(len(rs)):
            for j in range(i + 1, len(rs)):
                a, b = rs[i], rs[j]
                rate = a["unit"] in ("TFLOPS", "GFLOPS", "GB/s")  # a rate: the larger is the faster
                src_faster = a["variant"] if (a["value"] > b["value"]) == rate else b["variant"]
                aoe_faster = a["variant"] if (a["aoe"] > b["aoe"]) == rate else b["variant"]
                pairs.append({"source": src, "group": g, "a": a["variant"], "b": b["variant"],
                              "source_ratio": round(b["value"] / a["value"], 4),
                              "aoe_ratio": round(b["aoe"] / a["aoe"], 4),
                              "source_faster": src_faster, "aoe_faster": aoe_faster,
                              "inverted": src_faster != aoe_faster})
    return pairs


def summary_json(report: dict[str, Any]) -> dict[str, Any]:
    """The report without its per-figure rows' `aoe_how` notes: what the CLI prints as one JSON line."""
    keep = ("source", "id", "op", "family", "soc", "what", "unit", "value", "aoe", "error")
    return {"calibration": {"figures": report["figures"], "matched": report["matched"],
                            "peaks_within_5pct": report["peaks_within_5pct"], "summary": report["summary"],
                            "ranking": report["ranking"],
                            "rows": [{k: r[k] for k in keep} for r in report["rows"]]}}


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def format_table(report: dict[str, Any], rows: bool = True) -> str:
    """The report as Markdown tables: every figure, the per-source / family summary, the ranking pairs."""
    out = []
    if rows:
        out += ["| source | figure | SoC | what | public | aoe | error |", "|---|---|---|---|---|---|---|"]
        for r in report["rows"]:
            aoe = "no match" if r["aoe"] is None else f"{r['aoe']:.4g}"
            out.append(f"| {r['source']} | {r['id']} | {r['soc']} | {r['what']} | {r['value']:.6g} {r['unit']} "
                       f"| {aoe} | {_pct(r['error'])} |")
        out.append("")
    out += ["| source | family | n | median \\|error\\| | worst \\|error\\| |", "|---|---|---|---|---|"]
    for s in report["summary"]:
        out.append(f"| {s['source']} | {s['family']} | {s['n']} | {s['median_abs_error'] * 100:.1f}% "
                   f"| {s['worst_abs_error'] * 100:.1f}% |")
    if report["ranking"]:
        out += ["", "| source | group | faster (source) | faster (aoe) | source ratio | aoe ratio | inverted |",
                "|---|---|---|---|---|---|---|"]
        for p in report["ranking"]:
            out.append(f"| {p['source']} | {p['group']} | {p['source_faster']} | {p['aoe_faster']} "
                       f"| {p['source_ratio']:.3f} | {p['aoe_ratio']:.3f} | {'YES' if p['inverted'] else 'no'} |")
    return "\n".join(out)
