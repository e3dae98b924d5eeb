"""Every fenced code block of the project's README files runs, as a user would run it.

- ```python blocks run in a fresh interpreter (`sys.executable -c`);
- ```bash blocks: the lines that start with `aoe`, `VAR=... aoe`, `mkdir` or `export` run in one bash
  script, in order (so an `export` reaches the lines after it); `pip install X && rest` runs `rest`;
  every such line must exit 0, or N when a comment on it says `# exit N`; other lines (pip, pytest,
  python bench/...) are left to CI;
- ```json blocks must parse, ```ini blocks must be read by configparser; other blocks are not code.

Each block runs in its own temporary directory with the job variables removed and bank, work path,
locks, HOME and TMPDIR inside it (search budget 2000 and the built-in bank on, as a user has it, so
tuning a zoo model takes seconds). The
placeholders of the docs are made real there: `/data/bank` and `/path/to/X` become directories or
files in the temporary directory, `model.onnx` is a small ONNX model written beside the block, and
`train.py` (of `aoe run ... -- python train.py`) a small PyTorch training loop.
A block that needs an optional extra (TensorFlow, PyTorch, the report's matplotlib, Dask, the bench
samplers) is marked with it and skipped, naming the extra, when it is not installed: the README's test
command installs only `.[test]`. After each block the test checks that nothing appeared outside the
temporary directory.
"""
from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import isolated_environ

REPO = Path(__file__).resolve().parents[1]
TIMEOUT_S = 600          # per block; a block needing this long is a bug in the block (the budget keeps them short)

# Absolute placeholders the docs use for "your bank / your file"; none of them may exist after a block.
ABSOLUTE_PLACEHOLDERS = ("/data/bank", "/path/to/bank", "/path/to")


def readme_files() -> list[Path]:
    """README.md, ARCHITECTURE.md (when present) and every README.md below aoe/."""
    files = [REPO / "README.md", REPO / "ARCHITECTURE.md"]
    files += sorted(p for p in (REPO / "aoe").rglob("README.md") if "__pycache__" not in p.parts)
    return [p for p in files if p.is_file()]


@dataclass(frozen=True)
class Block:
    """One fenced code block: its file, 1-based index among the file's blocks, language, first line, text."""

    path: Path
    index: int
    lang: str
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)} block {self.index} (line {self.line}, {self.lang or 'no language'})"


