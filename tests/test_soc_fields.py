"""The SoC description has one field table on each side of the binding; they must agree name for name."""
from __future__ import annotations

import dataclasses

import pytest

from aoe import _sim
from aoe.soc import Soc, known_socs, load_soc

# derived in Python when the native twin is built, not read from a SoC file
DERIVED = {"gm_to_ub_rate"}


def _native_fields() -> set[str]:
    return {n for n, v in vars(_sim.SoC).items() if isinstance(v, property)}


def test_python_and_cpp_soc_fields_agree() -> None:
    py = {f.name for f in dataclasses.fields(Soc)} - {"source", "ini_sha256", "_native"}   # where it came from
    cpp = _native_fields()
    assert py - cpp == set(), "fields the C++ SoC lacks"
    assert cpp - py == DERIVED, "C++ fields Python never sets"


@pytest.mark.parametrize("name", known_socs())
def test_every_field_reaches_the_simulator(name: str) -> None:
    soc = load_soc(name)
    native = soc.native
    for f in dataclasses.fields(Soc):
        if f.name in ("source", "ini_sha256", "_native"):
            continue
        got, want = getattr(native, f.name), getattr(soc, f.name)
        assert got == pytest.approx(want) if isinstance(want, float) else got == want, f.name
    assert native.gm_to_ub_rate == soc.ddr_rate
