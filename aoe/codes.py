"""Numeric codes of data types and formats, following CANN's `ge::DataType` / `ge::Format` enums.

Bank keys store these integers (as CANN's bank files do); the names are for people and for
converting graph attributes. This is a ground-floor module: the simulator's front end and the banks
both read these tables, so it imports nothing of theirs.
"""
from __future__ import annotations

import operator

from .errors import AoeError

# ge::DataType values (graph/types.h). Only codes the project handles are listed; add more here.
DTYPES: dict[str, int] = {
    "DT_FLOAT": 0,
    "DT_FLOAT16": 1,
    "DT_INT8": 2,
    "DT_INT32": 3,
    "DT_UINT8": 4,
    "DT_INT16": 6,
    "DT_UINT16": 7,
    "DT_UINT32": 8,
    "DT_INT64": 9,
    "DT_UINT64": 10,
    "DT_DOUBLE": 11,
    "DT_BOOL": 12,
    "DT_BF16": 27,
}

# ge::Format values (graph/types.h).
FORMATS: dict[str, int] = {
    "FORMAT_NCHW": 0,
    "FORMAT_NHWC": 1,
    "FORMAT_ND": 2,
    "FORMAT_NC1HWC0": 3,
    "FORMAT_FRACTAL_Z": 4,
    "FORMAT_FRACTAL_NZ": 29,
}

# Common spellings (numpy / ONNX / CANN short names) accepted on input; always stored as codes.
_DTYPE_ALIASES: dict[str, str] = {
    "float": "DT_FLOAT", "float32": "DT_FLOAT", "fp32": "DT_FLOAT",
    "float16": "DT_FLOAT16", "fp16": "DT_FLOAT16", "half": "DT_FLOAT16",
    "bfloat16": "DT_BF16", "bf16": "DT_BF16",
    "int8": "DT_INT8", "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64",
    "uint8": "DT_UINT8", "uint16": "DT_UINT16", "uint32": "DT_UINT32", "uint64": "DT_UINT64",
    "double": "DT_DOUBLE", "float64": "DT_DOUBLE", "bool": "DT_BOOL",
}

_DTYPE_NAMES = {code: name for name, code in DTYPES.items()}
_FORMAT_NAMES = {code: name for name, code in FORMATS.items()}


def _code(value: object, table: dict[str, int], names: dict[int, str], prefix: str,
          aliases: dict[str, str], what: str) -> int:
    if isinstance(value, bool):
        raise AoeError(f"{what} {value!r} is not a {what}; use a name such as {next(iter(table))}")
    if not isinstance(value, (str, bytes, float)) and hasattr(value, "__index__"):
        code = operator.index(value)  # ints and numpy integers
        if code in names:
            return code
        raise AoeError(f"unknown {what} code {code}; known: {sorted(names)}")
    if isinstance(value, str):
        key = value.strip()
        if key in table:
            return table[key]
        if key.lower() in aliases:
            return table[aliases[key.lower()]]
        full = prefix + key.upper()
        if full in table:
            return table[full]
    raise AoeError(f"unknown {what} {value!r}; known: {', '.join(table)}")


def dtype_code(value: str | int) -> int:
    """Return the ge::DataType code of a dtype name (`DT_FLOAT16`, `float16`, `FLOAT16`) or code."""
    return _code(value, DTYPES, _DTYPE_NAMES, "DT_", _DTYPE_ALIASES, "dtype")


def dtype_name(code: int) -> str:
    """Return the ge name (`DT_FLOAT16`) of a dtype code."""
    try:
        return _DTYPE_NAMES[code]
    except KeyError:
        raise AoeError(f"unknown dtype code {code!r}; known: {sorted(_DTYPE_NAMES)}") from None


def format_code(value: str | int) -> int:
    """Return the ge::Format code of a format name (`FORMAT_ND`, `ND`, `fractal_nz`) or code."""
    return _code(value, FORMATS, _FORMAT_NAMES, "FORMAT_", {}, "format")


def format_name(code: int) -> str:
    """Return the ge name (`FORMAT_ND`) of a format code."""
    try:
        return _FORMAT_NAMES[code]
    except KeyError:
        raise AoeError(f"unknown format code {code!r}; known: {sorted(_FORMAT_NAMES)}") from None