_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file (fences may be indented, e.g. inside a list item)."""
    blocks: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path.relative_to(REPO)}: the code block opened on line {i + 1} is never closed")
        blocks.append(Block(path, len(blocks) + 1, lang, i + 1, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


ALL_BLOCKS = [b for f in readme_files() for b in fenced_blocks(f)]


# --- what a block needs ---------------------------------------------------------------------------

# optional extra -> what in a block needs it (a bash line is matched from its start, after VAR=value words)
_CMD = r"^\s*(?:\w+=\S+\s+)*aoe\s+"
_EXTRA_USES = {
    "tensorflow": re.compile(r"\b(import|from)\s+tensorflow\b|\baoe\.(graph\.)?tf\b|--framework[ =](3|tensorflow)\b"
                             r"|\s-f\s+3\b|framework\s*=\s*(3|\"tensorflow\"|'tensorflow')"),
    "torch": re.compile(r"\b(import|from)\s+torch\b|\baoe\.(graph\.)?(torch|fx)\b|--framework[ =](torch|pytorch)\b"
                        r"|framework\s*=\s*(\"torch\"|'torch'|\"pytorch\"|'pytorch')"
                        rf"|{_CMD}run\b[^\n]*\btrain\.py\b", re.M),   # the docs' train.py is a PyTorch loop
    "torch-test": re.compile(r"\b(import|from)\s+transformers\b"),
    # the charts: `aoe report`, `aoe explain -o`, a job asked for its HTML report
    "report": re.compile(rf"{_CMD}report\b|{_CMD}explain\b[^\n]*\s-o\s|\bwrite_report\b|report_html\s*=\s*True"
                         r"|--report[ =]on\b|\b(import|from)\s+matplotlib\b", re.M),
    "dask": re.compile(rf"{_CMD}batch\b|\bcluster\s*=|\b(import|from)\s+(dask|distributed)\b", re.M),
    # the black-box samplers, or the plots (`--no-plots` leaves them out)
    "bench": re.compile(rf"{_CMD}bench\s+search\b(?![^\n]*--no-plots)|--strategies[ =]\S*(tpe|cmaes|gp)\b"
                        r"|\b(import|from)\s+(optuna|cmaes)\b", re.M),
}


def block_extras(text: str) -> list[str]:
    """The optional extras a block needs (none: it runs with only `.[test]` installed)."""
    return [name for name, pattern in _EXTRA_USES.items() if pattern.search(text)]


def with_real_paths(text: str, tmp: Path) -> str:
    """The block with its absolute placeholders pointing into `tmp` (`/path/to/X` -> `tmp/X`)."""
    text = re.sub(r"(?<![\w./])/data/bank(?![\w.-])", str(tmp / "bank"), text)
    return re.sub(r"(?<![\w./])/path/to/(?=[\w.-])", str(tmp) + "/", text)


def tiny_model(path: Path) -> None:
    """`model.onnx` of the docs: input "input" [8,3,224,224] -> Conv 3x3/2 -> Relu -> GlobalAveragePool."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("input", TensorProto.FLOAT, [8, 3, 224, 224])
    y = helper.make_tensor_value_info("output", TensorProto.FLOAT, [8, 16, 1, 1])
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 3, 3, 3], [0.0] * (16 * 3 * 3 * 3))
    nodes = [helper.make_node("Conv", ["input", "w"], ["c"], name="conv", strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["output"], name="pool")]
    graph = helper.make_graph(nodes, "model", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


# `train.py` of the docs (`aoe run ... -- python train.py`): a training loop with no line of aoe in it
TRAIN_PY = """\
import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(16 * 30 * 30, 10))
opt = torch.optim.Adam(model.parameters())
loss_fn = torch.nn.CrossEntropyLoss()
for step in range(3):
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))
    loss = loss_fn(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    print(f"step {step}: loss {loss.item():.4f}")
"""


def sandbox(tmp: Path) -> dict[str, str]:
    """The block's environment: no job variables; bank, work path, locks, HOME and TMPDIR under `tmp`."""
    env = isolated_environ(tmp)                 # bank (created), locks, HOME, AOE_SEARCH_BUDGET=2000
    # the shipped built-in bank on, as a reader's shell has it (a block asks for --no_builtin itself):
    # its hits make the zoo jobs of the blocks cheap; tuning every case is the job tests' business
    env.pop("AOE_BUILTIN_BANK", None)
    for sub in ("work", "tmp"):
        (tmp / sub).mkdir(exist_ok=True)
    env.update(ASCEND_WORK_PATH=str(tmp / "work"), TMPDIR=str(tmp / "tmp"), PYTHONDONTWRITEBYTECODE="1")
    # the `aoe` command of the interpreter running the tests, also when its environment is not activated
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    tiny_model(tmp / "model.onnx")
    (tmp / "train.py").write_text(TRAIN_PY)
    return env


# --- bash blocks ----------------------------------------------------------------------------------

_ASSIGN = r"""\w+=(\$\([^)]*\)|"[^"]*"|'[^']*'|\S*)\s+"""      # VAR=value, VAR=$(cmd), VAR="a b"
_RUNNABLE = re.compile(rf"^(({_ASSIGN})*aoe(\s|$)|mkdir\s|export\s)")
_EXIT = re.compile(r"#.*\bexit\s+(\d+)\b")


def bash_commands(text: str) -> list[tuple[str, int]]:
    """(command, expected exit code) for each line of a bash block that the test runs."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:].lstrip()
        m = re.match(r"^pip\s+install\s+[^&;|]*&&\s*(.*)$", line)
        if m:                                   # CI installs the package; run what follows
            line = m.group(1)
        if _RUNNABLE.match(line):
            want = _EXIT.search(line)
            out.append((line, int(want.group(1)) if want else 0))
    return out


def bash_script(commands: list[tuple[str, int]]) -> str:
    """One script running the commands in order, stopping at the first unexpected exit code."""
    parts = []
    for n, (cmd, want) in enumerate(commands, 1):
        said = shlex.quote(f"command {n} exited ") + "$rc" + shlex.quote(f" (expected {want}): {cmd}")
        parts.append(f"{cmd}\nrc=$?\nif [ $rc -ne {want} ]; then echo {said} >&2; exit 1; fi")
    return "\n".join(parts) + "\n"


# --- leaks ----------------------------------------------------------------------------------------

# Files other sessions may be writing into the working tree while the blocks run; a README block's
# outputs are result files, banks, models, locks, .ini/.json files, never source or docs.
_AUTHORED = (".py", ".md", ".cpp", ".h", ".hpp", ".toml", ".txt")
_CACHES = ("__pycache__", ".pytest_cache", ".hypothesis", ".ruff_cache", ".mypy_cache")
# An editor's atomic save of one of those files: `.name.py.<hex>.tmp`.
_EDITOR_TMP = re.compile(r"\.(py|md|cpp|h|hpp|toml|txt)\.[0-9A-Za-z_]+\.tmp$")
# The editable install may re-run CMake in the build tree when `aoe` is imported: the package's own doing.
_BUILD = ("build/", "_skbuild/", "dist/")


def tree_state() -> set[str] | None:
    """Untracked and ignored paths of the git checkout (None when not in one)."""
    try:
        out = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=all", "--ignored"],
                             capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    paths = set()
    for line in out.stdout.splitlines():
        status, path = line[:2], line[3:]
        if status in ("??", "!!") and not path.endswith(_AUTHORED) and not _EDITOR_TMP.search(path) \
                and not path.startswith(_BUILD) \
                and not any(c in path.split("/") for c in _CACHES) and not path.endswith((".pyc", ".nbi", ".nbc")):
            paths.add(path)
    return paths


# --- README errors reported to the files' owners -----------------------------------------------------

# (README, a text of the broken block) -> the error it fails with, for a block whose fix belongs to
# another change. An entry matches only while the block still holds that text and fails with that
# error; a block that runs again fails the test until its entry is removed, and any other error is
# reported as usual. Empty: every block runs.
KNOWN_BROKEN: dict[tuple[str, str], str] = {}


def known_failure(block: Block) -> str | None:
    """The error a block is known to fail with (None: it must run)."""
    name = str(block.path.relative_to(REPO))
    return next((err for (f, text), err in KNOWN_BROKEN.items() if f == name and text in block.text), None)


# --- the test -------------------------------------------------------------------------------------

def _param(b: Block) -> object:
    """The block as a test parameter, marked with the extras it needs (skipped where one is missing)."""
    runs = b.lang in ("python", "py", "bash", "sh", "shell", "console")
    marks = [pytest.mark.extra(*block_extras(b.text))] if runs and block_extras(b.text) else []
    return pytest.param(b, marks=marks, id=f"{b.path.relative_to(REPO)}#{b.index}-{b.lang or 'text'}")


@pytest.mark.parametrize("block", [_param(b) for b in ALL_BLOCKS])
def test_readme_block_runs(block: Block, tmp_path: Path) -> None:
    if block.lang == "json":
        json.loads(block.text)
        return
    if block.lang == "ini":
        configparser.ConfigParser().read_string(block.text)
        return
    if block.lang not in ("python", "py", "bash", "sh", "shell", "console"):
        pytest.skip(f"{block.where}: not code that runs")
    is_python = block.lang in ("python", "py")
    commands = [] if is_python else bash_commands(block.text)
    if not is_python and not commands:
        pytest.skip(f"{block.where}: no line for this test to run (pip / pytest / python scripts are CI's)")

    env = sandbox(tmp_path)
    existed = {p: os.path.lexists(p) for p in ABSOLUTE_PLACEHOLDERS}
    before = tree_state()
    text = with_real_paths(block.text, tmp_path)
    if is_python:
        argv = [sys.executable, "-c", text]
    else:
        argv = ["bash", "-c", bash_script([(with_real_paths(c, tmp_path), want) for c, want in commands])]
    try:
        run = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                             check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.where} did not finish within {TIMEOUT_S} s")
    after = tree_state()

    known = known_failure(block)
    if known is not None:
        assert run.returncode != 0, f"{block.where} runs now: remove its entry from KNOWN_BROKEN"
        assert known in run.stderr, (f"{block.where} fails, but not with the known error {known!r}:\n"
                                     f"{run.stderr[-3000:]}")
        pytest.xfail(f"{block.where}: known README error, reported to its owner: {known}")
    assert run.returncode == 0, (f"{block.where} failed (exit {run.returncode}):\n{block.text}\n"
                                 f"--- stderr (end) ---\n{run.stderr[-3000:]}")
    appeared = [p for p, was in existed.items() if not was and os.path.lexists(p)]
    assert not appeared, f"{block.where} created {appeared} outside its temporary directory"
    if before is not None and after is not None:
        new = sorted(after - before)
        assert not new, f"{block.where} wrote into the working tree: {new}"


# --- the runner's own rules (cheap, no subprocess) -------------------------------------------------

def test_every_readme_is_found() -> None:
    names = {str(p.relative_to(REPO)) for p in readme_files()}
    assert "README.md" in names and any(n.startswith("aoe/") for n in names)


def test_bash_lines_selected() -> None:
    text = ("pip install \".[test]\"\npytest tests -q\nmkdir -p bank && export X=1\n"
            "pip install . && TUNE_BANK_PATH=$(mktemp -d) aoe -m zoo:resnet50 -j 2\n"
            "AOE_MODE=2 aoe -m model.onnx\naoe bank verify      # exit 1 when a line is damaged\n"
            "python bench/calibration.py\naoe simulate --op Add \\\n  --shape 8\n")
    assert bash_commands(text) == [
        ("mkdir -p bank && export X=1", 0),
        ("TUNE_BANK_PATH=$(mktemp -d) aoe -m zoo:resnet50 -j 2", 0),
        ("AOE_MODE=2 aoe -m model.onnx", 0),
        ("aoe bank verify      # exit 1 when a line is damaged", 1),
        ("aoe simulate --op Add    --shape 8", 0),
    ]


def test_placeholders_point_into_tmp(tmp_path: Path) -> None:
    text = 'bank="/data/bank", d="/path/to/bank/Ascend910B2", m="/path/to/model.onnx", keep="/data/banker"'
    out = with_real_paths(text, tmp_path)
    assert out == (f'bank="{tmp_path}/bank", d="{tmp_path}/bank/Ascend910B2", m="{tmp_path}/model.onnx", '
                   f'keep="/data/banker"')


def test_known_broken_entries_match_only_their_block(tmp_path: Path) -> None:
    block = Block(REPO / "README.md", 1, "python", 1, "print(undefined_name)\n")
    KNOWN_BROKEN[("README.md", "undefined_name")] = "NameError"
    try:
        assert known_failure(block) == "NameError"
        assert known_failure(Block(REPO / "README.md", 2, "python", 5, "print(1)\n")) is None
    finally:
        del KNOWN_BROKEN[("README.md", "undefined_name")]


def test_fences_inside_list_items(tmp_path: Path) -> None:
    md = tmp_path / "x.md"
    md.write_text("- item:\n\n  ```python\n  import aoe\n  ```\n\n```bash\naoe bank ls\n```\n")
    blocks = fenced_blocks(md)
    assert [(b.index, b.lang, b.line, b.text) for b in blocks] == [(1, "python", 3, "import aoe\n"),
                                                                   (2, "bash", 7, "aoe bank ls\n")]


def test_blocks_needing_an_extra_are_marked_with_it() -> None:
    assert block_extras("aoe -m zoo:resnet50 -j 2 --work_path results\naoe report r.json -m zoo:resnet50\n") == ["report"]
    assert block_extras("aoe explain /conv1/Conv -m zoo:resnet50 -o conv1.svg\n") == ["report"]
    assert block_extras("aoe explain MatMulV2 --shape 8,8 --shape 8,8\naoe simulate --op Add --shape 8\n") == []
    assert block_extras("page = write_report(res.result_file, graph, 'Ascend910B2')\n") == ["report"]
    assert block_extras('rs = aoe.tune_models(["zoo:gpt2"], bank="/data/bank", cluster="local:2")\n') == ["dask"]
    assert block_extras("aoe batch models.txt --scheduler local:2\n") == ["dask"]
    assert block_extras("aoe bench search --suite random:2:0 --budgets 50 --strategies aoe,random --no-plots\n") == []
    assert block_extras("aoe bench search --suite zoo --strategies aoe,tpe --no-plots\n") == ["bench"]
    assert block_extras("import torch\nfrom transformers import BertModel\n") == ["torch", "torch-test"]
    assert block_extras("import aoe.tf\n") == ["tensorflow"]
    assert block_extras("AOE_MODE=2 aoe run --work_path results -- python train.py\n") == ["torch"]
    assert block_extras('aoe -m zoo:resnet50 -j 2 --training\naoe.tune("zoo:gpt2", mode="op")\n') == []


def test_every_extra_marker_names_an_extra_of_pyproject() -> None:
    import tomllib

    from conftest import EXTRAS, extra_reason
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(EXTRAS) <= set(declared) and set(_EXTRA_USES) <= set(EXTRAS)
    assert extra_reason("report") == "needs the report extra: pip install '.[report]'"
