"""`stretto drift`: has the agent changed its habits since the flow was learned?
(../shared/spec/algorithms.md §11)

Three series, one value per session in start order:

- **surprise**: nats per decision, −mean ln p of the agent's steps at the decision points
  under the flow's decider (stretto.offline.audit's scoring, the same number as audit's);
- **disagreement**: 1 − the share of decision points where the likeliest option was the
  agent's step;
- **unknown**: the share of the agent's steps after a tool result that follow a tool the
  flow's habit never counted (no decision is scored there, so surprise cannot see them).

Bayesian online change-point detection (Adams & MacKay 2007) runs on the three jointly: per
series a normal-gamma prior (mean the series' median, κ 0.1, α 1, β scale², scale
max(0.05, median |Δ| · 1.4826/√2)), a Student-t predictive mixed with an outlier drawn from
the prior (weight 0.05), the series independent given the run, a constant hazard. The alarm
sounds after a session when the posterior probability that the current run began within the
last `window` sessions — at least 3 sessions ago, with at least 10 before it — reaches
`threshold`. A session without a decision point leaves its missing values out of the
likelihood.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the command's parser reads Settings' defaults: this module stays light
    from stretto.logs.episode import Episode

SERIES = ("surprise", "disagreement", "unknown")
KAPPA0, ALPHA0 = 0.1, 1.0
MIN_SCALE = 0.05
OUTLIER = 0.05
MIN_RUN = 3  # sessions in the new run before the alarm may sound
MIN_BEFORE = 10  # sessions before the change
MOVED_SITES = 5
TAIL = 1e-20  # the oldest run hypotheses' mass dropped (change_probabilities)


@dataclass
class Settings:
    hazard: float = 0.01
    window: int = 10
    threshold: float = 0.5

    def check(self) -> None:
        if not 0 < self.hazard <= 1:
            raise ValueError(f"--hazard wants a probability in (0, 1], got {self.hazard}")
        if self.window < MIN_RUN:
            raise ValueError(f"--window wants at least {MIN_RUN} sessions, got {self.window}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"--threshold wants a probability in (0, 1], got {self.threshold}")


@dataclass
class Drift:
    domain: str
    decider: str
    settings: Settings
    sessions: list[dict]  # {id, decisions, surprise, disagreement, unknown, change}
    alarms: list[dict]  # {at, session, change, change_session, probability, until, moved}
    unknown_tools: dict[str, int]  # tool -> index of the first session that used it
    decisions: list[list[dict]] = field(default_factory=list, repr=False)  # per session

    @property
    def sounding(self) -> bool:
        """The alarm sounds after the last session (the command exits 1)."""
        return bool(self.sessions) and self.sessions[-1]["change"] >= self.settings.threshold

    def as_json(self) -> dict:
        return {
            "domain": self.domain,
            "decider": self.decider,
            "settings": {
                "hazard": self.settings.hazard,
                "window": self.settings.window,
                "threshold": self.settings.threshold,
            },
            "sessions": self.sessions,
            "alarms": self.alarms,
            "sounding": self.sounding,
            "unknown_tools": self.unknown_tools,
        }


def trained_tools(flow: dict) -> set[str]:
    """The tools the flow's habit counted as steps in training."""
    level0 = flow["habit"]["levels"][0]
    return set(level0[0]["counts"]) if level0 else set()


@dataclass
class Scored:
    """One session's values under a flow, whatever the other sessions are: what drift's series
    are made of, and what stretto.offline.driftcache keeps per (flow, session)."""

    id: str
    started_ms: int
    decisions: int
    surprise: float | None
    disagreement: float | None
    steps: int  # the agent's steps after a tool result
    unknown_steps: int  # those that follow a tool the flow's habit never counted
    unknown_tools: list[str]  # those tools, sorted
    sites: list[str]  # per decision: its site, whether the likeliest option was the step,
    hits: list[bool]  # and the step's log-probability (what moved_sites needs)
    log_probs: list[float]

    @property
    def unknown(self) -> float | None:
        """The share of the agent's steps after a tool result that follow an unknown tool."""
        return self.unknown_steps / self.steps if self.steps else None

    def decision_rows(self) -> list[dict]:
        return [
            {"site": s, "hit": h, "log_prob": p}
            for s, h, p in zip(self.sites, self.hits, self.log_probs, strict=True)
        ]


