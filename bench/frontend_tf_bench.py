"""TensorFlow frontend on Keras models: what is captured, converted, priced and tuned, and what it costs.

    python bench/frontend_tf_bench.py [--models ResNet50,MobileNetV2,...] [--batch 8] [--budget 2000]
    python bench/frontend_tf_bench.py --models resnet50,bert_base [--quick]     # the TF vs ONNX rows

Keras applications (``keras.applications.<Name>(weights=None)``: random weights, nothing downloaded):
ResNet50, MobileNetV2, EfficientNetB0, DenseNet121, MobileNetV3Small (224x224) and InceptionV3 (299x299),
each compiled with Adam and sparse cross-entropy. For each, what ``aoe.tf.TuneCallback`` does on the first
step: trace ``model.train_step`` with static shapes and convert it (``aoe.graph.tf``), then operator
tuning (OPAT) with the built-in bank on, into a fresh custom bank. Printed per model: TF operations in
the traced graph, aoe operators, operators priced and skipped (by type, with the reason), the distinct
cases and how many the built-in bank answers / the custom bank answers / are tuned and added, CPU
seconds of capture + convert and of tuning (this process and its tuning workers) with wall beside.

``resnet50`` / ``bert_base``: Keras ResNet50 (batch 32) and the BERT-base-shaped encoder of
``aoe.tf.examples`` (12 layers, 32 x 128) traced the same way, tuned cold (built-in bank set aside) and
warm, next to the same models through the ONNX route (``aoe.tune("zoo:...", training=True)``).

Prints one JSON line with the date, CPU model, vector flags and load (the machine may be shared).
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


APPS = {"ResNet50": 224, "MobileNetV2": 224, "EfficientNetB0": 224, "DenseNet121": 224, "MobileNetV3Small": 224,
        "InceptionV3": 299}


def _vector_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return []
    return [x for x in ("avx2", "avx512f") if x in flags]


def app_row(name: str, batch: int, budget: int, tmp: Path, size: int | None = None) -> dict[str, Any]:
    """One Keras application: capture + convert, pricing coverage, bank provenance of its cases, tuning
    (``size``: another input resolution than the application's own, e.g. for a quick check)."""
    from collections import Counter

    import keras
    import tensorflow as tf

    import aoe
    from aoe.bank import BankChain, BuiltinBank
    from aoe.graph.tf import concrete_function, from_concrete_function
    from aoe.job.api import TuneOptions
    from aoe.opat.apply import operator_cases
    from aoe.soc import load_soc

    size = size or APPS[name]
    keras.utils.set_random_seed(0)
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.optimizer.build(model.trainable_variables)
    spec = (tf.TensorSpec((batch, size, size, 3)), tf.TensorSpec((batch,), tf.int32))

    def capture() -> tuple[Any, int]:
        cf = concrete_function(model.train_step, (spec,))
        return (from_concrete_function(cf, name=name, training=True, optimizer_variables=model.optimizer.variables),
                len(cf.graph.get_operations()))

    (g, tf_ops), wall, secs = timed(capture)
    priced, skipped = operator_cases(g)
    soc = load_soc("Ascend910B2")
    builtin = BankChain(None, BuiltinBank(soc.name, soc.cube_cores))
    cases = {case.case_id: case for _, case in priced}
    in_builtin = sum(builtin.lookup(c.op_type, c.key) is not None for c in cases.values())
    reasons = Counter(f"{s['op_type']}: {s['reason']}" for s in skipped)
    (tmp / "bank").mkdir()
    r, t_wall, t_cpu = timed(lambda: aoe.tune(g, mode="op", bank=tmp / "bank", work_path=tmp,
                                              options=TuneOptions(budget=budget, lock=False, builtin=True), env={}))
    summary = r.section["repo_summary"]
    return {"input": [batch, size, size, 3], "tf_ops": tf_ops, "aoe_ops": len(g.ops),
            "views": sum(1 for op in g.ops if op.is_view or op.attrs.get("view")),
            "priced": len(priced), "skipped": len(skipped), "skipped_reasons": dict(reasons),
            "unconverted_tf_types": sorted({u["tf_type"] for u in g.unsupported}),
            "distinct_cases": len(cases), "cases_builtin": in_builtin,
            "cases_custom": summary["repo_hit_num"] - in_builtin if summary["repo_hit_num"] > in_builtin else 0,
            "cases_new": summary["repo_add_num"], "repo_summary": summary, "status": r.status,
            "capture_convert": {"wall_s": wall, "cpu_s": secs}, "tuning": {"wall_s": t_wall, "cpu_s": t_cpu}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(APPS),
                   help=f"comma list of {', '.join(APPS)}, resnet50, bert_base (default: the applications)")
    p.add_argument("--batch", type=int, default=8, help="batch of the Keras applications")
    p.add_argument("--budget", type=int, default=2000, help="strategy evaluations per operator case")
    p.add_argument("--quick", action="store_true", help="resnet50/bert_base: batch 2 (and a 2-layer encoder)")
    args = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from aoe.graph.tf import training_graph

    from job_bench import machine  # the bench folder's shared helper (date, CPU model)

    names = [n.strip() for n in args.models.split(",") if n.strip()]
    pairs = _models(args.quick)
    unknown = [n for n in names if n not in APPS and n not in pairs]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join([*APPS, *pairs])}")
    out: dict[str, Any] = {"bench": "frontend_tf", **machine(), "vector_flags": _vector_flags(),
                           "budget": args.budget, "tensorflow": tf.__version__, "models": {}}
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            if name in APPS:
                out["models"][name] = app_row(name, args.batch, args.budget, Path(tmp))
                continue
            build, spec, zoo, shape = pairs[name]
            model = build()
            model.optimizer.build(model.trainable_variables)
            row: dict[str, Any] = {"shape": shape}
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
    out["load_1min_end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
