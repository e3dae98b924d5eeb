"""Hostile and impossible bank files: FIFOs, hard links, out-of-range records, false time claims,
and the append-only save (compaction, incremental readers, verify's duplicate count)."""
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from aoe.bank import BankWarning, OpBank, make_pending
from aoe.bank.schema import MATMUL_KNOWLEDGE
from aoe.cli import main
from aoe.errors import AoeError
from conftest import mm_key, mm_know

SOC, MM = "Ascend910B2", "MatMulV3"


@pytest.fixture
def bank_dir(env):
    """TUNE_BANK_PATH of the isolated environment (conftest.py)."""
    return env / "bank"


def _run_with_timeout(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    # a FIFO would block open() forever: run the reader in a child so a hang fails the test
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ))


def test_a_planted_fifo_hangs_no_reader_and_is_refused_by_writers(bank_dir, capsys):
    bank = OpBank(bank_dir / SOC, SOC)
    bank.save([make_pending(MM, mm_key(16), mm_know(1), 2.0)])
    fifo = bank.path_for("Add")
    os.mkfifo(fifo)
    os.mkfifo(bank_dir / "subgraph.json")
    reader = _run_with_timeout("""
        import sys, warnings
        from aoe.bank import OpBank, SubgraphBank
        from aoe.cli import main
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            b = OpBank(sys.argv[1], "Ascend910B2")
            assert b.lookup("Add", {"op_type": "Add", "input_shapes": [[2]], "input_dtypes": [1],
                                    "input_formats": [2], "output_dtypes": [1], "output_formats": [2],
                                    "attrs": {}}) is None
            assert SubgraphBank(sys.argv[2]).lookup("1") is None
        assert any("not a regular file" in str(x.message) for x in w), [str(x.message) for x in w]
        rc_ls = main(["bank", "ls"])
        rc_verify = main(["bank", "verify"])
        print("RC", rc_ls, rc_verify)
        """, str(bank_dir / SOC), str(bank_dir))
    assert reader.returncode == 0, reader.stderr
    assert "RC 0 1" in reader.stdout and "not a regular file" in reader.stdout
    with pytest.raises(AoeError, match="not a regular file"):
        bank.save([make_pending("Add", {"input_shapes": [[2]], "input_dtypes": [1], "input_formats": [2],
                                        "output_dtypes": [1], "output_formats": [2]},
                                {"blockDim": 1, "tileLen": 2, "doubleBuffer": 0, "impl": 0}, 1.0)])


def test_a_fifo_as_lock_file_is_refused_not_waited_on(bank_dir):
    bank = OpBank(bank_dir / SOC, SOC)
    bank.save([make_pending(MM, mm_key(16), mm_know(1), 2.0)])
    path = bank.path_for(MM)
    lock = path.with_name(f".{path.name}.lock")
    lock.unlink()
    os.mkfifo(lock)
    with pytest.raises(AoeError, match="lock file .* not a regular file"):
        bank.save([make_pending(MM, mm_key(32), mm_know(1), 2.0)])


def test_a_planted_hard_link_is_refused_and_the_foreign_file_untouched(bank_dir, tmp_path):
    bank = OpBank(bank_dir / SOC, SOC)
    bank.save([make_pending(MM, mm_key(16), mm_know(1), 2.0)])
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"secret": 1}\n')
    conv = bank.path_for("Conv2D")
    os.link(foreign, conv)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert list(OpBank(bank_dir / SOC, SOC).entries("Conv2D")) == []
    assert any("hard links" in str(x.message) for x in w)
    with pytest.raises(AoeError, match="hard links"):
        bank.save([make_pending("Conv2D", {"a_dtype": 1, "b_dtype": 1, "c_dtype": 1, "a_shape_n": 1,
                                           "a_shape_c": 16, "a_shape_h": 8, "a_shape_w": 8, "b_shape_n": 16,
                                           "b_shape_c": 16, "b_shape_h": 3, "b_shape_w": 3, "c_shape_h": 8,
                                           "c_shape_w": 8, "a_format": 3, "b_format": 3, "c_format": 3},
                                {f: 1 for f in ("singleCoreCi", "singleCoreCo", "singleCoreHo", "singleCoreWo",
                                                "hoL1", "woL1", "kAL1", "kBL1", "hoL0", "woL0", "kL0", "nL0",
                                                "pBufferFlag", "iterateMNOrder", "batchDim", "hoDim", "nDim",
                                                "groupDim")}, 1.0)])
    assert foreign.read_text() == '{"secret": 1}\n'
    # the same for a multiply-linked file that aoe itself would append to
    os.link(bank.path_for(MM), tmp_path / "second_name.json")
    with pytest.raises(AoeError, match="hard links"):
        bank.save([make_pending(MM, mm_key(32), mm_know(1), 2.0)])


def _record(m, know, perf, **aoe_extra):
    from aoe.bank.schema import MATMUL
    from aoe.bank.store import default_hash
    key = mm_key(m)
    rec = {"id": default_hash(MATMUL.pack(MM, key)), "op": MM, "version": 1, "info_dict": key,
           "knowledge": know}
    if perf is not None or aoe_extra:
        rec["aoe"] = {**({"perf_us": perf} if perf is not None else {}), **aoe_extra}
    return json.dumps(rec)


