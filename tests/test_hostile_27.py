"""Issue 27: hostile names, output paths and files, tried as an attacker would (run as root, as the
product runs). One test (or one parametrized family) per item of the issue, in its order:

 1 writers never replace a device, FIFO or symlink     2 `$…$` in names is plain text in charts
 3 hostile result JSON is a one-line error             4 names are made visibly safe on the terminal
 5 `aoe bank import` of garbage                         6 `aoe batch` checks every line first
 7 bounded argument sizes                               8 SIGTERM at the very start of a job
 9 symlinked / special bank paths refused at once       10 every knowledge field of a record checked
11 one environment parser                              12 a BankWarning prints no source line
13 AOE_LOCK_DIR mode 555 refused for root
"""
from __future__ import annotations

import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import isolated_environ, mm_key, mm_know, mm_op

from aoe.cli import main
from aoe.errors import AoeError

SOC, MM = "Ascend910B2", "MatMulV3"
ROOT = os.geteuid() == 0
# a name an attacker would give an operator: an OSC window title, an SGR colour, a bidi override,
# a zero-width space and an invalid mathtext expression
EVIL = "mm$\\frac$\x1b]0;pwned\x07\x1b[31mred\u202eevil\u200bx"
RAW = ("\x1b", "\x07", "\u202e", "\u200b")


def _aoe(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 240, pre: str = ""
         ) -> subprocess.CompletedProcess:
    """`aoe ARGS` in a child (a hang, e.g. on a FIFO, fails the test instead of blocking it)."""
    code = textwrap.dedent(pre) + "\nimport sys\nfrom aoe.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd)


