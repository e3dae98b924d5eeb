"""The batch list file of `aoe batch`: one model per line with its own options.

    # comments and blank lines are ignored
    zoo:resnet50 --training --input_shape input:32,3,224,224
    models/bert.onnx --soc_version Ascend910A --job_type 1

Options per line: `--job_type 1|2` (default 2, operator tuning), `--soc_version SOC` (default
Ascend910B2), `--input_shape SPEC`, `--training`. The file is untrusted: a regular file of at most
1 MiB and 10,000 lines; an unknown option is an error naming the line.
"""
from __future__ import annotations

import argparse
import os
import shlex
import stat
from dataclasses import dataclass
from pathlib import Path

from ..errors import AoeError

MAX_BYTES = 1 << 20
MAX_LINES = 10_000
DEFAULT_SOC = "Ascend910B2"


@dataclass(frozen=True)
class BatchLine:
    """One model of a batch and how to tune it."""

    model: str
    mode: int = 2
    soc: str = DEFAULT_SOC
    input_shape: str | None = None
    training: bool = False
    lineno: int = 0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise AoeError(message)


def _line_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="batch line", add_help=False)
    p.add_argument("model")
    p.add_argument("--job_type", "-j", type=int, choices=(1, 2), default=2)
    p.add_argument("--soc_version", default=DEFAULT_SOC)
    p.add_argument("--input_shape", default=None)
    p.add_argument("--training", action="store_true")
    return p


def read_list(path: str | os.PathLike[str]) -> str:
    """The text of a list file: regular, bounded, never a FIFO that would hang us."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise AoeError(f"cannot read the batch list {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise AoeError(f"the batch list {path} is not a regular file")
        if st.st_size > MAX_BYTES:
            raise AoeError(f"the batch list {path} is larger than {MAX_BYTES} bytes; split it")
        data = os.read(fd, MAX_BYTES + 1)
    finally:
        os.close(fd)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise AoeError(f"the batch list {path} is not UTF-8 text") from None


def parse_list(text: str, source: str = "batch list") -> list[BatchLine]:
    """The models of a list file's text, in order."""
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise AoeError(f"{source}: more than {MAX_LINES} lines; split the batch")
    out: list[BatchLine] = []
    parser = _line_parser()
    for n, line in enumerate(lines, 1):
        body = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not body:
            continue
        try:
            a = parser.parse_args(shlex.split(body))
        except (AoeError, ValueError) as exc:
            raise AoeError(f"{source}:{n}: {exc}") from None
        out.append(BatchLine(a.model, a.job_type, a.soc_version, a.input_shape, a.training, n))
    if not out:
        raise AoeError(f"{source}: no models listed")
    return out


def check_lines(lines: list[BatchLine], source: str) -> None:
    """Check every line (model reference, input shapes, SoC) before anything is tuned; an error names
    `source:line`, so a mistake on the last line never costs the tuning of the first ones."""
    from ..graph.loader import check_model_ref
    from ..soc import load_soc

    for line in lines:
        try:
            check_model_ref(line.model, line.input_shape)
            soc = load_soc(line.soc)
            if line.mode == 1:
                from ..sgat import check_soc

                check_soc(soc)
        except AoeError as exc:
            raise AoeError(f"{source}:{line.lineno}: {exc}") from None


def load_list(path: str | os.PathLike[str]) -> list[BatchLine]:
    """Read, parse and check a list file (`check_lines`)."""
    lines = parse_list(read_list(path), str(Path(path)))
    check_lines(lines, str(Path(path)))
    return lines