def unknown_steps(episode: Episode, known: set[str]) -> tuple[int, int, list[str]]:
    """(the agent's steps after a tool result, those that follow a tool not in `known`, those
    tools sorted)."""
    from stretto.logs.episode import Assistant, ToolResult

    steps = unknown = 0
    tools: set[str] = set()
    events = episode.events
    for i, event in enumerate(events):
        if not isinstance(event, ToolResult) or i + 1 >= len(events):
            continue
        following = events[i + 1]
        if isinstance(following, ToolResult):
            continue
        if isinstance(following, Assistant) and following.calls and following.calls[0].by_proxy:
            continue  # the flow's lookup, not the agent's step
        steps += 1
        if event.name not in known:
            unknown += 1
            tools.add(event.name)
    return steps, unknown, sorted(tools)


def score(flow: dict, episode: Episode, decider: str = "habit") -> tuple[Scored, str]:
    """One session scored under the flow's decider (audit's scoring), and the decider's kind."""
    from stretto.offline.audit import audit

    scored = audit(flow, [episode], decider)
    totals = scored.totals()
    n = totals["decisions"]
    steps, unknown, tools = unknown_steps(episode, trained_tools(flow))
    ds = scored.decisions
    return (
        Scored(
            id=episode.id,
            started_ms=episode.started_ms,
            decisions=n,
            surprise=totals["nats_per_decision"] if n else None,
            disagreement=1.0 - totals["agreement"] if n else None,
            steps=steps,
            unknown_steps=unknown,
            unknown_tools=tools,
            sites=[d["site"] for d in ds],
            hits=[d["hit"] for d in ds],
            log_probs=[d["log_prob"] for d in ds],
        ),
        scored.decider,
    )


def start_order(scored: list[Scored]) -> list[Scored]:
    """In the order their sessions started, as stretto.logs.episode.in_start_order."""
    return sorted(scored, key=lambda s: (s.started_ms, s.id))


def series(scored: list[Scored]):
    """Per session in the given order: its row (without `change`), its decisions, and each
    unknown tool's first session."""
    first: dict[str, int] = {}
    rows = []
    for index, s in enumerate(scored):
        for tool in s.unknown_tools:
            first.setdefault(tool, index)
        rows.append(
            {
                "id": s.id,
                "decisions": s.decisions,
                "surprise": s.surprise,
                "disagreement": s.disagreement,
                "unknown": s.unknown,
            }
        )
    return rows, [s.decision_rows() for s in scored], first


# --- change points ---------------------------------------------------------------------------


def prior(values: list[float]) -> tuple[float, float]:
    """(mean, scale) of a series' normal-gamma prior: its median, and a robust scale of its
    session-to-session changes."""
    import numpy as np

    x = np.asarray(values, dtype=float)
    x = x[~np.isnan(x)]
    if not len(x):
        return 0.0, MIN_SCALE
    steps = np.abs(np.diff(x))
    scale = float(np.median(steps)) * 1.4826 / math.sqrt(2) if len(steps) else 0.0
    return float(np.median(x)), max(MIN_SCALE, scale)


def _log_t(x: float, mu, kappa, alpha, beta, gammas):
    """log of the normal-gamma's Student-t predictive at x (arrays over runs); `gammas` is
    lgamma((ν + 1)/2) − lgamma(ν/2) at ν = 2α (_Gammas)."""
    import numpy as np

    nu = 2 * alpha
    var = beta * (kappa + 1) / (alpha * kappa)
    return (
        gammas
        - 0.5 * np.log(nu * math.pi * var)
        - (nu + 1) / 2 * np.log1p((x - mu) ** 2 / (nu * var))
    )