@pytest.mark.parametrize("why,line", [
    ("zero time", _record(16, mm_know(1), 0)),
    ("negative time", _record(16, mm_know(1), -3.0)),
    ("absurd time", _record(16, mm_know(1), 1e30)),
    ("absurd default time", _record(16, mm_know(1), 2.0, default_perf_us=0)),
    ("float knowledge", _record(16, {**mm_know(1), "baseM": 1e30}, 2.0)),
    ("huge knowledge", _record(16, {**mm_know(1), "baseM": 1 << 40}, 2.0)),
    ("negative knowledge", _record(16, {**mm_know(1), "baseM": -16}, 2.0)),
    ("bool knowledge", _record(16, {**mm_know(1), "baseM": True}, 2.0)),
    ("string knowledge", _record(16, {**mm_know(1), "baseM": "16"}, 2.0)),
    ("missing knowledge", _record(16, {f: 1 for f in MATMUL_KNOWLEDGE[1:]}, 2.0)),
])
def test_impossible_records_are_skipped_on_load_and_reported_by_verify(bank_dir, capsys, why, line):
    bank = OpBank(bank_dir / SOC, SOC)
    bank.save([make_pending(MM, mm_key(32), mm_know(2), 2.0)])  # a good neighbour
    path = bank.path_for(MM)
    with open(path, "a") as f:
        f.write(line + "\n")
    with pytest.warns(BankWarning):
        assert OpBank(bank_dir / SOC, SOC).lookup(MM, mm_key(16)) is None, why
    rc = main(["bank", "verify"])
    out = capsys.readouterr().out
    assert rc == 1 and f"{path}:2:" in out, (why, out)
    # a tuning write of that case is added (the impossible record never wins)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BankWarning)
        assert bank.save([make_pending(MM, mm_key(16), mm_know(3), 5.0)]) == ["added"]
        assert OpBank(bank_dir / SOC, SOC).lookup(MM, mm_key(16)).knowledge == mm_know(3)


def test_a_false_claim_does_not_pin_its_case_when_the_tuner_repriced_it(bank_dir):
    bank = OpBank(bank_dir / SOC, SOC)
    bank.save([make_pending(MM, mm_key(16), mm_know(1), 0.001)])  # in range, but a lie
    # without a re-priced time, the claim is all the bank knows: kept
    assert bank.save([make_pending(MM, mm_key(16), mm_know(2), 5.0)]) == ["kept"]
    # the tuner re-priced the stored strategy at 40 us: its 5 us result replaces it
    assert bank.save([make_pending(MM, mm_key(16), mm_know(2), 5.0, over=(mm_know(1), 40.0))]) == ["replaced"]
    assert OpBank(bank_dir / SOC, SOC).lookup(MM, mm_key(16)).knowledge == mm_know(2)
    # a re-pricing of some other strategy says nothing about what is stored now
    assert bank.save([make_pending(MM, mm_key(16), mm_know(3), 4.0, over=(mm_know(1), 40.0))]) == ["replaced"]
    assert bank.save([make_pending(MM, mm_key(16), mm_know(4), 4.5, over=(mm_know(1), 40.0))]) == ["kept"]


def test_appends_are_seen_incrementally_and_compaction_keeps_cann_layout(bank_dir, capsys):
    writer, reader = OpBank(bank_dir / SOC, SOC), OpBank(bank_dir / SOC, SOC)
    writer.save([make_pending(MM, mm_key(m), mm_know(1), 10.0) for m in (16, 32, 48)])
    assert reader.lookup(MM, mm_key(16)).perf_us == 10.0
    lines_obj = reader.file(MM).lines
    writer.save([make_pending(MM, mm_key(16), mm_know(2), 5.0)])
    writer.save([make_pending(MM, mm_key(64), mm_know(2), 5.0)])
    assert reader.lookup(MM, mm_key(16)).perf_us == 5.0 and reader.lookup(MM, mm_key(64)) is not None
    assert reader.file(MM).lines is lines_obj  # read incrementally, not reloaded
    rc = main(["bank", "verify"])
    out = capsys.readouterr().out
    assert rc == 0 and "1 superseded lines awaiting compaction" in out
    assert main(["bank", "compact"]) == 0
    recs = [json.loads(x) for x in writer.path_for(MM).read_text().splitlines()]
    assert [r["info_dict"]["m"] for r in recs] == [16, 32, 48, 64]  # one line per case, first place
    assert recs[0]["knowledge"] == mm_know(2)
    # the reader sees the new inode and reloads
    assert reader.lookup(MM, mm_key(16)).perf_us == 5.0 and reader.duplicates(MM) == 0
    capsys.readouterr()
    assert main(["bank", "verify"]) == 0 and "awaiting" not in capsys.readouterr().out


def test_auto_compaction_bounds_the_file(bank_dir):
    bank = OpBank(bank_dir / SOC, SOC)
    for r in range(1100):  # one case improved again and again
        bank.save([make_pending(MM, mm_key(16), mm_know(r % 7), 2000.0 - r)])
    assert len(bank.path_for(MM).read_text().splitlines()) <= 1025
    assert OpBank(bank_dir / SOC, SOC).lookup(MM, mm_key(16)).perf_us == 2000.0 - 1099
