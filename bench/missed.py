"""Where the read-only ceiling's turns go that a flow does not save (issue 19): for each turn the
ceiling counts (results.md §2.3) and the replay did not save, the first of its calls the flow
did not answer, classed by why:

- `no decision`: the flow decided nowhere between the agent's last write and the turn;
- `not an option`: it decided, but the lookup was never among the options;
- `other values`: it was an option, but never bound to the agent's arguments (the binding
  picked other values, or could not bind);
- `bound, below θ`: bound to the agent's arguments, but served below θ;
- `bound, above θ`: bound and served at θ or more, yet not made (the per-call or per-episode
  cap).

    .venv/bin/python bench/missed.py [--domain retail] [--variant ours+cal@*]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.quality import load_domain, parse  # noqa: E402
from bench.tau2data import add_option, choose  # noqa: E402
from stretto.logs.episode import Assistant  # noqa: E402
from stretto.model.decide import Decider  # noqa: E402
from stretto.model.program import FlowDistributions  # noqa: E402
from stretto.offline.reports.ceiling import ceiling_turns  # noqa: E402
from stretto.offline.reports.replay import PER_CALL, PER_EPISODE, EpisodeReplay  # noqa: E402
from stretto.offline.walk import call_key  # noqa: E402

REASONS = ("no decision", "not an option", "other values", "bound, below θ", "bound, above θ")


def ceiling_calls(episode, kinds) -> set[int]:
    """The events indices of the turns the ceiling counts (ceiling_turns, one turn at a time:
    a turn counts when the ceiling of the episode cut just after it grows)."""
    counted, before = set(), 0
    events = episode.events
    for i, event in enumerate(events):
        if isinstance(event, Assistant) and any(not c.by_proxy for c in event.calls):
            head = replace(episode, events=events[: i + 1])
            now = ceiling_turns(head, kinds)
            if now > before:
                counted.add(i)
            before = now
    return counted


class Traced(EpisodeReplay):
    """The replay, keeping every decision's options (with their arguments) and every turn."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.decisions: list[tuple[int, str, list]] = []  # (agent calls made, site, options)
        self.turns: list[tuple[int, object]] = []  # (agent calls made before it, turn)
        self.writes_at: list[int] = []

    def _options(self, decision, later) -> None:
        super()._options(decision, later)
        options = [
            (o.tool, call_key(o.tool, o.arguments) if o.arguments is not None else None, o.score)
            for o in decision.options
        ]
        self.decisions.append((self.executed, decision.site, options))

    def _turn(self, turn) -> None:
        self.turns.append((self.executed, turn))
        super()._turn(turn)

    def _made(self, key) -> None:
        call = self.walk.agent_calls[self.walk.position[key]]
        super()._made(key)
        if call.name in self.writes:
            self.writes_at.append(self.executed)


def why(trace: Traced, at: int, call, theta: float) -> tuple[str, str]:
    """Why the flow did not answer `call` of the turn made after `at` agent calls: (reason,
    the site of the last decision before it)."""
    since = max([w for w in trace.writes_at if w <= at], default=0)
    window = [d for d in trace.decisions if since <= d[0] <= at]
    if not window:
        return "no decision", "-"
    site = window[-1][1]
    key = call_key(call.name, call.arguments)
    offered = [o for d in window for o in d[2] if o[0] == call.name]
    if not offered:
        return "not an option", site
    right = [score for _, k, score in offered if k == key]
    if not right:
        return "other values", site
    return ("bound, above θ" if max(right) >= theta else "bound, below θ"), site


def missed(domain, spec: str) -> tuple[Counter, Counter, int, int]:
    """The variant's replay of the domain's test episodes: the missed ceiling turns by reason
    and by (reason, site, lookup), the ceiling's turns, and those of them saved."""
    v = parse(spec)
    flow = v.learn(domain, domain.train_ok)
    theta = v.threshold(domain)
    decider = Decider(flow, v.decider, theta)
    dists = FlowDistributions(flow)
    kinds = flow["manifest"]["tools"]
    by_reason, by_lookup, ceiling, saved = Counter(), Counter(), 0, 0
    for _, episode in domain.test:
        trace = Traced(episode, decider, dists, kinds, PER_CALL, PER_EPISODE, 0.0, 0)
        trace.replay()
        counted = ceiling_calls(episode, kinds)
        for at, turn in trace.turns:
            if turn.index not in counted:
                continue
            ceiling += 1
            if len(turn.skipped) == len(turn.calls):
                saved += 1
                continue
            first = next(c for c in turn.calls if c.key not in turn.skipped)
            reason, site = why(trace, at, first, theta)
            by_reason[reason] += 1
            by_lookup[(reason, site, first.name)] += 1
    return by_reason, by_lookup, ceiling, saved


def section(q, spec: str = "ours+cal@*", top: int = 6) -> list[str]:
    """docs/results.md's breakdown of the ceiling's missed turns, per domain (`q`:
    bench.quality)."""
    lines = [
        "## Where the missed share goes",
        "",
        "The served flow's replay of the test episodes (all agents): each turn the read-only "
        "ceiling counts and the flow did not save, by the first of its calls the flow did not "
        "answer (bench/missed.py), from the agent's last write to the turn: *no decision* — "
        "the flow decided nowhere; *not an option* — the lookup never followed the site in "
        "training; *other values* — an option, never bound to the agent's arguments; *bound, "
        "below θ* — bound to them, served below θ*; *bound, above θ* — the per-call or "
        "per-episode cap. Percentages of the missed turns. (*saved* counts the ceiling's "
        "turns saved; the share of the ceiling above counts every turn saved, a few of which "
        "the ceiling does not count.)",
        "",
        "| domain | ceiling turns | saved | "
        + " | ".join(REASONS)
        + " | largest (why: last site → lookup, turns) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in ("retail", "airline", "telecom"):
        by_reason, by_lookup, ceiling, saved = missed(q.domain(name), spec)
        lost = max(ceiling - saved, 1)
        cells = [f"{by_reason[r]} ({100 * by_reason[r] / lost:.0f}%)" for r in REASONS]
        largest = "; ".join(
            f"{r}: {site} → {lookup}, {n}" for (r, site, lookup), n in by_lookup.most_common(top)
        )
        lines.append(f"| {name} | {ceiling} | {saved} | " + " | ".join(cells) + f" | {largest} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="retail")
    parser.add_argument("--variant", default="ours+cal@*")
    parser.add_argument("--top", type=int, default=12)
    add_option(parser)
    args = parser.parse_args()
    choose(args.tau2)
    by_reason, by_lookup, ceiling, saved = missed(load_domain(args.domain), args.variant)
    lost = ceiling - saved
    print(f"{args.domain} {args.variant}: ceiling {ceiling} turns, saved {saved}, missed {lost}")
    print("\n| why missed | turns | share of the missed |\n|---|---|---|")
    for reason in REASONS:
        print(f"| {reason} | {by_reason[reason]} | {100 * by_reason[reason] / lost:.0f}% |")
    print("\n| why missed | site (last decision) | lookup | turns |\n|---|---|---|---|")
    for (reason, site, lookup), n in by_lookup.most_common(args.top):
        print(f"| {reason} | {site} | {lookup} | {n} |")


if __name__ == "__main__":
    main()
