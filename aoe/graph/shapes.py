"""Static shapes: the ``--input_shape`` syntax, limits on untrusted dimensions, broadcasting."""
from __future__ import annotations

from typing import Mapping, Sequence

from ..errors import AoeError

# Caps for untrusted model files: a dimension or element count beyond these is a corrupt or hostile
# file, not a model anyone tunes (the largest real activations are ~2**34 elements).
MAX_DIM = 2**31 - 1
MAX_NUMEL = 2**48
MAX_RANK = 16

INPUT_SHAPE_SYNTAX = '--input_shape "name1:d0,d1,...;name2:d0,d1,..."  (e.g. "input_ids:32,128;attention_mask:32,128")'


def check_shape(shape: Sequence[int], what: str) -> tuple[int, ...]:
    """Validate a static shape from untrusted data; raise AoeError naming ``what`` if it is unusable."""
    shape = tuple(int(d) for d in shape)
    if len(shape) > MAX_RANK:
        raise AoeError(f"{what} has rank {len(shape)}, more than the supported {MAX_RANK}")
    n = 1
    for d in shape:
        if d < 0:
            raise AoeError(f"{what} has a negative dimension in shape {list(shape)}; the model file is corrupt")
        if d > MAX_DIM:
            raise AoeError(f"{what} has dimension {d} (> {MAX_DIM}) in shape {list(shape)}; "
                           "the model file is corrupt or the shape is unrealistic")
        n *= d
    if n > MAX_NUMEL:
        raise AoeError(f"{what} would have {n} elements (> 2**48) with shape {list(shape)}; "
                       "check the model file and --input_shape")
    return shape


def parse_input_shape(spec: str | Mapping[str, object] | None) -> dict[str, tuple[int, ...]]:
    """Parse AOE's ``"a:1,2;b:3"`` syntax (or a dict name -> dims) into {name: shape}.

    The name is everything before the *last* colon, so TensorFlow-style names like ``x:0`` work.
    An empty dimension list (``"scalar:"``) is a 0-d tensor. Every dimension must be a positive
    integer: AOE tunes static shapes only.
    """
    if spec is None:
        return {}
    items: list[tuple[str, object]]
    if isinstance(spec, Mapping):
        items = list(spec.items())
    elif isinstance(spec, str):
        items = []
        for part in spec.split(";"):
            part = part.strip()
            if not part:
                continue
            name, sep, dims = part.rpartition(":")
            if not sep or not name:
                raise AoeError(f"bad --input_shape entry {part!r}: expected NAME:DIMS; syntax: {INPUT_SHAPE_SYNTAX}")
            items.append((name, dims))
    else:
        raise AoeError(f"input_shape must be a string or a dict, not {type(spec).__name__}")
    out: dict[str, tuple[int, ...]] = {}
    for name, dims in items:
        if not isinstance(name, str) or not name:
            raise AoeError(f"bad --input_shape: tensor names must be non-empty strings; syntax: {INPUT_SHAPE_SYNTAX}")
        if isinstance(dims, str):
            text = [d.strip() for d in dims.split(",")] if dims.strip() else []
        elif isinstance(dims, (list, tuple)):
            text = list(dims)
        else:
            raise AoeError(f"bad --input_shape for {name!r}: dims must be a list of integers")
        shape = []
        for d in text:
            try:
                v = int(d)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise AoeError(f"bad --input_shape for {name!r}: {d!r} is not an integer; "
                               f"syntax: {INPUT_SHAPE_SYNTAX}") from None
            if isinstance(d, bool) or v <= 0:
                raise AoeError(f"bad --input_shape for {name!r}: dimension {d!r} must be a positive integer "
                               "(only static shapes can be tuned)")
            shape.append(v)
        if name in out:
            raise AoeError(f"bad --input_shape: {name!r} is given twice")
        out[name] = check_shape(shape, f"--input_shape for {name!r}")
    return out


def broadcast(a: Sequence[int], b: Sequence[int], what: str) -> tuple[int, ...]:
    """Numpy-style broadcast of two static shapes; AoeError naming ``what`` if they do not broadcast."""
    ra, rb = len(a), len(b)
    n = max(ra, rb)
    out = []
    for i in range(n):
        x = a[i - n + ra] if i - n + ra >= 0 else 1
        y = b[i - n + rb] if i - n + rb >= 0 else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            raise AoeError(f"{what}: shapes {list(a)} and {list(b)} do not broadcast; "
                           "check --input_shape against the model")
    return tuple(out)
