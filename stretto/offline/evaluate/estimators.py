"""The estimators of a target rule's value over the logged decisions (docs/formats.md §5).

Notation, for the decisions i of a scope (one site, or every site):

- `π(xᵢ)` the target's option at decision i; where it hands back the decision is worth 0
  (`lookᵢ` = 1 when it looks up);
- `aᵢ` the option the logging rule took, `μᵢ` the logged propensity of what it took, and
  `μ(π(xᵢ))` the chance the logging rule took the target's option;
- `yᵢ` the METRICS [lookups, used, detours, turns] of aᵢ by its label, `yᵢ(π)` those of π(xᵢ);
- `wᵢ = 1{π(xᵢ) = aᵢ} / μᵢ` the importance weight; `ρᵢ = 1 / μ(π(xᵢ))` the weight the
  target's option carries (∞ when the logging rule could not take it);
- `q̂ᵢ` the reward model at π(xᵢ) (`reward_model`);
- `n_π = Σ lookᵢ`, the target's lookups.

Every sum is weighted by a record weight vᵢ: 1 for the point estimate, and for a bootstrap
draw how often decision i's session was drawn. `scope_sums` makes each weighted sum once for
every row of record weights and every scope; each estimator is then a few array operations on
those sums, so that the point estimate and all bootstrap draws are computed together.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from stretto.offline.evaluate.target import Target, target_action, values

DEFAULT_SWITCH_TAU = 20.0
DEFAULT_MODEL = (1.0, 0.0, 1.0, 0.0)  # a lookup nobody saw taken: made, not used

# An estimator's rows: (draws, scopes, METRICS); a diagnostic's: (draws, scopes).
Array = np.ndarray


class Groups:
    """Sums over the records of each group (records with a group id < 0 are left out), for
    many rows of record weights at once."""

    def __init__(self, ids: Array, k: int) -> None:
        keep = np.flatnonzero(ids >= 0)
        self.order = keep[np.argsort(ids[keep], kind="stable")]
        self.k = k
        g = ids[self.order]
        self.starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if len(g) else g
        self.ids = g[self.starts] if len(g) else g

    def sum(self, x: Array) -> Array:
        """x: (b, N, ...) -> (b, k, ...)"""
        out = np.zeros((x.shape[0], self.k) + x.shape[2:])
        if len(self.order):
            out[:, self.ids] = np.add.reduceat(x[:, self.order], self.starts, axis=1)
        return out


class Records:
    """One target's decisions as arrays (N decisions; sites and sessions by index)."""

    def __init__(
        self, rows: list[dict], target: Target, sites: list[str], sessions: list[str]
    ) -> None:
        n = len(rows)
        site_index = {s: i for i, s in enumerate(sites)}
        session_index = {s: i for i, s in enumerate(sessions)}
        # the reward model's cells: a tool where it was taken at a site, and a tool anywhere
        site_tools: dict[tuple[str, str], int] = {}
        tools: dict[str, int] = {}
        for row in rows:
            if row["taken"] is not None:
                tool = row["options"][row["taken"]]["tool"]
                site_tools.setdefault((row["site"], tool), len(site_tools))
                tools.setdefault(tool, len(tools))
        self.n = n
        self.n_sites = len(sites)
        self.site = np.array([site_index[r["site"]] for r in rows], dtype=np.int64)
        self.session = np.array([session_index[r["session"]] for r in rows], dtype=np.int64)
        self.look = np.zeros(n)  # lookᵢ
        self.match = np.zeros(n)  # 1{π(xᵢ) = aᵢ}, where the target looks up
        self.w = np.zeros(n)  # wᵢ
        self.rho = np.zeros(n)  # ρᵢ (0 where the target hands back)
        self.unsupported = np.zeros(n)  # 1{μ(π(xᵢ)) = 0}, where the target looks up
        self.y = np.zeros((n, 4))  # yᵢ (0 where the logging rule handed back)
        self.y_target = np.zeros((n, 4))  # yᵢ(π) (0 where the target hands back)
        # each decision's cells: of what was taken, and of the target's option (-1: none)
        self.taken_site_tool = np.full(n, -1, dtype=np.int64)
        self.taken_tool = np.full(n, -1, dtype=np.int64)
        self.target_site_tool = np.full(n, -1, dtype=np.int64)
        self.target_tool = np.full(n, -1, dtype=np.int64)
        for i, row in enumerate(rows):
            taken, act = row["taken"], target_action(row, target)
            if taken is not None:
                tool = row["options"][taken]["tool"]
                self.y[i] = values(row["labels"][taken])
                self.taken_site_tool[i] = site_tools[(row["site"], tool)]
                self.taken_tool[i] = tools[tool]
            if act is None:
                continue  # the target hands back: worth zero, known exactly
            tool = row["options"][act]["tool"]
            self.look[i] = 1.0
            self.y_target[i] = values(row["labels"][act])
            self.target_site_tool[i] = site_tools.get((row["site"], tool), -1)
            self.target_tool[i] = tools.get(tool, -1)
            mu = row["options"][act]["propensity"]
            self.rho[i] = 1.0 / mu if mu > 0 else math.inf
            self.unsupported[i] = float(mu <= 0)
            if act == taken:
                self.match[i] = 1.0
                self.w[i] = 1.0 / max(row["propensity"], 1e-12)
        self.n_site_tools, self.n_tools = max(1, len(site_tools)), max(1, len(tools))
        self.by_site = Groups(self.site, self.n_sites)
        self.by_taken_site_tool = Groups(self.taken_site_tool, self.n_site_tools)
        self.by_taken_tool = Groups(self.taken_tool, self.n_tools)


