"""`stretto promote`: promote the sites whose lookups the agent would have used
(../shared/spec/algorithms.md §16).

Sessions recorded in shadow mode (`stretto-proxy --flow-shadow`), or without a flow, are
**scored as served**: at each of the agent's results the proxy would run after, the flow
decides exactly as the proxy does (the same Decider, the same program, the same session
state), with the flow's own promotion removed. A lookup it would make is **used** when the
agent makes that call itself in a later LLM turn (same tool, every bound argument equal by
value text; the agent may pass more). A used lookup is then answered with the agent's own
result and the flow decides again, as the proxy would after a lookup, while the per-call cap
allows.

A site is **promoted** when enough of its lookups were used: at least `min_used` of them,
with a 90% Wilson lower bound of at least `min_lower`, from at least `min_tasks` distinct
tasks (each session is its own task). `promote_served` scores with chains through every
site, promotes, then scores again with chains only through the promoted sites (as a promoted
flow serves: it acts only there) until the promotion repeats, at most 8 rounds.

With the arbiter decider the System-One model is asked as the proxy asked it
(stretto.offline.episode_judges; `replay` by default: pass the proxy's cache for shadow sessions); a
decision it cannot answer is left out and counted (`Scored.unanswered`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from stretto.logs.episode import Episode, ToolResult
from stretto.logs.merged import read_episodes
from stretto.model import defaults
from stretto.model.decide import (
    DEFAULT_THRESHOLD,
    Decider,
    decider_problem,
    default_decider,
    served_threshold,
    theta_text,
)
from stretto.model.flow import write_flow
from stretto.model.program import STANDARD_PROGRAM, Execute, FlowDistributions, run
from stretto.offline.episode_judges import Judges, OracleOptions, judges_for
from stretto.offline.walk import BOUND, Point, agent_made, walk
from stretto.oracle.arbiter import load_flow
from stretto.progress import Progress

Z = 1.6448536  # 90% two-sided
PER_CALL = defaults.PER_CALL  # lookups after one call, as the proxy's --flow-per-call default
MAX_ROUNDS = 8


def wilson_lower(k: int, n: int, z: float = Z) -> float:
    """The Wilson score interval's lower bound for k successes in n trials (0 when n = 0)."""
    if n <= 0:
        return 0.0
    p = k / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - margin) / (1 + z * z / n))


@dataclass(frozen=True)
class Bar:
    """What a site needs to be promoted; `threshold` is the θ its decisions are scored at
    (None: the flow's own, `served_threshold`; the CLI's default)."""

    threshold: float | None = DEFAULT_THRESHOLD
    min_used: float = 0.7
    min_lower: float = 0.5
    min_tasks: int = 3

    def as_dict(self) -> dict:
        return {
            "threshold": self.threshold,
            "min_used": self.min_used,
            "min_lower": self.min_lower,
            "min_tasks": self.min_tasks,
        }

    def check(self, cli: bool = True) -> None:
        """ValueError naming the option (`--min-used`; `min_used` when not `cli`) that is out
        of range."""

        def name(field_name: str) -> str:
            return "--" + field_name.replace("_", "-") if cli else field_name

        if self.threshold is not None and not (
            math.isfinite(self.threshold) and self.threshold >= 0
        ):
            raise ValueError(f"{name('threshold')} wants a number ≥ 0, got {self.threshold}")
        for field_name, value in (("min_used", self.min_used), ("min_lower", self.min_lower)):
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise ValueError(f"{name(field_name)} wants a share in [0, 1], got {value}")
        if self.min_tasks < 0:
            raise ValueError(f"{name('min_tasks')} wants a count ≥ 0, got {self.min_tasks}")


@dataclass
class SiteTally:
    decisions: int = 0
    lookups: int = 0
    used: int = 0
    tasks: set[str] = field(default_factory=set)  # the tasks of its lookups


@dataclass
class Scored:
    """What scoring as served found: per site, and over every session."""

    sites: dict[str, SiteTally]
    sessions: int
    decision_points: int  # the agent's results the proxy would have run after
    # with `keep_decisions`: every decision, as the proxy would log it, and whether it was used
    decisions: list[dict] | None = None
    unanswered: int = 0  # arbiter decisions the oracle could not answer: left out


def without_promotion(flow: dict) -> dict:
    return {k: v for k, v in flow.items() if k != "promoted"}


