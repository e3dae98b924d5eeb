"""What happens to one case after tuning — the one rule both OPAT and SGAT use.

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
from typing import Mapping

from ..errors import AoeError
from ..safeio import env_text
from ..tuning import Counters, Outcome

__all__ = ["Counters", "Outcome", "decide", "repeat_tune", "should_tune"]


def repeat_tune(env: Mapping[str, str] | None = None) -> bool:
    """Read REPEAT_TUNE (`True`/`False`, default False); anything else is an error."""
    value = (os.environ if env is None else env).get("REPEAT_TUNE", "")
    text = env_text(value).lower()
    if text == "":
        return False
    if text in ("true", "false"):
        return text == "true"
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
