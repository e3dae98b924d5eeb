"""`aoe bank`: list, show, export, import, verify and compact knowledge banks."""
from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator

from ..errors import AoeError
from ..safetext import safe_text
from . import jsonl
from .paths import check_name, core_num_for, resolve_op_bank_dir, resolve_subgraph_bank_dir
from .schema import schema_for
from .store import BuiltinBank, Entry, OpBank, Pending, make_pending
from .subgraph import SubgraphBank, make_subgraph_pending

DEFAULT_SOC = "Ascend910B2"

DESCRIPTION = f"""Inspect and share knowledge banks.

Which bank: the custom operator bank of --soc_version (default {DEFAULT_SOC}) and --core_num (default:
the SoC's AI core count), found as in tuning: $TUNE_BANK_PATH/<soc>, else
$ASCEND_CACHE_PATH/aoe_data/<soc>, else $HOME/Ascend/latest/data/aoe/custom/op/<soc>; the subgraph
bank (subgraph.json) in $TUNE_BANK_PATH, else $ASCEND_CACHE_PATH/aoe_data, else
$HOME/Ascend/latest/data/aoe/custom/graph/<soc>. --tune_bank_path DIR acts like TUNE_BANK_PATH=DIR.
The built-in bank shipped with aoe is listed and verified too (it is read-only)."""

