"""`aoe bank` ls / show / export / import / verify."""
import json
import subprocess
import sys

import pytest

from aoe.bank import OpBank, SubgraphBank, make_pending
from aoe.bank.subgraph import make_subgraph_pending
from aoe.cli import main
from conftest import mm_key, mm_know

SOC, MM = "Ascend910B2", "MatMulV3"


@pytest.fixture
def bank_dir(env):
    """TUNE_BANK_PATH of the isolated environment (conftest.py)."""
    return env / "bank"


def run(capsys, *argv):
    rc = main(["bank", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_ls_lists_custom_builtin_and_subgraph(bank_dir, capsys):
    OpBank(bank_dir / SOC, SOC).save([make_pending(MM, mm_key(16), mm_know(1), 2.5)])[0]
    SubgraphBank(bank_dir).save([make_subgraph_pending("42", {"plan": [1]}, 3.0)])[0]
    rc, out, _ = run(capsys, "ls")
    assert rc == 0
    assert "custom" in out and "builtin" in out and "subgraph" in out and "2.500us" in out
    rc, out, _ = run(capsys, "ls", "--json")
    recs = [json.loads(x) for x in out.splitlines()]
    sources = {(r["source"], r.get("op", "subgraph")) for r in recs}
    assert ("custom", MM) in sources and ("builtin", "MatMulV2") in sources and ("custom", "subgraph") in sources
    mine = next(r for r in recs if r["source"] == "custom" and "op" in r)
    assert mine["knowledge"] == mm_know(1) and mine["info_dict"]["m"] == 16


def test_show_by_id_and_repo_key(bank_dir, capsys):
    b = OpBank(bank_dir / SOC, SOC)
    b.save([make_pending(MM, mm_key(16), mm_know(1), 2.5)])[0]
    e = b.lookup(MM, mm_key(16))
    for k in (str(e.id), hex(e.id), f"{MM}:{e.id}"):
        rc, out, _ = run(capsys, "show", k)
        assert rc == 0 and json.loads(out)["knowledge"] == mm_know(1)
    SubgraphBank(bank_dir).save([make_subgraph_pending("1024942313106047484", {"plan": [1]}, 3.0)])[0]
    rc, out, _ = run(capsys, "show", "1024942313106047484")
    assert rc == 0 and json.loads(out)["repo_key"] == "1024942313106047484"
    rc, _, err = run(capsys, "show", "123")
    assert rc == 2 and "no bank entry" in err


def test_export_import_keeps_the_better_strategy(tmp_path, bank_dir, capsys, monkeypatch):
    mine = OpBank(bank_dir / SOC, SOC)
    mine.save([make_pending(MM, mm_key(16), mm_know(1), 5.0)])[0]  # colleague has it faster
    mine.save([make_pending(MM, mm_key(32), mm_know(2), 5.0)])[0]  # colleague has it slower
    theirs_dir = tmp_path / "colleague"
    theirs_dir.mkdir()
    theirs = OpBank(theirs_dir / SOC, SOC)
    theirs.save([make_pending(MM, mm_key(16), mm_know(10), 4.0)])[0]
    theirs.save([make_pending(MM, mm_key(32), mm_know(20), 6.0)])[0]
    theirs.save([make_pending(MM, mm_key(48), mm_know(30), 1.0)])[0]  # new to me
    SubgraphBank(theirs_dir).save([make_subgraph_pending("9", {"plan": [2]}, 1.0)])[0]
    exported = tmp_path / "colleague.jsonl"
    rc, out, _ = run(capsys, "--tune_bank_path", str(theirs_dir), "export", str(exported))
    assert rc == 0 and "exported 3 operator and 1 subgraph" in out
    rc, out, err = run(capsys, "import", str(exported))
    assert rc == 0, err
    assert "2 added" in out and "1 replaced" in out and "1 kept" in out
    assert mine.lookup(MM, mm_key(16)).knowledge == mm_know(10)
    assert mine.lookup(MM, mm_key(32)).knowledge == mm_know(2)
    assert mine.lookup(MM, mm_key(48)).knowledge == mm_know(30)
    assert SubgraphBank(bank_dir).lookup("9").knowledge == {"plan": [2]}
    assert "soc" not in mine.lookup(MM, mm_key(48)).aoe  # export-only bookkeeping is stripped
    rc, out, _ = run(capsys, "import", str(exported))  # idempotent
    assert rc == 0 and "0 added" in out and "0 replaced" in out


def test_import_refuses_other_socs_and_bad_records(tmp_path, bank_dir, capsys):
    f = tmp_path / "in.jsonl"
    cann = {"id": 1, "op": MM, "version": 1, "info_dict": mm_key(64), "knowledge": mm_know(4)}
    lines = [json.dumps({**cann, "aoe": {"soc": "Ascend310P3", "core_num": 8}}),
             json.dumps({**cann, "info_dict": {"m": 1}}), "{broken", json.dumps({**cann, "op": "../x"}),
             json.dumps({"repo_key": "", "knowledge": {}}), json.dumps(cann)]
    f.write_text("\n".join(lines) + "\n")
    rc, out, err = run(capsys, "import", str(f))
    assert rc == 1
    assert f"{f}:1: rejected" in err and "Ascend310P3" in err
    assert f"{f}:2:" in err and f"{f}:3:" in err and f"{f}:4:" in err and f"{f}:5:" in err
    assert "1 added" in out and "5 rejected" in out
    e = OpBank(bank_dir / SOC, SOC).lookup(MM, mm_key(64))
    assert e.knowledge == mm_know(4) and e.perf_us is None  # a CANN record: performance unknown
    rc, out, err = run(capsys, "import", str(f), "--force")
    assert "Ascend310P3" not in err


def test_verify_reports_damage_with_file_and_line(bank_dir, capsys):
    b = OpBank(bank_dir / SOC, SOC)
    for m in (16, 32):
        b.save([make_pending(MM, mm_key(m), mm_know(m), 1.0)])[0]
    rc, out, _ = run(capsys, "verify")
    assert rc == 0 and "0 damaged" in out
    path = b.path_for(MM)
    lines = path.read_text().splitlines()
    tampered = json.loads(lines[1])
    tampered["info_dict"]["m"] = 17  # the id no longer matches the key
    missing = json.loads(lines[0])
    del missing["knowledge"]["baseK"]
    path.write_text("\n".join([json.dumps(missing), json.dumps(tampered), '{"id": 1, "op"']) + "\n")
    SubgraphBank(bank_dir).path.write_text("nope\n")
    rc, out, _ = run(capsys, "verify")
    assert rc == 1
    assert f"{path}:1:" in out and "baseK" in out
    assert f"{path}:2:" in out and "never be found" in out
    assert f"{path}:3:" in out
    assert "subgraph.json:1:" in out


def test_cli_errors_are_clean(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TUNE_BANK_PATH", str(tmp_path / "missing"))
    rc, _, err = run(capsys, "ls")
    assert rc == 2 and "TUNE_BANK_PATH" in err and "does not exist" in err
    rc, _, err = run(capsys, "--tune_bank_path", str(tmp_path), "--soc_version", "../x", "ls")
    assert rc == 2 and "invalid SoC version" in err
    rc, _, err = run(capsys, "--tune_bank_path", str(tmp_path), "--soc_version", "AscendX", "ls")
    assert rc == 2 and "core_num" in err
    rc, _, err = run(capsys, "--tune_bank_path", str(tmp_path), "import", str(tmp_path / "nofile"))
    assert rc == 2 and "does not exist" in err


def test_help_documents_location_and_soc(capsys):
    with pytest.raises(SystemExit) as ei:
        main(["bank", "--help"])
    assert ei.value.code == 0
    out = capsys.readouterr().out
    for word in ("TUNE_BANK_PATH", "ASCEND_CACHE_PATH", "--soc_version", "Ascend910B2", "verify",
                 "import", "export"):
        assert word in out


def test_console_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aoe.cli", "bank", "--tune_bank_path", str(tmp_path), "verify"],
                          capture_output=True, text=True, cwd=tmp_path)  # the installed aoe
    assert proc.returncode == 0, proc.stderr
    assert "damaged" in proc.stdout
