"""`stretto drift`: has the agent changed its habits since the flow was learned?
(../shared/spec/algorithms.md §11)

Three series, one value per session in start order:

- **surprise**: nats per decision, −mean ln p of the agent's steps at the decision points
  under the flow's decider (stretto.offline.reports.audit's scoring, the same number as audit's);
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

The alarm then holds: the command reports it (exit 1) after the last session while the
statistic reaches `threshold` there, or while the last alarm's change began fewer than `hold`
sessions before the last one (`hold` 0: only while the statistic does). The statistic alone
falls quiet once the new run is longer than `window`, though nobody has relearned: a check
run a dozen sessions after a change of habit would have said nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from stretto.home import private_dirs, write_private
from stretto.model.decide import Decider
from stretto.model.habit import seen
from stretto.model.program import FlowDistributions
from stretto.offline.lifecycle import changepoints
from stretto.offline.lifecycle.changepoints import MIN_RUN, TAIL

if TYPE_CHECKING:  # the command's parser reads Settings' defaults: this module stays light
    from stretto.logs.episode import Episode

SERIES = ("surprise", "disagreement", "unknown")
MOVED_SITES = 5


@dataclass
class Settings:
    hazard: float = 0.01
    window: int = 10
    threshold: float = 0.5
    hold: int = 30

    def check(self) -> None:
        if not 0 < self.hazard <= 1:
            raise ValueError(f"--hazard wants a probability in (0, 1], got {self.hazard}")
        if self.window < MIN_RUN:
            raise ValueError(f"--window wants at least {MIN_RUN} sessions, got {self.window}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"--threshold wants a probability in (0, 1], got {self.threshold}")
        if self.hold < 0:
            raise ValueError(f"--hold wants 0 sessions or more, got {self.hold}")


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
        """The alarm sounds after the last session (the command exits 1): the statistic
        reaches the threshold there, or the last alarm's change began fewer than `hold`
        sessions before it."""
        if not self.sessions:
            return False
        if self.sessions[-1]["change"] >= self.settings.threshold:
            return True
        return bool(self.alarms) and (
            len(self.sessions) - 1 - self.alarms[-1]["change"] < self.settings.hold
        )

    def as_json(self) -> dict:
        return {
            "domain": self.domain,
            "decider": self.decider,
            "settings": {
                "hazard": self.settings.hazard,
                "window": self.settings.window,
                "threshold": self.settings.threshold,
                "hold": self.settings.hold,
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
    are made of, and what stretto.offline.lifecycle.driftcache keeps per (flow, session)."""

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


def step_tools(episode: Episode) -> list[str]:
    """Per step of the agent's after a tool result, the tool it followed (the "unknown"
    series' raw data: it depends on the session only, not on the flow)."""
    # `stretto --help` loads drift: the log's types only when reading sessions
    from stretto.logs.episode import Assistant, ToolResult

    tools: list[str] = []
    events = episode.events
    for i, event in enumerate(events):
        if not isinstance(event, ToolResult) or i + 1 >= len(events):
            continue
        following = events[i + 1]
        if isinstance(following, ToolResult):
            continue
        if isinstance(following, Assistant) and following.calls and following.calls[0].by_proxy:
            continue  # the flow's lookup, not the agent's step
        tools.append(event.name)
    return tools


def unknown_steps(episode: Episode | list[str], known: set[str]) -> tuple[int, int, list[str]]:
    """(the agent's steps after a tool result, those that follow a tool not in `known`, those
    tools sorted); from the episode or its step_tools."""
    tools = episode if isinstance(episode, list) else step_tools(episode)
    unknown = [t for t in tools if t not in known]
    return len(tools), len(unknown), sorted(set(unknown))


# A decision point as the habit and reach deciders see it: the history, the call answered,
# whether it failed, and the agent's next step (None: a reply or the customer speaking).
Context = tuple[tuple[str, ...], str, bool, str | None]


@dataclass
class Facts:
    """What scoring reads from a session, whatever the flow
    (stretto.offline.lifecycle.driftcache keeps it per session): its decision points
    (audit.decision_points) and its step_tools."""

    id: str
    started_ms: int
    points: list[Context]
    tools: list[str]


def facts(episode: Episode) -> Facts:
    # `stretto --help` loads drift: the audit (oracle, http) on scoring
    from stretto.offline.reports.audit import agents_step, decision_points

    # a history only as far as the habit and reach models read it (its last steps): the
    # facts of an archive's sessions stay small, and alike points are alike here already
    points = [
        (seen(p.view.history), p.last[0], p.last[1], agents_step(p.following))
        for p in decision_points(episode)
    ]
    return Facts(episode.id, episode.started_ms, points, step_tools(episode))


