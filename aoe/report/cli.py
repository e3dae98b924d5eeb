"""`aoe report RESULT_FILE -m MODEL` and `aoe explain OP`: the command-line faces of the package."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from ..errors import AoeError
from ..safeio import parse_json
from ..safetext import safe_text

REPORT_EPILOG = """Every figure comes from the run's record the job wrote beside its result file
(<result stem>.records.jsonl): the SoC, the model spec, each case's times, kernels and bank decision.
Nothing is re-priced, so the page shows what the job measured, wherever the files were moved.
--bank DIR adds the bank's view (which of the run's subgraphs that bank holds now). A result file
written by an older aoe has no record: give the model again (-m, --input_shape, --training,
--soc_version) and it is re-priced under the banks. A job writes this report itself beside its
result file unless it ran with --report off.

examples:
  aoe report aoe_result_opat_20260101120000000_pid42.json
  aoe report aoe_result_sgat_*.json -o mobilenet.html
  aoe report old_aoe_result_opat.json -m zoo:resnet50 --training      # a result file without a record"""

EXPLAIN_EPILOG = """OP is an operator of a job's run (--result RESULT_FILE: everything comes from the run's record
beside it, as the job measured it: its SoC, kernels, strategies and times), or of MODEL (its name, or a
unique part of it) with -m, or else a CANN operator type described like `aoe simulate` does (--shape
for each input, --attrs, ...). With -m or --shape the tuned strategy is the banks' (custom, then
built-in) if they hold the case, else the operator is tuned now within --budget evaluations
(--retune: always tune now).

The timeline is derived from the simulator's numbers, not traced: each pipe's busy time is spread
evenly over the kernel after its launch/fill overhead, offset in dataflow order, so every bar's
filled length is exact, the bound pipe is the fullest row and the slice positions are a rendering.

examples:
  aoe explain /conv1/Conv --result aoe_result_opat_20260101120000000_pid42.json
  aoe explain /bert/encoder/layer.0/intermediate/dense/MatMul -m zoo:bert_base --input_shape "input_ids:8,128;attention_mask:8,128"
  aoe explain /conv1/Conv -m zoo:resnet50 -o conv1.svg
  aoe explain MatMulV2 --shape 4096,1024 --shape 1024,4096 --json"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise AoeError(f"{message}; run `{self.prog} --help` for usage")


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("-m", "--model", metavar="MODEL", help="the model: an .onnx file, a .json graph, or zoo:NAME")
    p.add_argument("--singleop", metavar="FILE", help="a single-operator file instead of a model")
    p.add_argument("--soc_version", default="Ascend910B2", help="simulated SoC (default Ascend910B2)")
    p.add_argument("--input_shape", metavar="SHAPES", help='static input shapes: "name1:d0,d1;name2:d0,d1"')
    p.add_argument("--training", action="store_true", help="the training graph")
    p.add_argument("--compute_dtype", choices=["float16", "float32"], default="float16")
    p.add_argument("--bank", metavar="DIR", help="the bank root, as TUNE_BANK_PATH (default: the environment)")


def _graph(args: argparse.Namespace) -> Any:
    from .. import graph as g

    if args.model and args.singleop:
        raise AoeError("pass either --model or --singleop, not both")
    if args.singleop:
        return g.load(args.singleop, framework="singleop")
    return g.load(args.model, args.input_shape, training=args.training, compute_dtype=args.compute_dtype)


def _bank_dirs(bank: str | None, soc: str) -> tuple[Path | None, Path | None]:
    """The operator and subgraph bank directories (None where no bank exists yet)."""
    from ..bank.paths import resolve_op_bank_dir, resolve_subgraph_bank_dir

    env = dict(os.environ)
    if bank is not None:
        if not os.path.isdir(bank):
            raise AoeError(f"--bank {bank}: no such directory")
        env["TUNE_BANK_PATH"] = bank
    op = resolve_op_bank_dir(soc, env=env, check=False)
    sg = resolve_subgraph_bank_dir(soc, env=env, check=False)
    return (op if op.is_dir() else None), (sg if sg.is_dir() else None)


def _command(prog: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """A subcommand's parser with the model options both commands share."""
    p = _Parser(prog=prog, description=description, epilog=epilog,
                formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    _model_options(p)
    return p


def report_parser() -> argparse.ArgumentParser:
    p = _command("aoe report", "Write the HTML report of a tuning job's result file.", REPORT_EPILOG)
    p.add_argument("result_file", metavar="RESULT_FILE", help="an aoe_result_opat_*.json / aoe_result_sgat_*.json")
    p.add_argument("--task", metavar="KEY", help="the task (report_<ts>_<pid>) of a file with several (default: last)")
    p.add_argument("-o", "--output", metavar="FILE", help="the HTML file (default: RESULT_FILE with .html)")
    p.add_argument("--top", type=int, default=8, metavar="N", help="operators in the pipe breakdown (default 8)")
    return p


def report_main(argv: list[str]) -> int:
    """`aoe report`: write the HTML report; prints its path."""
    from ..soc import load_soc
    from . import write_report
    from .charts import require_matplotlib
    from .data import read_result
    from .record import repriced_record

    args = report_parser().parse_args(argv)
    require_matplotlib()
    if not 1 <= args.top <= 50:
        raise AoeError("--top must be between 1 and 50")
    if not args.model and not args.singleop:
        from .record import read_record, record_path

        rp = record_path(args.result_file)
        if not rp.exists():
            raise AoeError(f"{args.result_file} has no run record beside it ({rp.name}; older aoe versions wrote "
                           "none): pass -m MODEL (and --input_shape / --training / --soc_version as the job had "
                           "them) to re-price the model")
        key = args.task if args.task is not None else read_result(args.result_file)[0]
        rec = read_record(rp, key)
        settings = list(rec.settings)
        if args.bank is not None:
            settings += _bank_view(args.bank, rec)
        path = write_report(args.result_file, out=args.output, task=args.task, record=rec, settings=settings,
                            top=args.top)
        print(f"report: {path}")
        return 0
    soc = load_soc(args.soc_version)
    op_dir, sg_dir = _bank_dirs(args.bank, soc.name)
    graph = _graph(args)
    kind, key = read_result(args.result_file, args.task)[1], read_result(args.result_file, args.task)[0]
    rec = repriced_record(graph, soc, kind, op_bank_dir=op_dir, subgraph_bank_dir=sg_dir, task=key,
                          model=args.singleop or args.model)
    _check_model(args.result_file, rec, kind, key)
    path = write_report(args.result_file, out=args.output, task=args.task, record=rec, top=args.top,
                        settings=[f"re-priced by aoe report on {soc.name} (the result file has no run record)",
                                  f"operator bank: {op_dir or 'none (built-in bank only)'}",
                                  f"subgraph bank: {sg_dir or 'none'}"])
    print(f"report: {path}")
    return 0


def _check_model(result_file: str, rec: Any, kind: str, key: str) -> None:
    """Refuse a model that is not the one the job tuned (none of the result file's entries is in it)."""
    from .data import _opat_credits, _sgat_keys, read_result

    section = read_result(result_file, key)[3]
    if kind == "opat":
        listed = set(_opat_credits(section))
        names = {o[1] for line in rec.cases.values() for o in line["ops"]} | {s["op"] for s in rec.skipped}
    else:
        listed, names = _sgat_keys(section), set(rec.subgraphs)
    if listed and not listed & names:
        raise AoeError(f"{result_file} does not describe this model: none of the {len(listed)} "
                       f"{'operators' if kind == 'opat' else 'subgraphs'} it lists is in it; pass the model (and "
                       "--input_shape / --training / --soc_version) the job tuned")


def _bank_view(bank: str, rec: Any) -> list[str]:
    """`--bank DIR` on a record: what that bank holds now of the run's cases (read only)."""
    op_dir, sg_dir = _bank_dirs(bank, rec.soc.name)
    lines = [f"bank view (--bank {bank}): operator bank {op_dir or 'none'}, subgraph bank {sg_dir or 'none'}"]
    if rec.kind == "opat" and op_dir is not None:
        from ..bank import OpBank

        b = OpBank(op_dir, rec.soc.name, rec.soc.cube_cores, readonly=True)
        cases = [line for line in rec.cases.values() if line["detail"] is not None and line["detail"].get("key")]
        held = same = 0
        for line in cases:
            try:
                e = b.lookup(line["detail"]["op_type"], line["detail"]["key"])
            except (AoeError, KeyError, TypeError, ValueError):
                e = None      # a key this bank cannot file: not held
            if e is not None:
                held += 1
                same += line["outcome"] in ("add", "update")
        lines.append(f"that operator bank holds {held} of the run's {len(cases)} distinct cases now "
                     f"({same} of them with a strategy this run wrote or replaced)")
    if rec.kind == "sgat" and sg_dir is not None:
        from ..bank.subgraph import SubgraphBank

        b = SubgraphBank(sg_dir)
        held = sum(1 for k in rec.subgraphs if b.lookup(k) is not None)
        lines.append(f"that subgraph bank holds {held} of the run's {len(rec.subgraphs)} distinct subgraphs now")
    return lines


def explain_parser() -> argparse.ArgumentParser:
    p = _command("aoe explain", "One operator's default and tuned strategy, pipe by pipe.", EXPLAIN_EPILOG)
    p.add_argument("op", metavar="OP", help="operator name (with --result or -m) or CANN operator type (with --shape)")
    p.add_argument("--result", metavar="RESULT_FILE", help="a job's result file: explain OP from its run's record")
    p.add_argument("--task", metavar="KEY", help="with --result: the task of a file with several (default: last)")
    p.add_argument("--shape", action="append", help="single operator: shape of one input (repeat per input)")
    p.add_argument("--dtype", default="float16", help="single operator: input dtype (default float16)")
    p.add_argument("--attrs", help="single operator: JSON object of attributes (axes, pads, trans_b, ...)")
    p.add_argument("--budget", type=int, default=20000, metavar="N",
                   help="evaluations when the case must be tuned now (default 20000)")
    p.add_argument("--retune", action="store_true", help="tune now even when a bank holds the case")
    p.add_argument("--no_builtin", action="store_true", help="ignore the built-in bank")
    p.add_argument("-o", "--output", metavar="FILE", help="also draw the timelines to FILE (.svg or .png)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")
    return p


def _shape(text: str) -> list[int]:
    try:
        dims = [int(v) for v in text.replace(" ", "").split(",") if v]
    except ValueError:
        raise AoeError(f"--shape {text!r} must be comma-separated integers, e.g. 4096,1024") from None
    if not dims:
        raise AoeError("--shape needs at least one dimension")
    return dims


def explain_main(argv: list[str]) -> int:
    """`aoe explain`: print the side-by-side view (or JSON), optionally draw the timelines."""
    from ..soc import load_soc
    from .explain import explain_graph_op, explain_single_op

    args = explain_parser().parse_args(argv)
    if args.output:
        from .charts import require_matplotlib

        if not args.output.lower().endswith((".svg", ".png")):
            raise AoeError(f"-o {args.output}: the timeline is written as .svg or .png")
        require_matplotlib()  # fail before tuning anything
    if not 1 <= args.budget <= 10_000_000:
        raise AoeError("--budget must be between 1 and 10000000")
    if args.result:
        if args.model or args.singleop or args.shape:
            raise AoeError("--result explains an operator of that job's run: drop -m / --singleop / --shape")
        from .data import read_result
        from .explain import explain_recorded
        from .record import read_record, record_path

        rp = record_path(args.result)
        if not rp.exists():
            raise AoeError(f"{args.result} has no run record beside it ({rp.name}; older aoe versions wrote none): "
                           "explain the operator of the model instead (-m MODEL)")
        key = args.task if args.task is not None else read_result(args.result)[0]
        exp = explain_recorded(read_record(rp, key), args.op)
        return _show(exp, args)
    soc = load_soc(args.soc_version)
    op_dir, _ = _bank_dirs(args.bank, soc.name)
    kw = {"builtin": not args.no_builtin, "budget": args.budget, "retune": args.retune}
    if args.model or args.singleop:
        if args.shape:
            raise AoeError("--shape describes a single operator: drop it, or drop -m to explain a type")
        exp = explain_graph_op(_graph(args), args.op, soc, op_dir, **kw)
    else:
        if not args.shape:
            raise AoeError("explain an operator of a model (-m MODEL OPNAME) or a single operator "
                           "(OPTYPE --shape d0,d1 [--shape ...])")
        attrs = parse_json(args.attrs, "--attrs") if args.attrs else {}
        if not isinstance(attrs, dict):
            raise AoeError("--attrs must be a JSON object, e.g. '{\"trans_b\": true}'")
        try:
            exp = explain_single_op(args.op, [_shape(s) for s in args.shape], soc, op_dir, dtype=args.dtype,
                                    attrs=attrs, **kw)
        except TypeError as exc:
            raise AoeError(f"bad --attrs for {args.op}: {exc}") from None
    return _show(exp, args)


def _show(exp: Any, args: argparse.Namespace) -> int:
    """Print an explanation (text or JSON) and draw its timelines with -o."""
    if args.output:
        exp.save_figure(args.output)
    if args.json:
        print(json.dumps(exp.to_dict(), indent=2))
    else:
        for line in exp.lines():
            print(safe_text(line))
        if args.output:
            print(f"timeline: {args.output}")
    return 0
