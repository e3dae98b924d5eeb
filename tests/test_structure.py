"""The building's shape: floors import downwards only, files stay small, every package says what it holds."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aoe

ROOT = Path(aoe.__file__).resolve().parent
PACKAGES = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def _imports(path: Path) -> set[str]:
    """aoe packages (or ground-floor modules) a file imports, at any level of the file."""
    pkg_parts = path.relative_to(ROOT).parts[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg_parts[: len(pkg_parts) - node.level + 1]) if node.level <= len(pkg_parts) + 1 else []
                parts = base + (node.module.split(".") if node.module else [])
                if not parts:  # `from .. import x`: x is the module
                    parts = [a.name for a in node.names][:1]
                    out.update(a.name for a in node.names)
                    continue
            elif node.module and node.module.split(".")[0] == "aoe":
                parts = node.module.split(".")[1:]
            else:
                continue
            if parts:
                out.add(parts[0])
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "aoe" and len(a.name.split(".")) > 1:
                    out.add(a.name.split(".")[1])
    return out


def _package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            graph[pkg] |= {m for m in _imports(f) if m in graph and m != pkg}
    return graph


def test_no_import_cycle_between_packages() -> None:
    graph = _package_graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(p: str) -> None:
        state[p] = 1
        path.append(p)
        for q in sorted(graph[p]):
            if state.get(q) == 1:
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(q):] + [q]))
            if q not in state:
                visit(q)
        path.pop()
        state[p] = 2

    for p in PACKAGES:
        if p not in state:
            visit(p)


def test_the_simulator_does_not_load_the_storage_wing() -> None:
    assert "bank" not in _package_graph()["sim"]


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_python_files_stay_under_800_lines(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= 800


def test_job_run_loop_stays_small() -> None:
    assert len((ROOT / "job" / "run.py").read_text().splitlines()) <= 400


@pytest.mark.parametrize("pkg", PACKAGES)
def test_every_package_has_a_file_table(pkg: str) -> None:
    readme = ROOT / pkg / "README.md"
    text = readme.read_text() if readme.exists() else (ast.get_docstring(ast.parse((ROOT / pkg / "__init__.py").read_text())) or "")
    assert "| file |" in text, f"aoe/{pkg} needs a README.md or module docstring with a file table"


def test_user_documents_explain_behaviour_in_their_own_words():
    """The project's users do not have the specification it was built from: no "SPEC §" in what they read."""
    repo = Path(__file__).resolve().parents[1]      # the checkout the tests belong to
    docs = [repo / "README.md", repo / "ARCHITECTURE.md", *(repo / "aoe").rglob("*.md"), *(repo / "aoe").rglob("*.py")]
    assert (repo / "README.md").is_file()
    cited = [str(p.relative_to(repo)) for p in docs if p.is_file() and "SPEC §" in p.read_text(errors="replace")]
    assert not cited