def reward_model(r: Records, weights: Array) -> tuple[Array, Array]:
    """q̂ᵢ, the reward model at each decision's target option, fitted with each row of record
    weights (b, N): the mean values of that tool where it was taken at that site, else where
    it was taken anywhere, else DEFAULT_MODEL. Returns q̂ (b, N, 4), zero where the target
    hands back, and the cell each look used: its site-tool cell, `n_site_tools` + its tool
    cell, or -1 for the default."""
    wy = weights[:, :, None] * r.y[None]
    count_site_tool = r.by_taken_site_tool.sum(weights)
    sum_site_tool = r.by_taken_site_tool.sum(wy)
    count_tool, sum_tool = r.by_taken_tool.sum(weights), r.by_taken_tool.sum(wy)
    at_site, anywhere = np.maximum(r.target_site_tool, 0), np.maximum(r.target_tool, 0)
    seen_at_site = np.where(r.target_site_tool >= 0, count_site_tool[:, at_site], 0.0)
    seen_anywhere = np.where(r.target_tool >= 0, count_tool[:, anywhere], 0.0)
    mean_at_site = sum_site_tool[:, at_site] / np.maximum(seen_at_site, 1e-300)[:, :, None]
    mean_anywhere = sum_tool[:, anywhere] / np.maximum(seen_anywhere, 1e-300)[:, :, None]
    q = np.where(
        (seen_at_site > 0)[:, :, None],
        mean_at_site,
        np.where((seen_anywhere > 0)[:, :, None], mean_anywhere, np.array(DEFAULT_MODEL)),
    )
    q = q * r.look[None, :, None]
    cell = np.where(
        seen_at_site > 0, at_site, np.where(seen_anywhere > 0, r.n_site_tools + anywhere, -1)
    )
    return q, np.where(r.look[None] > 0, cell, -1)


