"""Generate the built-in banks shipped in aoe/bank/builtin/<soc>/ (operator and subgraph banks).

    python scripts/gen_builtin_bank.py --workers 2 --budget 20000     # what is committed (see the README)
    python scripts/gen_builtin_bank.py --quick --out /tmp/bb           # a small subset, for a look
    python scripts/gen_builtin_bank.py --list                          # the models and their case counts

Models (`MODELS`): the zoo (ResNet-50 and MobileNetV2 at batch 1/8/32/64, BERT-base and GPT-2 small
at 1x128 and 8x128; inference and training), the tests' tiny ONNX matmul, and one transformer layer of
BERT-large, GPT-2 medium/large, ViT-B/16, Llama-7B and Llama-13B at common batch x sequence sizes (all
layers of these models share shapes, so one layer gives every case). The layers are small ONNX graphs
built here with onnx.helper (weights marked as not shipped, as the zoo's are) and imported through
`aoe.graph.load`, so every key is exactly what a lookup of the real model computes.

Per SoC, every distinct operator case (`aoe.ops.describe`, de-duplicated by `case_id`) is tuned by
`aoe.opat.tune.tune_case` at `--budget` evaluations, and written with the tuner's own decision: only a
case whose tuned strategy beats CANN's default (by what the result file's 3 decimals show) gets a
record, made by `aoe.bank.make_pending` exactly as a tuning run writes it to a custom bank, plus
{"origin": "gen_builtin_bank.py", "budget": N}. On Ascend910A and Ascend310P3 (the SoCs with subgraph
tuning) every distinct subgraph (`aoe.sgat.prepare`) is searched (`aoe.sgat.search`) and a plan that
beats the compiler's default fusion goes to `<soc>/subgraph.json`, made by `make_subgraph_pending`.

Deterministic: cases are tuned in a fixed order with seed 0 (the search is seeded, results do not
depend on `--workers`), and the files are rewritten from scratch with records sorted by key.
`--cache FILE` keeps finished (soc, budget, case) results so an interrupted run resumes; delete it
whenever the simulator, the default tilings or the search change.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

# aoe is imported from the installed package (the source tree has no built aoe._sim); never put the
# repository on sys.path: a test that loads this file would make later child processes import the
# unbuilt source tree.

SOCS = ("Ascend310P3", "Ascend910A", "Ascend910B2", "Ascend910B3")
SGAT_SOCS = ("Ascend310P3", "Ascend910A")      # Atlas A2/A3 (Ascend910B*) have no subgraph tuning
ORIGIN = "gen_builtin_bank.py"


# --- the model list -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Spec:
    """One graph of the model list: a zoo model or a transformer layer at one shape, inference or training."""

    label: str
    kind: str                      # "zoo", "tiny", "encoder", "gpt2", "llama"
    name: str = ""                 # zoo name
    batch: int = 1
    seq: int = 0
    hidden: int = 0
    heads: int = 0
    ffn: int = 0
    training: bool = False


def _layer(kind: str, label: str, hidden: int, heads: int, ffn: int, sizes: Iterable[tuple[int, int]]) -> list[Spec]:
    return [Spec(f"{label} {b}x{s}", kind, batch=b, seq=s, hidden=hidden, heads=heads, ffn=ffn)
            for b, s in sizes]


ENCODER_SIZES = ((1, 128), (8, 512), (32, 128))


def model_specs(quick: bool = False) -> list[Spec]:
    """The graphs whose cases make up the built-in bank (`quick`: a small subset)."""
    if quick:
        return [Spec("resnet50 b1", "zoo", "resnet50"), Spec("bert_base 1x128", "zoo", "bert_base", seq=128),
                Spec("tiny", "tiny")]
    out: list[Spec] = []
    for training in (False, True):
        sfx = " train" if training else ""
        for name in ("resnet50", "mobilenet_v2"):
            out += [Spec(f"{name} b{b}{sfx}", "zoo", name, batch=b, training=training) for b in (1, 8, 32, 64)]
        for name in ("bert_base", "gpt2"):
            out += [Spec(f"{name} {b}x{s}{sfx}", "zoo", name, batch=b, seq=s, training=training)
                    for b, s in ((1, 128), (8, 128))]
    out.append(Spec("tests tiny onnx", "tiny"))
    out += _layer("encoder", "BERT-large layer", 1024, 16, 4096, ENCODER_SIZES)
    out += _layer("gpt2", "GPT-2 medium layer", 1024, 16, 4096, ((1, 128), (8, 512), (1, 1024)))
    out += _layer("gpt2", "GPT-2 large layer", 1280, 20, 5120, ((1, 128), (8, 512), (1, 1024)))
    out += _layer("vit", "ViT-B/16 layer", 768, 12, 3072, ((1, 197), (8, 197), (32, 197), (64, 197)))
    out += _layer("llama", "Llama-7B layer", 4096, 32, 11008, ((1, 2048), (4, 2048)))
    out += _layer("llama", "Llama-13B layer", 5120, 40, 13824, ((1, 2048), (4, 2048)))
    return out


# --- graphs -------------------------------------------------------------------------------------

def load_spec(spec: Spec) -> Any:
    """The aoe Graph of one spec (transformer layers go through a temporary ONNX file)."""
    import aoe.graph

    if spec.kind == "zoo":
        from aoe.graph.zoo import zoo_model

        shapes = {}
        for inp, dims in zoo_model(spec.name)[1].items():
            shapes[inp] = (spec.batch, spec.seq or dims[1], *dims[2:]) if len(dims) == 2 else (spec.batch, *dims[1:])
        return aoe.graph.load("zoo:" + spec.name, shapes, training=spec.training)
    with tempfile.TemporaryDirectory(prefix="aoe_genbank_") as tmp:
        path = Path(tmp) / "layer.onnx"
        import onnx

        onnx.save(_onnx_model(spec), path)
        return aoe.graph.load(path, training=spec.training)


class _Builder:
    """A few onnx.helper shortcuts; weights are declared, their data marked as not shipped."""

    def __init__(self, name: str) -> None:
        from onnx import helper

        self.h, self.name = helper, name
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.n = 0

    def node(self, op: str, inputs: list[str], n_out: int = 1, **attrs: Any) -> Any:
        self.n += 1
        outs = [f"{op.lower()}_{self.n}_{i}" for i in range(n_out)]
        self.nodes.append(self.h.make_node(op, inputs, outs, name=f"{op}_{self.n}", **attrs))
        return outs[0] if n_out == 1 else outs

    def weight(self, dims: list[int]) -> str:
        from onnx import TensorProto

        self.n += 1
        t = TensorProto()
        t.name, t.data_type = f"w_{self.n}", TensorProto.FLOAT
        t.dims.extend(dims)
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "weights_not_shipped.bin"), ("offset", "0"), ("length", str(4 * math.prod(dims)))):
            e = t.external_data.add()
            e.key, e.value = k, v
        self.inits.append(t)
        return t.name

    def const(self, values: list[Any], dtype: str = "int64") -> str:
        import numpy as np
        from onnx import numpy_helper

        self.n += 1
        arr = np.array(values, dtype=dtype)
        self.inits.append(numpy_helper.from_array(arr, f"c_{self.n}"))
        return f"c_{self.n}"

    def linear(self, x: str, k: int, n: int, bias: bool = True) -> str:
        y = self.node("MatMul", [x, self.weight([k, n])])
        return self.node("Add", [y, self.weight([n])]) if bias else y

    def layer_norm(self, x: str, hidden: int) -> str:
        return self.node("LayerNormalization", [x, self.weight([hidden]), self.weight([hidden])], axis=-1,
                         epsilon=1e-5)

    def rms_norm(self, x: str, hidden: int) -> str:
        sq = self.node("Pow", [x, self.const([2.0], "float32")])
        ms = self.node("ReduceMean", [sq], axes=[-1], keepdims=1)
        r = self.node("Sqrt", [self.node("Add", [ms, self.const([1e-6], "float32")])])
        return self.node("Mul", [self.node("Div", [x, r]), self.weight([hidden])])

    def heads(self, x: str, b: int, s: int, nh: int, d: int, perm: list[int]) -> str:
        return self.node("Transpose", [self.node("Reshape", [x, self.const([b, s, nh, d])])], perm=perm)

    def attention(self, q: str, k: str, v: str, spec: Spec, mask: str | None) -> str:
        b, s, h, nh = spec.batch, spec.seq, spec.hidden, spec.heads
        d = h // nh
        qh = self.heads(q, b, s, nh, d, [0, 2, 1, 3])
        kh = self.heads(k, b, s, nh, d, [0, 2, 3, 1])
        vh = self.heads(v, b, s, nh, d, [0, 2, 1, 3])
        sc = self.node("Div", [self.node("MatMul", [qh, kh]), self.const([math.sqrt(d)], "float32")])
        if mask is not None:
            sc = self.node("Add", [sc, mask])
        p = self.node("Softmax", [sc], axis=-1)
        ctx = self.node("Transpose", [self.node("MatMul", [p, vh])], perm=[0, 2, 1, 3])
        return self.node("Reshape", [ctx, self.const([b, s, h])])

    def gelu_erf(self, x: str) -> str:
        e = self.node("Erf", [self.node("Div", [x, self.const([math.sqrt(2.0)], "float32")])])
        return self.node("Mul", [self.node("Mul", [x, self.node("Add", [e, self.const([1.0], "float32")])]),
                                 self.const([0.5], "float32")])

    def gelu_tanh(self, x: str) -> str:
        c = self.node("Mul", [self.node("Pow", [x, self.const([3.0], "float32")]), self.const([0.044715], "float32")])
        t = self.node("Tanh", [self.node("Mul", [self.node("Add", [x, c]),
                                                  self.const([math.sqrt(2 / math.pi)], "float32")])])
        return self.node("Mul", [self.node("Mul", [x, self.const([0.5], "float32")]),
                                 self.node("Add", [t, self.const([1.0], "float32")])])


def _onnx_model(spec: Spec) -> Any:
    """One transformer layer (or the tests' tiny matmul graph) as an ONNX model at fixed shapes."""
    from onnx import TensorProto, helper

    bd = _Builder(spec.label)
    b, s, h, f = spec.batch, spec.seq, spec.hidden, spec.ffn
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, h])]
    x = "x"
    if spec.kind == "tiny":  # tests/conftest.py's tiny_onnx: x[64,128] @ W[128,256] -> Relu -> Softmax
        ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 128])]
        y = bd.node("Softmax", [bd.node("Relu", [bd.node("MatMul", ["x", bd.weight([128, 256])])])], axis=-1)
    elif spec.kind == "encoder":  # BERT: post-LN, attention mask [b,1,1,s], erf GELU
        ins.append(helper.make_tensor_value_info("mask", TensorProto.FLOAT, [b, 1, 1, s]))
        a = bd.attention(bd.linear(x, h, h), bd.linear(x, h, h), bd.linear(x, h, h), spec, "mask")
        x1 = bd.layer_norm(bd.node("Add", [bd.linear(a, h, h), x]), h)
        y = bd.layer_norm(bd.node("Add", [bd.linear(bd.gelu_erf(bd.linear(x1, h, f)), f, h), x1]), h)
    elif spec.kind == "vit":  # ViT: pre-LN, no mask, erf GELU
        n1 = bd.layer_norm(x, h)
        a = bd.attention(bd.linear(n1, h, h), bd.linear(n1, h, h), bd.linear(n1, h, h), spec, None)
        x1 = bd.node("Add", [bd.linear(a, h, h), x])
        y = bd.node("Add", [bd.linear(bd.gelu_erf(bd.linear(bd.layer_norm(x1, h), h, f)), f, h), x1])
    elif spec.kind == "gpt2":  # GPT-2: pre-LN, fused QKV (Conv1D) split in three, causal mask, tanh GELU
        qkv = bd.linear(bd.layer_norm(x, h), h, 3 * h)
        q, k, v = bd.node("Split", [qkv, bd.const([h, h, h])], n_out=3, axis=-1)
        a = bd.attention(q, k, v, spec, bd.weight([1, 1, s, s]))
        x1 = bd.node("Add", [bd.linear(a, h, h), x])
        y = bd.node("Add", [bd.linear(bd.gelu_tanh(bd.linear(bd.layer_norm(x1, h), h, f)), f, h), x1])
    elif spec.kind == "llama":  # Llama: RMSNorm, no biases, rotary embedding, causal mask, SwiGLU
        n1 = bd.rms_norm(x, h)
        q, k, v = (bd.linear(n1, h, h, bias=False) for _ in range(3))
        q, k = (_rotary(bd, t, spec) for t in (q, k))
        a = bd.attention(q, k, v, spec, bd.weight([1, 1, s, s]))
        x1 = bd.node("Add", [bd.linear(a, h, h, bias=False), x])
        n2 = bd.rms_norm(x1, h)
        g = bd.linear(n2, h, f, bias=False)
        act = bd.node("Mul", [bd.node("Mul", [g, bd.node("Sigmoid", [g])]), bd.linear(n2, h, f, bias=False)])
        y = bd.node("Add", [bd.linear(act, f, h, bias=False), x1])
    else:
        raise ValueError(f"unknown layer kind {spec.kind!r}")
    out = helper.make_tensor_value_info(y, TensorProto.FLOAT, None)
    g = helper.make_graph(bd.nodes, spec.label.replace(" ", "_").replace("/", "_"), ins, [out], bd.inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _rotary(bd: _Builder, x: str, spec: Spec) -> str:
    """x * cos + rotate_half(x) * sin on [b, s, h] (the halves of every head's dimensions)."""
    b, s, h, nh = spec.batch, spec.seq, spec.hidden, spec.heads
    d = h // nh
    xh = bd.node("Reshape", [x, bd.const([b, s, nh, d])])
    x1, x2 = bd.node("Split", [xh, bd.const([d // 2, d // 2])], n_out=2, axis=-1)
    rot = bd.node("Concat", [bd.node("Neg", [x2]), x1], axis=-1)
    y = bd.node("Add", [bd.node("Mul", [xh, bd.weight([1, s, 1, d])]), bd.node("Mul", [rot, bd.weight([1, s, 1, d])])])
    return bd.node("Reshape", [y, bd.const([b, s, h])])


# --- cases --------------------------------------------------------------------------------------

def distinct_cases(graphs: Iterable[tuple[Spec, Any]]) -> tuple[dict[tuple[str, str], Any], dict[str, int]]:
    """case_id -> OpCase over all graphs (first one wins), and the distinct case count of each graph."""
    from aoe.errors import AoeError
    from aoe.ops import Unsupported, describe

    cases: dict[tuple[str, str], Any] = {}
    per_graph: dict[str, int] = {}
    for spec, g in graphs:
        ids = set()
        for op in g.ops:
            if getattr(op, "is_view", False) or op.attrs.get("view"):
                continue
            try:
                case = describe(g, op)
            except (Unsupported, AoeError):
                continue
            ids.add(case.case_id)
            cases.setdefault(case.case_id, case)
        per_graph[spec.label] = len(ids)
    return cases, per_graph


def _cache_key(soc: str, budget: int, cid: tuple[str, str]) -> str:
    return json.dumps([soc, budget, cid[0], cid[1]])


def tune_one(args: tuple[str, int, Any]) -> dict[str, Any] | None:
    """Tune one case on one SoC as a tuning run does; the record to write, or None (no gain / failure)."""
    soc_name, budget, case = args
    from aoe.bank import make_pending
    from aoe.opat.apply import price
    from aoe.opat.graph_tune import kinds_against
    from aoe.opat.search import Budget, simulator_measure
    from aoe.opat.tune import tune_case
    from aoe.soc import load_soc

    soc = load_soc(soc_name)
    try:
        default_t = price(case, soc, None, simulator_measure(soc, 1), {})
        result = tune_case(case, soc, budget=Budget(evaluations=budget), seed=0)
    except Exception as exc:  # noqa: BLE001 - a case the tuner cannot handle is left out, and counted
        return {"error": f"{type(exc).__name__}: {exc}"}
    # the tuner's rule: a gain the result file cannot show (3 decimals) is no gain
    if not math.isfinite(default_t) or round(result.after_us, 3) >= round(default_t, 3):
        return None
    kinds = kinds_against(result, default_t)
    try:
        p = make_pending(case.op_type, case.key, result.knowledge, result.after_us, default_t,
                         {"soc": soc.name, "kinds": sorted(kinds), "origin": ORIGIN, "budget": budget})
    except Exception as exc:  # noqa: BLE001 - e.g. a time the bank refuses (not positive): left out, counted
        return {"error": f"{type(exc).__name__}: {exc}", "after_us": result.after_us, "default_us": default_t}
    return {"op": p.op_type, "info_dict": p.info_dict, "knowledge": p.knowledge, "aoe": p.aoe}


def sgat_one(args: tuple[str, Spec]) -> list[dict[str, Any]]:
    """Search every distinct subgraph of one graph on one SoC; records of plans that beat default fusion."""
    soc_name, spec = args
    import numpy as np

    from aoe.bank.decision import decide
    from aoe.bank.subgraph import make_subgraph_pending
    from aoe.sgat.keys import plan_knowledge
    from aoe.sgat.search import search
    from aoe.sgat.tune import TIE, prepare
    from aoe.soc import load_soc

    soc = load_soc(soc_name)
    prep = prepare(load_spec(spec), soc)
    out = []
    for case in prep.cases:
        found = search(case.rd)
        tuned = found.time_us if np.isfinite(found.time_us) else None
        if not decide(False, False, case.default_us, tuned, min_gain=TIE).writes:
            continue
        know = plan_knowledge(case.rd, found.plan, [op.type for op in case.subs[0].kernels])
        out.append(make_subgraph_pending(case.key, know, found.time_us, case.default_us,
                                         {"method": found.method, "instances": len(case.subs), "origin": ORIGIN}))
    return out


# --- writing ------------------------------------------------------------------------------------

def write_op_bank(soc: str, recs: list[dict[str, Any]], root: Path) -> dict[str, int]:
    """Rewrite one SoC's built-in operator files from scratch, records sorted by packed key."""
    from aoe.bank import jsonl
    from aoe.bank.schema import schema_for
    from aoe.bank.store import RECORD_VERSION, OpBank

    bank = OpBank(root / soc, soc, readonly=True)
    shutil.rmtree(bank.dir, ignore_errors=True)
    bank.dir.mkdir(parents=True)
    by_op: dict[str, dict[bytes, dict[str, Any]]] = {}
    for r in recs:
        by_op.setdefault(r["op"], {})[schema_for(r["op"]).pack(r["op"], r["info_dict"])] = r
    counts = {}
    for op, cases in sorted(by_op.items()):
        lines = [jsonl.dumps({"id": bank.hash_fn(packed), "op": op, "version": RECORD_VERSION,
                              "info_dict": r["info_dict"], "knowledge": r["knowledge"], "aoe": r["aoe"]}) + b"\n"
                 for packed, r in sorted(cases.items())]
        jsonl.atomic_write(bank.path_for(op), b"".join(lines))
        counts[op] = len(lines)
    return counts


def write_subgraph_bank(soc: str, recs: list[dict[str, Any]], root: Path) -> int:
    """Rewrite one SoC's built-in subgraph.json, one record per repo_key, sorted."""
    from aoe.bank import jsonl
    from aoe.bank.subgraph import SUBGRAPH_FILE

    path = root / soc / SUBGRAPH_FILE
    by_key = {}
    for r in recs:
        by_key.setdefault(r["repo_key"], r)  # same key, same subgraph: the first graph's search
    if not by_key:
        path.unlink(missing_ok=True)
        return 0
    path.parent.mkdir(parents=True, exist_ok=True)
    jsonl.atomic_write(path, b"".join(jsonl.dumps(by_key[k]) + b"\n" for k in sorted(by_key)))
    return len(by_key)


def _size(root: Path, soc: str) -> int:
    return sum(p.stat().st_size for p in (root / soc).rglob("*") if p.is_file())


def hit_rates(root: Path, socs: Iterable[str]) -> dict[str, Any]:
    """Share of distinct cases (operator and subgraph) of each zoo model, at its default shapes, that
    the banks under `root` hold: what a first run with an empty custom bank finds in the built-in bank."""
    import aoe.graph
    from aoe.bank import BuiltinBank
    from aoe.bank.subgraph import SubgraphBank
    from aoe.graph.zoo import zoo_names
    from aoe.sgat.tune import prepare
    from aoe.soc import load_soc

    out: dict[str, Any] = {}
    for name in zoo_names():
        for training in (False, True):
            g = aoe.graph.load("zoo:" + name, training=training)
            cases, _ = distinct_cases([(Spec(name, "zoo"), g)])
            for soc in socs:
                bank = BuiltinBank(soc, root=root / soc)
                hits = sum(bank.lookup(c.op_type, c.key) is not None for c in cases.values())
                row = {"op_cases": len(cases), "op_hits": hits}
                if soc in SGAT_SOCS:
                    sg = SubgraphBank(root / soc)
                    keys = [c.key for c in prepare(g, load_soc(soc)).cases]
                    row.update(subgraph_cases=len(keys), subgraph_hits=sum(sg.lookup(k) is not None for k in keys))
                out[f"{name}{' train' if training else ''} {soc}"] = row
    return out


# --- main ---------------------------------------------------------------------------------------

def _graphs(specs: list[Spec]) -> Iterator[tuple[Spec, Any]]:
    for spec in specs:
        yield spec, load_spec(spec)


def main(argv: list[str] | None = None) -> int:
    """Regenerate the built-in banks."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget", type=int, default=100000, help="evaluations per case (default 100000)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="worker processes")
    ap.add_argument("--socs", default=",".join(SOCS), help="comma-separated SoCs (default: all four)")
    ap.add_argument("--quick", action="store_true", help="a small subset of models (a look, not for shipping)")
    ap.add_argument("--no-sgat", action="store_true", help="leave the subgraph banks as they are")
    ap.add_argument("--list", action="store_true", help="print the models and their case counts, tune nothing")
    ap.add_argument("--hit-rates", action="store_true",
                    help="print the built-in hit rates of the zoo models (default shapes), tune nothing")
    ap.add_argument("--cache", type=Path, help="a JSON Lines file of finished results to resume from")
    ap.add_argument("--out", type=Path, default=None, help="output root (default: aoe/bank/builtin)")
    args = ap.parse_args(argv)
    from aoe.bank.store import BUILTIN_ROOT

    out = args.out or BUILTIN_ROOT
    socs = [s for s in args.socs.split(",") if s]
    if set(socs) - set(SOCS):
        ap.error(f"unknown SoC in --socs; choose from {', '.join(SOCS)}")
    if args.hit_rates:
        for label, row in hit_rates(out, socs).items():
            print(label, json.dumps(row))
        return 0
    t0, c0 = time.time(), time.process_time()
    specs = model_specs(args.quick)
    cases, per_graph = distinct_cases(_graphs(specs))
    for label, n in per_graph.items():
        print(f"  {label}: {n} distinct cases", flush=True)
    print(f"{len(cases)} distinct operator cases in {len(specs)} graphs "
          f"({dict(sorted(Counter(c[0] for c in cases).items()))})", flush=True)
    if args.list:
        return 0

    done: dict[str, Any] = {}
    if args.cache and args.cache.exists():
        for line in args.cache.read_text().splitlines():
            k, v = json.loads(line)
            done[k] = v
    order = sorted(cases)  # a fixed order: the same run whatever the worker count
    jobs = [(soc, args.budget, cases[cid]) for soc in socs for cid in order
            if _cache_key(soc, args.budget, cid) not in done]
    print(f"tuning {len(jobs)} (SoC, case) pairs at budget {args.budget} with {args.workers} workers "
          f"({len(socs) * len(order) - len(jobs)} from the cache)", flush=True)
    cache_f = args.cache.open("a") if args.cache else None
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        for i, (job, res) in enumerate(zip(jobs, pool.map(tune_one, jobs, chunksize=4)), 1):
            k = _cache_key(job[0], args.budget, job[2].case_id)
            done[k] = res
            if cache_f:
                cache_f.write(json.dumps([k, res]) + "\n")
                cache_f.flush()
            if i % 200 == 0 or i == len(jobs):
                print(f"  {i}/{len(jobs)} tuned ({time.time() - t0:.0f} s)", flush=True)
        sg: dict[str, list[dict[str, Any]]] = {s: [] for s in socs if s in SGAT_SOCS}
        if not args.no_sgat and sg:
            sjobs = [(soc, spec) for soc in sg for spec in specs]
            for (soc, _), recs in zip(sjobs, pool.map(sgat_one, sjobs)):
                sg[soc] += recs
    if cache_f:
        cache_f.close()

    summary: dict[str, Any] = {"budget": args.budget, "graphs": len(specs), "cases": len(cases), "socs": {}}
    for soc in socs:
        results = [done[_cache_key(soc, args.budget, cid)] for cid in order]
        recs = [r for r in results if r and "error" not in r]
        failed = sum(1 for r in results if r and "error" in r)
        counts = write_op_bank(soc, recs, out)
        n_sg = write_subgraph_bank(soc, sg[soc], out) if soc in sg and not args.no_sgat else None
        summary["socs"][soc] = {"op_records": sum(counts.values()), "no_gain": results.count(None),
                                "failed": failed, "subgraph_records": n_sg, "bytes": _size(out, soc),
                                "per_op_type": counts}
        print(f"{soc}: {sum(counts.values())} operator records of {len(order)} cases "
              f"({results.count(None)} no gain, {failed} failed), subgraph records: {n_sg}, "
              f"{_size(out, soc) / 1e6:.2f} MB", flush=True)
    summary["wall_s"] = round(time.time() - t0, 1)
    summary["cpu_s_main"] = round(time.process_time() - c0, 1)
    print(json.dumps(summary, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
