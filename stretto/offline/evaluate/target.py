"""Targets: the rules evaluated (a decider × a threshold), re-run on the logged options of
each labelled decision by the decide module's own rules (docs/formats.md §5)."""

from __future__ import annotations

from dataclasses import dataclass

from stretto.model.decide import Decider, Option, theta_text
from stretto.offline.evaluate.labelling import EvaluateError, Labelled

# A target's value at a decision, in this order: the lookups it makes, those the agent used,
# the detours, the turns saved. Handing back is worth zero.
METRICS = ("lookups", "used", "detours", "turns")


@dataclass(frozen=True)
class Target:
    decider: str  # arbiter | reach | habit
    threshold: float

    @property
    def name(self) -> str:
        return f"{self.decider}@{theta_text(self.threshold)}"


def targets(
    labelled: Labelled, deciders: list[str] | None, thresholds: list[float]
) -> list[Target]:
    """Every decider × threshold asked for; no decider given: the one the logs were made
    with."""
    chosen = deciders or [labelled.logging_decider or "reach"]
    return [Target(d, t) for d in dict.fromkeys(chosen) for t in thresholds]


def target_action(row: dict, target: Target) -> int | None:
    """The option the target rule takes at a labelled decision (None: hand back), by the
    decide module's own rules on the logged options: reach's set rule on the logged p; the
    next-step rule on the habit's probability (habit) or the logged arbiter's p (arbiter)."""
    habit = target.decider == "habit"
    options = [
        Option(
            o["tool"],
            o["habit"] if habit else o["p"],
            o["habit"],
            o["binding"],
            o["arguments"],
            o["unbound"],
        )
        for o in row["options"]
    ]
    rule = Decider.reach_rule if target.decider == "reach" else Decider.habit_rule
    decision = rule(options, target.threshold)
    if decision.action != "lookup" or decision.tool is None:
        return None
    return [o.tool for o in options].index(decision.tool)


def check_targets(labelled: Labelled, targets: list[Target]) -> None:
    """Refuse a target the logs cannot tell: an unknown decider, or one whose probabilities
    the logged options do not carry (reach and arbiter need logs made with that decider; the
    habit's probability is logged by every decider)."""
    logged = labelled.logging_decider
    for target in targets:
        if target.decider not in ("arbiter", "reach", "habit"):
            raise EvaluateError(f"unknown decider {target.decider!r} (arbiter, reach or habit)")
        if target.decider in ("reach", "arbiter") and logged not in (None, target.decider):
            raise EvaluateError(
                f"{labelled.folder}: the logs were made with the {logged} decider; their "
                f"options carry no {target.decider} probabilities (evaluate --decider "
                f"{logged} or habit)"
            )
        if target.decider == "habit":
            for row in labelled.rows:
                if any(o["habit"] is None for o in row["options"]):
                    raise EvaluateError(
                        f"{row['file']}:{row['line']}: an option without its habit probability"
                    )


def values(label: dict) -> tuple[float, float, float, float]:
    """The METRICS of a lookup with this label: [lookups, used, detours, turns]."""
    return (1.0, float(label["used"]), float(label["detour"]), float(label["turn"]))
