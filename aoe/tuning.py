"""The one tuner contract, and the words of a result file that every floor shares.

Both tuners — operator tuning (`aoe.opat.tune_graph`) and subgraph tuning (`aoe.sgat.tune_graph`) —
are driven the same way, so the job has one run loop for both:

    report = tuner.tune_graph(graph, soc, bank_dir, config, events=events, done=done)

- `events` (an `Events`) hears `start(n_cases, report)` once, `case_done(records, hit)` after every
  distinct case (the records of the operators or subgraph instances it covers; `hit` = it was in a
  bank), and is asked `should_stop()` between cases. A stop ends the run early with status
  `INCOMPLETE`; the returned report then holds what was finished.
- `report` (a `Report`) is live: the tuner fills it as it goes, so `report.to_result_section()` is
  the result file's section at any instant (status `INCOMPLETE` until the run ends). Its counters
  are computed from its records, never patched from outside.
- Records save and restore their own resume state (`to_state()` / the tuner's `record_from_state`);
  `done` maps record keys of an interrupted run to restored records: the tuner keeps them as they
  were and does not tune their cases again.

This module imports nothing from the other floors; they import it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

# --- statuses and the improvement formula --------------------------------------------------------

SUCCESS = "tuning successful"
FAILED = "tuning failed"
INCOMPLETE = "tuning incomplete"
STATUSES = (SUCCESS, FAILED, INCOMPLETE)


def gain_pct(before: float, after: float) -> float:
    """The product's gain as a number: (before / after - 1) x 100, 0 when `after` is not positive."""
    if after <= 0:
        return 0.0
    return (before / after - 1.0) * 100.0


def improvement(before: float, after: float) -> str:
    """The product's gain figure: (before / after - 1) x 100 with two decimals and a '%'."""
    return f"{gain_pct(before, after):.2f}%"


# --- bank outcomes and the six counters ---------------------------------------------------------

class Outcome(str, Enum):
    """The fate of one tuned case (see `aoe.bank.decide` for the rule)."""

    ADD = "add"
    UPDATE = "update"
    RESERVED = "reserved"
    UNSATISFIED = "unsatisfied"

    @property
    def writes(self) -> bool:
        """True if the tuned strategy goes into the custom bank."""
        return self in (Outcome.ADD, Outcome.UPDATE)

    @property
    def hit(self) -> bool:
        """True if the case was in a bank before tuning."""
        return self in (Outcome.UPDATE, Outcome.RESERVED)


COUNTER_NAMES = ("repo_add_num", "repo_hit_num", "repo_reserved_num", "repo_unsatisfied_num",
                 "repo_update_num", "total_num")


@dataclass
class Counters:
    """The six `repo_summary` counters of a result file; they always add up."""

    repo_add_num: int = 0
    repo_hit_num: int = 0
    repo_reserved_num: int = 0
    repo_update_num: int = 0
    repo_unsatisfied_num: int = 0
    total_num: int = 0

    def record(self, outcome: Outcome) -> None:
        """Count one case."""
        self.total_num += 1
        if outcome is Outcome.ADD:
            self.repo_add_num += 1
        elif outcome is Outcome.UNSATISFIED:
            self.repo_unsatisfied_num += 1
        else:
            self.repo_hit_num += 1
            if outcome is Outcome.UPDATE:
                self.repo_update_num += 1
            else:
                self.repo_reserved_num += 1

    def __add__(self, other: "Counters") -> "Counters":
        return Counters(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def consistent(self) -> bool:
        """True if hit = update + reserved and total = add + hit + unsatisfied."""
        return (self.repo_hit_num == self.repo_update_num + self.repo_reserved_num
                and self.total_num == self.repo_add_num + self.repo_hit_num + self.repo_unsatisfied_num)

    def to_dict(self) -> dict[str, int]:
        """The counters under their result-file names, in the order of the product's example."""
        return {name: getattr(self, name) for name in COUNTER_NAMES}


# --- schema fragments shared by the sections ----------------------------------------------------

PCT_SCHEMA: dict[str, Any] = {"type": "string", "pattern": r"^-?[0-9]+\.[0-9]{2}%$"}
TIME_SCHEMA: dict[str, Any] = {"type": "number", "minimum": 0}
COUNT_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 0}


def strict_object(properties: dict[str, Any], required: Sequence[str] | None = None) -> dict[str, Any]:
    """Schema of a JSON object with exactly these properties (all required unless `required` says otherwise)."""
    return {"type": "object", "required": list(properties if required is None else required),
            "additionalProperties": False, "properties": properties}


SUMMARY_SCHEMA: dict[str, Any] = strict_object({k: COUNT_SCHEMA for k in COUNTER_NAMES})


# --- the contract -------------------------------------------------------------------------------

@runtime_checkable
class Record(Protocol):
    """What a tuner reports per operator (OPAT) or per distinct subgraph (SGAT)."""

    @property
    def key(self) -> str:
        """The identity `done` is keyed by when a run resumes."""

    @property
    def label(self) -> str:
        """Short text for progress output."""

    @property
    def n_ops(self) -> int:
        """How many graph operators the record covers."""

    def to_state(self) -> dict[str, Any]:
        """JSON-ready resume state; the tuner's `record_from_state` reads it back."""


class Report(Protocol):
    """A tuner's live report (filled while it runs)."""

    status: str
    records: Sequence[Any]

    @property
    def counters(self) -> Counters:
        """The six counters, computed from the records."""

    def to_result_section(self) -> dict[str, Any] | None:
        """The tuner's section of a result file (None when there is nothing to report)."""


class Events:
    """What a tuner tells its driver; the base class ignores everything and never stops.

    `detail`: True asks the tuner to fill each record's `detail` (the case's kernels or the subgraph's
    plans, as plain values) before `case_done`: what a run's record keeps. It costs a few simulations
    per case, so it is off unless asked for.
    """

    detail: bool = False

    def start(self, n_cases: int, report: Report) -> None:
        """Tuning begins: `n_cases` distinct cases to go; `report` is the live report."""

    def case_done(self, records: Sequence[Record], hit: bool) -> None:
        """One distinct case finished (its records; `hit`: it was in a bank before)."""

    def should_stop(self) -> bool:
        """Asked between cases: True ends the run as `INCOMPLETE`."""
        return False


def restore(done: Mapping[str, Any] | None) -> dict[str, Any]:
    """A private copy of a `done` mapping (None = nothing done)."""
    return dict(done or {})