def score(
    flow: dict,
    episodes: list[Episode],
    *,
    decider: str | None = None,
    threshold: float | None = None,
    per_call: int = PER_CALL,
    chains: set[str] | None = None,
    keep_decisions: bool = False,
    progress=None,
    oracle: OracleOptions | None = None,
) -> Scored:
    """Score the flow as served on `episodes` (its own promotion removed). After a used lookup
    decided at site S the flow decides again only when `chains` is None or holds S.
    `oracle`: who answers the arbiter decider's questions (default `replay`)."""
    served = without_promotion(flow)
    chosen = Decider(served, decider, threshold)
    dists = FlowDistributions(served)
    out = Scored({}, len(episodes), 0, [] if keep_decisions else None)
    judges = judges_for(served, [chosen.kind], oracle)
    for episode in episodes:
        _score_episode(episode, chosen, dists, per_call, chains, out, judges)
        if progress is not None:
            progress.advance()
    return out


def promote(scored: Scored | dict[str, SiteTally], bar: Bar) -> dict:
    """The flow's `promoted` record: the bar, and per site its evidence and verdict."""
    tallies = scored.sites if isinstance(scored, Scored) else scored
    sites = {}
    for site in sorted(tallies):
        t = tallies[site]
        lower = wilson_lower(t.used, t.lookups)
        promoted = (
            t.lookups > 0
            and t.used / t.lookups >= bar.min_used
            and lower >= bar.min_lower
            and len(t.tasks) >= bar.min_tasks
        )
        sites[site] = {
            "decisions": t.decisions,
            "lookups": t.lookups,
            "used": t.used,
            "tasks": len(t.tasks),
            "lower": lower,
            "promoted": promoted,
        }
    return {"bar": bar.as_dict(), "sites": sites}


def promoted_sites(record: dict) -> set[str]:
    return {site for site, entry in record["sites"].items() if entry["promoted"]}


@dataclass
class Promotion:
    record: dict  # the `promoted` record
    scored: Scored  # the last round's scoring (chains through the promoted sites)
    rounds: int
    decider: str


def promote_served(
    flow: dict,
    episodes: list[Episode],
    bar: Bar = Bar(),
    *,
    decider: str | None = None,
    per_call: int = PER_CALL,
    max_rounds: int = MAX_ROUNDS,
    progress=None,
    oracle: OracleOptions | None = None,
) -> Promotion:
    """Score with chains through every site and promote; then score again with chains only
    through the promoted sites and promote again, until the promotion repeats. `progress`,
    given the round, returns a progress bar for it (or None)."""
    kind = decider or default_decider(flow)  # as the proxy serves it
    bar = replace(bar, threshold=served_threshold(flow, bar.threshold))
    chains: set[str] | None = None
    previous: set[str] | None = None
    record, scored, rounds = None, None, 0
    while rounds < max_rounds:
        rounds += 1
        bar_of_round = progress(rounds) if progress is not None else None
        scored = score(
            flow,
            episodes,
            decider=kind,
            threshold=bar.threshold,
            per_call=per_call,
            chains=chains,
            progress=bar_of_round,
            oracle=oracle,
        )
        if bar_of_round is not None:
            bar_of_round.close()
        record = promote(scored, bar)
        now = promoted_sites(record)
        if previous is not None and now == previous:
            break
        previous = chains = now
    if record is None or scored is None:
        raise ValueError(f"max_rounds wants a count ≥ 1, got {max_rounds}")
    return Promotion(record, scored, rounds, kind)


# --- scoring one session as the proxy would have served it ----------------------------------


def _score_episode(
    episode: Episode,
    decider: Decider,
    dists: FlowDistributions,
    per_call: int,
    chains: set[str] | None,
    out: Scored,
    judges: Judges | None = None,
) -> None:
    """Walk the session as the proxy saw it (stretto.offline.walk); at each of the agent's
    results that something followed, run the flow's program as served."""
    judge = judges.judge(episode) if judges is not None else None
    transcript = Judges.transcript() if judges is not None else None
    for point in walk(episode, decider.rules.source_tools(), transcript=transcript):
        if isinstance(point, Point) and not point.by_proxy and point.followed:
            out.decision_points += 1
            _run(point, decider, dists, per_call, chains, episode.id, out, judge)