EPILOG = """commands:
  ls [--json]      list every case (custom, built-in, subgraph) with its performance
  show KEY         print the records whose id is KEY (decimal or 0x hex; 'OpType:KEY' narrows to one
                   operator type) or whose subgraph repo_key is KEY
  export FILE      write the custom bank (operator + subgraph records) as one JSON Lines file
  import FILE      merge such a file into the custom bank, keeping the better strategy per case
                   (known perf beats unknown; equal or unknown keeps what is there)
  verify           check every bank file; exit 1 and print file:line for each damaged record (and
                   each FIFO, device or multiply-linked file); also counts superseded lines
                   awaiting compaction (not damage)
  compact          rewrite the custom bank's files with one line per case (saves append; this
                   restores CANN's one-record-per-case layout); damaged lines are kept

exit codes: 0 ok, 1 damage found (verify) or records rejected (import), 2 usage or environment error"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aoe bank", description=DESCRIPTION, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--soc_version", default=DEFAULT_SOC, help=f"SoC of the bank (default {DEFAULT_SOC})")
    p.add_argument("--core_num", type=int, default=None, help="AI core count in the bank file names")
    p.add_argument("--tune_bank_path", metavar="DIR", default=None,
                   help="use DIR as TUNE_BANK_PATH (overrides the environment)")
    sub = p.add_subparsers(dest="cmd", metavar="command")
    ls = sub.add_parser("ls", help="list cases")
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    show = sub.add_parser("show", help="print the records of one id / repo_key")
    show.add_argument("key")
    exp = sub.add_parser("export", help="write the custom bank to FILE")
    exp.add_argument("file")
    imp = sub.add_parser("import", help="merge FILE into the custom bank")
    imp.add_argument("file")
    imp.add_argument("--force", action="store_true",
                     help="import records exported for another SoC/core count")
    sub.add_parser("verify", help="check the banks; non-zero exit on damage")
    sub.add_parser("compact", help="one line per case in the custom bank's files")
    return p


class _Banks:
    def __init__(self, args: argparse.Namespace) -> None:
        env: dict[str, str] = dict(os.environ)
        if args.tune_bank_path is not None:
            env["TUNE_BANK_PATH"] = args.tune_bank_path
        self.soc = check_name(args.soc_version, "SoC version")
        self.core_num = core_num_for(self.soc, args.core_num)
        self.custom = OpBank(resolve_op_bank_dir(self.soc, env), self.soc, self.core_num)
        self.builtin = BuiltinBank(self.soc, self.core_num)
        self.subgraph = SubgraphBank(resolve_subgraph_bank_dir(self.soc, env))

    def op_entries(self) -> Iterator[Entry]:
        yield from self.custom.entries()
        yield from self.builtin.entries()


def _summary(e: Entry) -> str:
    info = e.info_dict
    if schema_for(e.op).family == "vector":
        key = f"shapes={info.get('input_shapes')} attrs={json.dumps(info.get('attrs'), sort_keys=True)}"
    else:
        key = " ".join(f"{k}={v}" for k, v in info.items() if not (k.startswith("batch") and v == 1))
    perf = "-" if e.perf_us is None else f"{e.perf_us:.3f}us"
    return f"{e.source:<8} {e.op:<20} {e.id:>10}  {perf:>12}  {key}"


def _ls(b: _Banks, as_json: bool) -> int:
    for e in b.op_entries():
        if as_json:
            print(json.dumps({"source": e.source, **e.record()}))
        else:
            print(safe_text(_summary(e)))
    for s in b.subgraph.entries():
        if as_json:
            print(json.dumps({"source": "custom", **s.record()}))
        else:
            perf = "-" if s.perf_us is None else f"{s.perf_us:.3f}us"
            print(f"{'custom':<8} {'subgraph':<20} {s.repo_key:>10}  {perf:>12}")
    return 0


def _show(b: _Banks, key: str) -> int:
    op, _, text = key.rpartition(":")
    found: list[dict[str, Any]] = []
    try:
        want: int | None = int(text, 0)
    except ValueError:
        want = None
    if want is not None:
        for e in b.op_entries():
            if e.id == want and (not op or e.op == op):
                found.append({"source": e.source, **e.record()})
    for s in b.subgraph.entries():
        if s.repo_key == key:
            found.append({"source": "custom", **s.record()})
    if not found:
        raise AoeError(f"no bank entry with id or repo_key {key!r} for {b.soc} (core_num "
                       f"{b.core_num}) in {b.custom.root}, the built-in bank or {b.subgraph.path}; "
                       f"`aoe bank ls` lists them")
    for rec in found:
        print(json.dumps(rec, indent=2))
    return 0


def _export(b: _Banks, file: str) -> int:
    out = []
    n_op = n_sg = 0
    for e in b.custom.entries():
        rec = e.record()
        rec["aoe"] = {**e.aoe, "soc": b.soc, "core_num": b.core_num}
        out.append(jsonl.dumps(rec))
        n_op += 1
    for s in b.subgraph.entries():
        out.append(jsonl.dumps({**s.record(), "aoe": {**s.aoe, "soc": b.soc}}))
        n_sg += 1
    path = Path(file).absolute()
    if not path.parent.is_dir():
        raise AoeError(f"cannot export to {path}: directory {path.parent} does not exist")
    jsonl.atomic_write(path, b"".join(line + b"\n" for line in out))
    print(f"exported {n_op} operator and {n_sg} subgraph records to {path}")
    return 0


def _import(b: _Banks, file: str, force: bool) -> int:
    path = Path(file)
    if not path.is_file():
        raise AoeError(f"import file {path} does not exist or is not a file")
    lines = jsonl.read_lines(path, lambda rec: None if type(rec) is dict else "not a JSON object",
                             warn=False)
    rejected = list(lines.problems)
    try:
        size = os.stat(path).st_size
    except OSError:
        size = lines.offset
    if size > lines.offset and not lines.open_tail:
        # a last line without its newline that is no record: in a bank an append in flight, here garbage
        rejected.append((lines.nlines + 1, "not valid JSON (corrupt or truncated line)"))
    ops: list[Pending] = []
    subgraphs = []
    for rec, n in zip(lines.recs, lines.linenos):
        if rec is None:
            continue
        aoe = dict(rec["aoe"]) if isinstance(rec.get("aoe"), dict) else {}
        soc, core = aoe.pop("soc", None), aoe.pop("core_num", None)
        if not force and ((soc is not None and soc != b.soc)
                          or (core is not None and "op" in rec and core != b.core_num)):
            rejected.append((n, f"exported for {soc} with {core} cores, not {b.soc} with "
                                f"{b.core_num} (use --force to import anyway)"))
            continue
        perf, default = aoe.pop("perf_us", None), aoe.pop("default_perf_us", None)
        try:
            if "repo_key" in rec:
                # validated one by one: a bad record is rejected alone, not the whole batch at save
                subgraphs.append(make_subgraph_pending(rec["repo_key"], rec["knowledge"], perf, default, aoe))
            else:
                ops.append(make_pending(rec["op"], rec["info_dict"], rec["knowledge"], perf,
                                        default, aoe))
        except (AoeError, KeyError, TypeError) as exc:
            rejected.append((n, f"not a usable bank record: {exc}"))
    if not ops and not subgraphs and not rejected:
        raise AoeError(f"import file {path} holds no bank records; give a file `aoe bank export` wrote")
    counts: dict[str, int] = {}
    for outcome in b.custom.save(ops) + (b.subgraph.save(subgraphs) if subgraphs else []):
        counts[outcome] = counts.get(outcome, 0) + 1
    for n, why in rejected:
        print(safe_text(f"{path}:{n}: rejected: {why}"), file=sys.stderr)
    print(f"imported {path}: {counts.get('added', 0)} added, {counts.get('replaced', 0)} replaced "
          f"by a better strategy, {counts.get('kept', 0)} kept (existing was as good or better), "
          f"{len(rejected)} rejected")
    return 1 if rejected else 0


def _verify_opbank(bank: OpBank) -> tuple[int, list[str], int]:
    n_ok, bad, dups = 0, [], 0
    for op in bank.op_types():
        path = bank.path_for(op)
        try:
            st = os.lstat(path)
            if not os.path.islink(path):
                jsonl.check_regular(path, st)
        except jsonl.NotRegular as exc:
            bad.append(f"{path}: {exc}")
            continue
        except OSError:
            pass
        f = bank.checked(op)  # every line parsed and checked (lookups check only what they touch)
        dups += f.dups
        bad += [f"{path}:{n}: {why}" for n, why in sorted(f.lines.problems)]
        for n, case in zip(f.lines.linenos, f.lines.recs):
            if type(case) is not tuple:  # a damaged line (listed above)
                continue
            h, packed = case  # a usable record: of its own file and schema, times and fields in range
            if h != bank.hash_fn(packed):  # (only aoe's records keep their stored id)
                bad.append(f"{path}:{n}: id {h} is not the hash of its key ({bank.hash_fn(packed)}): "
                           f"this record can never be found")
                continue
            n_ok += 1
    return n_ok, bad, dups


def _verify(b: _Banks) -> int:
    n_ok, bad, dups = 0, [], 0
    for bank in (b.custom, b.builtin):
        k, problems, d = _verify_opbank(bank)
        n_ok += k
        bad += problems
        dups += d
    sg = b.subgraph.problems()
    bad += [f"{b.subgraph.path}:{n}: {why}" for n, why in sg]
    n_ok += sum(1 for _ in b.subgraph.entries())
    for line in bad:
        print(safe_text(line))
    print(f"verified: {n_ok} good records, {len(bad)} damaged "
          f"({b.custom.root}, built-in, {b.subgraph.path})")
    if dups:
        print(f"{dups} superseded lines awaiting compaction (not damage; `aoe bank compact` removes them)")
    return 1 if bad else 0


def _compact(b: _Banks) -> int:
    done = b.custom.compact()
    print(f"compacted {len(done)} operator files in {b.custom.dir}: {sum(done.values())} superseded "
          f"lines removed")
    return 0


def main(argv: list[str]) -> int:
    """Entry point of `aoe bank`; returns the exit code (AoeError is reported by aoe.cli)."""
    p = _parser()
    args = p.parse_args(argv)
    if args.cmd is None:
        p.print_help()
        return 2
    with warnings.catch_warnings():
        if args.cmd == "verify":  # it prints every damaged line itself
            warnings.simplefilter("ignore", jsonl.BankWarning)
        b = _Banks(args)
        if args.cmd == "ls":
            return _ls(b, args.json)
        if args.cmd == "show":
            return _show(b, args.key)
        if args.cmd == "export":
            return _export(b, args.file)
        if args.cmd == "import":
            return _import(b, args.file, args.force)
        if args.cmd == "compact":
            return _compact(b)
        return _verify(b)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
