"""Every one-input operator the catalogue accepts has a valid default on every SoC, at any shape.

A property test over shapes, axes and dtypes at the job's level (catalogue -> case -> default price):
an operator either is refused with a reason (Unsupported / AoeError) or is priced with a finite time;
never an exception such as "no valid default vector tiling" that would fail a case in a real job.
"""
from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aoe.errors import AoeError
from aoe.graph.singleop import single_ops_graph
from aoe.opat.apply import price
from aoe.opat.search import simulator_measure
from aoe.ops import Unsupported, describe
from aoe.ops.catalogue import _VECTOR_AS
from aoe.sim.ops import VECTOR_ALIASES, VECTOR_OPS
from aoe.soc import known_socs, load_soc

# the vector operators (and their aliases) with one input; DepthwiseConv2D is a Cube operator listed among
# the vector kernels for its depthwise variant: it needs its weight (two inputs)
TYPES = sorted((set(VECTOR_OPS) | set(VECTOR_ALIASES) | set(_VECTOR_AS)) - {"DepthwiseConv2D"})


@st.composite
def one_input_ops(draw):
    shape = draw(st.lists(st.integers(1, 512), min_size=1, max_size=4))
    op_type = draw(st.sampled_from(TYPES))
    axes = draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    dtype = draw(st.sampled_from(["float16", "float32"]))
    return {"op": op_type, "name": "x", "input_desc": [{"shape": shape, "type": dtype}],
            "output_desc": [{"shape": shape, "type": dtype}], "attr": {"axes": axes}}


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=one_input_ops(), soc=st.sampled_from(known_socs()))
def test_every_accepted_operator_has_a_valid_default(d, soc):
    g = single_ops_graph([d])
    try:
        case = describe(g, g.ops[0])
    except (Unsupported, AoeError):
        return  # refused with a reason: the job lists it as skipped or failed, naming why
    s = load_soc(soc)
    t = price(case, s, None, simulator_measure(s))
    assert math.isfinite(t) and t > 0, (d, soc, t)