@dataclass
class ScopeSums:
    """The weighted sums every estimator is made of, per row of record weights and per scope
    (the sites in order, then every site): values (b, S+1, 4), counts (b, S+1)."""

    logged: Array  # Σ v y
    labelled: Array  # Σ v y(π)
    model: Array  # Σ v q̂
    weighted: Array  # Σ v w y
    residual: Array  # Σ v w (y − q̂)
    switched_residual: Array  # Σ v 1{ρ ≤ τ} w (y − q̂)
    sum_w: Array  # Σ v w
    sum_w2: Array  # Σ v w²
    looks: Array  # Σ v look
    matched: Array  # Σ v 1{π(x) = a}
    unsupported: Array  # Σ v 1{μ(π(x)) = 0}


def scope_sums(r: Records, weights: Array, tau: float) -> ScopeSums:
    """ScopeSums for each row of record weights (b, N); `tau` is Switch-DR's τ."""
    q, _ = reward_model(r, weights)
    residual = r.w[None, :, None] * (r.y[None] - q)
    per_decision = {
        "logged": r.y,
        "labelled": r.y_target,
        "model": q,
        "weighted": r.w[:, None] * r.y,
        "residual": residual,
        "switched_residual": (r.rho <= tau)[None, :, None] * residual,
        "sum_w": r.w,
        "sum_w2": r.w**2,
        "looks": r.look,
        "matched": r.match,
        "unsupported": r.unsupported,
    }
    return ScopeSums(**_sum_by_scope(r, weights, per_decision))


def _sum_by_scope(r: Records, weights: Array, columns: dict[str, Array]) -> dict[str, Array]:
    """Σ vᵢ · xᵢ per site and over every site, for each named x: (N,) -> (b, S+1); (N, 4) or
    (b, N, 4) -> (b, S+1, 4). The columns are stacked side by side for one pass."""
    blocks = [_block(x, weights.shape[0]) for x in columns.values()]
    per_site = r.by_site.sum(weights[:, :, None] * np.concatenate(blocks, axis=2))
    stacked = np.concatenate([per_site, per_site.sum(axis=1, keepdims=True)], axis=1)
    out, start = {}, 0
    for (name, x), block in zip(columns.items(), blocks, strict=True):
        width = block.shape[2]
        out[name] = stacked[:, :, start] if x.ndim == 1 else stacked[:, :, start : start + width]
        start += width
    return out


def _block(x: Array, b: int) -> Array:
    """(N,), (N, k) or (b, N, k) as (b, N, k)."""
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim == 2:
        x = x[None]
    return np.broadcast_to(x, (b, *x.shape[1:]))


# --- the estimators: each (b, S+1, 4) from the sums ------------------------------------------


def logged(s: ScopeSums) -> Array:
    """What the logging rule made: `V̂ = Σᵢ yᵢ`. The same whatever the target."""
    return s.logged


def labelled(s: ScopeSums) -> Array:
    """Every option's label read directly: `V̂ = Σᵢ yᵢ(π)`. Exact for these decisions when the
    labels are (they are observed for every option, not only for what was taken)."""
    return s.labelled


def direct_method(s: ScopeSums) -> Array:
    """The direct method, the reward model's values at the target's options:
    `V̂_DM = Σᵢ q̂ᵢ`. No weights; biased where the model is wrong."""
    return s.model


def ips(s: ScopeSums) -> Array:
    """Inverse propensity scoring: `V̂_IPS = Σᵢ wᵢ yᵢ`, `wᵢ = 1{π(xᵢ) = aᵢ} / μᵢ`. Unbiased
    where the logging rule could take the target's option; variance grows with the weights."""
    return s.weighted


def snips(s: ScopeSums) -> Array:
    """Self-normalized IPS: `V̂_SNIPS = n_π · Σᵢ wᵢ yᵢ / Σᵢ wᵢ` (0 with no weight): the
    weighted mean value per lookup, times the target's lookups."""
    return s.weighted * _self_normalizer(s)


def dr(s: ScopeSums) -> Array:
    """Doubly robust: `V̂_DR = Σᵢ [q̂ᵢ + wᵢ (yᵢ − q̂ᵢ)]`: the direct method, corrected by the
    importance-weighted residuals. Unbiased if either the propensities or the model are."""
    return s.model + s.residual


