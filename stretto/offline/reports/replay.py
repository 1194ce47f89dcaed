"""Replaying recorded episodes "from the record" (../shared/spec/results.md §2.2–2.4).

No LLM runs. Each episode is walked as the proxy saw it (stretto.offline.walk, the recorded
flow's own lookups left out); after each of the agent's calls that is made, the flow decides
exactly as the proxy would (the same Decider, program and session view), and its lookups are
answered from the record: with the result of the agent's own later call with the
same arguments before its next write, else with a stand-in (the nearest recorded result of
that tool), which can never count as used. A later call of the agent is skipped when a fresh
lookup already answered it; a turn is saved when every call in it was skipped.

With the arbiter decider each episode's walk has its judge (stretto.offline.episode_judges); a
decision the oracle cannot answer hands back and is counted (`unanswered`).

Where the proxy and the reference's harness differ, this follows the proxy: the calls of
one LLM turn are sent together, so lookups made after the first of them can only answer
later turns.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from stretto.logs.episode import Episode, ToolCall, ToolResult
from stretto.logs.merged import read_episodes
from stretto.logs.tau2 import episodes_from_results
from stretto.logs.tau2_inputs import read_split
from stretto.model import defaults
from stretto.model.binding import parse_output
from stretto.model.decide import Decider, SplitMix64
from stretto.model.decide import explore as explore_options
from stretto.model.program import STANDARD_PROGRAM, Execute, FlowDistributions, run
from stretto.offline.episode_judges import Judges, OracleOptions, judges_for
from stretto.offline.reports import frames
from stretto.offline.reports.ceiling import ceiling_turns
from stretto.offline.reports.plots import reliability_diagram
from stretto.offline.reports.reliability import edges_text, measures
from stretto.offline.walk import EXACT, Point, Reply, Turn, agent_made, call_key, walk, write_tools
from stretto.vocabulary import fnv1a64

PER_CALL = defaults.PER_CALL  # lookups after one call, as the proxy's --flow-per-call default
PER_EPISODE = defaults.PER_SESSION  # lookups in one episode (the reference harness's budget)


def _normalized_result(result: ToolResult | None) -> str | None:
    if result is None:
        return None
    parsed = parse_output(result.content)
    text = json.dumps(parsed, sort_keys=True) if parsed is not None else result.content.strip()
    return ("error:" if result.error else "ok:") + text


@dataclass
class Lookup:
    key: tuple[str, str]
    at: int  # how many of the agent's calls had been made when it was looked up
    guessed: bool  # answered by a stand-in, not by the agent's own later call
    result: str | None
    used: bool = False
    stale: bool = False


@dataclass
class EpisodeCheck:
    """What the flow did on one episode (results.md §2.2 names)."""

    episode: str
    task_id: str
    trial: int
    turns: int = 0
    tool_turns: int = 0
    turns_saved: int = 0
    calls: int = 0
    calls_skipped: int = 0
    used_next: int = 0
    used_later: int = 0
    flow_lookups: int = 0
    unrecorded: int = 0  # lookups of a tool the episode never recorded a result of
    unanswered: int = 0  # arbiter decisions the oracle could not answer (handed back)
    detours: int = 0
    ceiling: int = 0  # turns a read-only speculator could have saved (results.md §2.3)
    options: list[dict] = field(default_factory=list)  # calibration rows, when asked
    sites: set[str] = field(default_factory=set)  # where the flow decided
    # per site, the values its decisions compared with the site's threshold θ (each option's
    # probability, and probability × chance where it bound): another θ on the same side of
    # every one of them decides the same way (stretto.offline.reports.search reuses the replay)
    cuts: dict[str, list[float]] = field(default_factory=dict)


TOTAL_FIELDS = (
    "turns",
    "tool_turns",
    "turns_saved",
    "calls",
    "calls_skipped",
    "used_next",
    "used_later",
    "flow_lookups",
    "unrecorded",
    "unanswered",
    "detours",
    "ceiling",
)


@dataclass
class Replay:
    decider: str
    threshold: float
    explore: float | None
    episodes: list[EpisodeCheck]

    def total(self) -> dict:
        return totals(self.episodes)

    def calibration(self) -> dict:
        rows = [o for e in self.episodes for o in e.options]
        return calibration(rows)

    def as_json(self) -> dict:
        episodes = []
        for e in self.episodes:
            row = asdict(e)
            row.pop("options")
            row.pop("cuts")
            row["sites"] = sorted(row["sites"])
            episodes.append(row)
        out = {
            "flow": {
                "decider": self.decider,
                "threshold": self.threshold,
                "explore": self.explore,
            },
            "total": self.total(),
            "episodes": episodes,
        }
        if self.explore is not None:
            out["calibration"] = self.calibration()
        return out


def totals(episodes: list[EpisodeCheck]) -> dict:
    total = {name: sum(getattr(e, name) for e in episodes) for name in TOTAL_FIELDS}
    total["episodes"] = len(episodes)
    total["episodes_with_detour"] = sum(e.detours > 0 for e in episodes)
    total["turns_saved_share"] = total["turns_saved"] / total["turns"] if total["turns"] else 0.0
    total["ceiling_share"] = total["turns_saved"] / total["ceiling"] if total["ceiling"] else 0.0
    return total


# --- the replay ---------------------------------------------------------------------------


class EpisodeReplay:
    """One episode replayed with a flow: its walk, the lookups the flow makes at each point
    answered from the record, and the agent's later calls they spare (`replay()` gives its
    EpisodeCheck). Also driven by bench/missed.py and the parity test with the proxy."""

    def __init__(
        self,
        episode: Episode,
        decider: Decider,
        dists: FlowDistributions,
        kinds: dict[str, str],
        per_call: int,
        per_episode: int,
        epsilon: float | None,
        seed: int,
        judges: Judges | None = None,
    ) -> None:
        self.episode = episode
        self.decider, self.dists = decider, dists
        self.writes = write_tools(kinds)
        self.per_call, self.per_episode = per_call, per_episode
        self.epsilon, self.seed = epsilon, seed
        self.check = EpisodeCheck(episode.id, episode.task_id, episode.trial)
        # the recorded flow's lookups are left out: this replay makes its own
        self.judge = judges.judge(episode) if judges is not None else None
        self.walk = walk(
            episode,
            decider.rules.source_tools(),
            lookups=False,
            transcript=Judges.transcript() if judges is not None else None,
        )
        self.view = self.walk.view
        self.lookups: list[Lookup] = []
        self.made: list[tuple[str, dict]] = []  # every call made so far, agent's or flow's
        self.runs = 0
        self.executed = 0  # agent calls made so far (not skipped)

    def replay(self) -> EpisodeCheck:
        for event in self.walk:
            if isinstance(event, Reply):
                self.check.turns += 1
            elif isinstance(event, Turn):
                self._turn(event)
            elif isinstance(event, Point):
                self._made(event.result.call_key)
                self._run_flow(event)
        self.check.detours = self.check.flow_lookups - self.check.calls_skipped
        return self.check

    def _turn(self, turn: Turn) -> None:
        """The agent's LLM turn, before its calls go out: lookups made before it answer its
        calls (those are not made); the rest go out together."""
        self.check.turns += 1
        self.check.tool_turns += 1
        results = self.walk.results
        answered = [self._answered(c, results.get(c.key)) for c in turn.calls]
        turn.skipped = {c.key for c, a in zip(turn.calls, answered, strict=True) if a}
        self.check.calls += len(turn.calls)
        self.check.calls_skipped += sum(answered)
        if all(answered):
            self.check.turns_saved += 1
        for call in turn.calls:
            if call.key not in turn.skipped and results.get(call.key) is None:
                self._made(call.key)  # no answer was recorded (cancelled, or the session ended)

    def _made(self, key: tuple[int, int]) -> None:
        """One of the agent's calls was made (counted when its answer comes back)."""
        call = self.walk.agent_calls[self.walk.position[key]]
        self.executed += 1
        self.made.append((call.name, call.arguments))
        if call.name in self.writes:
            for lookup in self.lookups:
                lookup.stale = True

    def _answered(self, call: ToolCall, result: ToolResult | None) -> bool:
        if not self.lookups:
            return False
        key = call_key(call.name, call.arguments)
        for lookup in self.lookups:
            if lookup.key != key or lookup.used or lookup.guessed:
                continue
            if lookup.stale and lookup.result != _normalized_result(result):
                continue
            lookup.used = True
            if lookup.at == self.executed:
                self.check.used_next += 1
            else:
                self.check.used_later += 1
            return True
        return False

    # the flow's run after one call, as the proxy runs it --------------------------------------

    def _run_flow(self, point: Point) -> None:
        if self.check.flow_lookups >= self.per_episode:
            return
        self.runs += 1
        position = self.walk.position[point.result.call_key]
        later = self.walk.agent_calls[position + 1 :]
        pending: dict[str, tuple[str, dict]] = {}

        def decide(address: str, prev: int, prev_failed: bool) -> int:
            if self.check.flow_lookups >= self.per_episode:
                return 0
            last = self.dists.tools[prev] if prev < len(self.dists.tools) else None
            every_option = self.epsilon is not None
            decision = self.decider.decide(
                list(self.view.history),
                (last, bool(prev_failed)) if last else None,
                self.view.state,
                every_option=every_option,
                judge=self.judge.on(self.view) if self.judge is not None else None,
            )
            self.check.unanswered += decision.unanswered
            if decision.site is not None:
                self.check.sites.add(decision.site)
                cuts = self.check.cuts.setdefault(decision.site, [])
                for option in decision.options:
                    cuts.append(option.prob)
                    if option.chance is not None:
                        cuts.append(option.prob * option.chance)
            if self.epsilon is not None and decision.site is not None:
                self._options(decision, later)
                if self.epsilon > 0:
                    rng = SplitMix64(
                        self.seed ^ fnv1a64(f"{self.episode.id}/{self.runs}/{address}")
                    )
                    decision, _ = explore_options(decision, self.epsilon, rng)
            if not decision.looks_up or decision.tool is None:
                return 0
            pending[address.replace("decide", "outcome")] = (
                decision.tool,
                decision.arguments or {},
            )
            return self.dists.tool_id(decision.tool)

        def look_up(address: str, tool_id: int) -> bool:
            tool, arguments = pending[address]
            return self._look_up(tool, arguments, position)

        run(
            STANDARD_PROGRAM,
            self.dists,
            Execute(decide, look_up),
            call=point.result.name,
            call_failed=point.result.error,
            max_lookups=self.per_call,
        )

    def _look_up(self, tool: str, arguments: dict, position: int) -> bool:
        """Answer a lookup from the record; True when it succeeded."""
        answer, guessed = self._recorded_answer(tool, arguments, position)
        if answer is None:
            self.check.unrecorded += 1
        self.check.flow_lookups += 1
        key = call_key(tool, arguments)
        self.lookups.append(Lookup(key, self.executed, guessed, _normalized_result(answer)))
        self.made.append((tool, arguments))
        failed = answer is None or answer.error
        lookup_id = f"stretto-{self.check.flow_lookups}"  # as the proxy numbers its lookups
        self.view.sent(tool, arguments, lookup_id)
        self.view.came_back(tool, failed, answer.content if answer is not None else "", lookup_id)
        return not failed

    def _recorded_answer(
        self, tool: str, arguments: dict, position: int
    ) -> tuple[ToolResult | None, bool]:
        """The agent's own later result for this call (after the one at `position`, which the
        run follows) before its next write (exact), else the nearest recorded result of the
        same tool (a guess)."""
        agent_calls, results, start = self.walk.agent_calls, self.walk.results, 0
        later = agent_calls[position + 1 :]
        while True:
            found = agent_made(tool, arguments, later[start:], match=EXACT, writes=self.writes)
            if found is None:
                break
            result = results.get(later[start + found].key)
            if result is not None:
                return result, False
            start += found + 1  # that call got no answer: a later one may have
        nearest, distance = None, None
        for i, call in enumerate(agent_calls):
            result = results.get(call.key)
            if call.name == tool and result is not None:
                d = abs(i - position)
                if distance is None or d < distance:
                    nearest, distance = result, d
        return nearest, True

    # calibration rows (results.md §2.4) --------------------------------------------------------

    def _options(self, decision, later: list[ToolCall]) -> None:
        for option in decision.options:
            if option.arguments is None or option.chance is None:
                continue
            used = agent_made(
                option.tool,
                option.arguments,
                later,
                match=EXACT,
                writes=self.writes,
                made=self.made,
            )
            self.check.options.append(
                {
                    "episode": self.episode.id,
                    "task_id": self.episode.task_id,
                    "site": decision.site,
                    "tool": option.tool,
                    "score": option.score,
                    "mention": option.mention,
                    "used": used is not None,
                }
            )


