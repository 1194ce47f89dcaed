"""Bayesian online change-point detection over drift's series (Adams & MacKay 2007; the model is
stretto.offline.lifecycle.drift's docstring): per series a normal-gamma prior, a Student-t
predictive mixed with an outlier drawn from the prior, the series independent given the run, a
constant hazard.

The run hypotheses live in preallocated buffers, newest first (row j: a run of j + 1 sessions),
updated in place; each run's α is α0 + k/2 after k values, so lgamma is looked up by k. The
oldest hypotheses whose posterior mass together is below `tail` are dropped once a session's
statistic is taken (never the window's): they change only the normalization, so the figures move
by float noise (tests/stretto/offline/lifecycle/test_driftcache.py: within 1e-15 of keeping them
all, the same change points), while the work per session stops growing with the sessions — in a
steady series a run's mass falls like (1 − hazard)^length, so ~4,600 hypotheses are kept at
hazard 0.01 (fewer after a change). `tail=0` keeps every one (the figures of the detector as it
was before the buffers, bit for bit).
"""

from __future__ import annotations

import math

KAPPA0, ALPHA0 = 0.1, 1.0
MIN_SCALE = 0.05
OUTLIER = 0.05
MIN_RUN = 3  # sessions in the new run before the alarm may sound
MIN_BEFORE = 10  # sessions before the change
TAIL = 1e-20  # the oldest run hypotheses' mass dropped


def prior(values: list[float]) -> tuple[float, float]:
    """(mean, scale) of a series' normal-gamma prior: its median, and a robust scale of its
    session-to-session changes."""
    import numpy as np  # `stretto --help` loads this (drift's Settings): numpy on detecting

    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if not len(x):
        return 0.0, MIN_SCALE
    steps = np.abs(np.diff(x))
    scale = float(np.median(steps)) * 1.4826 / math.sqrt(2) if len(steps) else 0.0
    return float(np.median(x)), max(MIN_SCALE, scale)


def _log_t(x, mu, kappa, alpha, beta, gammas):
    """log of the normal-gamma's Student-t predictive at x (a value or an array, broadcast
    over runs); `gammas` is lgamma((ν + 1)/2) − lgamma(ν/2) at ν = 2α."""
    import numpy as np  # `stretto --help` loads this (drift's Settings): numpy on detecting

    nu = 2 * alpha
    var = beta * (kappa + 1) / (alpha * kappa)
    return (
        gammas
        - 0.5 * np.log(nu * math.pi * var)
        - (nu + 1) / 2 * np.log1p((x - mu) ** 2 / (nu * var))
    )


class _Runs:
    """The run hypotheses' posterior and statistics: `lo:hi` of buffers filled from the end,
    row `lo` the newest run."""

    def __init__(self, dims: int, capacity: int) -> None:
        import numpy as np  # `stretto --help` loads this (drift's Settings): numpy on detecting

        self.lo = self.hi = capacity
        self.posterior = np.empty(capacity)
        self.stats = np.empty((4, dims, capacity))  # mu, kappa, alpha, beta per series
        self.counted = np.empty((dims, capacity), dtype=np.int64)  # values seen per run

    def __len__(self) -> int:
        return self.hi - self.lo

    def prepend(self) -> None:
        """Room for a new run before the newest (the buffers grown when full)."""
        import numpy as np  # `stretto --help` loads this (drift's Settings): numpy on detecting

        if self.lo == 0:
            n = len(self)
            capacity = max(2 * n, 1024)
            posterior, stats = np.empty(capacity), np.empty((*self.stats.shape[:2], capacity))
            counted = np.empty((self.counted.shape[0], capacity), dtype=np.int64)
            posterior[capacity - n :] = self.posterior[self.lo : self.hi]
            stats[:, :, capacity - n :] = self.stats[:, :, self.lo : self.hi]
            counted[:, capacity - n :] = self.counted[:, self.lo : self.hi]
            self.posterior, self.stats, self.counted = posterior, stats, counted
            self.lo, self.hi = capacity - n, capacity
        self.lo -= 1