def _run(
    point: Point,
    decider: Decider,
    dists: FlowDistributions,
    per_call: int,
    chains: set[str] | None,
    task: str,
    out: Scored,
    judge=None,
) -> None:
    """The flow's run after one of the agent's results, its lookups answered by the agent's
    own calls in later LLM turns. The session's view is extended only on a fork."""
    result = point.result
    later = point.later_turns()
    views = [point.view]  # the session's own view, then its fork once a lookup is answered
    pending: dict[str, tuple[str, dict, ToolResult]] = {}

    def decide(address: str, prev: int, prev_failed: bool) -> int:
        view = views[-1]
        last = dists.tools[prev] if prev < len(dists.tools) else None
        decision = decider.decide(
            list(view.history),
            (last, bool(prev_failed)) if last else None,
            view.state,
            judge=judge.on(view) if judge is not None else None,
        )
        if decision.site is None:
            return 0
        if decision.unanswered:
            out.unanswered += 1  # no cached answer: the decision is left out
            return 0
        tally = out.sites.setdefault(decision.site, SiteTally())
        tally.decisions += 1
        entry = None
        if out.decisions is not None:
            entry = {
                "session": task,
                "after": result.call_id,
                "address": address,
                "site": decision.site,
                "action": decision.action,
                "tool": decision.tool if decision.looks_up else None,
                "arguments": decision.arguments if decision.looks_up else None,
                "reason": decision.reason,
                "prob": decision.prob,
                "binding": decision.binding,
                "used": None,
            }
            out.decisions.append(entry)
        if not decision.looks_up or decision.tool is None:
            return 0
        tally.lookups += 1
        tally.tasks.add(task)
        arguments = decision.arguments or {}
        # promotion's rule: any later LLM turn, no cut at the next write, made before or not
        made = agent_made(decision.tool, arguments, later, match=BOUND, writes=None)
        if entry is not None:
            entry["used"] = made is not None
        if made is None:
            return 0  # a detour: the agent never made that call
        tally.used += 1
        answer = point.walk.results.get(later[made].key)
        if answer is None or (chains is not None and decision.site not in chains):
            return 0  # no result to go on with, or the flow does not go on from this site
        pending[address.replace("decide", "outcome")] = (decision.tool, arguments, answer)
        return dists.tool_id(decision.tool)

    def look_up(address: str, tool_id: int) -> bool:
        tool, arguments, answer = pending[address]
        if len(views) == 1:
            views.append(point.view.fork())
        views[-1].sent(tool, arguments, ("flow", address))
        views[-1].came_back(tool, answer.error, answer.content, ("flow", address))
        return not answer.error

    run(
        STANDARD_PROGRAM,
        dists,
        Execute(decide, look_up),
        call=result.name,
        call_failed=result.error,
        max_lookups=per_call,
    )


# --- the report and the written flow --------------------------------------------------------


def rows(record: dict) -> list[dict]:
    """The report's table as data, one row per site, in site order."""
    out = []
    for site, entry in sorted(record["sites"].items()):
        lookups, used = entry["lookups"], entry["used"]
        out.append(
            {
                "site": site,
                "decisions": entry["decisions"],
                "lookups": lookups,
                "used": used,
                "used_share": used / lookups if lookups else None,
                "lower": entry["lower"],
                "tasks": entry["tasks"],
                "promoted": entry["promoted"],
            }
        )
    return out


