"""Standard errors and 95% intervals of the estimates (docs/formats.md §5): analytic (normal,
from each decision's term in the estimate) and a bootstrap over whole sessions."""

from __future__ import annotations

import numpy as np

from stretto.offline.evaluate.estimators import (
    ESTIMATORS,
    Array,
    Records,
    ScopeSums,
    estimates,
    reward_model,
    scope_sums,
)

DEFAULT_BOOTSTRAP = 1000
Z95 = 1.959963984540054
UNKNOWN_VARIANCE = 0.25  # a 0–1 value's largest variance, for a model mean from one record
BOOTSTRAP_CELLS = 100_000  # draws × decisions computed at once: bounds the memory


def analytic_se(
    r: Records, point: dict[str, Array], sums: ScopeSums, tau: float
) -> dict[str, Array]:
    """Standard errors per site and in total, {estimator: (S+1, 4)}: `√(n · var(φ))` over the
    scope's n decisions, φᵢ decision i's term in the estimate (hand-backs contribute 0); NaN
    with fewer than 2 decisions. `point` holds the point estimates, `sums` their sums, `tau`
    is Switch-DR's τ.

    The terms (notation of stretto.offline.evaluate.estimators; `ȳ = V̂_SNIPS / n_π` and
    `δ = (V̂_SNDR − V̂_DM) / n_π` the self-normalized ones' means per lookup, and `c = n_π / Σ w`):
    labelled `yᵢ(π)`; direct `q̂ᵢ`, its variance plus the reward model's own
    (`Σ_k N_k² var_k / n_k` over the model's cells k, N_k the lookups that used cell k);
    IPS `wᵢ yᵢ`; SNIPS, linearized, `lookᵢ ȳ + c wᵢ (yᵢ − ȳ)`; DR `q̂ᵢ + wᵢ (yᵢ − q̂ᵢ)`;
    SNDR `q̂ᵢ + lookᵢ δ + c (wᵢ (yᵢ − q̂ᵢ) − wᵢ δ)`; Switch-DR `q̂ᵢ + 1{ρᵢ ≤ τ} wᵢ (yᵢ − q̂ᵢ)`."""
    q, cell = reward_model(r, np.ones((1, r.n)))
    q, cell = q[0], cell[0]
    residual = r.w[:, None] * (r.y - q)
    model_var = _model_variance(r)
    cells = r.n_site_tools + r.n_tools
    switched = r.rho <= tau

    out = {name: np.full((r.n_sites + 1, 4), np.nan) for name in ESTIMATORS}
    for scope in range(r.n_sites + 1):
        inside = np.ones(r.n, bool) if scope == r.n_sites else r.site == scope
        n = int(inside.sum())
        if n < 2:
            continue
        look, w, y = r.look[inside], r.w[inside], r.y[inside]
        qq, rr = q[inside], residual[inside]
        sum_w, looks = sums.sum_w[0, scope], sums.looks[0, scope]
        scale = looks / sum_w if sum_w > 0 else 0.0
        ratio = point["snips"][0, scope] / looks if looks > 0 else np.zeros(4)
        shift = (
            (point["sndr"][0, scope] - point["direct"][0, scope]) / looks
            if looks > 0
            else np.zeros(4)
        )
        terms = {
            "labelled": r.y_target[inside],
            "direct": qq,
            "ips": w[:, None] * y,
            "snips": look[:, None] * ratio + scale * w[:, None] * (y - ratio),
            "dr": qq + rr,
            "sndr": qq + look[:, None] * shift + scale * (rr - w[:, None] * shift),
            "switch_dr": qq + switched[inside][:, None] * rr,
        }
        for name, phi in terms.items():
            variance = n * phi.var(axis=0, ddof=1)
            if name == "direct":
                used = cell[inside]
                per_cell = np.bincount(used[used >= 0], minlength=cells).astype(float)
                variance = variance + (per_cell[:, None] ** 2 * model_var).sum(axis=0)
            out[name][scope] = np.sqrt(variance)
    return out


def _model_variance(r: Records) -> Array:
    """The variance of each reward-model cell's mean (site-tool cells, then tool cells): that
    of the values it averages over their count; UNKNOWN_VARIANCE / 1 for a single value,
    0 for a cell never used."""
    cells = r.n_site_tools + r.n_tools
    by_cell = np.concatenate(
        [r.taken_site_tool, np.where(r.taken_tool >= 0, r.n_site_tools + r.taken_tool, -1)]
    )
    ys = np.concatenate([r.y, r.y])[by_cell >= 0]
    by_cell = by_cell[by_cell >= 0]
    counts = np.bincount(by_cell, minlength=cells)
    sums = np.stack([np.bincount(by_cell, ys[:, j], minlength=cells) for j in range(4)], 1)
    squares = np.stack([np.bincount(by_cell, ys[:, j] ** 2, minlength=cells) for j in range(4)], 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        var = (squares - sums**2 / counts[:, None]) / (counts[:, None] - 1)
    var = np.where(counts[:, None] >= 2, np.maximum(var, 0.0), UNKNOWN_VARIANCE)
    var[:, 0] = 0.0  # a lookup is always one lookup
    return np.where(counts[:, None] > 0, var / np.maximum(counts, 1)[:, None], 0.0)


def session_bootstrap(
    r: Records, n_sessions: int, draws: int, seed: int, tau: float
) -> dict[str, Array]:
    """Percentile 95% intervals over `draws` resamplings of whole sessions (each draw weighs a
    decision by how often its session was drawn): {estimator: (2, S+1, 4)}, low then high."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n_sessions, np.full(n_sessions, 1.0 / n_sessions), size=draws)
    chunk = max(1, BOOTSTRAP_CELLS // max(1, r.n))
    collected: dict[str, list[Array]] = {name: [] for name in ESTIMATORS}
    for start in range(0, draws, chunk):
        weights = counts[start : start + chunk][:, r.session].astype(float)
        for name, value in estimates(scope_sums(r, weights, tau)).items():
            collected[name].append(value)
    return {
        name: np.percentile(np.concatenate(parts, axis=0), [2.5, 97.5], axis=0)
        for name, parts in collected.items()
    }