def replay_episode(
    episode: Episode,
    decider: Decider,
    *,
    dists: FlowDistributions | None = None,
    per_call: int = PER_CALL,
    per_episode: int = PER_EPISODE,
    explore: float | None = None,
    seed: int = 0,
    ceiling: bool = True,
    judges: Judges | None = None,
) -> EpisodeCheck:
    """Replay one episode; `explore` (ε, 0 included) also records every option's score and
    whether it was used, for calibration. `ceiling=False` leaves the read-only ceiling at 0:
    it does not depend on the flow, so a search need not count it on every replay. `judges`:
    the arbiter decider's (stretto.offline.episode_judges)."""
    kinds = decider.flow["manifest"]["tools"]
    dists = dists or FlowDistributions(decider.flow)
    replay = EpisodeReplay(
        episode, decider, dists, kinds, per_call, per_episode, explore, seed, judges
    )
    check = replay.replay()
    if ceiling:
        check.ceiling = ceiling_turns(episode, kinds)
    return check


def replay(
    flow: dict,
    episodes: list[Episode],
    *,
    decider: str | None = None,
    threshold: float | None = None,
    explore: float | None = None,
    per_call: int = PER_CALL,
    per_episode: int = PER_EPISODE,
    progress=None,
    oracle: OracleOptions | None = None,
) -> Replay:
    """Replay every episode with the flow served by `decider` at `threshold` (the flow's own
    per-site `thresholds` and `promoted` record apply, as when served). `oracle`: who
    answers the arbiter decider's questions (default `replay`, the cache)."""
    chosen = Decider(flow, decider, threshold)
    dists = FlowDistributions(flow)
    judges = judges_for(flow, [chosen.kind], oracle)
    checks = []
    for episode in episodes:
        checks.append(
            replay_episode(
                episode,
                chosen,
                dists=dists,
                per_call=per_call,
                per_episode=per_episode,
                explore=explore,
                judges=judges,
            )
        )
        if progress is not None:
            progress.advance()
    return Replay(chosen.kind, chosen.threshold, explore, checks)


