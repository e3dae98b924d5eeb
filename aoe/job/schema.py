"""JSON Schema of a result file, and the checks a schema cannot express.

`RESULT_SCHEMA` validates the structure (names, keys, nesting, units, improvement strings);
`semantic_errors(data)` checks that the counters add up, that each `performance_improvement` is
`(before / after - 1) * 100` of its own before/after, and the status-dependent fields.
"""
from __future__ import annotations

from typing import Any

import jsonschema

from ..opat.report import OPAT_SECTION_SCHEMA
from ..sgat.report import SGAT_SECTION_SCHEMA
from ..tuning import INCOMPLETE, gain_pct, improvement

RESULT_FILE_NAME = r"^aoe_result_(opat|sgat)_[0-9]{17}_pid[0-9]+\.json$"
REPORT_KEY = r"^report_[0-9]{17}_[0-9]+$"

# The sections are the ones the tuners build and document; the dialect marker stays at the top.
OPAT_SCHEMA: dict[str, Any] = {k: v for k, v in OPAT_SECTION_SCHEMA.items() if k not in ("$schema", "title")}
SGAT_SCHEMA: dict[str, Any] = {k: v for k, v in SGAT_SECTION_SCHEMA.items() if k not in ("$schema", "title")}

_BASIC = {
    "type": "object", "required": ["tuning_name"], "additionalProperties": False,
    "properties": {"tuning_name": {"type": "string", "minLength": 1},
                   "tuning_time(s)": {"type": "number", "minimum": 0}},
}


def _task(section: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "array", "minItems": 1, "maxItems": 2,
        "prefixItems": [
            {"type": "object", "required": ["basic"], "additionalProperties": False, "properties": {"basic": _BASIC}},
            {"type": "object", "required": [section], "additionalProperties": False, "properties": {section: schema}},
        ],
        "items": False,
    }


def result_schema(kind: str) -> dict[str, Any]:
    """The schema of an `aoe_result_opat_*` (kind "opat") or `aoe_result_sgat_*` file."""
    section, schema = ("OPAT", OPAT_SCHEMA) if kind == "opat" else ("SGAT", SGAT_SCHEMA)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"AOE {section} result file",
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": REPORT_KEY},
        "additionalProperties": _task(section, schema),
    }


RESULT_SCHEMA = {"opat": result_schema("opat"), "sgat": result_schema("sgat")}


def _pct_ok(text: str, before: float, after: float, tol: float = 0.011) -> bool:
    # values in the file are rounded (µs: 3 decimals, ms: 6), so allow the rounding of the inputs
    try:
        got = float(text.rstrip("%"))
    except ValueError:
        return False
    if after <= 0:
        return got == 0.0
    want = gain_pct(before, after)
    slack = tol + 100.0 * (before / after) * (0.0006 / max(after, 1e-9) + 0.0006 / max(before, 1e-9))
    return abs(got - want) <= slack


def _counters_errors(where: str, s: dict[str, int]) -> list[str]:
    errs = []
    if s["repo_hit_num"] != s["repo_update_num"] + s["repo_reserved_num"]:
        errs.append(f"{where}: repo_hit_num != repo_update_num + repo_reserved_num")
    if s["total_num"] != s["repo_add_num"] + s["repo_hit_num"] + s["repo_unsatisfied_num"]:
        errs.append(f"{where}: total_num != repo_add_num + repo_hit_num + repo_unsatisfied_num")
    return errs


def semantic_errors(data: dict[str, Any]) -> list[str]:
    """What the schema cannot check: sums, improvement strings, modes vs counters, interrupted tasks."""
    errs: list[str] = []
    for key, task in data.items():
        basic = task[0]["basic"]
        for part in task[1:]:
            if "OPAT" in part:
                sec = part["OPAT"]
                errs += _counters_errors(key, sec["repo_summary"])
                if sec["opat_tuning_result"] == INCOMPLETE and "tuning_time(s)" in basic:
                    errs.append(f"{key}: an incomplete task must not have tuning_time(s)")
                if sec["opat_tuning_result"] != INCOMPLETE and "tuning_time(s)" not in basic:
                    errs.append(f"{key}: a finished task needs tuning_time(s)")
                modes = {"add": set(), "update": set()}
                for op in sec["repo_modified_operators"]:
                    for kind, perf in op["tune_performance"].items():
                        b, a = perf["performance_before_tune(us)"], perf["performance_after_tune(us)"]
                        if not _pct_ok(perf["performance_improvement"], b, a):
                            errs.append(f"{key}: {op['op_name']} {kind}: improvement "
                                        f"{perf['performance_improvement']} does not match {b} -> {a} "
                                        f"(expected {improvement(b, a)})")
                        if not a < b:
                            errs.append(f"{key}: {op['op_name']} {kind} did not help ({b} -> {a})")
                        modes[perf["update_mode"]].add(op["op_name"])
                s = sec["repo_summary"]
                if modes["add"] and s["repo_add_num"] == 0:
                    errs.append(f"{key}: operators were added but repo_add_num is 0")
                if modes["update"] and s["repo_update_num"] == 0:
                    errs.append(f"{key}: operators were updated but repo_update_num is 0")
            if "SGAT" in part:
                sec = part["SGAT"]
                errs += _counters_errors(key, sec["repo_summary"])
                b, a = sec["model_baseline_performance(ms)"], sec["model_result_performance(ms)"]
                if not _pct_ok(sec["model_performance_improvement"], b, a):
                    errs.append(f"{key}: model improvement {sec['model_performance_improvement']} does not "
                                f"match {b} -> {a}")
                mods = sec["repo_modified_subgraphs"]
                for group, counter in (("add_repo_subgraphs", "repo_add_num"),
                                       ("update_repo_subgraphs", "repo_update_num")):
                    if len(mods[group]) != sec["repo_summary"][counter]:
                        errs.append(f"{key}: {len(mods[group])} {group} but {counter} = {sec['repo_summary'][counter]}")
                    for e in mods[group]:
                        if not _pct_ok(e["performance_improvement"], e["performance_before_tune(ms)"],
                                       e["performance_after_tune(ms)"]):
                            errs.append(f"{key}: subgraph {e['repo_key']} improvement does not match")
    return errs


def validate(data: Any, kind: str) -> None:
    """Raise ValueError (with every problem) unless `data` is a valid result file of `kind`."""
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in jsonschema.Draft202012Validator(RESULT_SCHEMA[kind]).iter_errors(data)]
    if not problems:
        problems = semantic_errors(data)
    if problems:
        raise ValueError("invalid result file:\n  " + "\n  ".join(problems))
