"""Replaying recorded episodes "from the record" (../shared/spec/results.md §2.2–2.4).

No LLM runs. Each episode's turns are walked in order; after each of the agent's calls that
is made, the flow decides exactly as the proxy would (the same Decider and program), and its
lookups are answered from the record: with the result of the agent's own later call with the
same arguments before its next write, else with a stand-in (the nearest recorded result of
that tool), which can never count as used. A later call of the agent is skipped when a fresh
lookup already answered it; a turn is saved when every call in it was skipped.

Where the proxy and the reference's harness differ, this follows the proxy: the calls of
one LLM turn are sent together, so lookups made after the first of them can only answer
later turns.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from stretto.logs.episode import Assistant, Episode, ToolCall, ToolResult, User
from stretto.logs.steps import episode_steps
from stretto.model import defaults
from stretto.model.binding import SessionState, parse_output
from stretto.model.decide import DEFAULT_THRESHOLD, Decider, SplitMix64, fnv1a64
from stretto.model.decide import explore as explore_options
from stretto.model.program import STANDARD_PROGRAM, Execute, FlowDistributions, run

PER_CALL = defaults.PER_CALL  # lookups after one call, as the proxy's --flow-per-call default
PER_EPISODE = defaults.PER_SESSION  # lookups in one episode (the reference harness's budget)

# Calibration bins (results.md §2.4): finer at the low end, where most scores fall.
CALIBRATION_EDGES = (0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0001)


def call_key(tool: str, arguments: dict) -> tuple[str, str]:
    return tool, json.dumps(arguments, sort_keys=True, ensure_ascii=False)


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
    detours: int = 0
    ceiling: int = 0  # turns a read-only speculator could have saved (results.md §2.3)
    options: list[dict] = field(default_factory=list)  # calibration rows, when asked
    sites: set[str] = field(default_factory=set)  # where the flow decided


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


class _EpisodeReplay:
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
    ) -> None:
        self.episode = episode
        self.decider, self.dists, self.kinds = decider, dists, kinds
        self.per_call, self.per_episode = per_call, per_episode
        self.epsilon, self.seed = epsilon, seed
        self.check = EpisodeCheck(episode.id, episode.task_id, episode.trial)
        self.state = SessionState(decider.rules.source_tools())
        self.history: list[str] = []
        self.lookups: list[Lookup] = []
        self.made: set[tuple[str, str]] = set()  # every call made so far, agent's or flow's
        self.runs = 0
        results = episode.results_by_key()
        # the agent's own calls in order, each with its normalized result
        self.agent_calls: list[tuple[ToolCall, ToolResult | None]] = [
            (c, results.get(c.key)) for c in episode.calls() if not c.by_proxy
        ]
        self.position = {c.key: i for i, (c, _) in enumerate(self.agent_calls)}
        self.executed = 0  # agent calls made so far (not skipped)

    def is_write(self, tool: str) -> bool:
        return self.kinds.get(tool) == "write"

    def replay(self) -> EpisodeCheck:
        names = {s.call_id: s.name() for s in episode_steps(self.episode) if s.call_id}
        results = self.episode.results_by_key()
        for event in self.episode.events:
            if isinstance(event, User):
                self.state.add_user(event.text)
            elif isinstance(event, Assistant):
                self._turn(event, names, results)
        self.check.detours = self.check.flow_lookups - self.check.calls_skipped
        return self.check

    def _turn(self, turn: Assistant, names: dict, results: dict) -> None:
        self.check.turns += 1
        calls = [c for c in turn.calls if not c.by_proxy]
        if not calls:
            self.history.append("respond")
            return
        self.check.tool_turns += 1
        # Lookups made before the turn answer its calls; the turn's calls then go out together.
        answered = [self._answered(c, results.get(c.key)) for c in calls]
        made_now = [c for c, a in zip(calls, answered, strict=True) if not a]
        for call in made_now:
            self.state.add_call(call.name, call.arguments)
        self.check.calls += len(calls)
        self.check.calls_skipped += sum(answered)
        if all(answered):
            self.check.turns_saved += 1
        for call in made_now:
            result = results.get(call.key)
            self.executed += 1
            self.made.add(call_key(call.name, call.arguments))
            if self.is_write(call.name):
                for lookup in self.lookups:
                    lookup.stale = True
            if result is None:
                continue  # no answer was recorded (cancelled, or the session ended)
            self.history.append(names.get(call.id, call.name))
            self.state.add_result(call.name, not result.error, result.content)
            self._run_flow(call, result)

    def _answered(self, call: ToolCall, result: ToolResult | None) -> bool:
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

    def _run_flow(self, call: ToolCall, result: ToolResult) -> None:
        if self.check.flow_lookups >= self.per_episode:
            return
        self.runs += 1
        position = self.position[call.key]
        pending: dict[str, tuple[str, dict]] = {}

        def decide(address: str, prev: int, prev_failed: bool) -> int:
            if self.check.flow_lookups >= self.per_episode:
                return 0
            last = self.dists.tools[prev] if prev < len(self.dists.tools) else None
            every_option = self.epsilon is not None
            decision = self.decider.decide(
                list(self.history),
                (last, bool(prev_failed)) if last else None,
                self.state,
                every_option=every_option,
            )
            if decision.site is not None:
                self.check.sites.add(decision.site)
            if every_option and decision.site is not None:
                self._options(decision, position)
                if self.epsilon > 0:
                    rng = SplitMix64(
                        self.seed ^ fnv1a64(f"{self.episode.id}/{self.runs}/{address}")
                    )
                    decision, _ = explore_options(decision, self.epsilon, rng)
            if not decision.looks_up:
                return 0
            pending[address.replace("decide", "outcome")] = (decision.tool, decision.arguments)
            return self.dists.tool_id(decision.tool)

        def look_up(address: str, tool_id: int) -> bool:
            tool, arguments = pending[address]
            return self._look_up(tool, arguments, position)

        run(
            STANDARD_PROGRAM,
            self.dists,
            Execute(decide, look_up),
            call=call.name,
            call_failed=result.error,
            max_lookups=self.per_call,
        )

    def _look_up(self, tool: str, arguments: dict, position: int) -> bool:
        """Answer a lookup from the record; True when it succeeded."""
        key = call_key(tool, arguments)
        answer, guessed = self._recorded_answer(tool, key, position)
        if answer is None:
            self.check.unrecorded += 1
        self.check.flow_lookups += 1
        self.lookups.append(Lookup(key, self.executed, guessed, _normalized_result(answer)))
        self.made.add(key)
        self.state.add_call(tool, arguments)
        failed = answer is None or answer.error
        self.history.append(tool + (" (error)" if failed else ""))
        if answer is not None:
            self.state.add_result(tool, not answer.error, answer.content)
        return not failed

    def _recorded_answer(
        self, tool: str, key: tuple[str, str], position: int
    ) -> tuple[ToolResult | None, bool]:
        """The agent's own later result for this call before its next write (exact), else the
        nearest recorded result of the same tool (a guess)."""
        for call, result in self.agent_calls[position + 1 :]:
            if call_key(call.name, call.arguments) == key and result is not None:
                return result, False
            if self.is_write(call.name):
                break
        nearest, distance = None, None
        for i, (call, result) in enumerate(self.agent_calls):
            if call.name == tool and result is not None:
                d = abs(i - position)
                if distance is None or d < distance:
                    nearest, distance = result, d
        return nearest, True

    # calibration rows (results.md §2.4) --------------------------------------------------------

    def _options(self, decision, position: int) -> None:
        ahead = set()
        for call, _ in self.agent_calls[position + 1 :]:
            if self.is_write(call.name):
                break
            ahead.add(call_key(call.name, call.arguments))
        for option in decision.options:
            if option.arguments is None or option.chance is None:
                continue
            key = call_key(option.tool, option.arguments)
            self.check.options.append(
                {
                    "episode": self.episode.id,
                    "task_id": self.episode.task_id,
                    "site": decision.site,
                    "tool": option.tool,
                    "score": option.prob * option.chance,
                    "used": key in ahead and key not in self.made,
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
) -> EpisodeCheck:
    """Replay one episode; `explore` (ε, 0 included) also records every option's score and
    whether it was used, for calibration. `ceiling=False` leaves the read-only ceiling at 0:
    it does not depend on the flow, so a search need not count it on every replay."""
    kinds = decider.flow["manifest"]["tools"]
    dists = dists or FlowDistributions(decider.flow)
    replay = _EpisodeReplay(episode, decider, dists, kinds, per_call, per_episode, explore, seed)
    check = replay.replay()
    if ceiling:
        check.ceiling = ceiling_turns(episode, kinds)
    return check


def replay(
    flow: dict,
    episodes: list[Episode],
    *,
    decider: str | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    explore: float | None = None,
    per_call: int = PER_CALL,
    per_episode: int = PER_EPISODE,
    progress=None,
) -> Replay:
    """Replay every episode with the flow served by `decider` at `threshold` (the flow's own
    per-site `thresholds` and `promoted` record apply, as when served)."""
    chosen = Decider(flow, decider, threshold)
    dists = FlowDistributions(flow)
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
            )
        )
        if progress is not None:
            progress.advance()
    return Replay(chosen.kind, threshold, explore, checks)


# --- the read-only ceiling (results.md §2.3) ------------------------------------------------


def _norm(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip().lower()


def _leaves(value, out: set[str]) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _leaves(item, out)
    elif isinstance(value, list):
        for item in value:
            _leaves(item, out)
    elif value is not None:
        out.add(_norm(value))


def _result_leaves(content: str, out: set[str]) -> None:
    parsed = parse_output(content)
    if isinstance(parsed, dict | list):
        _leaves(parsed, out)
    elif parsed is not None and not isinstance(parsed, str):
        out.add(_norm(parsed))
    else:
        for line in content.splitlines():
            if line.strip():
                out.add(_norm(line))


def ceiling_turns(episode: Episode, kinds: dict[str, str]) -> int:
    """Turns a perfect read-only speculator could have saved: turns whose calls are all reads,
    after some earlier turn made calls, with every argument copied from an earlier successful
    result of the episode."""
    seen: set[str] = set()
    results = episode.results_by_key()
    called_before = False
    count = 0
    for event in episode.events:
        if not isinstance(event, Assistant):
            continue
        calls = [c for c in event.calls if not c.by_proxy]
        if not calls:
            continue
        reads = all(kinds.get(c.name) == "read" for c in calls)
        if reads and called_before:
            leaves: set[str] = set()
            for call in calls:
                _leaves(call.arguments, leaves)
            if leaves <= seen:
                count += 1
        called_before = True
        for call in calls:
            result = results.get(call.key)
            if result is not None and not result.error:
                _result_leaves(result.content, seen)
    return count


# --- calibration (results.md §2.4) ----------------------------------------------------------


def calibration(rows: list[dict]) -> dict:
    """ECE over the fixed bins, Brier, and AUC (Mann–Whitney with mid-ranks) of option scores
    against use before the next write."""
    n = len(rows)
    if n == 0:
        return {"options": 0, "used": 0, "ece": None, "brier": None, "auc": None, "bins": []}
    bins = []
    for low, high in zip(CALIBRATION_EDGES, CALIBRATION_EDGES[1:], strict=False):
        inside = [r for r in rows if low <= r["score"] < high]
        if inside:
            bins.append(
                {
                    "from": low,
                    "options": len(inside),
                    "mean_score": sum(r["score"] for r in inside) / len(inside),
                    "used": sum(r["used"] for r in inside) / len(inside),
                }
            )
    ece = sum(b["options"] / n * abs(b["mean_score"] - b["used"]) for b in bins)
    brier = sum((r["score"] - r["used"]) ** 2 for r in rows) / n
    return {
        "options": n,
        "used": sum(bool(r["used"]) for r in rows),
        "ece": ece,
        "brier": brier,
        "auc": auc([r["score"] for r in rows], [bool(r["used"]) for r in rows]),
        "bins": bins,
    }


def auc(scores: list[float], labels: list[bool]) -> float | None:
    positives = sum(labels)
    negatives = len(labels) - positives
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
            ranks[order[k]] = (i + j) / 2 + 1  # mid-rank of the tie
        i = j + 1
    rank_sum = sum(r for r, label in zip(ranks, labels, strict=True) if label)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


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
    if result.explore is not None:
        c = result.calibration()
        if c["options"]:
            auc_text = "n/a" if c["auc"] is None else f"{c['auc']:.3f}"
            out.append(
                f"- Calibration of p × binding over {c['options']} options "
                f"({c['used']} used): ECE {c['ece']:.3f}, Brier {c['brier']:.3f}, AUC {auc_text}"
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


def write_tables(result: Replay, folder) -> list:
    """The replay's tables as Parquet (episodes, totals, and with exploration the options and
    calibration bins); the paths written."""
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = result.as_json()
    tables = {"episodes": data["episodes"], "totals": [data["total"]]}
    if result.explore is not None:
        tables["options"] = [o for e in result.episodes for o in e.options]
        tables["calibration"] = data["calibration"]["bins"]
    written = []
    for name, rows in tables.items():
        path = folder / f"{name}.parquet"
        pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({}), path)
        written.append(path)
    return written


class NoEpisodes(ValueError):
    pass


def load_episodes(
    sessions: str | None, results: list[str] | None, split: str | None, part: str = "test"
) -> list[Episode]:
    """The episodes a replay or search walks: a folder of session logs, or τ²-bench results
    files, kept to the split's `part` tasks ("train" or "test") when a split is given."""
    from stretto.logs.episode import read_episodes

    if bool(sessions) == bool(results):
        raise NoEpisodes("give either a folder of session logs or τ²-bench results files")
    if results:
        from stretto.logs.tau2 import episodes_from_results

        episodes = episodes_from_results(results)
    else:
        episodes = read_episodes(sessions)
    if split:
        from stretto.logs.tau2 import read_split

        tasks = read_split(split)[part]
        episodes = [e for e in episodes if e.task_id in tasks]
    if not episodes:
        where = f" on the split's {part} tasks" if split else ""
        raise NoEpisodes(f"no episodes to replay{where}")
    return episodes
