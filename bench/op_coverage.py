"""Kernel-model coverage: per model, the operators tuning would skip (no kernel model, Opaque), by type.

Run: python bench/op_coverage.py [--soc Ascend910B2] [--training] [MODEL ...]
MODEL is ``zoo:NAME`` or an ONNX file (default: the four zoo models). Prints one JSON line per model
and phase: operators, skipped count, skipped types with counts, and the Opaque ops the importer kept.
The goal is 0 skipped for the zoo and for common CNN/transformer exports.
"""
from __future__ import annotations

import argparse
import collections
import json
import time



def measure(model: str, soc: str, training: bool) -> dict[str, object]:
    """Load `model` and count what `aoe.opat.apply.apply_bank` skips, by operator type."""
    import aoe.graph
    from aoe.opat import apply_bank

    t, c = time.perf_counter(), time.process_time()
    graph = aoe.graph.load(model, training=training)
    priced, skipped = apply_bank(graph, soc, None, builtin=False)
    types = collections.Counter(s["op_type"] for s in skipped)
    opaque = collections.Counter(str(u.get("onnx_type")) for u in graph.unsupported)
    return {"model": model, "training": training, "soc": soc, "ops": len(priced) + len(skipped),
            "skipped": len(skipped), "skipped_types": dict(types.most_common()),
            "opaque_types": dict(opaque.most_common()),
            "wall_s": round(time.perf_counter() - t, 2), "cpu_s": round(time.process_time() - c, 2)}


def main() -> int:
    """Print the coverage of each model as JSON lines."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=["zoo:resnet50", "zoo:mobilenet_v2", "zoo:bert_base", "zoo:gpt2"])
    ap.add_argument("--soc", default="Ascend910B2")
    ap.add_argument("--training", action="store_true", help="also measure the derived training graphs")
    args = ap.parse_args()
    for model in args.models:
        for training in ((False, True) if args.training else (False,)):
            try:
                row = measure(model, args.soc, training)
            except Exception as exc:  # a model that fails to price is a finding, not the end of the run
                row = {"model": model, "training": training, "soc": args.soc, "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
