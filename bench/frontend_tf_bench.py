"""TensorFlow frontend timing: capture + convert + tune of a training step, cold and warm, next to the ONNX route.

    python bench/frontend_tf_bench.py [--budget 2000] [--quick]

For Keras ResNet50 (batch 32, 224x224) and the BERT-base-shaped Keras encoder of ``aoe.tf.examples``
(12 layers, 32 x 128), each built from code with random weights:

- TF route: ``aoe.graph.tf.training_graph(model.train_step, ...)`` (what ``aoe.tf.TuneCallback`` does on
  the first step: trace forward + GradientTape + Keras Adam with static shapes, convert to CANN
  operators), then operator tuning (OPAT) of that graph into a fresh bank (cold) and again into the
  same bank (warm: every tunable case a bank hit);
- ONNX route: ``aoe.tune("zoo:...", training=True)`` the same way (torchvision ResNet-50, BERT-base).

Prints one JSON line: wall seconds and CPU seconds (this process and its tuning workers) per phase,
the graphs' operator counts and MACs, and the bank counters of each run.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _frontend_common import onnx_route, timed, tune  # bench/ is on the path of a script


def _models(quick: bool) -> dict[str, tuple[Callable[[], Any], Callable[[], tuple], str, str]]:
    import keras
    import tensorflow as tf

    from aoe.tf.examples import bert_like_encoder, resnet50

    b = 2 if quick else 32

    def keras_resnet() -> Any:
        m = resnet50(224)
        m.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        return m

    def keras_bert() -> Any:
        m = bert_like_encoder(seq=128, layers=2 if quick else 12)
        m.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return m

    return {
        "resnet50": (keras_resnet, lambda: ((tf.TensorSpec((b, 224, 224, 3)), tf.TensorSpec((b,), tf.int32)),),
                     "zoo:resnet50", f"input:{b},3,224,224"),
        "bert_base": (keras_bert, lambda: (((tf.TensorSpec((b, 128), tf.int32), tf.TensorSpec((b, 128))),
                                            tf.TensorSpec((b,), tf.int32)),),
                      "zoo:bert_base", f"input_ids:{b},128;attention_mask:{b},128"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget", type=int, default=2000, help="strategy evaluations per operator case")
    p.add_argument("--quick", action="store_true", help="batch 2 (and a 2-layer encoder) instead: a smoke run")
    args = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from aoe.graph.tf import training_graph

    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    out: dict[str, Any] = {"bench": "frontend_tf", **machine(), "budget": args.budget, "tensorflow": tf.__version__,
                           "models": {}}
    for name, (build, spec, zoo, shape) in _models(args.quick).items():
        model = build()
        model.optimizer.build(model.trainable_variables)
        row: dict[str, Any] = {"shape": shape}
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            for d in ("bank_tf", "bank_onnx", "work"):
                (t / d).mkdir()
            g, wall, cpu = timed(lambda m=model, s=spec, n=name: training_graph(
                m.train_step, *s(), name=n, optimizer_variables=m.optimizer.variables))
            s = g.summary()
            row["tf"] = {"capture_convert": {"wall_s": wall, "cpu_s": cpu}, "ops": len(g.ops),
                         "gmacs": round(s["total_macs"] / 1e9, 2), "unsupported": len(g.unsupported),
                         "cold": tune(g, t / "bank_tf", t / "work", args.budget),
                         "warm": tune(g, t / "bank_tf", t / "work", args.budget)}
            row["onnx"] = onnx_route(zoo, shape, t, args.budget)
        out["models"][name] = row
    print(json.dumps(out))


if __name__ == "__main__":
    main()
