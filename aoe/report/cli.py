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

REPORT_EPILOG = """The result file names the job's model but not its path, so give the model again with the
options the job had (-m, --input_shape, --training, --soc_version); the model is re-priced under the
banks (the result file lists only the operators the job modified). A job writes this report itself
beside its result file unless it ran with --report off.

examples:
  aoe report aoe_result_opat_20260101120000000_pid42.json -m zoo:resnet50 --training
  aoe report aoe_result_sgat_*.json -m zoo:mobilenet_v2 --soc_version Ascend910A -o mobilenet.html"""

EXPLAIN_EPILOG = """OP is an operator of MODEL (its name, or a unique part of it) with -m, or else a CANN operator
type described like `aoe simulate` does (--shape for each input, --attrs, ...). The tuned strategy is
the banks' (custom, then built-in) if they hold the case, else the operator is tuned now within
--budget evaluations (--retune: always tune now).

The timeline is derived from the simulator's numbers, not traced: each pipe's busy time is spread
evenly over the kernel after its launch/fill overhead, offset in dataflow order, so every bar's
filled length is exact, the bound pipe is the fullest row and the slice positions are a rendering.

examples:
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

    args = report_parser().parse_args(argv)
    require_matplotlib()
    if not args.model and not args.singleop:
        raise AoeError("the report re-prices the job's model: pass -m MODEL (and --input_shape / --training / "
                       "--soc_version as the job had them) or --singleop FILE")
    if not 1 <= args.top <= 50:
        raise AoeError("--top must be between 1 and 50")
    soc = load_soc(args.soc_version)
    op_dir, sg_dir = _bank_dirs(args.bank, soc.name)
    graph = _graph(args)
    path = write_report(args.result_file, graph, soc, out=args.output, op_bank_dir=op_dir,
                        subgraph_bank_dir=sg_dir, task=args.task, model=args.singleop or args.model, top=args.top,
                        settings=[f"re-priced by aoe report on {soc.name}",
                                  f"operator bank: {op_dir or 'none (built-in bank only)'}",
                                  f"subgraph bank: {sg_dir or 'none'}"])
    print(f"report: {path}")
    return 0


def explain_parser() -> argparse.ArgumentParser:
    p = _command("aoe explain", "One operator's default and tuned strategy, pipe by pipe.", EXPLAIN_EPILOG)
    p.add_argument("op", metavar="OP", help="operator name (with -m) or CANN operator type (with --shape)")
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
