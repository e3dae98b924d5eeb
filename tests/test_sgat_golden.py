"""The Numba SGAT evaluator against outputs the C++ evaluator it replaced gave, bit for bit.

tests/golden/sgat_evaluator.npz was written by `bench/sgat_parity.py --golden` (which also compared
both evaluators on every plan of every zoo region) with the last build that had the C++ evaluator:
every 12th distinct region of resnet50, bert_base, mobilenet_v2 and gpt2 (inference and training) on
Ascend910A, Ascend310P3 and Ascend910B2, each with random and completed plans, one completion and 64
single kernels.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aoe.sgat.evaluator import complete, evaluate_arrays, kernel_costs
from aoe.sgat.model import RegionData

GOLDEN = np.load(Path(__file__).parent / "golden" / "sgat_evaluator.npz")
REGIONS = range(len(GOLDEN["labels"]))
NAMES = ("edges", "opf", "edgef", "tens", "tensf", "reach", "anc", "socp")


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("j", REGIONS)
def test_plans_kernels_and_completion_as_the_cpp_evaluator(j: int) -> None:
    arrays = [GOLDEN[f"r{j}_{name}"] for name in NAMES]
    plans = GOLDEN[f"r{j}_plans"].astype(np.int64)
    want = GOLDEN[f"r{j}_times"]
    assert np.array_equal(_bits(evaluate_arrays(plans, *arrays, parallel=False)), _bits(want))
    assert np.array_equal(_bits(evaluate_arrays(plans, *arrays, parallel=True)), _bits(want))
    done = GOLDEN[f"r{j}_complete_in"].astype(np.int64)
    complete(done, int(GOLDEN[f"r{j}_complete_k"][0]), arrays[0], arrays[1].shape[0])
    assert np.array_equal(done, GOLDEN[f"r{j}_complete_out"])
    rd = RegionData(arrays[1].shape[0], *arrays)
    split, tile, l2 = (int(x) for x in GOLDEN[f"r{j}_kernel_args"])
    got = kernel_costs(rd, GOLDEN[f"r{j}_masks"], split, tile, l2)
    assert np.array_equal(_bits(got), _bits(GOLDEN[f"r{j}_kernel_times"]))


def test_the_golden_sample_prices_real_plans() -> None:
    # a sample that only held invalid plans would check nothing: most regions must have finite times
    finite = [np.isfinite(GOLDEN[f"r{j}_times"]).sum() for j in REGIONS]
    assert len(finite) >= 50 and sum(f > 0 for f in finite) >= 0.9 * len(finite)
    labels = set(GOLDEN["labels"].tolist())
    assert {lab.rsplit("/", 1)[1] for lab in labels} == {"Ascend910A", "Ascend310P3", "Ascend910B2"}
