"""How well scores in [0, 1] predict a yes/no outcome: the one calibration module for audit and
replay (../shared/spec/results.md §2.4).

- `reliability`: per bin of the score, how many, their mean score, how often the outcome was
  yes. Bins are half-open `[from, to)` between consecutive `edges`; empty bins are left out.
- `ece`: expected calibration error, Σ_bins (n_b / N) · |mean score_b − yes rate_b|.
- `brier`: the mean of (score − outcome)².
- `auc`: the chance a yes scores above a no (Mann–Whitney, ties at mid-ranks).

Each is None when there is nothing to score (AUC also when every outcome is the same).
"""

from __future__ import annotations

from collections.abc import Sequence

# The spec's edges: finer at the low end, where most scores fall; the last above 1 so that a
# score of exactly 1 has a bin.
EDGES: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0001)


def edges_text(edges: Sequence[float] = EDGES) -> str:
    """The bins as a report names them: their lower edges."""
    return ", ".join(f"{e:g}" for e in edges[:-1])


def reliability(
    scores: Sequence[float], outcomes: Sequence[bool], edges: Sequence[float] = EDGES
) -> list[dict]:
    """One row per non-empty bin: `from`, `to`, `count`, `mean_score`, `used` (the share of
    yes)."""
    rows = []
    for low, high in zip(edges, edges[1:], strict=False):
        inside = [i for i, s in enumerate(scores) if low <= s < high]
        if inside:
            rows.append(
                {
                    "from": low,
                    "to": high,
                    "count": len(inside),
                    "mean_score": sum(scores[i] for i in inside) / len(inside),
                    "used": sum(bool(outcomes[i]) for i in inside) / len(inside),
                }
            )
    return rows


def ece(
    scores: Sequence[float], outcomes: Sequence[bool], edges: Sequence[float] = EDGES
) -> float | None:
    n = len(scores)
    if n == 0:
        return None
    bins = reliability(scores, outcomes, edges)
    return sum(b["count"] / n * abs(b["mean_score"] - b["used"]) for b in bins)


def brier(scores: Sequence[float], outcomes: Sequence[bool]) -> float | None:
    if not scores:
        return None
    return sum((s - bool(o)) ** 2 for s, o in zip(scores, outcomes, strict=True)) / len(scores)


def auc(scores: Sequence[float], outcomes: Sequence[bool]) -> float | None:
    positives = sum(bool(o) for o in outcomes)
    negatives = len(outcomes) - positives
    if positives == 0 or negatives == 0:
        return None
    order = sorted(range(len(scores)), key=lambda i: scores[i])
    ranks = [0.0] * len(scores)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and scores[order[j + 1]] == scores[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1  # the mid-rank of the tie
        i = j + 1
    rank_sum = sum(r for r, o in zip(ranks, outcomes, strict=True) if o)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def measures(
    scores: Sequence[float], outcomes: Sequence[bool], edges: Sequence[float] = EDGES
) -> dict:
    """`{count, used, ece, brier, auc, bins}` (bins: the reliability rows)."""
    bins = reliability(scores, outcomes, edges)
    n = len(scores)
    return {
        "count": n,
        "used": sum(bool(o) for o in outcomes),
        "ece": sum(b["count"] / n * abs(b["mean_score"] - b["used"]) for b in bins) if n else None,
        "brier": brier(scores, outcomes),
        "auc": auc(scores, outcomes),
        "bins": bins,
    }