def change_probabilities(
    values: list[list[float | None]], hazard: float, window: int, tail: float = TAIL
) -> list[dict]:
    """Per session: `change`, the probability that the current run began within the last
    `window` sessions (at least MIN_RUN ago, with MIN_BEFORE before it), and `began`, the
    likeliest first session of such a run."""
    import numpy as np  # `stretto --help` loads this (drift's Settings): numpy on detecting

    data = np.array([[np.nan if v is None else v for v in s] for s in values], dtype=float).T
    count, dims = data.shape if data.size else (0, len(values))
    priors = [prior(list(data[:, d])) for d in range(dims)]
    mu0 = np.array([m for m, _ in priors])
    beta0 = np.array([s * s for _, s in priors])
    table = np.array([math.lgamma(ALPHA0 + k / 2) for k in range(count + 2)])
    gamma0 = float(table[1] - table[0])
    log_stay, log_outlier = float(np.log1p(-OUTLIER)), math.log(OUTLIER)
    runs = _Runs(dims, min(count, 1024) + 1)
    keep_at_least = window + 1
    out = []
    # each session's seen series are taken together (one array operation over series and
    # runs, not one per series): the same element-wise figures, the series still added in turn
    prior_all = _log_t(data, mu0, KAPPA0, ALPHA0, beta0, gamma0) if count else data
    for t in range(count):
        x = data[t]
        seen = np.flatnonzero(~np.isnan(x))
        prior_fits = prior_all[t, seen]
        log_new = sum(prior_fits.tolist())
        old = slice(runs.lo, runs.hi)
        xs = x[seen, None]
        if t > 0:
            mu, kappa, alpha, beta = runs.stats[:, seen, old]
            k = runs.counted[seen, old]
            fits = _log_t(xs, mu, kappa, alpha, beta, table[k + 1] - table[k])
            terms = np.logaddexp(log_stay + fits, log_outlier + prior_fits[:, None])
            log_run = np.zeros(len(runs))
            for term in terms:
                log_run += term
            top = max(log_new, float(log_run.max()))
            grow = runs.posterior[old]
            grow *= np.exp(log_run - top)
            grow *= 1 - hazard
            new = hazard * math.exp(log_new - top)
        runs.prepend()
        now = slice(runs.lo, runs.hi)
        posterior = runs.posterior[now]
        posterior[0] = 1.0 if t == 0 else new
        if t > 0:
            posterior /= posterior.sum()
        # the runs' statistics after this session: a new run from the prior, the others grown
        runs.stats[:, :, runs.lo] = [mu0, np.full(dims, KAPPA0), np.full(dims, ALPHA0), beta0]
        runs.counted[:, runs.lo] = 0
        if len(seen):
            mu, kappa, alpha, beta = runs.stats[:, seen, now]
            runs.stats[3, seen, now] = beta + kappa * (xs - mu) ** 2 / (2 * (kappa + 1))
            runs.stats[0, seen, now] = (kappa * mu + xs) / (kappa + 1)
            runs.stats[1, seen, now] = kappa + 1
            runs.stats[2, seen, now] = alpha + 0.5
            runs.counted[seen, now] += 1
        # the window's runs: lengths MIN_RUN..window with MIN_BEFORE sessions before them
        shortest, longest = MIN_RUN, min(window, t + 1 - MIN_BEFORE, len(runs))
        change, began = 0.0, None
        if longest >= shortest:
            recent = posterior[shortest - 1 : longest]
            change = float(recent.sum())
            began = t + 1 - (shortest + int(np.argmax(recent)))
        out.append({"change": change, "began": began})
        if tail > 0 and len(runs) > keep_at_least:
            oldest = np.cumsum(posterior[::-1])
            drop = min(int(np.searchsorted(oldest, tail)), len(runs) - keep_at_least)
            runs.hi -= drop
    return out
