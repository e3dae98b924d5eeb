"""Graph import benchmark: prints one JSON line of timings (seconds) for the bundled zoo models.

Run: python bench/graph_bench.py [--repeat N] [--model FILE.onnx --input_shape "..."]
The issue's target is importing BERT-base in under 1 s (``bert_base_import_s``, median of warm runs;
``bert_base_first_import_s`` includes importing the onnx package).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path



def _median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> int:
    """Measure and print the figures."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", help="also time this model file (e.g. a BERT-base export with its weights)")
    ap.add_argument("--input_shape", help="input shapes for --model")
    args = ap.parse_args()

    t = time.perf_counter()
    import aoe.graph as graph
    import_pkg = time.perf_counter() - t

    t = time.perf_counter()
    g = graph.load("zoo:bert_base")
    first = time.perf_counter() - t

    out: dict[str, object] = {
        "bench": "graph_import",
        "python": sys.version.split()[0],
        "import_aoe_graph_s": round(import_pkg, 4),
        "bert_base_first_import_s": round(first, 4),
        "bert_base_ops": len(g.ops),
    }
    for name in ("bert_base", "resnet50", "mobilenet_v2", "gpt2"):
        out[f"{name}_import_s"] = round(_median(lambda: graph.load(f"zoo:{name}"), args.repeat), 4)
        out[f"{name}_training_s"] = round(_median(lambda: graph.load(f"zoo:{name}", training=True), args.repeat), 4)
    big = "input_ids:32,128;attention_mask:32,128"
    out["bert_base_b32_import_s"] = round(_median(lambda: graph.load("zoo:bert_base", big), args.repeat), 4)
    gt = graph.load("zoo:bert_base", training=True)
    text = gt.to_json()
    out["bert_base_training_ops"] = len(gt.ops)
    out["bert_base_training_json_bytes"] = len(text)
    out["bert_base_training_json_roundtrip_s"] = round(
        _median(lambda: graph.Graph.from_json(graph.Graph.from_json(text).to_json()), args.repeat), 4)
    if args.model:
        t = time.perf_counter()
        graph.load(args.model, args.input_shape)
        out["model_first_import_s"] = round(time.perf_counter() - t, 4)
        out["model_import_s"] = round(_median(lambda: graph.load(args.model, args.input_shape), args.repeat), 4)
        out["model_bytes"] = Path(args.model).stat().st_size
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
