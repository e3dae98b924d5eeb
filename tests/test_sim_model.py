"""Behaviour of the kernel models: constraints, reasons, formats, padding, buffering, calibration."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from aoe import AoeError, _sim, sim
from aoe.soc import known_socs, load_soc

B2 = "Ascend910B2"


def mm_default(op, soc=B2):
    return sim.default_strategy(load_soc(soc), op)


# --- SoC descriptions -------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend310P3"])
def test_every_shipped_soc_loads(name):
    soc = load_soc(name)
    assert soc.name == name and soc.cube_cores > 0 and soc.hbm_gbps > 0
    assert soc.native.cube_cores == soc.cube_cores
    assert name in known_socs()


def test_soc_numbers_follow_the_reference():
    b2, a, p = load_soc("Ascend910B2"), load_soc("Ascend910A"), load_soc("Ascend310P3")
    assert (b2.cube_cores, b2.vector_cores, b2.separated, b2.freq_mhz) == (24, 48, True, 1800)
    assert (b2.l0c, b2.l1, b2.ub, b2.l2) == (128 * 1024, 512 * 1024, 192 * 1024, 201326592)
    assert (a.cube_cores, a.separated, a.l0c, a.l1) == (32, False, 256 * 1024, 1024 * 1024)
    assert a.peak_flops["float16"] == pytest.approx(262.144e12)  # 32 cores x 8192 FLOP x 1 GHz
    assert b2.peak_flops["float16"] == pytest.approx(24 * 8192 * 1.8e9)
    assert p.hbm_gbps == pytest.approx(204.8)


def test_unknown_soc_lists_the_known_ones():
    with pytest.raises(AoeError, match="known SoCs: Ascend310P3, Ascend910A, Ascend910B2, Ascend910B3"):
        load_soc("Ascend999")


CANN_STYLE = """[version]
SoC_version=Ascend910B4
[SoCInfo]
ai_core_cnt=20
cube_core_cnt=20
vector_core_cnt=40
ai_cpu_cnt=6
memory_type=
memory_size=34359738368
l2_type=0
l2_size=100663296
l2PageNum=64
[AICoreSpec]
cube_freq=1650
cube_m_size=16
cube_n_size=16
cube_k_size=16
vec_calc_size=128
l0_a_size=65536
l0_b_size=65536
l0_c_size=131072
l1_size=524288
smask_buffer=0
ub_size=196608
ubblock_size=32
ubbank_size=4096
ubbank_num=64
ubburst_in_one_block=32
ubbank_group_num=16
unzip_engines=0
unzip_max_ratios=64
unzip_channels=0
unzip_is_tight=0
cube_vector_split=1
sparsity=1
[AICoreMemoryRates]
ddr_rate=32
ddr_read_rate=32
ddr_write_rate=32
l2_rate=110
l2_read_rate=110
l2_write_rate=86
l1_to_l0_a_rate=512
l1_to_l0_b_rate=256
l1_to_ub_rate=128
l0_c_to_ub_rate=256
ub_to_l2_rate=64
ub_to_ddr_rate=64
ub_to_l1_rate=128
[VectorCoreSpec]
vec_freq=1650
vec_calc_size=128
[CPUCache]
AICPUSyncBySW=0
TSCPUSyncBySW=0
"""


def test_a_cann_platform_config_file_loads(tmp_path):
    path = tmp_path / "Ascend910B4.ini"
    path.write_text(CANN_STYLE)
    soc = load_soc(str(path))
    assert soc.name == "Ascend910B4" and soc.separated and soc.cube_cores == 20 and soc.vector_cores == 40
    assert soc.l2 == 100663296 and soc.freq_mhz == 1650
    # no chip bandwidth in a CANN file: the cores' GM ports bound it
    assert soc.hbm_gbps == pytest.approx(32 * 20 * 1650 / 1000)
    r = sim.simulate(soc, sim.MatMul(m=1024, n=1024, k=1024))
    assert r.valid and r.time_us > 0


def test_bad_soc_files_are_clear_errors(tmp_path):
    missing = tmp_path / "missing.ini"
    missing.write_text(CANN_STYLE.replace("l1_size=524288\n", ""))
    with pytest.raises(AoeError, match=r"missing \[AICoreSpec\] l1_size"):
        load_soc(str(missing))
    bad = tmp_path / "bad.ini"
    bad.write_text(CANN_STYLE.replace("cube_freq=1650", "cube_freq=fast"))
    with pytest.raises(AoeError, match="cube_freq='fast' is not a number"):
        load_soc(str(bad))
    neg = tmp_path / "neg.ini"
    neg.write_text(CANN_STYLE.replace("ai_core_cnt=20", "ai_core_cnt=-4"))
    with pytest.raises(AoeError, match="cube_cores must be positive"):
        load_soc(str(neg))
    garbage = tmp_path / "garbage.ini"
    garbage.write_bytes(b"\x00\xff[[[not an ini")
    with pytest.raises(AoeError):
        load_soc(str(garbage))
    with pytest.raises(AoeError, match="does not exist"):
        load_soc(str(tmp_path / "nope.ini"))


# --- constraints and reason codes -------------------------------------------------------------

def _with(strategy, **changes):
    out = dict(strategy)
    out.update(changes)
    return out


def test_over_capacity_and_misaligned_strategies_name_the_reason():
    op = sim.MatMul(m=4096, n=4096, k=4096)
    base = mm_default(op)
    assert sim.simulate(B2, op, base).valid
    cases = {
        "l0a_overflow": _with(base, baseM=256, baseK=128, dbL0A=1),
        "l0b_overflow": _with(base, baseN=256, baseK=128, dbL0B=1),
        "l0c_overflow": _with(base, baseM=256, baseN=256, dbL0C=0),
        "l1_overflow": _with(base, stepKa=16, stepKb=16, depthA1=32, depthB1=32),
        "misaligned": _with(base, baseM=120),
        "too_many_cores": _with(base, usedCoreNum=25),
        "bad_value": _with(base, dbL0A=2),
        "inconsistent": _with(base, depthA1=3),
        "exceeds_shape": _with(base, singleCoreM=8192),
    }
    for reason, strategy in cases.items():
        r = sim.simulate(B2, op, strategy)
        assert not r.valid and r.reason == reason, (reason, r.reason)
        assert r.bound == "invalid" and r.tflops == 0.0
    times, reasons = sim.simulate_times(B2, op, [cases["l1_overflow"]])
    assert np.isinf(times[0]) and sim.REASONS[reasons[0]] == "l1_overflow"


def test_vector_ub_and_alignment_reasons():
    op = sim.VectorOp("Add", (64, 1024 * 1024))
    ok = sim.simulate(B2, op)
    assert ok.valid
    assert sim.simulate(B2, op, _with(ok.strategy, tileLen=100000 // 16 * 16)).reason == "ub_overflow"
    assert sim.simulate(B2, op, _with(ok.strategy, tileLen=1000)).reason == "misaligned"  # 2000 B not 32-aligned
    softmax = sim.VectorOp("SoftmaxV2", (64, 200000))  # a row does not fit in UB
    single_pass = sim.simulate(B2, softmax, {"blockDim": 48, "tileLen": 8192, "doubleBuffer": 1, "impl": 2})
    assert single_pass.reason == "ub_overflow"
    assert sim.simulate(B2, softmax, {"blockDim": 48, "tileLen": 8192, "doubleBuffer": 1, "impl": 1}).valid


def test_separated_cores_run_vector_work_on_aiv():
    op = sim.VectorOp("Gelu", (4096, 4096))
    s48 = {"blockDim": 48, "tileLen": 8192, "doubleBuffer": 1, "impl": 0}
    assert sim.simulate("Ascend910B2", op, s48).valid          # 48 AIV cores
    assert sim.simulate("Ascend910A", op, s48).reason == "too_many_cores"  # 32 coupled cores
    mm = sim.MatMul(m=4096, n=4096, k=4096)
    assert sim.simulate("Ascend910B2", mm, _with(mm_default(mm), usedCoreNum=25)).reason == "too_many_cores"


# --- the effects the model must show ----------------------------------------------------------

def test_double_buffering_helps_a_balanced_case():
    op = sim.MatMul(m=4096, n=4096, k=4096)
    base = mm_default(op)
    r_db = sim.simulate(B2, op, base)
    assert abs(r_db.busy_us["MTE2"] - r_db.busy_us["Cube"]) < 0.5 * r_db.busy_us["Cube"]  # balanced
    single = _with(base, depthA1=base["stepKa"], depthB1=base["stepKb"], dbL0A=0, dbL0B=0)
    r_single = sim.simulate(B2, op, single)
    assert r_single.valid
    assert r_db.time_us < 0.8 * r_single.time_us
    add = sim.VectorOp("Add", (1 << 24,))
    d = sim.simulate(B2, add)
    assert d.strategy["doubleBuffer"] == 1
    assert sim.simulate(B2, add, _with(d.strategy, doubleBuffer=0)).time_us > 1.2 * d.time_us


def test_nz_operands_load_faster_than_nd():
    nd = sim.MatMul(m=4096, n=4096, k=4096)
    nz = sim.MatMul(m=4096, n=4096, k=4096, a_format="FRACTAL_NZ", b_format="FRACTAL_NZ")
    strat = mm_default(nd)
    r_nd, r_nz = sim.simulate(B2, nd, strat), sim.simulate(B2, nz, strat)
    assert r_nz.busy_us["MTE2"] < 0.9 * r_nd.busy_us["MTE2"]
    assert r_nz.time_us < r_nd.time_us
    # the ND penalty grows as the contiguous bursts shrink (short K chunks of a row-major A)
    short = _with(strat, stepKa=1, stepKb=1, depthA1=2, depthB1=2)
    assert (sim.simulate(B2, nd, short).busy_us["MTE2"] / sim.simulate(B2, nz, short).busy_us["MTE2"]
            > r_nd.busy_us["MTE2"] / r_nz.busy_us["MTE2"])


def test_transdata_to_nz_costs_more_than_a_copy():
    copy = sim.simulate(B2, sim.VectorOp("Cast", (4096, 1024), out_dtype="float16"))
    trans = sim.simulate(B2, sim.VectorOp("TransData", (4096, 1024), src_format="ND", dst_format="FRACTAL_NZ"))
    assert trans.time_us > copy.time_us


def test_padding_to_fractals_costs():
    aligned = sim.simulate(B2, sim.MatMul(m=16 * 96, n=4096, k=4096))
    ragged = sim.simulate(B2, sim.MatMul(m=16 * 96 + 1, n=4096, k=4096))
    per_flop = lambda r, m: r.time_us / (2.0 * m * 4096 * 4096)  # noqa: E731
    assert per_flop(ragged, 16 * 96 + 1) > per_flop(aligned, 16 * 96)
    # conv: 3 input channels pad to C0 = 16, so the first layer wastes most of the Cube
    c3 = sim.simulate(B2, sim.Conv2D(x=(32, 3, 224, 224), weight=(64, 3, 3, 3), pads=(1, 1, 1, 1)))
    c16 = sim.simulate(B2, sim.Conv2D(x=(32, 16, 224, 224), weight=(64, 16, 3, 3), pads=(1, 1, 1, 1)))
    assert c3.busy_us["Cube"] == pytest.approx(c16.busy_us["Cube"])
    assert c3.tflops < 0.25 * c16.tflops


def test_depthwise_on_the_cube_wastes_it():
    dw = sim.simulate(B2, sim.Conv2D(x=(32, 96, 56, 56), weight=(96, 1, 3, 3), pads=(1, 1, 1, 1), groups=96))
    dense = sim.simulate(B2, sim.Conv2D(x=(32, 96, 56, 56), weight=(96, 96, 3, 3), pads=(1, 1, 1, 1)))
    assert dw.tflops < 0.05 * dense.tflops


def test_strided_backprop_input_multiplies_zeros():
    fwd = sim.simulate(B2, sim.Conv2D(x=(32, 128, 56, 56), weight=(128, 128, 3, 3), strides=(2, 2),
                                      pads=(1, 1, 1, 1)))
    dx = sim.simulate(B2, sim.Conv2D(x=(32, 128, 56, 56), weight=(128, 128, 3, 3), strides=(2, 2),
                                     pads=(1, 1, 1, 1), op_type="Conv2DBackpropInput"))
    assert dx.busy_us["Cube"] > 3 * fwd.busy_us["Cube"]


def test_l2_tiling_matters_for_operands_beyond_l2():
    op = sim.MatMul(m=8192, n=8192, k=8192)  # 256 MiB of operands > 192 MB L2
    strat = mm_default(op)
    assert strat["tilingEnable"] == 1
    r_tiled = sim.simulate(B2, op, strat)
    m_blocks = -(-8192 // strat["singleCoreM"])
    n_blocks = -(-8192 // strat["singleCoreN"])
    untiled = _with(strat, tilingEnable=0, l2MTileCnt=1, l2NTileCnt=1, l2MTileBlock=m_blocks,
                    l2NTileBlock=n_blocks)
    r_untiled = sim.simulate(B2, op, untiled)
    assert r_untiled.hbm_bytes > r_tiled.hbm_bytes


# --- calibration (figures also printed by bench/calibration.py) -------------------------------

def test_small_matmul_is_dominated_by_overheads():
    r = sim.simulate(B2, sim.MatMul(m=128, n=128, k=128))
    overheads = r.busy_us["Overhead"] + r.busy_us["Scalar"]
    assert r.bound in ("Overhead", "Scalar")
    assert overheads > 5 * r.busy_us["Cube"]


def test_big_add_reaches_80_to_95_percent_of_hbm():
    soc = load_soc(B2)
    r = sim.simulate(soc, sim.VectorOp("Add", (128 * 1024 * 1024,)))  # two 256 MiB inputs
    frac = r.gbps * 1e9 / soc.hbm_bytes_per_s
    assert 0.80 <= frac <= 0.95, frac


def test_default_8192_cubed_is_in_the_calibrated_band():
    soc = load_soc(B2)
    r = sim.simulate(soc, sim.MatMul(m=8192, n=8192, k=8192))
    frac = r.tflops * 1e12 / soc.peak_flops["float16"]
    assert 0.80 <= frac <= 0.92, frac


# --- bad input ---------------------------------------------------------------------------------

def test_bad_operators_are_aoe_errors():
    with pytest.raises(AoeError, match="no model for operator type 'Frobnicate'"):
        sim.make_op("Frobnicate", [[4, 4]])
    with pytest.raises(AoeError, match="dimensions must be in"):
        sim.MatMul(m=0, n=4, k=4)
    with pytest.raises(AoeError, match="dimensions must be in"):
        sim.VectorOp("Add", (4, -1))
    with pytest.raises(AoeError, match="K of A"):
        sim.make_op("MatMulV2", [[4, 5], [6, 7]])
    with pytest.raises(AoeError, match="unknown dtype"):
        sim.MatMul(m=4, n=4, k=4, dtype="float8")
    with pytest.raises(AoeError, match="groups must divide"):
        sim.Conv2D(x=(1, 3, 8, 8), weight=(4, 1, 3, 3), groups=2)
    with pytest.raises(AoeError, match="larger than the padded input"):
        sim.Conv2D(x=(1, 3, 2, 2), weight=(4, 3, 3, 3))
    with pytest.raises(AoeError, match="not a permutation"):
        sim.VectorOp("Transpose", (2, 3), perm=(0, 0))


def test_bad_strategies_are_aoe_errors_not_crashes():
    op = sim.MatMul(m=64, n=64, k=64)
    with pytest.raises(AoeError, match="rows of 23 integers"):
        sim.simulate(B2, op, [1, 2, 3])
    with pytest.raises(AoeError, match="missing"):
        sim.simulate(B2, op, {"usedCoreNum": 1})
    with pytest.raises(AoeError, match="integers"):
        sim.simulate_times(B2, op, np.zeros((2, 23), dtype=np.float64))
    with pytest.raises(AoeError, match="integers"):
        sim.simulate(B2, op, ["a"] * 23)
    # negative and absurd numbers are a reason, not a crash
    times, reasons = sim.simulate_times(B2, op, np.full((4, 23), -5, dtype=np.int64))
    assert np.isinf(times).all() and set(reasons) == {_sim.REASONS.index("bad_value")}
    huge = np.full((1, 23), 2**62, dtype=np.int64)
    assert not np.isfinite(sim.simulate_times(B2, op, huge)[0]).any()


def test_native_layer_rejects_bad_arrays_with_python_errors():
    soc = load_soc(B2)
    op = sim.MatMul(m=64, n=64, k=64)
    with pytest.raises(ValueError):
        _sim.simulate_times(soc.native, _sim.K_MATMUL, op.params()[:5], np.zeros((1, 23), np.int64))
    with pytest.raises(ValueError):
        _sim.simulate_times(soc.native, 99, op.params(), np.zeros((1, 23), np.int64))
    with pytest.raises(ValueError):
        _sim.simulate_times(soc.native, _sim.K_MATMUL, op.params(), np.zeros((3,), np.int64))


def test_cli_prints_json_and_errors_cleanly(tmp_path):
    # run outside the source tree so the installed package (with its extension) is imported
    proc = subprocess.run([sys.executable, "-m", "aoe.cli", "simulate", "--op", "MatMulV2", "--shape", "256,512",
                           "--shape", "512,1024"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["valid"] and out["strategy_source"] == "default" and out["time_us"] > 0
    assert set(out["busy_us"]) == set(sim.PIPES) and out["strategy"]["baseK"] > 0
    for bad in (["--op", "Nope", "--shape", "4"], ["--op", "Add", "--shape", "4,x"],
                ["--op", "Add", "--shape", "4", "--soc_version", "Ascend1"],
                ["--op", "MatMulV2", "--shape", "4,4", "--shape", "4,4", "--strategy", "{bad json"]):
        proc = subprocess.run([sys.executable, "-m", "aoe.cli", "simulate", *bad], capture_output=True, text=True,
                              cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith("aoe: error:"), (bad, proc.stderr)
        assert "Traceback" not in proc.stderr
