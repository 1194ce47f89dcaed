"""The calibration of the served score (docs/algorithms.md, "Calibrating the served score").

A flow may carry `calibration.<decider>`: a logistic map from the decider's raw score
s = probability × binding chance to the chance that the agent makes the lookup itself before
its next write, with offsets for where it is decided and how its arguments were bound:

    q = σ(intercept + slope · logit(s) + sites[site][tool] + mentions[tool][mention])

s is clipped to [CLIP, 1 − CLIP] before the logit; an offset not in the table is 0. With
slope > 0 (the fit keeps it so), q rises with s for every option. The map is fitted offline
on replays of episodes the fitting flows never saw (stretto.offline.fits.calibrate); the Decider
serves q in place of s: it is what the threshold is compared with and what the logs and
reports call the score.
"""

from __future__ import annotations

import math

CLIP = 1e-3


def logit(p: float) -> float:
    p = min(max(p, CLIP), 1 - CLIP)
    return math.log(p / (1 - p))


def sigmoid(z: float) -> float:
    if z >= 0:
        return 1 / (1 + math.exp(-z))
    e = math.exp(z)
    return e / (1 + e)


class Calibration:
    """A flow's map for one decider; the identity when the flow has none."""

    def __init__(self, table: dict | None = None) -> None:
        self.table = table
        if table is not None:
            self.intercept = float(table["intercept"])
            self.slope = float(table["slope"])
            self.sites: dict[str, dict[str, float]] = table.get("sites", {})
            self.mentions: dict[str, dict[str, float]] = table.get("mentions", {})

    @classmethod
    def of(cls, flow: dict, decider: str) -> Calibration:
        return cls((flow.get("calibration") or {}).get(decider))

    @property
    def identity(self) -> bool:
        return self.table is None

    def _z(self, raw: float, site: str | None, tool: str) -> float:
        return (
            self.intercept + self.slope * logit(raw) + self.sites.get(site or "", {}).get(tool, 0.0)
        )

    def score(self, raw: float, site: str | None, tool: str, mention: str | None) -> float:
        """The served score of an option bound with chance `raw / prob`."""
        if self.table is None:
            return raw
        offset = self.mentions.get(tool, {}).get(mention or "", 0.0)
        return sigmoid(self._z(raw, site, tool) + offset)

    def upper(self, prob: float, site: str | None, tool: str) -> float:
        """The most an option of probability `prob` could be served at, whatever its binding
        (chance 1, the tool's highest mention offset): below θ, it need not be bound."""
        if self.table is None:
            return prob
        offset = max([0.0, *self.mentions.get(tool, {}).values()])
        return sigmoid(self._z(prob, site, tool) + offset)