def _one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr, p.stderr
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("aoe: error:"), p.stderr
    return lines[0]


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One finished OPAT job of one hostile-named matmul: its environment, single-op file and result file."""
    root = tmp_path_factory.mktemp("hostile_job")
    env = isolated_environ(root)
    env["AOE_SEARCH_BUDGET"] = "300"
    ops = root / "ops.json"
    ops.write_text(json.dumps([mm_op(256, 512, 256, EVIL)]), encoding="utf-8")
    p = _aoe(["--singleop", str(ops), "-j", "2", "--report", "off", "--progress_bar", "off"], env, root)
    assert p.returncode == 0, p.stderr
    result = next(root.glob("aoe_result_opat_*.json"))
    return {"root": root, "env": env, "ops": ops, "result": result, "out": p.stdout + p.stderr}


# --- 1. writers -------------------------------------------------------------------------------------

def _special(kind: str, path: Path, victim: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "symlink":
        path.symlink_to(victim)
    elif kind == "device":
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a copy of /dev/null's node
    elif kind == "directory":
        path.mkdir()


def _same_kind(kind: str, path: Path) -> bool:
    st = os.lstat(path)
    return {"fifo": stat.S_ISFIFO, "symlink": stat.S_ISLNK, "device": stat.S_ISCHR,
            "directory": stat.S_ISDIR}[kind](st.st_mode)


# the report and explain writers draw with matplotlib (the report extra); bank export needs no extra
_DRAWN = pytest.mark.extra("report")


@pytest.mark.skipif(not ROOT, reason="device nodes need root (the issue's setting)")
@pytest.mark.parametrize("kind", ["fifo", "symlink", "device"])
@pytest.mark.parametrize("writer", [pytest.param("report", marks=_DRAWN), pytest.param("explain", marks=_DRAWN),
                                    "export", pytest.param("explain_png", marks=_DRAWN)])
def test_1_writers_refuse_devices_fifos_and_symlinks(job: dict, tmp_path: Path, writer: str, kind: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    target = tmp_path / {"report": "out.html", "explain": "out.svg", "explain_png": "out.png",
                         "export": "out.jsonl"}[writer]
    _special(kind, target, victim)
    args = {"report": ["report", str(job["result"]), "--singleop", str(job["ops"]), "-o", str(target)],
            "explain": ["explain", "mm", "--singleop", str(job["ops"]), "-o", str(target)],
            "explain_png": ["explain", "MatMulV2", "--shape", "64,64", "--shape", "64,64", "--budget", "50",
                            "-o", str(target)],
            "export": ["bank", "export", str(target)]}[writer]
    if writer == "explain":
        args[1] = EVIL
    p = _aoe(args, job["env"], tmp_path, timeout=60)
    line = _one_line_error(p)
    assert "regular file" in line, line
    assert _same_kind(kind, target)
    assert victim.read_text() == "keep me\n"


@pytest.mark.extra("report")
def test_1_writers_replace_a_regular_file(job: dict, tmp_path: Path) -> None:
    target = tmp_path / "out.html"
    target.write_text("old")
    p = _aoe(["report", str(job["result"]), "--singleop", str(job["ops"]), "-o", str(target)], job["env"], tmp_path)
    assert p.returncode == 0, p.stderr
    assert target.read_text(encoding="utf-8").lower().startswith("<!doctype html>")


# --- 2. mathtext ------------------------------------------------------------------------------------

@pytest.mark.extra("report")
def test_2_dollar_names_are_plain_text_in_every_chart(job: dict, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    p = _aoe(["report", str(job["result"]), "--singleop", str(job["ops"]), "-o", str(out)], job["env"], tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    svg = tmp_path / "t.svg"
    p = _aoe(["explain", EVIL, "--singleop", str(job["ops"]), "-o", str(svg)], job["env"], tmp_path)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert "$\\frac$" in svg.read_text(encoding="utf-8")  # drawn as the characters it is
    assert "does not have a glyph" not in p.stderr        # control characters were escaped, not drawn


# --- 3. hostile result files --------------------------------------------------------------------------

def _huge(v, big):
    if isinstance(v, dict):
        return {k: _huge(x, big) for k, x in v.items()}
    if isinstance(v, list):
        return [_huge(x, big) for x in v]
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return big
    return v


@pytest.mark.parametrize("variant", ["deep", "digits", "overflow"])
def test_3_hostile_result_files_are_one_line_errors(job: dict, tmp_path: Path, variant: str) -> None:
    bad = tmp_path / "aoe_result_opat_1_pid1.json"
    if variant == "deep":
        bad.write_text("[" * 100_000 + "]" * 100_000)
    else:
        doc = json.loads(job["result"].read_text(encoding="utf-8"))
        if variant == "digits":  # beyond Python's int-from-string limit (4300 digits)
            text = json.dumps(_huge(doc, 0)).replace(": 0", ": " + "9" * 5000)
        else:
            text = json.dumps(_huge(doc, 10 ** 400))
        bad.write_text(text)
    p = _aoe(["report", str(bad), "--singleop", str(job["ops"]), "-o", str(tmp_path / "r.html")], job["env"], tmp_path)
    if p.returncode == 0:  # a page is fine too, as long as nothing broke
        assert "Traceback" not in p.stderr
    else:
        _one_line_error(p)


def test_3_hostile_explain_attrs_is_a_one_line_error(job: dict, tmp_path: Path) -> None:
    p = _aoe(["explain", "MatMulV2", "--shape", "64,64", "--shape", "64,64", "--attrs",
              "[" * 5000 + "]" * 5000], job["env"], tmp_path)
    _one_line_error(p)
    p = _aoe(["explain", "MatMulV2", "--shape", "64,64", "--shape", "64,64", "--attrs",
              '{"trans_b": ' + "9" * 5000 + "}"], job["env"], tmp_path)
    _one_line_error(p)


# --- 4. terminal injection ---------------------------------------------------------------------------

def test_4_safe_text_escapes_controls_bidi_and_zero_width() -> None:
    from aoe.safetext import safe_text

    s = safe_text(EVIL)
    assert not any(c in s for c in RAW)
    assert "\\x1b" in s and "\\u202e" in s and "\\u200b" in s and "mm$\\frac$" in s
    assert safe_text("plain /bert/layer.0/MatMul é 名") == "plain /bert/layer.0/MatMul é 名"


def test_4_summary_table_progress_bar_and_errors_print_no_raw_escapes(job: dict, tmp_path: Path) -> None:
    assert "mm$\\frac$" in job["out"]                 # the summary table names the operator...
    assert not any(c in job["out"] for c in RAW)       # ...visibly escaped
    from aoe.job.progress import Progress

    buf = io.StringIO()
    bar = Progress(True, stream=buf, force=True)
    bar.start(2)
    bar.step(False, EVIL)
    bar.close()
    assert "\\x1b" in buf.getvalue() and not any(c in buf.getvalue() for c in RAW)
    p = _aoe(["explain", EVIL + "nope", "--singleop", str(job["ops"])], job["env"], tmp_path)
    line = _one_line_error(p)
    assert not any(c in line for c in RAW)


@pytest.mark.extra("report")
def test_4_the_html_report_marks_hostile_names(job: dict, tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    p = _aoe(["report", str(job["result"]), "--singleop", str(job["ops"]), "-o", str(out)], job["env"], tmp_path)
    assert p.returncode == 0, p.stderr
    text = out.read_text(encoding="utf-8")
    assert 'class="name unsafe"' in text
    assert "\u202e" not in text and "\x1b" not in text


# --- 5. bank import of garbage -----------------------------------------------------------------------

def test_5_bank_import_of_garbage_counts_the_line_and_fails(job: dict, tmp_path: Path) -> None:
    env = isolated_environ(tmp_path)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"\x00\xffnot json at all")
    p = _aoe(["bank", "import", str(garbage)], env, tmp_path)
    assert p.returncode != 0, p.stdout
    assert "1 rejected" in p.stdout and f"{garbage}:1: rejected" in p.stderr


# --- 6. aoe batch ------------------------------------------------------------------------------------

def test_6_batch_checks_every_line_before_tuning_and_names_it(tmp_path: Path) -> None:
    from conftest import tiny_onnx

    env = isolated_environ(tmp_path)
    good = tiny_onnx(tmp_path / "good.onnx")
    lst = tmp_path / "list.txt"
    lst.write_text(f"{good}\n{tmp_path / 'missing.onnx'}\n")
    p = _aoe(["batch", str(lst), "--progress_bar", "off", "--work_path", str(tmp_path)], env, tmp_path, timeout=300)
    line = _one_line_error(p)
    assert f"{lst}:2" in line
    assert not list(tmp_path.glob("aoe_result_*"))  # nothing was tuned


def test_6_batch_names_the_line_of_an_unknown_soc(tmp_path: Path) -> None:
    env = isolated_environ(tmp_path)
    lst = tmp_path / "list.txt"
    lst.write_text("# models\nzoo:mobilenet_v2\nzoo:mobilenet_v2 --soc_version Ascend999\n")
    p = _aoe(["batch", str(lst), "--progress_bar", "off"], env, tmp_path, timeout=300)
    assert f"{lst}:3" in _one_line_error(p)


# --- 7. argument sizes ------------------------------------------------------------------------------

def test_7_an_oversized_argument_is_refused_at_once(env: Path, capsys: pytest.CaptureFixture) -> None:
    huge = ";".join(f"in{i}:1,2,3" for i in range(80_000))  # ~800 KB
    assert main(["-m", "zoo:mobilenet_v2", "-j", "2", "--input_shape", huge]) == 2
    err = capsys.readouterr().err
    assert "--input_shape" in err and "too long" in err
    assert main(["explain", "MatMulV2", "--shape", "1," * 200_000]) == 2
    assert "too long" in capsys.readouterr().err


# --- 8. SIGTERM at the start -------------------------------------------------------------------------

def test_8_sigterm_before_the_job_started_still_says_tuning_incomplete(job: dict, tmp_path: Path) -> None:
    # the signal lands as the job's own modules are imported: the earliest point the command runs code
    pre = """
        import os, signal
        import aoe.cli
        _real = aoe.cli._resolve
        def _resolve(argv):
            os.kill(os.getpid(), signal.SIGTERM)
            return _real(argv)
        aoe.cli._resolve = _resolve
        """
    env = dict(job["env"], AOE_BUILTIN_BANK="off")
    p = _aoe(["--singleop", str(job["ops"]), "-j", "2", "--report", "off", "--work_path", str(tmp_path)],
             env, tmp_path, pre=pre)
    assert p.returncode == 128 + signal.SIGTERM, (p.returncode, p.stderr)
    (result,) = tmp_path.glob("aoe_result_opat_*.json")
    assert "tuning incomplete" in result.read_text(encoding="utf-8")


def test_8_the_command_leaves_no_signal_handler_behind(env: Path, capsys: pytest.CaptureFixture) -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    assert main(["--singleop", str(env / "missing.json"), "-j", "2"]) == 2
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


# --- 9. special paths in the bank --------------------------------------------------------------------

@pytest.mark.parametrize("where", ["file_symlink", "dir_symlink", "file_fifo", "file_dir"])
def test_9_special_bank_paths_are_one_input_error(job: dict, tmp_path: Path, where: str) -> None:
    from aoe.bank import OpBank

    env = isolated_environ(tmp_path)
    env["AOE_SEARCH_BUDGET"] = "200"
    bank = OpBank(Path(env["TUNE_BANK_PATH"]) / SOC, SOC)
    path = bank.path_for("MatMulV2")  # the job's operator (a single-op MatMulV2)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if where == "dir_symlink":
        path.parent.parent.mkdir(parents=True, exist_ok=True)
        path.parent.symlink_to(elsewhere, target_is_directory=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        _special({"file_symlink": "symlink", "file_fifo": "fifo", "file_dir": "directory"}[where], path,
                 elsewhere / "x.json")
    p = _aoe(["--singleop", str(job["ops"]), "-j", "2", "--report", "off", "--progress_bar", "off"], env,
             tmp_path, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and p.stderr.count("aoe: error:") == 1, p.stderr
    assert "tuning failed" not in p.stdout + p.stderr
    assert not list(elsewhere.iterdir())  # nothing written through the link


# --- 10. knowledge fields ----------------------------------------------------------------------------

@pytest.mark.parametrize("extra", [{"impl": "../../x"}, {"impl": 7}, {"formats": ["../etc"]},
                                   {"kernel": {"op": "Evil", "strategy": {"x": "y"}}}, {"surprise": 1}])
def test_10_every_knowledge_field_is_checked(env: Path, extra: dict, capsys: pytest.CaptureFixture) -> None:
    from aoe.bank import OpBank, make_pending

    bank = OpBank(env / "bank" / SOC, SOC)
    bank.save([make_pending(MM, mm_key(16), mm_know(1), 2.0)])
    path = bank.path_for(MM)
    from aoe.bank import jsonl

    rec = json.loads(path.read_text())
    rec["knowledge"].update(extra)
    path.write_bytes(jsonl.dumps(rec) + b"\n")  # aoe's own compact layout: the native reader's fast path
    assert main(["bank", "verify"]) == 1
    assert "knowledge" in capsys.readouterr().out
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert OpBank(env / "bank" / SOC, SOC).lookup(MM, mm_key(16)) is None


# --- 11. one environment parser ----------------------------------------------------------------------

def test_11_one_env_parser_ascii_digits_one_whitespace_rule() -> None:
    from aoe.bank.decision import repeat_tune
    from aoe.job import config as cfg

    for bad in ("\u0663", "\uff13", "3\u00a0", "٣"):
        with pytest.raises(AoeError):
            cfg.device_id(bad, 8)
        with pytest.raises(AoeError):
            cfg.te_parallel({"TE_PARALLEL_COMPILER": bad})
        with pytest.raises(AoeError):
            cfg.search_budget({"AOE_SEARCH_BUDGET": bad})
        with pytest.raises(AoeError):
            cfg.env_mode({"AOE_MODE": bad})
    # the same whitespace rule everywhere: surrounding blanks are ignored
    assert cfg.env_mode({"AOE_MODE": " 2 "}) == 2
    assert repeat_tune({"REPEAT_TUNE": "true "}) is True
    assert cfg.device_id(" 3 ", 8) == 3
    assert cfg.builtin_bank({"AOE_BUILTIN_BANK": " off "}) is False
    assert cfg.search_budget({"AOE_SEARCH_BUDGET": "\t50\n"}) == 50


# --- 12. BankWarning -------------------------------------------------------------------------------

def test_12_a_bank_warning_prints_no_source_line(tmp_path: Path) -> None:
    from aoe.bank import OpBank, make_pending

    env = isolated_environ(tmp_path)
    bank = OpBank(Path(env["TUNE_BANK_PATH"]) / SOC, SOC)
    bank.save([make_pending(MM, mm_key(16), mm_know(1), 2.0)])
    with open(bank.path_for(MM), "ab") as f:
        f.write(b"{torn\n")
    p = _aoe(["bank", "ls"], env, tmp_path)
    assert p.returncode == 0, p.stderr
    assert "line skipped" in p.stderr
    assert "warnings.warn" not in p.stderr and ".py:" not in p.stderr, p.stderr


# --- 13. AOE_LOCK_DIR ------------------------------------------------------------------------------

@pytest.mark.skipif(not ROOT, reason="the rule is about root")
def test_13_a_lock_dir_without_owner_write_is_refused_for_root(tmp_path: Path) -> None:
    from aoe.job.lock import check_dir

    d = tmp_path / "locks"
    d.mkdir()
    os.chmod(d, 0o555)
    with pytest.raises(AoeError, match="AOE_LOCK_DIR|permission"):
        check_dir(d)
