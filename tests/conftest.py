"""Shared test builders: tiny ONNX models, single-operator descriptions, bank keys, an isolated job environment.

The plain functions are imported by the test files (`from conftest import tiny_onnx, mm_op`); the
fixtures (`env`, `job_env`) are found by pytest itself.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

from aoe.bank.schema import MATMUL_KEY, MATMUL_KNOWLEDGE
from aoe.graph.singleop import single_ops_graph  # noqa: F401 - re-exported for the test files

# Every variable that steers a job; the environment fixtures remove them so the developer's shell
# (or another test) cannot change what a test sees.
# the compiled SGAT evaluator (Numba) is cached once for the session, also for the jobs run with an
# isolated HOME below (tests/test_sgat_numba.py sets its own, empty cache directories)
os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                             / "aoe" / "numba"))
JOB_ENV = ("AOE_MODE", "ASCEND_DEVICE_ID", "TUNE_BANK_PATH", "ASCEND_CACHE_PATH", "ASCEND_WORK_PATH",
           "TE_PARALLEL_COMPILER", "REPEAT_TUNE", "AOE_CONFIG", "AOE_DEVICE_COUNT", "AOE_SEARCH_BUDGET",
           "AOE_LOCK_DIR", "AOE_STOP_GRACE", "AOE_BUILTIN_BANK")
SEARCH_BUDGET = "2000"     # small enough for a test, large enough that tuning finds improvements


# --- optional extras ------------------------------------------------------------------------------

# Each optional extra of pyproject.toml whose absence a test must survive -> the modules its tests import.
# A test needing one is marked `@pytest.mark.extra("report")` (a module: `pytestmark = ...`): where the
# extra is not installed it is skipped naming it, and `pytest -m extra` selects exactly these tests (CI's
# second pass, after the README's `pip install ".[test]" && pytest tests -q` has run without them).
EXTRAS: dict[str, tuple[str, ...]] = {
    "report": ("matplotlib",),
    "dask": ("dask", "distributed"),
    "torch": ("torch",),
    "torch-test": ("torch", "transformers"),
    "tensorflow": ("tensorflow", "keras"),
    "bench": ("optuna", "cmaes", "scipy", "matplotlib"),
}


def extra_reason(extra: str) -> str:
    """The skip message of a test that needs `extra`: what to install."""
    how = f"pip install '.[{extra}]'"
    if extra.startswith("torch"):       # a plain torch requirement resolves the multi-GB CUDA build
        how = f"pip install torch (its CPU build), then {how}"
    return f"needs the {extra} extra: {how}"


def missing_extra(*extras: str) -> str | None:
    """The first of `extras` with a module that is not installed here (None: all are)."""
    for extra in extras:
        if any(importlib.util.find_spec(m) is None for m in EXTRAS[extra]):
            return extra
    return None


def extras_required() -> bool:
    """True where every extra must be installed (CI's second pass): a missing one fails instead of skipping."""
    return os.environ.get("AOE_TEST_REQUIRE_EXTRAS") == "1"


def import_extra(extra: str, module: str) -> Any:
    """`module`, or a skip of the calling test module naming `extra` when it is not installed."""
    if extras_required():
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=extra_reason(extra))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, naming the extra, every test marked with an extra that is not installed."""
    for item in items:
        for mark in item.iter_markers("extra"):
            unknown = [e for e in mark.args if e not in EXTRAS]
            if unknown or not mark.args:
                raise pytest.UsageError(f"{item.nodeid}: extra marker names no known extra: {mark.args}")
            missing = missing_extra(*mark.args)
            if missing and extras_required():
                raise pytest.UsageError(f"{item.nodeid} {extra_reason(missing)} (AOE_TEST_REQUIRE_EXTRAS=1)")
            if missing:
                item.add_marker(pytest.mark.skip(reason=extra_reason(missing)))


# --- environment isolation ----------------------------------------------------------------------

def isolated_environ(tmp_path: Path) -> dict[str, str]:
    """os.environ without the job variables; bank, locks and HOME under `tmp_path` (the bank dir is created)."""
    bank = tmp_path / "bank"
    bank.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in JOB_ENV}
    # the shipped built-in banks hold the test models' cases too: a job test tunes afresh unless it asks
    env.update(TUNE_BANK_PATH=str(bank), AOE_LOCK_DIR=str(tmp_path / "locks"), AOE_SEARCH_BUDGET=SEARCH_BUDGET,
               HOME=str(tmp_path), AOE_BUILTIN_BANK="off")
    return env


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as a clean job environment: bank, locks, work path and HOME in tmp_path (returned)."""
    clean = isolated_environ(tmp_path)
    for k in JOB_ENV:
        monkeypatch.delenv(k, raising=False)
    for k in ("TUNE_BANK_PATH", "AOE_LOCK_DIR", "AOE_SEARCH_BUDGET", "HOME", "AOE_BUILTIN_BANK"):
        monkeypatch.setenv(k, clean[k])
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def job_env(tmp_path: Path) -> dict[str, str]:
    """The same clean environment as a dict, for `aoe` run as a child process."""
    return isolated_environ(tmp_path)


