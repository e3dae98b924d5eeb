"""Regenerate the stored outcomes that `tests/test_golden.py` compares against.

    python tests/golden/make_golden.py            # writes tests/golden/*.json

Run it only when a deliberate change of behaviour moves the figures, and say so in the commit.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import aoe

HERE = Path(__file__).resolve().parent

# (file stem, model, tune() keywords): the two jobs the renovation must leave unchanged
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("resnet50_opat_training", "zoo:resnet50",
     {"mode": "op", "training": True, "options": {"workers": 2, "budget": 20000}}),
    ("bert_base_sgat_910a", "zoo:bert_base", {"mode": "subgraph", "soc": "Ascend910A"}),
]


def bank_records(bank: Path) -> list[dict[str, Any]]:
    """Every bank line (operator and subgraph banks) as parsed JSON, in a stable order."""
    out = []
    for f in sorted(p for p in bank.rglob("*") if p.is_file()):
        for line in f.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                out.append({"file": f.relative_to(bank).as_posix(), "record": rec})
    return sorted(out, key=lambda r: (r["file"], json.dumps(r["record"], sort_keys=True)))


def outcome(model: str, kw: dict[str, Any]) -> dict[str, Any]:
    """The result section and the bank lines of one job into a fresh bank."""
    with tempfile.TemporaryDirectory() as tmp:
        bank, work = Path(tmp, "bank"), Path(tmp, "work")
        bank.mkdir()
        kw = dict(kw)
        # built-in banks off: the stored outcome pins tuning itself, not the shipped bank's content
        options = aoe.TuneOptions(lock=False, builtin=False, **kw.pop("options", {}))
        r = aoe.tune(model, bank=bank, work_path=work, options=options, env={}, **kw)
        return {"status": r.status, "section": r.section, "bank": bank_records(bank)}


def main() -> int:
    for stem, model, kw in CASES:
        data = outcome(model, kw)
        (HERE / f"{stem}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(stem, data["status"], len(data["bank"]), "bank lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