def score_facts(flow: dict, sessions: Iterable[Facts], decider: str = "habit"):
    """Each session scored from its facts as score() would from its log, each distinct
    decision point (as the models see it: habit.seen of its history) scored once; None for the
    arbiter (its judge reads the transcript)."""
    # `stretto --help` loads drift: the audit on scoring
    from stretto.offline.reports.audit import score_point

    scorer = Decider(flow, decider)
    if scorer.kind == "arbiter":
        return None
    dists = FlowDistributions(flow)
    kinds = flow["manifest"]["tools"]
    known = trained_tools(flow)
    # the habit and reach models read only what habit.seen keeps of a history: a point is
    # scored once per (that, call, failed, step)
    memo: dict[Context, dict | None] = {}
    out = []
    for f in sessions:
        ds = []
        for history, call, failed, step in f.points:
            key = (seen(history), call, failed, step)
            if key not in memo:
                probs = scorer.probabilities(list(history), (call, failed))
                memo[key] = (
                    score_point("", probs, step, (call, failed), kinds, dists) if probs else None
                )
            d = memo[key]
            if d is not None:
                ds.append(d)
        n = len(ds)
        surprise = -sum(d["log_prob"] for d in ds) / n if n else None
        disagreement = 1.0 - sum(d["hit"] for d in ds) / n if n else None
        out.append(
            _scored(f.id, f.started_ms, ds, surprise, disagreement, unknown_steps(f.tools, known))
        )
    return out, scorer.kind


def _scored(
    session: str,
    started_ms: int,
    ds: list[dict],
    surprise: float | None,
    disagreement: float | None,
    steps: tuple[int, int, list[str]],
) -> Scored:
    """A session's Scored from its decisions `ds` (site, hit, log_prob each) and its
    unknown_steps."""
    return Scored(
        id=session,
        started_ms=started_ms,
        decisions=len(ds),
        surprise=surprise,
        disagreement=disagreement,
        steps=steps[0],
        unknown_steps=steps[1],
        unknown_tools=steps[2],
        sites=[d["site"] for d in ds],
        hits=[d["hit"] for d in ds],
        log_probs=[d["log_prob"] for d in ds],
    )


def score(flow: dict, episode: Episode, decider: str = "habit") -> tuple[Scored, str]:
    """One session scored under the flow's decider (audit's scoring), and the decider's kind."""
    from stretto.offline.reports.audit import (
        audit,  # `stretto --help` loads drift: the audit on scoring
    )

    scored = audit(flow, [episode], decider, served=False)
    totals = scored.totals()
    n = totals["decisions"]
    one = _scored(
        episode.id,
        episode.started_ms,
        scored.decisions,
        totals["nats_per_decision"] if n else None,
        1.0 - totals["agreement"] if n else None,
        unknown_steps(episode, trained_tools(flow)),
    )
    return one, scored.decider


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


def change_probabilities(
    values: list[list[float | None]], settings: Settings, tail: float = TAIL
) -> list[dict]:
    """Run the detector (stretto.offline.lifecycle.changepoints) over the sessions' values (one
    list per series, None = missing). Per session: `change`, the probability that the current
    run began within the window (the alarm's statistic), and `began`, the likeliest first
    session of such a run. `tail`: the oldest run hypotheses' mass dropped (0: none)."""
    return changepoints.change_probabilities(values, settings.hazard, settings.window, tail)


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
    read: list[Facts] | None = None,
) -> Drift:
    """The series (the sessions taken in start order, `started_unix_ms`), the detector's
    statistic after each session, and the alarms: each run of sessions after which the alarm
    sounds, with where the change began and the sites whose surprise rose most (before the
    change against from it to the end of the alarm). `read`: the episodes' facts when the
    caller has read them already (the console, a session at a time)."""
    settings = settings or Settings()
    settings.check()
    # each session's decision points read once, in one pass (facts), and each distinct point
    # scored once: the work is linear in the session's calls (no binding: drift scores the
    # agent's steps, not what the proxy would have served)
    # a generator: the arbiter's scoring reads no facts, and returns before taking any
    fresh = score_facts(flow, read if read is not None else (facts(e) for e in episodes), decider)
    if fresh is not None:
        scored, kind = fresh
    else:  # the arbiter: its judge reads the session's transcript, scored from the log
        kind, scored = decider, []
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
        f"{s.window} sessions reaches {s.threshold:g}; it holds {s.hold} sessions from the "
        "change.",
        "",
    ]
    if result.sounding:
        last = result.alarms[-1]
        since = len(result.sessions) - last["change"]
        out.append(
            f"**The alarm is sounding**: the agent's habits changed around session "
            f"{last['change']} ({last['change_session']}), {since} sessions ago (probability "
            f"{last['probability']:.2f} at session {last['at']}). Relearn (stretto stage) and "
            "review."
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
    import matplotlib  # heavy: only the plot needs matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # once its backend is chosen: files, no display

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
    write_private(path, lambda temp: fig.savefig(temp, format="png"))
    plt.close(fig)


def write_report(result: Drift, folder) -> list:
    """The report (`drift.md`), its data (`drift.json`) and the plot (`drift.png`) in
    `folder`, private: what `stretto drift` writes, and a pipeline check would."""
    folder = private_dirs(Path(folder), own=False)
    written = [folder / "drift.md", folder / "drift.json", folder / "drift.png"]
    write_private(written[0], markdown(result))
    write_private(written[1], json.dumps(result.as_json(), indent=1, ensure_ascii=False) + "\n")
    plot(result, written[2])
    return written
