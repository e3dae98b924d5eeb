"""JSON Schema of a result file (SPEC §4), and the checks a schema cannot express.

`RESULT_SCHEMA` validates the structure (names, keys, nesting, units, improvement strings);
`semantic_errors(data)` checks that the counters add up, that each `performance_improvement` is
`(before / after - 1) * 100` of its own before/after, and the status-dependent fields.
"""
from __future__ import annotations

from typing import Any

from ..sgat.report import SGAT_SECTION_SCHEMA

RESULT_FILE_NAME = r"^aoe_result_(opat|sgat)_[0-9]{17}_pid[0-9]+\.json$"
REPORT_KEY = r"^report_[0-9]{17}_[0-9]+$"

_PCT = {"type": "string", "pattern": r"^-?[0-9]+\.[0-9]{2}%$"}
_TIME = {"type": "number", "minimum": 0}
_COUNT = {"type": "integer", "minimum": 0}
_COUNTERS = ("repo_add_num", "repo_hit_num", "repo_reserved_num", "repo_unsatisfied_num", "repo_update_num",
             "total_num")
_SUMMARY = {"type": "object", "required": list(_COUNTERS), "additionalProperties": False,
            "properties": {k: _COUNT for k in _COUNTERS}}

_KIND_PERF = {
    "type": "object",
    "required": ["performance_after_tune(us)", "performance_before_tune(us)", "performance_improvement",
                 "update_mode"],
    "additionalProperties": False,
    "properties": {"performance_after_tune(us)": _TIME, "performance_before_tune(us)": _TIME,
                   "performance_improvement": _PCT, "update_mode": {"enum": ["add", "update"]}},
}

OPAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["opat_tuning_result", "repo_modified_operators", "repo_summary"],
    "additionalProperties": False,
    "properties": {
        "opat_tuning_result": {"enum": ["tuning successful", "tuning failed", "tuning incomplete"]},
        "repo_modified_operators": {"type": "array", "items": {
            "type": "object", "required": ["op_name", "op_type", "tune_performance"], "additionalProperties": False,
            "properties": {
                "op_name": {"type": "string", "minLength": 1},
                "op_type": {"oneOf": [{"type": "string", "minLength": 1},
                                      {"type": "array", "minItems": 2, "items": {"type": "string", "minLength": 1}}]},
                "tune_performance": {"type": "object", "minProperties": 1, "additionalProperties": False,
                                     "properties": {k: _KIND_PERF for k in ("Format", "Schedule", "Impl")}},
            }}},
        "repo_summary": _SUMMARY,
        "tuning_failed_operators": {"type": "array", "minItems": 1, "items": {"type": "string"}},
    },
    # tuning_failed_operators only (and always) with "tuning failed"
    "if": {"properties": {"opat_tuning_result": {"const": "tuning failed"}}},
    "then": {"required": ["tuning_failed_operators"]},
    "else": {"not": {"required": ["tuning_failed_operators"]}},
}

# The SGAT section is the one aoe.sgat builds and documents; the dialect marker stays at the top.
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
        "title": f"AOE {section} result file (SPEC §4)",
        "type": "object",
        "minProperties": 1,
        "propertyNames": {"pattern": REPORT_KEY},
        "additionalProperties": _task(section, schema),
    }


RESULT_SCHEMA = {"opat": result_schema("opat"), "sgat": result_schema("sgat")}


def improvement(before: float, after: float) -> str:
    """(before / after - 1) x 100, two decimals, with '%'."""
    if after <= 0:
        return "0.00%"
    return f"{(before / after - 1.0) * 100.0:.2f}%"


def _pct_ok(text: str, before: float, after: float, tol: float = 0.011) -> bool:
    # values in the file are rounded (µs: 3 decimals, ms: 6), so allow the rounding of the inputs
    try:
        got = float(text.rstrip("%"))
    except ValueError:
        return False
    if after <= 0:
        return got == 0.0
    want = (before / after - 1.0) * 100.0
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
                if sec["opat_tuning_result"] == "tuning incomplete" and "tuning_time(s)" in basic:
                    errs.append(f"{key}: an incomplete task must not have tuning_time(s)")
                if sec["opat_tuning_result"] != "tuning incomplete" and "tuning_time(s)" not in basic:
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
    import jsonschema

    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in jsonschema.Draft202012Validator(RESULT_SCHEMA[kind]).iter_errors(data)]
    if not problems:
        problems = semantic_errors(data)
    if problems:
        raise ValueError("invalid result file:\n  " + "\n  ".join(problems))
