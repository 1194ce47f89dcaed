"""Replays summed by task, their measures, and the bootstrap over tasks that bench/quality.py
and bench/replay.py judge them by.

A `Run` holds, per (agent, task), the summed counts of a flow's replay of the test episodes
(turns, turns saved, detours, ceiling turns, episodes) and of its option rows per calibration
bin (stretto.offline.reports.reliability.EDGES), so that every measure of any resample of tasks is a
sum: one matrix product per measure for all the draws. A task's episodes (its trials, and the
agents when pooled) travel together; two runs judged against each other share every resample.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from stretto.offline.reports.reliability import EDGES, auc
from stretto.offline.reports.replay import EpisodeCheck, replay

NBINS = len(EDGES) - 1
# per task: turns, turns saved, detours, ceiling turns, episodes, options, Brier sum; then per
# bin: options, score sum, used sum
COLUMNS = 7 + 3 * NBINS


@dataclass
class Run:
    """A variant's replay of a domain's test episodes: per (agent, task) the summed counts."""

    rows: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    scores: list[tuple[str, float, bool]] = field(default_factory=list)  # (agent, score, used)
    checks: list[tuple[str, EpisodeCheck]] = field(default_factory=list)
    unanswered: int = 0  # arbiter decisions the oracle could not answer (handed back)


def replayed(domain, flow: dict, decider: str, threshold: float | None, oracle=None) -> Run:
    """A flow replaying the domain's test episodes (every option scored), summed by task.
    `oracle` (stretto.offline.episode_judges.OracleOptions): who answers the arbiter decider."""
    episodes = [e for _, e in domain.test]
    result = replay(
        flow, episodes, decider=decider, threshold=threshold, explore=0.0, oracle=oracle
    )
    out = Run(unanswered=result.total()["unanswered"])
    for (agent, _), check in zip(domain.test, result.episodes, strict=True):
        row = out.rows.setdefault((agent, check.task_id), np.zeros(COLUMNS))
        row[:5] += (check.turns, check.turns_saved, check.detours, check.ceiling, 1)
        for option in check.options:
            s, u = option["score"], bool(option["used"])
            b = min(np.searchsorted(EDGES, s, side="right") - 1, NBINS - 1)
            row[5] += 1
            row[6] += (s - u) ** 2
            row[7 + 3 * b : 10 + 3 * b] += (1, s, u)
            out.scores.append((agent, s, u))
        out.checks.append((agent, check))
    return out


def figures(m: np.ndarray, costs: tuple[float, float]) -> dict[str, np.ndarray]:
    """The measures of summed rows (the last axis: COLUMNS)."""
    turns, saved, detours, ceiling, episodes, options, brier = (m[..., i] for i in range(7))
    bins = m[..., 7:].reshape(*m.shape[:-1], NBINS, 3)
    with np.errstate(divide="ignore", invalid="ignore"):
        return {
            "ceiling %": 100 * saved / ceiling,
            "detours/ep": detours / episodes,
            "saved %": 100 * saved / turns,
            "utility/ep": (costs[0] * saved - costs[1] * detours) / episodes,
            "ece": np.abs(bins[..., 1] - bins[..., 2]).sum(-1) / options,
            "brier": brier / options,
        }


MEASURES = ("ceiling %", "detours/ep", "saved %", "utility/ep", "ece", "brier")
DIGITS = {"ceiling %": 1, "detours/ep": 2, "saved %": 1, "utility/ep": 0, "ece": 3, "brier": 3}
BETTER = {"ceiling %": 1, "detours/ep": -1, "saved %": 1, "utility/ep": 1, "ece": -1, "brier": -1}


def by_task(r: Run, agent: str | None) -> tuple[list[str], np.ndarray]:
    """The run's rows summed per task (of one agent, or of all)."""
    tasks = sorted({t for a, t in r.rows if agent is None or a == agent})
    index = {t: i for i, t in enumerate(tasks)}
    table = np.zeros((len(tasks), COLUMNS))
    for (a, t), row in r.rows.items():
        if agent is None or a == agent:
            table[index[t]] += row
    return tasks, table


def intervals(r: Run, costs, agent: str | None, draws: int, seed: int = 7) -> dict:
    """Per measure: (value, low, high), the 95% interval from `draws` resamples of tasks
    (the same resamples as `paired` with this seed and task set)."""
    tasks, table = by_task(r, agent)
    weights = np.random.default_rng(seed).multinomial(
        len(tasks), [1 / len(tasks)] * len(tasks), size=draws
    )
    point, drawn = figures(table.sum(0), costs), figures(weights @ table, costs)
    out = {}
    for name in MEASURES:
        values = np.sort(drawn[name][~np.isnan(drawn[name])])
        lo, hi = (values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1])
        out[name] = (float(point[name]), float(lo), float(hi))
    rows = [(s, u) for g, s, u in r.scores if agent is None or g == agent]
    out["auc"] = auc([s for s, _ in rows], [u for _, u in rows])
    return out


def paired(base: Run, other: Run, costs, agent: str | None, draws: int, seed: int = 7) -> dict:
    """Per measure: (base, variant, difference, low, high) with the 95% interval of the
    difference from `draws` resamples of tasks (the same for both)."""
    keys = sorted(k for k in base.rows if agent is None or k[0] == agent)
    tasks = sorted({t for _, t in keys})
    index = {t: i for i, t in enumerate(tasks)}
    a = np.zeros((len(tasks), COLUMNS))
    b = np.zeros((len(tasks), COLUMNS))
    for k in keys:
        a[index[k[1]]] += base.rows[k]
        b[index[k[1]]] += other.rows[k]
    rng = np.random.default_rng(seed)
    weights = rng.multinomial(len(tasks), [1 / len(tasks)] * len(tasks), size=draws)
    fa, fb = figures(a.sum(0), costs), figures(b.sum(0), costs)
    da, db = figures(weights @ a, costs), figures(weights @ b, costs)
    out = {}
    for name in MEASURES:
        diff = np.sort(db[name] - da[name])
        diff = diff[~np.isnan(diff)]
        lo, hi = (
            (diff[int(0.025 * len(diff))], diff[int(0.975 * len(diff)) - 1])
            if len(diff)
            else (np.nan, np.nan)
        )
        out[name] = (float(fa[name]), float(fb[name]), float(fb[name] - fa[name]), lo, hi)
    for name, r in (("auc", base), ("auc*", other)):
        rows = [(s, u) for g, s, u in r.scores if agent is None or g == agent]
        out[name] = auc([s for s, _ in rows], [u for _, u in rows])
    return out