class _Gammas:
    """lgamma at α + ½ and at α, for the α a run can have: α0 + k/2 after k values (exact
    in binary), so looked up by k instead of computed per run and session."""

    def __init__(self, count: int) -> None:
        import numpy as np

        self.table = np.array([math.lgamma(ALPHA0 + k / 2) for k in range(count + 2)])

    def at(self, k):
        """lgamma(α + ½) − lgamma(α) for α = α0 + k/2 (k an int or an int array)."""
        return self.table[k + 1] - self.table[k]


def change_probabilities(
    values: list[list[float | None]], settings: Settings, tail: float = TAIL
) -> list[dict]:
    """Run the detector over the sessions' values (one list per series, None = missing).
    Per session: `change`, the probability that the current run began within the window
    (the alarm's statistic), and `began`, the likeliest first session of such a run.

    The oldest run hypotheses whose posterior mass together is below `tail` are dropped once
    the statistic is taken (never the window's). They change only the normalization, so the
    figures move by float noise (tests/stretto/test_drift.py: within 1e-15 of keeping them all,
    the same `began`), while the work per session stops growing with the sessions: in a
    steady series a run's mass falls like (1 − hazard)^length, so ~4,600 hypotheses are kept
    at hazard 0.01 (fewer after a change). `tail=0` keeps every one."""
    import numpy as np

    data = np.array([[np.nan if v is None else v for v in s] for s in values], dtype=float).T
    count, dims = data.shape if data.size else (0, len(values))
    priors = [prior(list(data[:, d])) for d in range(dims)]
    mu0 = np.array([m for m, _ in priors])
    beta0 = np.array([s * s for _, s in priors])
    gammas = _Gammas(count)
    gamma0 = float(gammas.at(0))
    log_stay, log_outlier = float(np.log1p(-OUTLIER)), math.log(OUTLIER)
    # one row per run hypothesis, newest first: row j = a run of j + 1 sessions; `seen` counts
    # each run's values per series (its α is α0 + seen/2)
    mu = np.empty((0, dims))
    kappa = np.empty((0, dims))
    alpha = np.empty((0, dims))
    beta = np.empty((0, dims))
    counted = np.empty((0, dims), dtype=np.int64)
    posterior = np.empty(0)
    keep_at_least = settings.window + 1
    out = []
    for t in range(count):
        x = data[t]
        seen = ~np.isnan(x)
        prior_fits = [
            float(_log_t(x[d], mu0[d], KAPPA0, ALPHA0, beta0[d], gamma0)) if seen[d] else 0.0
            for d in range(dims)
        ]
        log_new = sum(prior_fits[d] for d in range(dims) if seen[d])
        if t == 0:
            posterior = np.array([1.0])
        else:
            log_run = np.zeros(len(posterior))
            for d in range(dims):
                if seen[d]:
                    fit = _log_t(
                        x[d],
                        mu[:, d],
                        kappa[:, d],
                        alpha[:, d],
                        beta[:, d],
                        gammas.at(counted[:, d]),
                    )
                    log_run += np.logaddexp(log_stay + fit, log_outlier + prior_fits[d])
            top = max(log_new, float(log_run.max()))
            grow = posterior * np.exp(log_run - top) * (1 - settings.hazard)
            new = settings.hazard * math.exp(log_new - top)
            posterior = np.concatenate([[new], grow])
            posterior /= posterior.sum()
        # the runs' statistics after this session: a new run from the prior, the others grown
        mu = np.vstack([mu0, mu])
        kappa = np.vstack([np.full(dims, KAPPA0), kappa])
        alpha = np.vstack([np.full(dims, ALPHA0), alpha])
        beta = np.vstack([beta0, beta])
        counted = np.vstack([np.zeros(dims, dtype=np.int64), counted])
        xs = np.where(seen, x, 0.0)
        beta = np.where(seen, beta + kappa * (xs - mu) ** 2 / (2 * (kappa + 1)), beta)
        mu = np.where(seen, (kappa * mu + xs) / (kappa + 1), mu)
        kappa = np.where(seen, kappa + 1, kappa)
        alpha = np.where(seen, alpha + 0.5, alpha)
        counted = counted + seen
        # the window's runs: lengths MIN_RUN..window with MIN_BEFORE sessions before them
        shortest, longest = MIN_RUN, min(settings.window, t + 1 - MIN_BEFORE, len(posterior))
        change, began = 0.0, None
        if longest >= shortest:
            recent = posterior[shortest - 1 : longest]
            change = float(recent.sum())
            began = t + 1 - (shortest + int(np.argmax(recent)))
        out.append({"change": change, "began": began})
        if tail > 0 and len(posterior) > keep_at_least:
            oldest = np.cumsum(posterior[::-1])
            drop = min(int(np.searchsorted(oldest, tail)), len(posterior) - keep_at_least)
            if drop:
                keep = len(posterior) - drop
                posterior, mu, kappa = posterior[:keep], mu[:keep], kappa[:keep]
                alpha, beta, counted = alpha[:keep], beta[:keep], counted[:keep]
    return out