def markdown(
    record: dict,
    *,
    decider: str | None = None,
    sessions: int | None = None,
    rounds: int | None = None,
) -> str:
    bar = record["bar"]
    scored_as = f" with the {decider} decider" if decider else ""
    on = f" on {sessions} session{'s' if sessions != 1 else ''}" if sessions is not None else ""
    table = rows(record)
    promoted = [r["site"] for r in table if r["promoted"]]
    out = [
        "# Promotion",
        "",
        f"Scored as served{scored_as} at threshold {theta_text(bar['threshold'])}{on}, a site "
        f"is promoted when the agent later made at least {bar['min_used']:.0%} of the "
        f"lookups the flow would make there, the 90% Wilson lower bound of that share is at "
        f"least {bar['min_lower']:g}, and those lookups came from at least "
        f"{bar['min_tasks']} task{'s' if bar['min_tasks'] != 1 else ''} (each session is "
        "its own task).",
        "",
        "| After | Decisions | Lookups it would make | Made by the agent later | Lower bound "
        "| Tasks | Promoted |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        made = f"{r['used']} ({r['used_share']:.0%})" if r["lookups"] else "0 (—)"
        out.append(
            f"| {r['site']} | {r['decisions']} | {r['lookups']} | {made} | {r['lower']:.2f} "
            f"| {r['tasks']} | {'yes' if r['promoted'] else 'no'} |"
        )
    if not table:
        out.append("| (no decisions) | | | | | | |")
    out.append("")
    summary = (
        f"{len(promoted)} of {len(table)} site{'s' if len(table) != 1 else ''} promoted"
        + (f": {', '.join(promoted)}" if promoted else "")
        + "."
    )
    if rounds is not None:
        summary += (
            f" The promotion repeated after {rounds} rounds of scoring."
            if rounds > 1
            else " Scored once."
        )
    out += [summary, ""]
    return "\n".join(out)


@dataclass
class PromoteRun:
    flow: dict  # the flow with its new `promoted` record
    promotion: Promotion
    out: Path
    report: str
    warnings: list[str] = field(default_factory=list)


def promote_flow(
    flow_path: str | Path,
    shadow: str | Path,
    bar: Bar = Bar(),
    *,
    decider: str | None = None,
    out: str | Path | None = None,
    per_call: int = PER_CALL,
    cli: bool = True,
    progress: bool = False,
    oracle: OracleOptions | None = None,
) -> PromoteRun:
    """`stretto promote` and the `promotion` asset: read the flow and the sessions, promote,
    write the flow with its record (to `out`, else in place). ValueError (FlowError,
    LogError) on bad input, naming the file or option (as the command's options when `cli`,
    else as the asset's config fields). `progress`: a progress bar per round on a terminal."""
    bar.check(cli)
    if per_call < 1:
        raise ValueError(f"the per-call cap wants a count ≥ 1, got {per_call}")
    flow = load_flow(flow_path)
    problem = decider_problem(flow, decider) if decider is not None else None
    if problem:
        hint = "--decider habit" if cli else "decider: habit"
        raise ValueError(f"{flow_path}: {problem} (use {hint})")
    episodes = read_episodes(shadow)
    if not episodes:
        raise ValueError(f"{shadow}: no session logs (*.jsonl) to score")
    warnings = []
    served = [e.id for e in episodes if any(c.by_proxy for c in e.calls())]
    if served:
        warnings.append(
            f"{len(served)} of {len(episodes)} sessions in {shadow} hold a flow's own lookups "
            f"(served, not shadow; e.g. {served[0]}): an agent seldom repeats a call it was "
            "shown, so lookups there look unused"
        )
    bars = None
    if progress:

        def bars(round_: int) -> Progress:
            return Progress(len(episodes), f"promote, round {round_}", " sessions")

    promotion = promote_served(
        flow, episodes, bar, decider=decider, per_call=per_call, progress=bars, oracle=oracle
    )
    promoted = dict(flow)
    promoted["promoted"] = promotion.record
    target = Path(out) if out else Path(flow_path)
    write_flow(promoted, target)
    report = markdown(
        promotion.record,
        decider=promotion.decider,
        sessions=len(episodes),
        rounds=promotion.rounds,
    )
    return PromoteRun(promoted, promotion, target, report, warnings)


# --- the record read back: where the flow acts, and why, in words (flow-show, flow-diff,
# staging and the console say it the same way)


def acts_at(flow: dict, site: str) -> bool:
    """Whether the flow's promotion lets it act at a site: it has no promotion record, or the
    record promotes the site (elsewhere it decides in shadow)."""
    record = flow.get("promoted")
    return record is None or bool(record["sites"].get(site, {}).get("promoted"))


def promotion_evidence(entry: dict | None) -> str:
    """A site's promotion evidence in words."""
    if not entry:
        return "not scored"
    if not entry["lookups"]:
        return f"{entry['decisions']} decisions, no lookup it would make"
    return (
        f"the agent later made {entry['used']} of the {entry['lookups']} lookups it would make "
        f"({entry['used'] / entry['lookups']:.0%}), lower bound {entry['lower']:.2f}, "
        f"{entry['tasks']} tasks"
    )


def promotion_summary(record: dict | None) -> str:
    """The promotion record in one line: how many sites are promoted, and at which bar."""
    if record is None:
        return "no promotion record (acts at every site)"
    bar = record["bar"]
    promoted = sorted(s for s, e in record["sites"].items() if e["promoted"])
    return (
        f"{len(promoted)} of {len(record['sites'])} sites promoted"
        + (f" ({', '.join(promoted)})" if promoted else "")
        + f" at threshold {theta_text(bar['threshold'])}, used ≥ {bar['min_used']:g}, "
        f"lower bound ≥ {bar['min_lower']:g}, ≥ {bar['min_tasks']} tasks"
    )