def sndr(s: ScopeSums) -> Array:
    """Self-normalized DR: `V̂_SNDR = Σᵢ q̂ᵢ + n_π · Σᵢ wᵢ (yᵢ − q̂ᵢ) / Σᵢ wᵢ`."""
    return s.model + s.residual * _self_normalizer(s)


def switch_dr(s: ScopeSums) -> Array:
    """Switch-DR (Wang et al. 2017): `V̂ = Σᵢ [q̂ᵢ + 1{ρᵢ ≤ τ} wᵢ (yᵢ − q̂ᵢ)]`: DR where the
    target's option has a weight of at most τ, the direct method where it is heavier."""
    return s.model + s.switched_residual


def _self_normalizer(s: ScopeSums) -> Array:
    """n_π / Σ w (0 with no weight), to multiply the (b, S+1, 4) sums with."""
    positive = s.sum_w > 0
    return np.where(positive, s.looks / np.where(positive, s.sum_w, 1.0), 0.0)[:, :, None]


ESTIMATOR_FUNCTIONS: dict[str, Callable[[ScopeSums], Array]] = {
    "logged": logged,
    "labelled": labelled,
    "direct": direct_method,
    "ips": ips,
    "snips": snips,
    "dr": dr,
    "sndr": sndr,
    "switch_dr": switch_dr,
}
ESTIMATORS = tuple(ESTIMATOR_FUNCTIONS)
WEIGHTED = ("ips", "snips", "dr", "sndr", "switch_dr")  # refused with too few effective samples
NAMES = {
    "logged": "logged (what was taken)",
    "labelled": "labelled (every option's label)",
    "direct": "direct method (reward model)",
    "ips": "IPS",
    "snips": "SNIPS",
    "dr": "doubly robust",
    "sndr": "self-normalized DR",
    "switch_dr": "Switch-DR",
}


def estimates(s: ScopeSums) -> dict[str, Array]:
    """Every estimator from the same sums: {name: (b, S+1, 4)}."""
    return {name: estimator(s) for name, estimator in ESTIMATOR_FUNCTIONS.items()}


# --- weight diagnostics -------------------------------------------------------------------


def effective_sample_size(sum_w: float, sum_w2: float) -> float:
    """Kish's effective sample size `(Σ w)² / Σ w²`; 0 with no weight."""
    return sum_w**2 / sum_w2 if sum_w2 > 0 else 0.0


def weight_diagnostics(r: Records, point: ScopeSums) -> list[dict]:
    """Per scope (the sites in order, then every site), from the point estimate's sums: the
    decisions, the target's lookups (`looks`), those where it took what was logged
    (`matched`), those the logging rule could not have taken (`unsupported`, and their share
    of the lookups), the effective sample size (and its share), the largest weight and the
    sum of the weights."""
    max_weight = np.zeros(r.n_sites + 1)
    np.maximum.at(max_weight, r.site, r.w)
    max_weight[-1] = r.w.max() if r.n else 0.0
    decisions = np.append(np.bincount(r.site, minlength=r.n_sites), r.n)
    out = []
    for j in range(r.n_sites + 1):
        sum_w, sum_w2 = float(point.sum_w[0, j]), float(point.sum_w2[0, j])
        looks = int(round(point.looks[0, j]))
        unsupported = int(round(point.unsupported[0, j]))
        ess = effective_sample_size(sum_w, sum_w2)
        out.append(
            {
                "decisions": int(decisions[j]),
                "looks": looks,
                "matched": int(round(point.matched[0, j])),
                "unsupported": unsupported,
                "unsupported_share": unsupported / looks if looks else 0.0,
                "ess": ess,
                "ess_share": ess / looks if looks else 0.0,
                "max_weight": float(max_weight[j]),
                "sum_weights": sum_w,
            }
        )
    return out