def _site_stats(decisions: list[dict]) -> dict[str, dict]:
    by: dict[str, list[dict]] = {}
    for d in decisions:
        by.setdefault(d["site"], []).append(d)
    return {
        site: {
            "decisions": len(ds),
            "agreement": sum(d["hit"] for d in ds) / len(ds),
            "surprise": -sum(d["log_prob"] for d in ds) / len(ds),
        }
        for site, ds in by.items()
    }


def moved_sites(before: list[dict], after: list[dict], limit: int = MOVED_SITES) -> list[dict]:
    """The sites whose surprise rose most from `before` to `after` (decisions); a site new
    after the change counts its whole surprise as the rise."""
    old, new = _site_stats(before), _site_stats(after)
    rows = []
    for site, stats in new.items():
        row = {"site": site, "after": stats}
        if site in old:
            row["before"] = old[site]
        rise = stats["surprise"] - (old[site]["surprise"] if site in old else 0.0)
        rows.append((-rise, site, row))
    rows.sort(key=lambda r: (r[0], r[1]))
    return [row for rise, _, row in rows if rise < -1e-9][:limit]


def drift(
    flow: dict,
    episodes: list[Episode],
    decider: str = "habit",
    settings: Settings | None = None,
) -> Drift:
    """The series (the sessions taken in start order, `started_unix_ms`), the detector's
    statistic after each session, and the alarms: each run of sessions after which the alarm
    sounds, with where the change began and the sites whose surprise rose most (before the
    change against from it to the end of the alarm)."""
    settings = settings or Settings()
    settings.check()
    kind = decider
    scored = []
    for episode in episodes:
        one, kind = score(flow, episode, decider)
        scored.append(one)
    return detect(flow, scored, kind, settings)


def detect(flow: dict, scored: list[Scored], kind: str, settings: Settings) -> Drift:
    """drift's result from its sessions' values (in any order: taken in start order)."""
    settings.check()
    rows, decisions, first = series(start_order(scored))
    stats = change_probabilities([[r[s] for r in rows] for s in SERIES], settings)
    for row, stat in zip(rows, stats, strict=True):
        row["change"] = stat["change"]
    alarms = []
    t = 0
    while t < len(rows):
        if rows[t]["change"] < settings.threshold:
            t += 1
            continue
        end = t
        while end + 1 < len(rows) and rows[end + 1]["change"] >= settings.threshold:
            end += 1
        began = stats[t]["began"]
        before = [d for ds in decisions[:began] for d in ds]
        after = [d for ds in decisions[began : end + 1] for d in ds]
        alarms.append(
            {
                "at": t,
                "session": rows[t]["id"],
                "change": began,
                "change_session": rows[began]["id"],
                "probability": rows[t]["change"],
                "until": end,
                "moved": moved_sites(before, after),
            }
        )
        t = end + 1
    domain = flow["manifest"]["domain"]
    return Drift(domain, kind, settings, rows, alarms, first, decisions)


