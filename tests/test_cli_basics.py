"""The `aoe` command's dispatcher: help, unknown commands, error reporting."""
import subprocess
import sys

from aoe.cli import main


def test_help_lists_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "simulate" in out and "bank" in out and "graph" in out


def test_unknown_command_is_a_clean_error(capsys):
    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'frobnicate'" in err
    assert "Traceback" not in err


def test_console_script_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aoe.cli", "nope"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
