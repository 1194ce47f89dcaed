"""The habit and reach models (../shared/spec/algorithms.md §2–3): order-2 hierarchical
Dirichlet back-off over readable step names, and the fit of its concentration α.

Counts are keyed by history: `()`, `(last,)`, `(second_last, last)`, each a mapping
action -> count. A history shorter than two steps is padded with START.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

START = "<start>"
ORDER = 2
# The grid for log α and its prior: log α ~ Normal(0, 2). (numpy is imported by the fit only:
# the proxy uses the models and starts without it.)
LOG_ALPHA_POINTS = 201
LOG_ALPHA_RANGE = (-5.0, 5.0)
LOG_ALPHA_PRIOR_SD = 2.0
LOGLIK_BLOCK = 65_536  # steps per block of the prequential log-likelihood (prequential_loglik)

Levels = Mapping[tuple[str, ...], Mapping[str, float]]


def seen(history: Sequence[str]) -> tuple[str, ...]:
    """All the models read of a history of step names: its last ORDER steps, padded with
    START (two histories that end alike get the same probabilities)."""
    return (*[START] * ORDER, *history[-ORDER:])[-ORDER:]


def contexts(history: Sequence[str]) -> list[tuple[str, ...]]:
    """The level-0, -1 and -2 contexts of a history of step names."""
    last = seen(history)
    return [(), last[-1:], last]


class BackoffModel:
    """P(a | history) with Dirichlet back-off through the levels; unseen contexts are skipped."""

    def __init__(
        self,
        levels: Levels,
        totals: Mapping[tuple[str, ...], float] | None,
        alpha: float,
        vocab_size: int,
        grouped: bool = False,
    ) -> None:
        self.levels = levels
        # Habit: totals are the counts' sums. Reach: steps that followed each history (its
        # counts need not sum to it).
        self.totals = (
            totals if totals is not None else {h: float(sum(c.values())) for h, c in levels.items()}
        )
        self.alpha = alpha
        self.vocab_size = vocab_size
        self.grouped = grouped

    def prob(self, action: str, history: Sequence[str]) -> float:
        p = 1.0 / self.vocab_size
        cs = contexts(history)
        for context in cs:
            total = self.totals.get(context)
            if not total:
                continue  # never seen: skip the level
            n = self.levels.get(context, {}).get(action, 0.0)
            p = (n + self.alpha * p) / (total + self.alpha)
        if self.grouped:
            # The group layer (every live episode in group 1, β = α) applies the longest
            # context's counts once more, as the reference serves it.
            total = self.totals.get(cs[-1])
            if total:
                n = self.levels.get(cs[-1], {}).get(action, 0.0)
                p = (n + self.alpha * p) / (total + self.alpha)
        return p

    def distribution(self, actions: Sequence[str], history: Sequence[str]) -> dict[str, float]:
        return {a: self.prob(a, history) for a in actions}


def prequential_loglik(counts: Mapping, alphas, vocab_size: int):
    """The online log-likelihood of the steps for each α: each step predicted from the steps
    before it, then observed. `counts` holds, per step, n(c_j) and n(c_j, a) over the earlier
    steps at levels 0–2 (`n0, na0, n1, na1, n2, na2`)."""
    # proxy start-up: it loads the models, never the fit (numpy, its thread pool)
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    steps = len(counts["n0"])
    levels = [(counts[f"n{lv}"], counts[f"na{lv}"], counts[f"n{lv}"] > 0) for lv in "012"]

    def loglik(alpha: float) -> float:
        # p <- (n(c, a) + α p) / (n(c) + α) where c was seen, else p: in place, with the
        # operations in that order (the same figures as the formula written out). The steps
        # go in blocks whose arrays stay in the cache between the levels' passes (at 300,000
        # steps, 40% less time than whole arrays); the logs are summed over the whole array
        # at the end, so the sum (numpy's pairwise one) and its figures are as before.
        logs = np.empty(steps)
        numerator, denominator = np.empty(LOGLIK_BLOCK), np.empty(LOGLIK_BLOCK)
        for start in range(0, steps, LOGLIK_BLOCK):
            end = min(start + LOGLIK_BLOCK, steps)
            p, num, den = logs[start:end], numerator[: end - start], denominator[: end - start]
            p.fill(1.0 / vocab_size)
            for n, na, seen in levels:
                np.multiply(p, alpha, out=num)
                np.add(num, na[start:end], out=num)
                np.add(n[start:end], alpha, out=den)
                np.divide(num, den, out=p, where=seen[start:end])
            np.log(p, out=p)
        return float(logs.sum())

    # each α's sum is independent of the others', and numpy lets go of the GIL in its loops
    with ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        return np.array(list(pool.map(loglik, alphas)))


def fit_alpha(counts: Mapping, vocab_size: int) -> dict:
    """The posterior median of α on a grid of log α (deterministic): prior log α ~ N(0, 2),
    likelihood the prequential log-likelihood of the steps."""
    import numpy as np  # proxy: it loads the models, never the fit

    if not len(counts.get("n0", [])):
        return {"alpha": 1.0, "method": "default (no steps)"}
    grid = np.linspace(*LOG_ALPHA_RANGE, LOG_ALPHA_POINTS)
    loglik = prequential_loglik(counts, np.exp(grid), vocab_size)
    log_post = loglik - 0.5 * (grid / LOG_ALPHA_PRIOR_SD) ** 2
    weights = np.exp(log_post - log_post.max())
    cdf = np.cumsum(weights) / weights.sum()

    def quantile(q: float) -> float:
        return float(np.exp(grid[int(np.searchsorted(cdf, q))]))

    return {
        "alpha": quantile(0.5),
        "method": "grid posterior median: log α on 201 points in [-5, 5], prior N(0, 2)",
        "p05": quantile(0.05),
        "p95": quantile(0.95),
        "steps": int(len(counts["n0"])),
    }
