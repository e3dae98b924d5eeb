"""``aoe graph MODEL``: import a model and print its operator summary (text or JSON)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Callable

from ..errors import AoeError
from ..safetext import safe_text

if TYPE_CHECKING:  # annotations only: the IR module is imported when a graph is loaded
    from .ir import Graph

EPILOG = """MODEL is a path to an .onnx file, a .json graph written by `aoe graph --json --full`,
a single-operator file (with --framework singleop), a TensorFlow model (with --framework 3, needs
the tensorflow extra), or a bundled model: zoo:resnet50, zoo:bert_base, zoo:mobilenet_v2, zoo:gpt2.

examples:
  aoe graph zoo:resnet50
  aoe graph zoo:bert_base --input_shape "input_ids:32,128;attention_mask:32,128" --training
  aoe graph model.onnx --input_shape "input:8,3,224,224" --json
  aoe graph ops.json --framework singleop --per_op
"""


class _Parser(argparse.ArgumentParser):
    # argparse exits with its own message; route usage errors through AoeError like every other error
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise AoeError(f"{message}; run `aoe graph --help` for usage")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="aoe graph", description="Import a model and print its operator summary.",
                epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="an .onnx file, a .json graph, or zoo:NAME")
    p.add_argument("-f", "--framework", metavar="FW",
                   help="5 = ONNX, 3 = TensorFlow, json, singleop (default: told from MODEL)")
    p.add_argument("--input_shape", metavar="SHAPES",
                   help='static input shapes, AOE syntax: "name1:d0,d1;name2:d0,d1"')
    p.add_argument("--training", action="store_true",
                   help="derive the training graph (backward operators and Adam updates)")
    p.add_argument("--compute_dtype", choices=["float16", "float32"], default="float16",
                   help="dtype fp32 tensors compute in (default float16, like ATC's mixed precision)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--full", action="store_true",
                   help="with --json: print the whole graph (loadable again as MODEL) instead of the summary")
    p.add_argument("--per_op", action="store_true", help="also list MACs/FLOPs/bytes of every operator")
    return p


def _human(n: float) -> str:
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3f} {unit}"
    return f"{n:.0f} "


def format_summary(s: dict[str, Any], per_op: bool = False) -> str:
    """Human-readable form of ``Graph.summary()``."""
    lines = [
        f"graph {s['name']!r}: {s['num_ops']} operators, batch size {s['batch_size']}, "
        f"compute dtype {s['compute_dtype']}, {'training' if s['training'] else 'inference'}",
        f"total: {_human(s['total_macs'])}MACs, {_human(s['total_flops'])}FLOPs, {_human(s['total_bytes'])}B moved",
        f"convention: {s['convention']}",
        "",
        f"{'op type':<24}{'count':>7}{'MACs':>14}{'FLOPs':>14}{'bytes':>14}",
    ]
    for t, agg in s["by_type"].items():
        lines.append(f"{t[:23]:<24}{agg['count']:>7}{_human(agg['macs']):>14}{_human(agg['flops']):>14}"
                     f"{_human(agg['bytes']):>14}")
    if s["unsupported"]:
        lines.append("")
        lines.append(f"unsupported ({len(s['unsupported'])}, skipped by tuning):")
        for u in s["unsupported"][:50]:
            lines.append(f"  {u.get('op')!r} ({u.get('onnx_type')!r}): {u.get('reason')}")
        if len(s["unsupported"]) > 50:
            lines.append(f"  ... and {len(s['unsupported']) - 50} more")
    if s.get("unmodelled"):
        un = s["unmodelled"]
        counts: dict[str, int] = {}
        for u in un:
            counts[str(u.get("op_type"))] = counts.get(str(u.get("op_type")), 0) + 1
        by_type = ", ".join(f"{t[:40]} x{n}" for t, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append("")
        lines.append(f"unmodelled: {len(un)} operators the simulator cannot price (tuning skips them): {by_type}")
        for u in un[:20]:
            lines.append(f"  {u.get('op')!r} ({u.get('op_type')!r}): {u.get('reason')}")
        if len(un) > 20:
            lines.append(f"  ... and {len(un) - 20} more")
    elif "unmodelled" in s:
        lines.append("")
        lines.append("unmodelled: none (the simulator prices every operator)")
    if per_op:
        lines.append("")
        lines.append(f"{'operator':<48}{'type':<24}{'MACs':>14}{'FLOPs':>14}{'bytes':>14}")
        for o in s["ops"]:
            # repr() keeps names from the model file printable (no control characters reach the terminal)
            lines.append(f"{repr(o['name'])[:47]:<48}{o['type'][:23]:<24}{o['macs']:>14}{o['flops']:>14}{o['bytes']:>14}")
    return "\n".join(lines)


def main(argv: list[str], annotate: Callable[[Graph], dict[str, Any]] | None = None) -> int:
    """Entry point of ``aoe graph``; returns the exit code (errors raise AoeError).

    `annotate(graph)` adds keys to the summary (the entrance passes the unmodelled operators, which
    this floor cannot know: pricing lives above it).
    """
    args = _parser().parse_args(argv)
    from . import load  # lazily: `aoe graph --help` answers without importing the IR and its loaders

    graph = load(args.model, args.input_shape, training=args.training, compute_dtype=args.compute_dtype,
                 framework=args.framework)
    if args.json and args.full:
        sys.stdout.write(graph.to_json() + "\n")
        return 0
    s = graph.summary()
    if annotate is not None:
        s.update(annotate(graph))
    if args.json:
        if not args.per_op:
            s = {k: v for k, v in s.items() if k != "ops"}
        sys.stdout.write(json.dumps(s, indent=2) + "\n")
    else:
        print(safe_text(format_summary(s, per_op=args.per_op), keep_newlines=True))
    return 0
