"""Suites of Schedule-search cases: the zoo's Cube operators, random shapes (seeded), or a JSON list."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

from .. import sim
from ..errors import AoeError

MAX_SUITE_BYTES = 4 << 20   # a user's case list is untrusted: bounded size
MAX_CASES = 10_000


@dataclass(frozen=True)
class Case:
    """One search problem: a label and a simulator descriptor (the SoC is the run's)."""

    name: str
    op: sim.SimOp


def zoo_suite() -> list[Case]:
    """Distinct MatMul / BatchMatMul / Conv cases of the bundled models at their default shapes."""
    import aoe.graph

    from ..graph.zoo import zoo_names
    from ..ops import Unsupported, describe

    seen: dict[str, Case] = {}
    for model in zoo_names():
        g = aoe.graph.load(f"zoo:{model}")
        for op in g.ops:
            try:
                case = describe(g, op)
            except Unsupported:
                continue
            sop = case.default.sim_op
            if isinstance(sop, sim.VectorOp):
                continue
            key = repr(sop)
            if key not in seen:
                seen[key] = Case(f"{model}/{op.type}/{len(seen)}", sop)
    return list(seen.values())


def random_suite(n: int, seed: int) -> list[Case]:
    """`n` random MatMul, BatchMatMul and Conv2D shapes of typical network sizes (seeded)."""
    if not 1 <= n <= MAX_CASES:
        raise AoeError(f"a random suite takes 1..{MAX_CASES} cases, got {n}")
    rng = np.random.default_rng(seed)
    cases: list[Case] = []
    dims = [16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]
    while len(cases) < n:
        kind = rng.integers(3)
        if kind == 0:
            m, k, nn = (int(rng.choice(dims)) for _ in range(3))
            op: sim.SimOp = sim.MatMul(m=m, n=nn, k=k)
        elif kind == 1:
            b, s, d = int(rng.choice([4, 8, 16, 32, 64])), int(rng.choice([64, 128, 256, 512])), int(rng.choice([64, 128]))
            op = sim.MatMul(m=s, n=s, k=d, batch=b, op_type="BatchMatMulV2")
        else:
            c, cout = int(rng.choice([16, 32, 64, 128, 256, 512])), int(rng.choice([16, 32, 64, 128, 256, 512]))
            hw, kh = int(rng.choice([7, 14, 28, 56, 112])), int(rng.choice([1, 3]))
            stride = int(rng.choice([1, 2])) if kh == 3 else 1
            op = sim.Conv2D(x=(int(rng.choice([1, 8, 32])), c, hw, hw), weight=(cout, c, kh, kh),
                            strides=(stride, stride), pads=(kh // 2,) * 4)
        cases.append(Case(f"random{seed}/{type(op).__name__}/{len(cases)}", op))
    return cases


def json_suite(path: str) -> list[Case]:
    """Cases from a JSON list of `{"op_type", "shapes", "dtype"?, "name"?, attrs...}` objects."""
    if not os.path.isfile(path):
        raise AoeError(f"suite file {path!r} is not a regular file; give zoo, random[:N[:SEED]] or a JSON list")
    if os.path.getsize(path) > MAX_SUITE_BYTES:
        raise AoeError(f"suite file {path!r} exceeds {MAX_SUITE_BYTES} bytes")
    try:
        with open(path, encoding="utf-8") as f:
            items = json.load(f)
    except (OSError, ValueError) as exc:
        raise AoeError(f"suite file {path!r} is not valid JSON: {exc}") from exc
    if not isinstance(items, list) or not items or len(items) > MAX_CASES:
        raise AoeError(f"suite file {path!r} must hold a JSON list of 1..{MAX_CASES} operator objects")
    cases = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("op_type"), str) or "shapes" not in item:
            raise AoeError(f"suite entry {i} needs at least \"op_type\" and \"shapes\"")
        attrs = {k: v for k, v in item.items() if k not in ("op_type", "shapes", "dtype", "name")}
        try:
            op = sim.make_op(item["op_type"], item["shapes"], str(item.get("dtype", "float16")), **attrs)
        except (TypeError, ValueError) as exc:
            raise AoeError(f"suite entry {i}: {exc}") from exc
        if isinstance(op, sim.VectorOp):
            raise AoeError(f"suite entry {i}: {item['op_type']} is a vector operator; the bench searches Cube spaces")
        cases.append(Case(str(item.get("name", f"{item['op_type']}/{i}"))[:200], op))
    return cases


def load_suite(spec: str) -> list[Case]:
    """`zoo`, `random[:N[:SEED]]` (default 20 cases, seed 0) or the path of a JSON case list."""
    if spec == "zoo":
        return zoo_suite()
    if spec == "random" or spec.startswith("random:"):
        parts = spec.split(":")[1:]
        try:
            n = int(parts[0]) if parts and parts[0] else 20
            seed = int(parts[1]) if len(parts) > 1 else 0
        except ValueError as exc:
            raise AoeError(f"random suite is random[:N[:SEED]], got {spec!r}") from exc
        return random_suite(n, seed)
    return json_suite(spec)
