"""`stretto audit`: how well a flow predicts sessions it never saw (../shared/spec/algorithms.md
§9), and how well its served scores are calibrated.

The sessions are walked as the proxy saw them (stretto.offline.walk), so the decider reads the
history the proxy would have. Two measures over the same decision points (the last result of
each batch of results that something followed):

- **Next step**: the flow's program (stretto.model.program) run under a Score handler whose
  `Decide` distribution is the decider's probabilities over the site's options, plus `other`
  (1 − Σ), each floored at 1e-6 and renormalized; the recorded trace is the agent's next step:
  agreement (the likeliest option was it) and nats per decision (−mean log-probability).
- **Served score**: the score the proxy would act on (probability × binding chance of the
  lookup it would choose, with its real binding; calibrated when the flow has a map) against
  whether the agent made that very call in a later LLM turn before its next write
  (stretto.offline.walk.agent_made, bound arguments): ECE over the spec's bins, Brier, AUC and
  a reliability table (stretto.offline.reports.reliability).

With the arbiter (either measure's decider), each decision point asks the System-One model
once (stretto.offline.episode_judges; `--oracle replay` by default: the cache only); a point it
cannot answer is left out of both measures and counted (`unanswered`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from stretto.logs.episode import Assistant, Episode
from stretto.model.decide import Decider, Judged, default_decider
from stretto.model.program import STANDARD_PROGRAM, FlowDistributions, Score, run
from stretto.offline.episode_judges import Judges, OracleOptions, judges_for
from stretto.offline.reports import frames, reliability
from stretto.offline.reports.plots import reliability_diagram
from stretto.offline.walk import BOUND, Point, agent_made, walk, write_tools
from stretto.vocabulary import FLOOR, RESPOND

OTHER = "other"


@dataclass
class Audit:
    decider: str  # the decider whose next-step probabilities are scored
    episodes: int = 0
    served_by: str = ""  # the decider the proxy would serve with (its served scores)
    decisions: list[dict] = field(default_factory=list)  # next-step scoring, one per decision
    served: list[dict] = field(default_factory=list)  # served score vs used, one per lookup
    unanswered: int = 0  # decision points the arbiter's oracle could not answer: left out

    def totals(self) -> dict:
        n = len(self.decisions)
        log_prob = sum(d["log_prob"] for d in self.decisions)
        measured = reliability.measures(*_scored(self.served))
        return {
            "episodes": self.episodes,
            "decisions": n,
            "unanswered": self.unanswered,
            "log_prob": log_prob,
            "nats_per_decision": -log_prob / n if n else 0.0,
            "agreement": sum(d["hit"] for d in self.decisions) / n if n else 0.0,
            "expected_agreement": sum(d["p_actual"] for d in self.decisions) / n if n else 0.0,
            "served": len(self.served),
            "ece": measured["ece"],
            "brier": measured["brier"],
            "auc": measured["auc"],
        }

    def sites(self) -> list[dict]:
        by: dict[str, list[dict]] = {}
        for d in self.decisions:
            by.setdefault(d["site"], []).append(d)
        rows = [
            {
                "site": site,
                "decisions": len(ds),
                "agreement": sum(d["hit"] for d in ds) / len(ds),
                "nats_per_decision": -sum(d["log_prob"] for d in ds) / len(ds),
            }
            for site, ds in by.items()
        ]
        return sorted(rows, key=lambda r: (-r["decisions"], r["site"]))

    def reliability(self) -> list[dict]:
        """The served scores' reliability table over the spec's bins."""
        return reliability.reliability(*_scored(self.served))


def _scored(served: list[dict]) -> tuple[list[float], list[bool]]:
    return [s["score"] for s in served], [bool(s["used"]) for s in served]


def audit(
    flow: dict,
    episodes: list[Episode],
    decider: str | None = "habit",
    oracle: OracleOptions | None = None,
    served: bool = True,
) -> Audit:
    """Score `episodes` under `decider` (None: the flow's default, its arbiter if it has
    one); the served scores are the proxy's default decider's. `oracle`: who answers the
    arbiter's questions (default `replay`). `served=False`: the agent's steps only (no
    binding, no served scores: what drift reads)."""
    scorer = Decider(flow, decider)
    server = Decider(flow, default_decider(flow))  # what the proxy would serve
    dists = FlowDistributions(flow)
    kinds = flow["manifest"]["tools"]
    writes = write_tools(kinds)
    result = Audit(scorer.kind, episodes=len(episodes), served_by=server.kind)
    sources = server.rules.source_tools()
    judges = judges_for(flow, [scorer.kind, server.kind], oracle)
    for episode in episodes:
        judge = judges.judge(episode) if judges is not None else None
        transcript = Judges.transcript() if judges is not None else None
        for point in decision_points(episode, sources, transcript):
            asked = _Asked(judge.on(point.view)) if judge is not None else None
            _audit_point(
                episode.id,
                point,
                scorer,
                server if served else None,
                dists,
                kinds,
                writes,
                result,
                asked,
            )
    return result


def decision_points(
    episode: Episode, sources: frozenset[str] | None = None, transcript=None
) -> Iterator[Point]:
    """Audit's decision points, as the proxy saw them: the last result of each batch of
    results that something followed (the one rule, drift's cache reads it too). Each point's
    view is live until the next one is asked for."""
    for point in walk(episode, sources, transcript=transcript):
        if isinstance(point, Point) and point.batch_end:
            yield point


class _Asked:
    """The judge at one decision point, asked once however many deciders want it."""

    def __init__(self, judge) -> None:
        self.judge = judge
        self.judged: Judged | None = None

    def __call__(self, **question) -> Judged:
        if self.judged is None:
            self.judged = self.judge(**question)
        return self.judged


def _audit_point(
    session: str,
    point: Point,
    scorer: Decider,
    server: Decider | None,
    dists: FlowDistributions,
    kinds: dict,
    writes: frozenset[str],
    out: Audit,
    judge: _Asked | None,
) -> None:
    view, last = point.view, point.last
    if scorer.kind == "arbiter":
        judged = scorer.judged(view.history, last, judge)
        if judged is not None and judged.reason is not None:
            out.unanswered += 1  # the oracle gave no answer: nothing to score here
            return
        probs = dict(judged.probs) if judged is not None else {}
    else:
        probs = scorer.probabilities(view.history, last)
    if probs:
        out.decisions.append(
            score_point(session, probs, agents_step(point.following), last, kinds, dists)
        )
    if server is None:
        return
    decision = server.decide(list(view.history), last, view.state, judge=judge)
    if judge is not None and judge.judged is not None and judge.judged.reason is not None:
        out.unanswered += 1  # the served measure leaves it out (the scorer is not the arbiter)
        return
    if decision.tool and decision.binding is not None and decision.prob is not None:
        made = agent_made(
            decision.tool,
            decision.arguments or {},
            point.later_turns(),
            match=BOUND,
            writes=writes,
        )
        out.served.append(
            {
                "episode": session,
                "site": decision.site,
                "tool": decision.tool,
                "score": decision.score,
                "used": made is not None,
            }
        )


def agents_step(event) -> str | None:
    """The agent's next step after a decision point: its call's tool, or None."""
    if isinstance(event, Assistant) and event.calls:
        return event.calls[0].name
    return None  # a reply, or the customer speaking


class NextStep(Score):
    """The Score handler audit runs the program with: `Decide` is the decider's distribution
    at the decision point (not the flow's level-1 counts); `Outcome` is not scored (audit
    scores the agent's step, not whether its call succeeded)."""

    def __init__(self, trace: dict, distribution: dict[int, float]) -> None:
        super().__init__(trace)
        self.distribution = distribution

    def sample(self, address, dist, args, dists):
        if dist == "Decide":
            value = self.trace[address]
            return value, math.log(self.distribution[value])
        return True, 0.0


def next_step_distribution(probs: dict[str, float]) -> dict[str, float]:
    """The decider's probabilities plus `other` (1 − Σ), each floored at 1e-6 and
    renormalized (../shared/spec/algorithms.md §9)."""
    full = dict(probs)
    full[OTHER] = max(0.0, 1.0 - sum(probs.values()))
    floored = {k: max(v, FLOOR) for k, v in full.items()}
    total = sum(floored.values())
    return {k: v / total for k, v in floored.items()}


def score_point(
    session: str,
    probs: dict,
    actual: str | None,
    last: tuple[str, bool],
    kinds: dict,
    dists: FlowDistributions,
) -> dict:
    """One decision point scored: the decider's `probs` against the agent's `actual` next step
    after the call `last` (name, failed), as audit's row (top, p_top, p_actual, hit and the
    log-probability of the agent's step under the program's Score handler). Drift scores its
    points with it too."""
    options = sorted(probs)
    label = RESPOND  # a write, another tool, a reply or the customer speaking
    if actual is not None and actual in options:
        label = actual
    elif actual is not None and kinds.get(actual) == "read":
        label = OTHER
    normed = next_step_distribution(probs)
    # the program's option ids: 0 = respond, a lookup its tool id, `other` one past the tools
    ids = {name: (0 if name == RESPOND else dists.tool_id(name)) for name in options}
    ids[OTHER] = len(dists.tools)
    _, trace = run(
        STANDARD_PROGRAM,
        dists,
        NextStep({"decide#0": ids[label]}, {ids[k]: p for k, p in normed.items()}),
        call=last[0],
        call_failed=last[1],
        max_lookups=1,
    )
    top = max([*options, OTHER], key=lambda k: normed[k])  # first of equals
    site = last[0] + (" (error)" if last[1] else "")
    return {
        "episode": session,
        "site": site,
        "actual": label,
        "top": top,
        "p_top": normed[top],
        "p_actual": normed[label],
        "hit": top == label,
        "log_prob": sum(logp for _, _, logp in trace),
    }


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def markdown(result: Audit) -> str:
    t = result.totals()
    out = [
        f"# Audit ({result.decider} decider)",
        "",
        f"{t['episodes']} episodes, {t['decisions']} decisions scored"
        + (
            f" ({t['unanswered']} left out: no answer from the oracle)." if t["unanswered"] else "."
        ),
        "",
        f"- Agreement: {t['agreement']:.1%} (expected {t['expected_agreement']:.1%})",
        f"- Surprise: {t['nats_per_decision']:.3f} nats per decision "
        f"(total log-probability {t['log_prob']:.2f})",
        f"- Served scores: {t['served']} lookups the proxy would make "
        f"({result.served_by} decider); ECE {_number(t['ece'])}, "
        f"Brier {_number(t['brier'])}, AUC {_number(t['auc'])} (ECE over the bins from "
        f"{reliability.edges_text()})",
        "",
        "## Sites",
        "",
        "| site | decisions | agreement | nats per decision |",
        "|---|---|---|---|",
    ]
    out += [
        f"| {r['site']} | {r['decisions']} | {r['agreement']:.1%} | {r['nats_per_decision']:.3f} |"
        for r in result.sites()
    ]
    out += [
        "",
        "## Calibration of the served score",
        "",
        "| score from | to | lookups | mean score | used before the next write |",
        "|---|---|---|---|---|",
    ]
    out += [
        f"| {r['from']:g} | {min(r['to'], 1):g} | {r['count']} | {r['mean_score']:.2f} | "
        f"{r['used']:.2f} |"
        for r in result.reliability()
    ]
    return "\n".join(out) + "\n"


TABLES: dict[str, frames.Schema] = {
    "decisions": {
        "episode": "String",
        "site": "String",
        "actual": "String",
        "top": "String",
        "p_top": "Float64",
        "p_actual": "Float64",
        "hit": "Boolean",
        "log_prob": "Float64",
    },
    "sites": {
        "site": "String",
        "decisions": "Int64",
        "agreement": "Float64",
        "nats_per_decision": "Float64",
    },
    "served": {
        "episode": "String",
        "site": "String",
        "tool": "String",
        "score": "Float64",
        "used": "Boolean",
    },
    "calibration": frames.RELIABILITY,
    "totals": {
        "episodes": "Int64",
        "decisions": "Int64",
        "unanswered": "Int64",
        "log_prob": "Float64",
        "nats_per_decision": "Float64",
        "agreement": "Float64",
        "expected_agreement": "Float64",
        "served": "Int64",
        "ece": "Float64",
        "brier": "Float64",
        "auc": "Float64",
    },
}


def write_tables(result: Audit, folder) -> list:
    """The audit's tables as Parquet, and the reliability diagram; the paths written."""
    folder = Path(folder)
    rows = {
        "decisions": result.decisions,
        "sites": result.sites(),
        "served": result.served,
        "calibration": result.reliability(),
        "totals": [result.totals()],
    }
    written = frames.write_tables({n: (rows[n], schema) for n, schema in TABLES.items()}, folder)
    written.append(
        reliability_diagram(
            rows["calibration"],
            folder / "reliability.png",
            title=f"Served score ({result.served_by or 'the served'} decider)",
            what="made by the agent before its next write",
        )
    )
    return written
