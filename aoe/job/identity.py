"""A job's identity for `--reload`: the graph's fingerprint, the SoC and the kind, and the lookup of the
interrupted job with the same identity (also one written by an older aoe)."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from .result import find_interrupted

FINGERPRINT_V = 2  # the state's "fingerprint_v": 2 = Graph.fingerprint(); absent = sha256 of to_json() (before)


def graph_fingerprint(graph: Any) -> str:
    """The graph's identity for `--reload` (`Graph.fingerprint`: equal JSON forms, equal fingerprints)."""
    return graph.fingerprint()


def job_identity(kind: str, graph: Any, soc_name: str) -> dict[str, Any]:
    """What the resume state keeps to be found again: the kind, the graph's fingerprint and the SoC."""
    return {"kind": kind, "fingerprint": graph_fingerprint(graph), "fingerprint_v": FINGERPRINT_V, "soc": soc_name}


def find_resumable(work_path: Path, job_id: dict[str, Any], graph: Any) -> tuple[Path, dict[str, Any]] | None:
    """The latest interrupted job of `job_id` in `work_path`. A state written before the fingerprint (no
    "fingerprint_v") matches by the sha256 of the whole `to_json()` text it used, which is worked out
    (about 3x the fingerprint's cost) only when such a state of the same kind and SoC is there."""
    kind = job_id["kind"]
    found = find_interrupted(work_path, kind, job_id)
    old = dict(job_id, fingerprint_v=None)
    if found is None and find_interrupted(work_path, kind, {k: old[k] for k in ("kind", "soc", "fingerprint_v")}):
        old["fingerprint"] = hashlib.sha256(graph.to_json().encode("utf-8")).hexdigest()
        found = find_interrupted(work_path, kind, old)
    return found