# --- the frontends' tests ------------------------------------------------------------------------

@pytest.fixture
def fresh_dynamo() -> Any:
    """torch.compile's caches emptied before and after a test (a module uses it with
    `pytest.mark.usefixtures("fresh_dynamo")`): no compiled graph or guard leaks between tests."""
    import torch  # lazily: the torch extra

    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def frontend_options(tmp_path: Path, budget: int, **kw: Any) -> dict[str, Any]:
    """The keyword options of an `aoe.torch.backend` / `aoe.torch.tune` call in a test: bank (created) and work
    path in `tmp_path`, `budget` evaluations per case, no device lock, no environment, no console output;
    `kw` adds options or replaces these."""
    (tmp_path / "bank").mkdir(exist_ok=True)
    return {"bank": str(tmp_path / "bank"), "work_path": str(tmp_path / "wp"), "budget": budget, "lock": False,
            "env": {}, "verbose": False, **kw}


# --- bench helpers ------------------------------------------------------------------------------

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench_module(name: str) -> Any:
    """bench/NAME.py as a module (a helper the benches share with the tests; bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"aoe_bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- tiny models --------------------------------------------------------------------------------

def tiny_onnx(path: Path, m: int = 64, k: int = 128, n: int = 256) -> Path:
    """x[m,k] @ W[k,n] -> Relu -> Softmax, saved at `path`: three tunable operators (mm, relu, softmax)."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])
    w = helper.make_tensor("w", TensorProto.FLOAT, [k, n], [0.0] * (k * n))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "tiny", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def declared_weight(name: str, dims: list[int]) -> Any:
    """An ONNX initializer with its shape and no data (marked as external data that is not shipped, as the
    zoo's weights are): a large model is cheap to build and to import."""
    import math

    from onnx import TensorProto

    t = TensorProto()
    t.name, t.data_type = name, TensorProto.FLOAT
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights_not_shipped.bin"), ("offset", "0"), ("length", str(4 * math.prod(dims)))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


# --- single-operator descriptions (the --singleop format) ----------------------------------------

def mm_op(m: int, k: int, n: int, name: str = "mm", dtype: str = "float16", **attrs: Any) -> dict[str, Any]:
    """A MatMulV2 x[m,k] @ w[k,n] as a single-operator description."""
    return {"op": "MatMulV2", "name": name,
            "input_desc": [{"shape": [m, k], "type": dtype}, {"shape": [k, n], "type": dtype}],
            "output_desc": [{"shape": [m, n], "type": dtype}], "attr": attrs}


def vec_op(op: str, shape: tuple[int, ...], name: str, dtype: str = "float16", **attrs: Any) -> dict[str, Any]:
    """A one-input vector operator of `shape` (output of the same shape) as a single-operator description."""
    return {"op": op, "name": name, "input_desc": [{"shape": list(shape), "type": dtype}],
            "output_desc": [{"shape": list(shape), "type": dtype}], "attr": attrs}


def small_opat_graph() -> Any:
    """Five operators: two sharing one matmul case, softmax, relu and one type with no kernel model."""
    return single_ops_graph([
        mm_op(256, 512, 256, "mm_a"),
        mm_op(256, 512, 256, "mm_b"),           # same case as mm_a: tuned once
        vec_op("SoftmaxV2", (64, 1024), "softmax", axes=[-1]),
        vec_op("Relu", (64, 1024), "relu"),
        vec_op("FrobnicateV9", (64, 1024), "mystery"),  # no kernel model: skipped and reported
    ], name="small")


# --- bank keys and knowledge --------------------------------------------------------------------

def mm_key(m: int = 128, k: int = 256, n: int = 512, **over: Any) -> dict[str, Any]:
    """A complete MatMul bank key (fp16, ND, no batch) with the given sizes; `over` replaces any field."""
    key = {f: 1 if f.startswith("batch") else 0 for f in MATMUL_KEY}
    key.update(m=m, k=k, n=n, a_dtype=1, b_dtype=1, out_dtype=1, a_format=2, b_format=2, out_format=2)
    key.update(over)
    return key


def mm_know(v: int = 1) -> dict[str, int]:
    """MatMul knowledge with every field set to `v` (distinct v, distinct strategies)."""
    return {f: v for f in MATMUL_KNOWLEDGE}
