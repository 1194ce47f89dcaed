"""Fitting the calibration of the served score (docs/algorithms.md, "Calibrating the served
score"); stretto.model.calibrate applies it.

The rows are cross-fitted (stretto.offline.fits.crossfit): the training episodes are split into
folds by task (FNV-1a of the task id, modulo FOLDS), a flow is learned from the successful
episodes of every other fold, and the fold's own episodes are replayed with it from the record,
scoring every option (ε = 0): each row is an option's raw score s = p × chance, where it was
decided, how its binding named its values, and whether the agent made that very call before its
next write. No row is scored by a flow that learned from its episode, so the map corrects the
optimism of a flow on its own data as well as the shape of its scores.

The map is a penalized logistic regression of used on logit(s), with an offset per (site,
lookup) and per (lookup, mention class), each offset under a Gaussian prior (a ridge penalty
λ/2 · offset²): an offset seen on few rows stays near 0 and the option is served near the
pooled map. The intercept and slope have a weak prior (weight PRIOR) at the identity map
(0, 1), so that rows a line separates perfectly cannot send them to infinity. λ is chosen
among PENALTIES by the log-loss of each fold's rows under the map fitted on the other folds'
rows. The slope is kept at MIN_SLOPE or more, so the served score rises with s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from stretto.logs.episode import Episode
from stretto.model.calibrate import logit
from stretto.offline.fits.crossfit import Learner, cross_fit
from stretto.offline.reports.replay import replay
from stretto.vocabulary import FOLDS, fold_of

PENALTIES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 64.0)
MIN_SLOPE = 0.05
PRIOR = 1.0  # the weight of the identity map's intercept 0 and slope 1 (one row's worth)
NEWTON_STEPS = 50
METHOD = (
    "penalized logistic regression of use on logit(p × chance), offsets per site and lookup "
    "and per lookup and mention class; cross-fitted by task"
)


class CalibrateError(ValueError):
    """Nothing to calibrate against; the message says why."""


def cross_fitted_rows(
    episodes: Sequence[Episode],
    learn: Learner,
    *,
    learnable: Callable[[Episode], bool] = lambda e: e.succeeded,
    decider: str = "reach",
    threshold: float = 0.3,
    folds: int = FOLDS,
) -> list[dict]:
    """The option rows of every episode, each replayed with a flow learned (`learn`, from the
    learnable episodes of the other folds; it must carry no calibration) without its fold's
    tasks (stretto.offline.fits.crossfit). A fold whose complement holds no learnable episode adds
    no rows."""
    rows: list[dict] = []
    for flow, held in cross_fit(episodes, learn, learnable=learnable, folds=folds):
        result = replay(flow, held, decider=decider, threshold=threshold, explore=0.0)
        rows += [o for e in result.episodes for o in e.options]
    return rows


def calibration_map(
    episodes: Sequence[Episode],
    learn: Learner,
    *,
    learnable: Callable[[Episode], bool] = lambda e: e.succeeded,
) -> dict:
    """The reach map a flow serves (its `calibration.reach`), fitted on the cross-fitted
    replays of `episodes`, each fold's flow learned by `learn` from the `learnable` episodes
    of the others. CalibrateError when the replays leave nothing to calibrate against."""
    rows = cross_fitted_rows(episodes, learn, learnable=learnable)
    table = fit_map(rows)
    if table is None:
        made = sum(bool(r["used"]) for r in rows)
        raise CalibrateError(
            f"the replays of {len(episodes)} episodes scored {len(rows)} options and the agent "
            f"made {made} of them (a map needs some of each)"
        )
    table.update(folds=FOLDS, episodes=len(episodes))
    return table


class _Design:
    """The rows as a matrix: intercept, logit(s), then one column per offset."""

    def __init__(self, rows: Sequence[dict]) -> None:
        self.keys: list[tuple[str, str, str]] = sorted(
            {("sites", r["site"], r["tool"]) for r in rows}
            | {("mentions", r["tool"], r.get("mention") or "none") for r in rows}
        )
        index = {k: 2 + i for i, k in enumerate(self.keys)}
        self.x = np.zeros((len(rows), 2 + len(self.keys)))
        self.y = np.array([float(bool(r["used"])) for r in rows])
        for i, r in enumerate(rows):
            self.x[i, 0] = 1.0
            self.x[i, 1] = logit(r["score"])
            self.x[i, index[("sites", r["site"], r["tool"])]] = 1.0
            self.x[i, index[("mentions", r["tool"], r.get("mention") or "none")]] = 1.0


def _fit(x, y, penalty: float):
    """Newton's method on the penalized log-likelihood; the slope held at MIN_SLOPE or more."""
    k = x.shape[1]
    ridge = np.full(k, penalty)
    ridge[:2] = PRIOR  # the intercept and slope, towards the identity map (0, 1)
    prior = np.zeros(k)
    prior[1] = 1.0
    w = prior.copy()
    free = np.ones(k, dtype=bool)
    for _ in range(NEWTON_STEPS):
        z = np.clip(x @ w, -30, 30)
        p = 1 / (1 + np.exp(-z))
        grad = x.T @ (p - y) + ridge * (w - prior)
        hess = (x * (p * (1 - p))[:, None]).T @ x + np.diag(ridge)
        step = np.zeros(k)
        step[free] = np.linalg.solve(hess[np.ix_(free, free)], grad[free])
        w -= step
        if w[1] < MIN_SLOPE:
            w[1], free[1] = MIN_SLOPE, False
        if np.abs(step).max() < 1e-9:
            break
    return w


def _log_loss(x, y, w) -> float:
    z = np.clip(x @ w, -30, 30)
    return float(np.sum(np.logaddexp(0, z) - y * z))


def choose_penalty(rows: Sequence[dict]) -> float:
    """The λ of PENALTIES with the least held-out log-loss over the task folds (the rows of
    each fold scored by the map fitted on the others); the middle one when there is one fold.
    A row's task is its `task_id`, else its episode."""
    design = _Design(rows)
    groups = [fold_of(r["task_id"] or r["episode"]) for r in rows]
    present = sorted(set(groups))
    if len(present) < 2:
        return PENALTIES[len(PENALTIES) // 2]
    groups_array = np.array([present.index(g) for g in groups])
    present = list(range(len(present)))
    losses = []
    for penalty in PENALTIES:
        loss = 0.0
        for k in present:
            train, test = groups_array != k, groups_array == k
            w = _fit(design.x[train], design.y[train], penalty)
            loss += _log_loss(design.x[test], design.y[test], w)
        losses.append(loss)
    return PENALTIES[int(np.argmin(losses))]


def fit_map(rows: Sequence[dict], penalty: float | None = None) -> dict | None:
    """The calibration map of the rows (a flow's `calibration.<decider>`), or None when the
    rows hold no option the agent made, or none it did not (nothing to calibrate against)."""
    if not any(r["used"] for r in rows) or all(r["used"] for r in rows):
        return None
    if penalty is None:
        penalty = choose_penalty(rows)
    design = _Design(rows)
    w = _fit(design.x, design.y, penalty)
    table: dict = {
        "intercept": round(float(w[0]), 6),
        "slope": round(float(w[1]), 6),
        "sites": {},
        "mentions": {},
        "method": METHOD,
        "penalty": penalty,
        "options": len(rows),
        "used": sum(bool(r["used"]) for r in rows),
    }
    for (part, outer, inner), value in zip(design.keys, w[2:], strict=True):
        if abs(value) >= 1e-4:
            table[part].setdefault(outer, {})[inner] = round(float(value), 6)
    return table
