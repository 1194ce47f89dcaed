"""The rule for a threshold a person gives the console (a setting, a job's parameter): a
number from 0 to 1. One check here, so the settings API and the jobs answer alike; the Jobs
page checks its form with the same words before it asks."""

from __future__ import annotations

import math

RULE = "a number from 0 to 1"


def threshold_problem(value: object) -> str | None:
    """Why `value` is not a threshold, or None when it is one. JSON's true/false are not
    numbers here, and NaN (which Python's JSON reader accepts) is refused too."""
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value <= 1
    ):
        return None
    return f"expected {RULE}, got {value!r}"
