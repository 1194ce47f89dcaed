"""Fitting the arbiter (../shared/spec/algorithms.md §13.4): a conditional logit over each
decision's options, ridge 1.0, by Newton's method with step halving, from w = 0.

numpy is imported here only: learning fits, serving judges (stretto.oracle.scores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stretto.oracle.arbiter import Fold
from stretto.oracle.questions import Predicate
from stretto.oracle.scores import Case, Rates, design
from stretto.vocabulary import FOLDS, fold_of

RIDGE = 1.0
MAX_ITERATIONS = 100
MIN_STEP = 1e-6  # step halving gives up below this
MIN_GAIN = 1e-9  # Newton stops when the objective gains less


@dataclass
class LogitFit:
    weights: np.ndarray
    objective: float  # penalized log-likelihood at the weights
    log_likelihood: float
    iterations: int
    stopped: str  # why Newton stopped


class _Data:
    """Cases padded to the most options any has: X (cases × options × features)."""

    def __init__(self, designs: Sequence[np.ndarray], chosen: Sequence[int]) -> None:
        width = max(len(d) for d in designs)
        dims = designs[0].shape[1]
        self.x = np.zeros((len(designs), width, dims))
        self.mask = np.zeros((len(designs), width), dtype=bool)
        for i, d in enumerate(designs):
            self.x[i, : len(d)] = d
            self.mask[i, : len(d)] = True
        self.chosen = np.asarray(chosen)
        self.rows = np.arange(len(designs))

    def probabilities(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = np.where(self.mask, self.x @ w, -np.inf)
        peak = scores.max(axis=1, keepdims=True)
        exps = np.exp(scores - peak)
        total = exps.sum(axis=1, keepdims=True)
        return exps / total, (scores[self.rows, self.chosen] - peak[:, 0] - np.log(total[:, 0]))

    def log_likelihood(self, w: np.ndarray) -> float:
        return float(self.probabilities(w)[1].sum())


def fit_logit(
    designs: Sequence[np.ndarray], chosen: Sequence[int], ridge: float = RIDGE
) -> LogitFit:
    """Maximize Σ [s_chosen − logsumexp(s)] − ½·ridge·‖w‖², s = X·w per case."""
    if not designs:
        raise ValueError("no decisions to fit on")
    data = _Data([np.asarray(d, dtype=float) for d in designs], chosen)
    dims = data.x.shape[2]
    w = np.zeros(dims)

    def objective(w: np.ndarray) -> float:
        return data.log_likelihood(w) - 0.5 * ridge * float(w @ w)

    value, stopped, iteration = objective(w), f"{MAX_ITERATIONS} iterations", 0
    for iteration in range(1, MAX_ITERATIONS + 1):  # noqa: B007 (reported below)
        p, _ = data.probabilities(w)
        mean = np.einsum("ck,ckd->cd", p, data.x)
        gradient = (data.x[data.rows, data.chosen] - mean).sum(axis=0) - ridge * w
        curvature = (
            np.einsum("ck,ckd,cke->de", p, data.x, data.x) - mean.T @ mean + ridge * np.eye(dims)
        )
        try:
            direction = np.linalg.solve(curvature, gradient)  # LU with partial pivoting
        except np.linalg.LinAlgError:
            stopped = "singular curvature"
            break
        step = 1.0
        while step >= MIN_STEP:
            candidate = w + step * direction
            candidate_value = objective(candidate)
            if candidate_value >= value:
                break
            step /= 2
        else:
            stopped = "no step improved the objective"
            break
        gain = candidate_value - value
        w, value = candidate, candidate_value
        if gain < MIN_GAIN:
            stopped = "converged"
            break
    return LogitFit(w, value, data.log_likelihood(w), iteration, stopped)


def fit_fold(cases: Sequence[Case], weighed: Sequence[Predicate]) -> Fold:
    """One arbiter: rates from every case, weights from the cases whose agent step was an
    option."""
    rates = Rates.of(cases)
    fittable = [c for c in cases if c.actual is not None]
    if not fittable:
        raise ValueError(
            "no decisions to fit the arbiter on (none where the agent's next step was an option)"
        )
    designs = [np.array(design(c, weighed, rates)) for c in fittable]
    chosen = [c.options.index(c.actual) for c in fittable if c.actual is not None]
    fit = fit_logit(designs, chosen)
    return Fold([float(x) for x in fit.weights], rates, len(fittable))


def fit_folds(
    cases: Sequence[Case], weighed: Sequence[Predicate], pooled: bool = True
) -> list[Fold]:
    """One pooled arbiter (learn), or five cross-fitted ones (compile): fold k learns from
    the cases of tasks whose group % 5 ≠ k, and judges the others."""
    if pooled:
        return [fit_fold(cases, weighed)]
    return [fit_fold([c for c in cases if fold_of(c.task) != k], weighed) for k in range(FOLDS)]