def calibration(rows: list[dict]) -> dict:
    """ECE over the spec's bins (stretto.offline.reports.reliability.EDGES), Brier, and AUC of the
    options' scores against their use before the next write:
    `{options, used, ece, brier, auc, bins}`."""
    measured = measures([r["score"] for r in rows], [bool(r["used"]) for r in rows])
    measured["options"] = measured.pop("count")
    return measured


# --- reports --------------------------------------------------------------------------------


def markdown(result: Replay, per_episode: bool = True) -> str:
    t = result.total()
    explore = "" if result.explore is None else f", exploring at ε = {result.explore:g}"
    out = [
        f"# Replay ({result.decider} at {result.threshold:g}{explore})",
        "",
        f"{t['episodes']} episodes, {t['turns']} LLM turns ({t['tool_turns']} with tool calls).",
        "",
        f"- Turns saved: {t['turns_saved']} ({t['turns_saved_share']:.1%} of turns)",
        f"- Read-only ceiling: {t['ceiling']} turns; share taken {t['ceiling_share']:.1%}",
        f"- Calls skipped: {t['calls_skipped']} of {t['calls']}",
        f"- Lookups: {t['flow_lookups']}; used next {t['used_next']}, used later "
        f"{t['used_later']}; detours {t['detours']} "
        f"({t['detours'] / t['episodes'] if t['episodes'] else 0:.2f} per episode, "
        f"{t['episodes_with_detour']} episodes with one)",
    ]
    if t["unrecorded"]:
        out.append(f"- Lookups of a tool the episode never recorded: {t['unrecorded']}")
    if t["unanswered"]:
        out.append(
            f"- Decisions handed back unanswered (no answer from the oracle): {t['unanswered']}"
        )
    if result.explore is not None:
        c = result.calibration()
        if c["options"]:
            auc_text = "n/a" if c["auc"] is None else f"{c['auc']:.3f}"
            out.append(
                f"- Calibration of p × binding over {c['options']} options "
                f"({c['used']} used): ECE {c['ece']:.3f}, Brier {c['brier']:.3f}, AUC {auc_text} "
                f"(ECE over the bins from {edges_text()})"
            )
    if per_episode:
        out += [
            "",
            "| episode | task | turns | saved | ceiling | calls skipped | lookups | "
            "used next | used later | detours |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        out += [
            f"| {e.episode} | {e.task_id} | {e.turns} | {e.turns_saved} | {e.ceiling} | "
            f"{e.calls_skipped}/{e.calls} | {e.flow_lookups} | {e.used_next} | {e.used_later} | "
            f"{e.detours} |"
            for e in result.episodes
        ]
    return "\n".join(out) + "\n"


