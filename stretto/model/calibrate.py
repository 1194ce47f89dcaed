"""The calibration of the served score (docs/algorithms.md, "Calibrating the served score").

A flow may carry `calibration.<decider>`: a logistic map from the decider's probability p and
the binding's chance c to the chance that the agent makes the lookup itself before its next
write, with offsets for where it is decided and how its arguments were bound:

    q = σ(intercept + slope · logit(p) + binding_slope · log(c) + sites[site][tool]
          + mentions[tool][mention] + classes[site][tool][mention])

p is clipped to [CLIP, 1 − CLIP] before the logit and c to [CLIP, 1] before the log; an
offset not in the table is 0. A map without `binding_slope` (written before it) weighs the
two together, `slope · logit(p · c)`. `classes` tells a mention class apart where it is
decided: a pick beside a value the customer named (`other`) may be the agent's own after one
call and hardly ever after another. With both slopes > 0 (the fit keeps them so), q rises
with p and with c for every option. The map is fitted offline on replays of episodes the
fitting flows never saw (stretto.offline.fits.calibrate); the Decider serves q in place of
p · c: it is what the threshold is compared with and what the logs and reports call the
score.
"""

from __future__ import annotations

import math

CLIP = 1e-3


def logit(p: float) -> float:
    p = min(max(p, CLIP), 1 - CLIP)
    return math.log(p / (1 - p))


def log_chance(c: float) -> float:
    return math.log(min(max(c, CLIP), 1.0))


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
            # None: a map that weighs p · c with one slope
            self.binding_slope: float | None = table.get("binding_slope")
            self.sites: dict[str, dict[str, float]] = table.get("sites", {})
            self.mentions: dict[str, dict[str, float]] = table.get("mentions", {})
            self.classes: dict[str, dict[str, dict[str, float]]] = table.get("classes", {})

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

    def score(
        self, raw: float, site: str | None, tool: str, mention: str | None, chance: float = 1.0
    ) -> float:
        """The served score of an option of raw score `raw` = p × `chance` (its probability
        times its binding's chance)."""
        if self.table is None:
            return raw
        if self.binding_slope is None:
            z = self._z(raw, site, tool)
        else:
            prob = raw / chance if chance > 0 else raw
            z = self._z(prob, site, tool) + self.binding_slope * log_chance(chance)
        return sigmoid(z + self._mention(site, tool, mention or ""))

    def _mention(self, site: str | None, tool: str, mention: str) -> float:
        """The offsets of the mention class: the lookup's, and the lookup's where decided."""
        here = self.classes.get(site or "", {}).get(tool, {})
        return self.mentions.get(tool, {}).get(mention, 0.0) + here.get(mention, 0.0)

    def upper(self, prob: float, site: str | None, tool: str) -> float:
        """The most an option of probability `prob` could be served at, whatever its binding
        (chance 1, the tool's highest mention offset): below θ, it need not be bound."""
        if self.table is None:
            return prob
        named = {*self.mentions.get(tool, {}), *self.classes.get(site or "", {}).get(tool, {})}
        offset = max([0.0, *(self._mention(site, tool, m) for m in named)])
        return sigmoid(self._z(prob, site, tool) + offset)
