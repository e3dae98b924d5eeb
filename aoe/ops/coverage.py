"""Which operators of a graph the simulator cannot price, named one by one.

Tuning skips an operator that has no kernel model (or is Opaque, or has a dynamic shape); a skipped
operator is absent from every total, so it must never pass silently. This module lists them
(`unmodelled`), counts them by type for a console line (`format_counts`), writes the full list to a
log file (`write_skipped_log`), and is the `aoe graph` command, which adds the unmodelled operators
to the graph summary.
"""
from __future__ import annotations

import collections
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..durable import atomic_replace
from ..graph import Graph
from .catalogue import describe

MAX_TYPES_SHOWN = 12


def _printable(text: Any, limit: int = 300) -> str:
    """One line of text from a model file: control characters escaped, bounded length."""
    s = str(text)
    s = "".join(ch if ch.isprintable() and ch != "\t" else repr(ch)[1:-1] for ch in s)
    return s if len(s) <= limit else s[:limit - 1] + "…"


def _type_name(op_type: Any) -> str:
    if isinstance(op_type, (list, tuple)):
        return "+".join(str(t) for t in op_type)
    return str(op_type)


def unmodelled(graph: Graph) -> list[dict[str, str]]:
    """Every operator (views excepted) the simulator cannot price: `{"op", "op_type", "reason"}`.

    An Opaque operator is listed under its source type (e.g. the ONNX type), so the list says what
    to model, not only that something is missing.
    """
    out: list[dict[str, str]] = []
    for op in graph.ops:
        if getattr(op, "is_view", False) or op.attrs.get("view"):
            continue
        try:
            describe(graph, op)
        except Exception as exc:  # Unsupported, AoeError or a kernel model refusing the shape
            t = op.type if op.type != "Opaque" else f"Opaque({op.attrs.get('onnx_type', '?')})"
            out.append({"op": op.name, "op_type": t, "reason": str(exc) or type(exc).__name__})
    return out


def counts_by_type(entries: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """(type, count) of skipped operators, most frequent first (ties by name)."""
    c = collections.Counter(_type_name(e.get("op_type", "?")) for e in entries)
    return sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))


def format_counts(entries: Iterable[Mapping[str, Any]]) -> str:
    """`BNInfer x53, LRN x2` (the most frequent types first; the rest summed)."""
    counts = counts_by_type(entries)
    shown = [f"{_printable(t, 60)} x{n}" for t, n in counts[:MAX_TYPES_SHOWN]]
    rest = counts[MAX_TYPES_SHOWN:]
    if rest:
        shown.append(f"{len(rest)} more types x{sum(n for _, n in rest)}")
    return ", ".join(shown)


def skipped_log_path(result_file: str | os.PathLike[str]) -> Path:
    """The skipped-operators log beside a result file: aoe_result_<kind>_<ts>_pid<pid>.json ->
    aoe_skipped_<kind>_<ts>_pid<pid>.log (same directory, same kind, time stamp and pid)."""
    p = Path(result_file)
    stem = p.stem
    stem = "aoe_skipped_" + stem[len("aoe_result_"):] if stem.startswith("aoe_result_") else stem + "_skipped"
    return p.with_name(stem + ".log")


def write_skipped_log(path: str | os.PathLike[str], entries: Iterable[Mapping[str, Any]],
                      title: str = "") -> Path:
    """Write the skipped operators, one per line (`name<TAB>type<TAB>reason`), atomically; returns the path."""
    rows = list(entries)
    lines = [f"# {_printable(title)}" if title else "# operators tuning skipped",
             f"# {len(rows)} operators by type: {format_counts(rows)}" if rows else "# none",
             "# op_name\top_type\treason"]
    for e in rows:
        lines.append("\t".join(_printable(e.get(k, "")) if k != "op_type" else _printable(_type_name(e.get(k, "?")))
                               for k in ("op", "op_type", "reason")))
    path = Path(path)
    atomic_replace(path, ("\n".join(lines) + "\n").encode("utf-8"))
    return path


def graph_main(argv: list[str]) -> int:
    """`aoe graph`: the graph summary plus the operators the simulator cannot price."""
    from ..graph import cli  # lazily: only the `aoe graph` command needs the graph's command line

    def annotate(graph: Graph) -> dict[str, Any]:
        return {"unmodelled": unmodelled(graph)}

    return cli.main(argv, annotate=annotate)