_COUNTS = dict.fromkeys(TOTAL_FIELDS, "Int64")
TABLES: dict[str, frames.Schema] = {
    "episodes": {
        "episode": "String",
        "task_id": "String",
        "trial": "Int64",
        **_COUNTS,
        "sites": ["String"],
    },
    "totals": {
        **_COUNTS,
        "episodes": "Int64",
        "episodes_with_detour": "Int64",
        "turns_saved_share": "Float64",
        "ceiling_share": "Float64",
    },
    "options": {
        "episode": "String",
        "task_id": "String",
        "site": "String",
        "tool": "String",
        "score": "Float64",
        "mention": "String",
        "used": "Boolean",
    },
    "calibration": frames.RELIABILITY,
}


def write_tables(result: Replay, folder) -> list:
    """The replay's tables as Parquet (episodes, totals, and with exploration the options,
    the calibration bins and the reliability diagram); the paths written."""
    folder = Path(folder)
    data = result.as_json()
    rows = {"episodes": data["episodes"], "totals": [data["total"]]}
    if result.explore is not None:
        rows["options"] = [o for e in result.episodes for o in e.options]
        rows["calibration"] = data["calibration"]["bins"]
    written = frames.write_tables({name: (rows[name], TABLES[name]) for name in rows}, folder)
    if result.explore is not None:
        written.append(
            reliability_diagram(
                rows["calibration"],
                folder / "reliability.png",
                title=f"p × binding ({result.decider} at {result.threshold:g})",
                what="made by the agent before its next write",
            )
        )
    return written


class NoEpisodes(ValueError):
    pass


def load_episodes(
    sessions: str | None, results: list[str] | None, split: str | None, part: str = "test"
) -> list[Episode]:
    """The episodes a replay or search walks: a folder of session logs, or τ²-bench results
    files, kept to the split's `part` tasks ("train" or "test") when a split is given."""
    if bool(sessions) == bool(results):
        raise NoEpisodes("give either a folder of session logs or τ²-bench results files")
    if sessions:
        episodes = read_episodes(sessions)
    else:
        episodes = episodes_from_results(results or [])
    if split:
        tasks = read_split(split)[part]
        episodes = [e for e in episodes if e.task_id in tasks]
    if not episodes:
        where = f" on the split's {part} tasks" if split else ""
        raise NoEpisodes(f"no episodes to replay{where}")
    return episodes
