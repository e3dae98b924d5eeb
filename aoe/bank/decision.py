"""What happens to one case after tuning (SPEC §3) — the one rule both OPAT and SGAT use.

    in a bank before?  REPEAT_TUNE  tuned better than the strategy in use?  outcome      written?
    yes                False        (not tuned)                             reserved     no
    yes                True         yes                                     update       yes
    yes                True         no / tuning failed                      reserved     no
    no                 -            yes (beats the default strategy)        add          yes
    no                 -            no / tuning failed                      unsatisfied  no

"In a bank" means the custom or the built-in bank (an update of a built-in case is written to the
custom bank). "Better" means strictly faster than the strategy in use, by more than `min_gain`
(a relative margin, 0 by default).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, fields
from enum import Enum
from typing import Mapping

from ..errors import AoeError


class Outcome(str, Enum):
    """The fate of one tuned case."""

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


def repeat_tune(env: Mapping[str, str] | None = None) -> bool:
    """Read REPEAT_TUNE (`True`/`False`, default False); anything else is an error."""
    value = (os.environ if env is None else env).get("REPEAT_TUNE", "")
    if value == "":
        return False
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise AoeError(f"REPEAT_TUNE={value!r} is not valid; set it to True or False")


def should_tune(in_bank: bool, repeat: bool) -> bool:
    """True if a case must be tuned: not in a bank yet, or REPEAT_TUNE is on."""
    return repeat or not in_bank


def decide(in_bank: bool, repeat: bool, in_use_perf_us: float | None,
           tuned_perf_us: float | None, min_gain: float = 0.0) -> Outcome:
    """The outcome of one case (table above); `tuned_perf_us` None = not tuned or tuning failed.

    `in_use_perf_us` is the time of the strategy in use: the bank's when `in_bank`, else the default
    heuristic's. None means unknown, and then any tuned strategy counts as better.
    """
    if in_bank and not repeat:
        return Outcome.RESERVED
    improved = tuned_perf_us is not None and (
        in_use_perf_us is None or tuned_perf_us * (1.0 + min_gain) < in_use_perf_us)
    if in_bank:
        return Outcome.UPDATE if improved else Outcome.RESERVED
    return Outcome.ADD if improved else Outcome.UNSATISFIED


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
        """The counters under their result-file names, in the order of the seed's example."""
        return {"repo_add_num": self.repo_add_num, "repo_hit_num": self.repo_hit_num,
                "repo_reserved_num": self.repo_reserved_num,
                "repo_unsatisfied_num": self.repo_unsatisfied_num,
                "repo_update_num": self.repo_update_num, "total_num": self.total_num}
