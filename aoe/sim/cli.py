"""`aoe simulate`: price one operator strategy on the simulated AI Core and print JSON."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import AoeError
from ..soc import known_socs, load_soc

EXAMPLES = """examples:
  aoe simulate --op MatMulV2 --shape 4096,1024 --shape 1024,4096
  aoe simulate --soc_version Ascend910A --op BatchMatMulV2 --shape 12,128,64 --shape 12,64,128 --trans_b
  aoe simulate --op SoftmaxV2 --shape 384,128,128 --attrs '{"axes": [-1]}'
  aoe simulate --op Conv2D --shape 32,64,56,56 --shape 64,64,3,3 --attrs '{"pads": [1,1,1,1]}'
  aoe simulate --op TransData --shape 4096,1024 --attrs '{"src_format": "ND", "dst_format": "FRACTAL_NZ"}'
  aoe simulate --op MatMulV2 --shape 512,512 --shape 512,512 --strategy '{"usedCoreNum": 16, ...}'
  aoe simulate --calibration [--calibration_data DIR]   # the simulator against public Ascend figures
                                    (aoe.calibration: error per figure, per source and family)

Without --strategy the CANN-like default strategy is priced (and printed).
"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aoe simulate", description="Price one operator on the simulated Ascend AI Core.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--soc_version", default="Ascend910B2",
                   help=f"SoC name ({', '.join(known_socs())}) or path to a platform_config .ini")
    p.add_argument("--op", required=True, help="CANN operator type, e.g. MatMulV2, Conv2D, SoftmaxV2, Add")
    p.add_argument("--shape", action="append", required=True,
                   help="shape of one input, comma-separated; repeat for each input (A then B, x then weight)")
    p.add_argument("--dtype", default="float16", help="input dtype (float16, bfloat16, float32, int8)")
    p.add_argument("--format", dest="formats", default=None,
                   help="matmul formats A,B,C each ND or FRACTAL_NZ (default ND,ND,ND)")
    p.add_argument("--trans_a", action="store_true", help="matmul: A is stored transposed")
    p.add_argument("--trans_b", action="store_true", help="matmul: B is stored transposed")
    p.add_argument("--bias", action="store_true", help="matmul / conv: add a bias")
    p.add_argument("--attrs", default=None,
                   help="JSON object of operator attributes (axes, perm, strides, pads, dilations, groups, "
                        "ksize, src_format, dst_format, out_dtype)")
    p.add_argument("--strategy", default=None,
                   help="JSON strategy: an object with every field, or a list of values in field order")
    p.add_argument("--fields", action="store_true", help="print the strategy fields of the operator and exit")
    return p


def _shape(text: str) -> list[int]:
    try:
        dims = [int(v) for v in text.replace(" ", "").split(",") if v != ""]
    except ValueError:
        raise AoeError(f"--shape {text!r} must be comma-separated integers, e.g. 4096,1024") from None
    if not dims:
        raise AoeError("--shape needs at least one dimension")
    return dims


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise AoeError(f"{what} is not valid JSON ({exc.msg} at position {exc.pos})") from None


def main(argv: list[str]) -> int:
    """Run `aoe simulate`."""
    from . import make_op, simulate, strategy_fields  # lazily: `aoe --help` must not load the extension

    args = _parser().parse_args(argv)
    soc = load_soc(args.soc_version)
    attrs = _json_arg(args.attrs, "--attrs") or {}
    if not isinstance(attrs, dict):
        raise AoeError("--attrs must be a JSON object, e.g. '{\"axes\": [-1]}'")
    if args.trans_a:
        attrs["trans_a"] = True
    if args.trans_b:
        attrs["trans_b"] = True
    if args.bias:
        attrs["bias"] = True
    if args.formats:
        parts = [f.strip() for f in args.formats.split(",")]
        if len(parts) != 3:
            raise AoeError("--format takes three comma-separated formats for A, B and C")
        attrs.update(a_format=parts[0], b_format=parts[1], c_format=parts[2])
    try:
        op = make_op(args.op, [_shape(s) for s in args.shape], dtype=args.dtype, **attrs)
    except TypeError as exc:  # an attribute of the wrong kind (e.g. a string where a list is needed)
        raise AoeError(f"bad --attrs for {args.op}: {exc}") from None
    if args.fields:
        print(json.dumps({"op": args.op, "strategy_fields": strategy_fields(op)}))
        return 0
    strategy = _json_arg(args.strategy, "--strategy")
    if strategy is not None and not isinstance(strategy, (dict, list)):
        raise AoeError("--strategy must be a JSON object or list")
    result = simulate(soc, op, strategy)
    out = {"soc_version": soc.name, "op": args.op, "inputs": [_shape(s) for s in args.shape],
           "dtype": args.dtype, "strategy_source": "given" if strategy is not None else "default",
           **result.to_dict()}
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if result.valid else 1