# --- the report ------------------------------------------------------------------------------


def _number(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def markdown(result: Drift) -> str:
    s = result.settings
    out = [
        f"# Drift: {result.domain} ({result.decider} decider)",
        "",
        f"{len(result.sessions)} sessions in start order; change-point detection with hazard "
        f"{s.hazard:g}, alarm when the chance that a new run began within the last "
        f"{s.window} sessions reaches {s.threshold:g}.",
        "",
    ]
    if result.sounding:
        last = result.alarms[-1]
        out.append(
            f"**The alarm is sounding**: the agent's habits changed around session "
            f"{last['change']} ({last['change_session']}), probability "
            f"{result.sessions[-1]['change']:.2f}. Relearn (stretto stage) and review."
        )
    else:
        out.append("The alarm is not sounding after the last session.")
    out.append("")
    if result.unknown_tools:
        out += ["## Tools the flow never learned", ""]
        for tool, index in sorted(result.unknown_tools.items(), key=lambda kv: (kv[1], kv[0])):
            out.append(f"- `{tool}`, first in session {index} ({result.sessions[index]['id']})")
        out.append("")
    for alarm in result.alarms:
        out += [
            f"## Alarm at session {alarm['at']} ({alarm['session']})",
            "",
            f"Change began at session {alarm['change']} ({alarm['change_session']}); "
            f"probability {alarm['probability']:.2f}.",
            "",
        ]
        if alarm["moved"]:
            out += [
                "| Site | Decisions before | Surprise before | Decisions after | Surprise after |",
                "|---|---|---|---|---|",
            ]
            for m in alarm["moved"]:
                b = m.get("before")
                out.append(
                    f"| {m['site']} | {b['decisions'] if b else 0} | "
                    f"{_number(b['surprise'] if b else None)} | {m['after']['decisions']} | "
                    f"{_number(m['after']['surprise'])} |"
                )
            out.append("")
    out += [
        "## Sessions",
        "",
        "| # | Session | Decisions | Surprise | Disagreement | Unknown | Change |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(result.sessions):
        out.append(
            f"| {i} | {r['id']} | {r['decisions']} | {_number(r['surprise'])} | "
            f"{_number(r['disagreement'])} | {_number(r['unknown'])} | {r['change']:.2f} |"
        )
    return "\n".join(out) + "\n"


def plot(result: Drift, path) -> None:
    """The three series and the alarm's statistic, one panel each, with each alarm's change
    point marked and its sessions shaded (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(range(len(result.sessions)))
    names = [*SERIES, "change"]
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 7), sharex=True)
    for ax, name in zip(axes, names, strict=True):
        ys = [r[name] if r[name] is not None else float("nan") for r in result.sessions]
        ax.plot(xs, ys, marker=".", linewidth=1)
        ax.set_ylabel(name)
        for alarm in result.alarms:
            ax.axvline(alarm["change"], color="tab:red", linestyle="--", linewidth=1)
            ax.axvspan(alarm["at"] - 0.5, alarm["until"] + 0.5, color="tab:red", alpha=0.15)
    axes[-1].axhline(result.settings.threshold, color="grey", linestyle=":")
    axes[-1].set_ylim(0, 1)
    axes[-1].set_xlabel("session (start order)")
    axes[0].set_title(f"Drift: {result.domain}")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def write_report(result: Drift, folder) -> list:
    """The report (`drift.md`), its data (`drift.json`) and the plot (`drift.png`) in
    `folder`, private: what `stretto drift` writes, and a pipeline check would."""
    import json
    from pathlib import Path

    from stretto.home import private_dirs, private_tree

    folder = private_dirs(Path(folder))
    written = [folder / "drift.md", folder / "drift.json", folder / "drift.png"]
    written[0].write_text(markdown(result))
    written[1].write_text(json.dumps(result.as_json(), indent=1, ensure_ascii=False) + "\n")
    plot(result, written[2])
    private_tree(folder)
    return written
