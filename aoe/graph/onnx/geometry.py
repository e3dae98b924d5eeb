"""Geometry shared by the shape rules, the mapping and constant folding: convolution/pooling windows,
reduction axes, splits, slices and pads, each read from a node and checked against its input shape."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...errors import AoeError
from .node import Node, norm_axis

if TYPE_CHECKING:
    from .importer import _Importer


def conv_geometry(imp: _Importer, node: Node, x: tuple[int, ...], kernel: list[int], transpose: bool):
    """Strides, dilations, begin/end pads and output spatial dims of a Conv/ConvTranspose/Pool node."""
    nd = len(kernel)
    spatial = list(x[2:])
    if nd < 1 or nd != len(spatial):
        raise AoeError(f"node {node.name!r} ({node.op_type}): kernel {kernel} does not match input {list(x)}")
    strides = node.attr_ints("strides", [1] * nd)
    dil = node.attr_ints("dilations", [1] * nd)
    pads = node.attr_ints("pads", [0] * (2 * nd))
    if len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd or min(strides + dil + [1]) < 1 or min(pads + [0]) < 0:
        raise AoeError(f"node {node.name!r} ({node.op_type}): strides/dilations/pads do not match a {nd}-D kernel")
    if min(kernel) < 1:
        raise AoeError(f"node {node.name!r} ({node.op_type}): kernel {kernel} is not positive")
    auto = node.attr_str("auto_pad", "NOTSET")
    ceil_mode = node.attr_int("ceil_mode", 0)
    out = []
    for i in range(nd):
        k_eff = (kernel[i] - 1) * dil[i] + 1
        if transpose:
            opad = (node.attr_ints("output_padding", [0] * nd) or [0] * nd)[i]
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                o = spatial[i] * strides[i]
                total = max(strides[i] * (spatial[i] - 1) + opad + k_eff - o, 0)
                lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
                pads[i], pads[i + nd] = lo, total - lo
            oshape = node.attr_ints("output_shape")
            if oshape and len(oshape) >= nd:
                o = oshape[len(oshape) - nd + i]
                total = max(strides[i] * (spatial[i] - 1) + opad + k_eff - o, 0)
                lo = total // 2 if auto != "SAME_LOWER" else total - total // 2
                pads[i], pads[i + nd] = lo, total - lo
            else:
                o = strides[i] * (spatial[i] - 1) + opad + k_eff - pads[i] - pads[i + nd]
        else:
            if auto in ("SAME_UPPER", "SAME_LOWER"):
                o = -(-spatial[i] // strides[i])
                total = max((o - 1) * strides[i] + k_eff - spatial[i], 0)
                lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
                pads[i], pads[i + nd] = lo, total - lo
            elif auto == "VALID":
                pads[i] = pads[i + nd] = 0
            span = spatial[i] + pads[i] + pads[i + nd] - k_eff
            if ceil_mode:
                o = -(-span // strides[i]) + 1
                # the last window must start inside the input or its begin padding
                if (o - 1) * strides[i] >= spatial[i] + pads[i]:
                    o -= 1
            else:
                o = span // strides[i] + 1
        if o < 1:
            raise AoeError(f"node {node.name!r} ({node.op_type}): output would be empty for input {list(x)} "
                           "(kernel larger than the padded input?); check --input_shape")
        out.append(o)
    return strides, dil, pads, out


def reduce_axes(imp: _Importer, node: Node, rank: int) -> list[int] | None:
    """The sorted, non-negative reduction axes (attribute or constant input), None when not given."""
    axes = imp.ints_of(node, 1, "axes", "reduction axes", required=False)
    if axes is None:
        return None
    return sorted({norm_axis(a, rank, node) for a in axes})


def split_sizes(imp: _Importer, node: Node, x: tuple[int, ...]) -> tuple[int, list[int]]:
    """The split axis and the size of every output of a Split node, checked against the input."""
    axis = norm_axis(node.attr_int("axis", 0), len(x), node)
    n_out = len(node.outputs)
    sizes = imp.ints_of(node, 1, "split", "split sizes", required=False)
    if sizes is None:
        parts = node.attr_int("num_outputs", n_out)
        if parts < 1:
            raise AoeError(f"node {node.name!r} (Split): num_outputs must be positive")
        chunk = -(-x[axis] // parts)
        sizes = [min(chunk, max(x[axis] - chunk * i, 0)) for i in range(parts)]
    if len(sizes) != n_out or sum(sizes) != x[axis] or min(sizes + [0]) < 0:
        raise AoeError(f"node {node.name!r} (Split): sizes {sizes} do not split dimension {axis} of {list(x)} "
                       f"into {n_out} outputs")
    return axis, sizes


def slice_params(imp: _Importer, node: Node, x: tuple[int, ...]):
    """Normalised begin/end/stride per dimension of an ONNX Slice, and the output shape."""
    if "starts" in node.attrs:  # opset < 10
        starts = node.attr_ints("starts") or []
        ends = node.attr_ints("ends") or []
        axes = node.attr_ints("axes")
        steps = None
    else:
        starts = imp.ints_of(node, 1, "", "slice starts") or []
        ends = imp.ints_of(node, 2, "", "slice ends") or []
        axes = imp.ints_of(node, 3, "", "slice axes", required=False)
        steps = imp.ints_of(node, 4, "", "slice steps", required=False)
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not (len(starts) == len(ends) == len(axes) == len(steps)):
        raise AoeError(f"node {node.name!r} (Slice): starts/ends/axes/steps have different lengths")
    begin = [0] * len(x)
    end = list(x)
    stride = [1] * len(x)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = norm_axis(a, len(x), node)
        dim = x[a]
        if st == 0:
            raise AoeError(f"node {node.name!r} (Slice): step 0")
        if st > 0:
            s = max(0, min(dim, s + dim if s < 0 else s))
            e = max(0, min(dim, e + dim if e < 0 else e))
        else:
            s = max(-1, min(dim - 1, s + dim if s < 0 else s))
            e = max(-1, min(dim - 1, e + dim if e < 0 else e))
        begin[a], end[a], stride[a] = s, e, st
    out = tuple(max(0, -(-(e - b) // st)) if st > 0 else max(0, -(-(b - e) // -st))
                for b, e, st in zip(begin, end, stride))
    return begin, end, stride, out


def pads_of(imp: _Importer, node: Node, rank: int) -> list[int]:
    """The begin/end pads of a Pad node for every dimension (ONNX order: all begins, then all ends)."""
    pads = imp.ints_of(node, 1, "pads", "pads")
    axes = imp.ints_of(node, 3, "", "pad axes", required=False) if "pads" not in node.attrs else None
    if axes is not None:
        full = [0] * (2 * rank)
        if len(pads) != 2 * len(axes):
            raise AoeError(f"node {node.name!r} (Pad): pads do not match axes")
        for j, a in enumerate(axes):
            a = norm_axis(a, rank, node)
            full[a], full[a + rank] = pads[j], pads[j + len(axes)]
        pads = full
    if len(pads) != 2 * rank:
        raise AoeError(f"node {node.name!r} (Pad): {len(pads)} pads for rank {rank}")
    return pads
