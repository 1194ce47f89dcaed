"""One walk of a recorded episode as the proxy saw it, and one rule for "the agent made this
call itself later" (docs/formats.md, "The walk and the agent's own calls").

`walk(episode)` feeds the episode, event by event, into the SessionView the proxy keeps
(stretto.model.session): what the user said; the calls as the host sent them (a call of an LLM
turn goes out once as many of the turn's results had come back as when it was recorded,
`Episode.sent_after_results`; the rest of a turn before the next turn); each answer as it came
back. It yields what a consumer decides on:

- `Turn`: one of the agent's LLM turns with calls, before any of them goes out. A consumer that
  answers calls itself (replay) may put call keys in `skipped` before asking for the next event:
  those calls are not sent, and their answers are left out.
- `Reply`: an assistant reply.
- `Point`: an answer came back (the agent's call's or a recorded lookup's), with the session
  just after it: the decision point the proxy runs the flow at.

Audit, replay and promote read the flow's decisions off these points; the proxy's FlowServer
keeps the same view while serving, so they see the history the proxy saw.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from stretto.logs.episode import Assistant, Episode, ToolCall, ToolResult, User
from stretto.model.binding import same_arguments, value_text
from stretto.model.session import SessionView, Transcript

EXACT = "exact"  # same tool, same arguments as canonical JSON
BOUND = "bound"  # same tool, every bound argument equal by value text; the agent may pass more


def canonical(arguments: dict) -> str:
    """Arguments as canonical JSON: keys sorted, text as it is."""
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def call_key(tool: str, arguments: dict) -> tuple[str, str]:
    return tool, canonical(arguments)


def _matcher(match: str, tool: str, arguments: dict):
    """A test of (tool, arguments) against the looked-for call, under `match`. The other
    tool's calls are told apart by name alone; the looked-for arguments are serialized once,
    and only if some call of the same tool comes up."""
    if match == EXACT:
        wanted: list[str] = []

        def exact(name: str, args: dict) -> bool:
            if name != tool:
                return False
            if not wanted:
                wanted.append(canonical(arguments))
            return canonical(args) == wanted[0]

        return exact
    if match == BOUND:
        bound = {arg: value_text(value) for arg, value in arguments.items()}
        return lambda name, args: name == tool and same_arguments(bound, args)
    raise ValueError(f"unknown match {match!r} ({EXACT} or {BOUND})")


def agent_made(
    tool: str,
    arguments: dict,
    later: Sequence[ToolCall],
    *,
    match: str,
    writes: Container[str] | None,
    made: Iterable[tuple[str, dict]] = (),
) -> int | None:
    """Where the agent made the call `tool(arguments)` itself: the index in `later` (the
    agent's calls the caller counts as later, in order) of the first that matches, or None.

    - `match`: EXACT (same tool, same arguments as canonical JSON) or BOUND (same tool, every
      argument given here equal by value text to the agent's; the agent may pass more).
    - `writes`: the write tools: the search stops at the agent's first call of one (its next
      write). None: no cut, any later call counts.
    - `made`: calls made before (the agent's or the flow's). If one of them matches, the call
      was made already and the agent's later one does not count: None.
    """
    same = _matcher(match, tool, arguments)
    if any(same(name, args) for name, args in made):
        return None
    for index, call in enumerate(later):
        if same(call.name, call.arguments):
            return index
        if writes is not None and call.name in writes:
            return None
    return None


def write_tools(kinds: dict[str, str]) -> frozenset[str]:
    """The tools a manifest (tool -> read / write / generic) marks as writes."""
    return frozenset(tool for tool, kind in kinds.items() if kind == "write")


# --- the walk ---------------------------------------------------------------------------------


@dataclass
class Turn:
    index: int  # the turn's position in episode.events
    calls: list[ToolCall]  # the agent's own calls in it
    skipped: set[tuple[int, int]] = field(default_factory=set)  # keys of calls not made


@dataclass
class Reply:
    index: int
    text: str


@dataclass
class Point:
    """An answer came back. `view` is live: the session just after this answer, until the
    consumer asks for the next event (fork it to keep or extend it)."""

    index: int  # the result's position in episode.events
    result: ToolResult
    view: SessionView
    walk: Walk

    @property
    def last(self) -> tuple[str, bool]:
        """The call the decision follows, as the Decider takes it: (tool, failed)."""
        return self.result.name, self.result.error

    @property
    def by_proxy(self) -> bool:
        return self.result.by_proxy

    @property
    def following(self) -> object | None:
        """The episode's next event, or None at its end."""
        events = self.walk.episode.events
        return events[self.index + 1] if self.index + 1 < len(events) else None

    @property
    def followed(self) -> bool:
        """Something follows in the episode (the proxy runs only before the session goes on)."""
        return self.index + 1 < len(self.walk.episode.events)

    @property
    def batch_end(self) -> bool:
        """The last answer of a batch, with something after it (audit's decision points)."""
        following = self.following
        return following is not None and not isinstance(following, ToolResult)

    def later_turns(self) -> list[ToolCall]:
        """The agent's calls in later LLM turns than this answer's own call."""
        walk = self.walk
        turn = walk.turn_of.get(self.result.call_key, self.index)
        return walk.agent_calls[bisect_right(walk.turn_starts, turn) :]

    def calls_after(self) -> list[ToolCall]:
        """The agent's calls after this answer's own call, in the order the agent made them
        (its own turn's later calls included)."""
        position = self.walk.position.get(self.result.call_key)
        return [] if position is None else self.walk.agent_calls[position + 1 :]


class Walk:
    """An episode prepared for walking: its calls by turn, the agent's own calls in order."""

    def __init__(
        self,
        episode: Episode,
        source_tools: frozenset[str] | None = None,
        *,
        lookups=True,
        transcript: Transcript | None = None,
    ) -> None:
        """`lookups`: feed the recorded flow's lookups as the proxy saw them (False: leave
        them out, for a consumer that makes its own). `transcript`: fed the same events, with
        the calls' keys as their ids (an arbiter's Conversation)."""
        self.episode = episode
        self.lookups = lookups
        self.view = SessionView(source_tools, transcript=transcript)
        self.results = episode.results_by_key()
        self.turn_of: dict[tuple[int, int], int] = {}  # call key -> index of its turn's event
        self.agent_calls: list[ToolCall] = []  # the agent's own calls, in turn order
        self.turn_starts: list[int] = []  # the turn index of each of agent_calls
        for index, event in enumerate(episode.events):
            if isinstance(event, Assistant):
                for call in event.calls:
                    self.turn_of[call.key] = index
                    if not call.by_proxy:
                        self.agent_calls.append(call)
                        self.turn_starts.append(index)
        self.position = {call.key: i for i, call in enumerate(self.agent_calls)}

    def __iter__(self) -> Iterator[Turn | Reply | Point]:
        view, sent_after, lookups = self.view, self.episode.sent_after_results, self.lookups
        sent: set[tuple[int, int]] = set()
        skipped: set[tuple[int, int]] = set()
        turn: list[ToolCall] = []  # the current turn's calls that go out
        turn_index, back = -1, 0  # the current turn's event; its answers back so far

        def send(call: ToolCall) -> None:
            if call.key not in sent:
                sent.add(call.key)
                view.sent(call.name, call.arguments, call.key)

        for index, event in enumerate(self.episode.events):
            if isinstance(event, User):
                view.user_said(event.text)
            elif isinstance(event, Assistant):
                for call in turn:  # the rest of the turn went out before the next one
                    send(call)
                turn, turn_index = [], -1
                if not event.calls:
                    view.assistant_replied(event.text or "")
                    yield Reply(index, event.text or "")
                    continue
                own = [c for c in event.calls if not c.by_proxy]
                if own:
                    asked = Turn(index, own)
                    yield asked
                    skipped |= asked.skipped
                turn = [
                    c for c in event.calls if c.key not in skipped and (lookups or not c.by_proxy)
                ]
                turn_index, back = index, 0
                for call in turn:  # sent before any of the turn's answers came back
                    if sent_after.get(call.id, 0) < 1:
                        send(call)
            elif isinstance(event, ToolResult):
                if self.turn_of.get(event.call_key) == turn_index:
                    back += 1
                    for call in turn:  # the calls the host had sent by this answer
                        if sent_after.get(call.id, 0) < back:
                            send(call)
                if event.call_key in skipped or (event.by_proxy and not lookups):
                    continue
                view.came_back(event.name, event.error, event.content, event.call_key)
                yield Point(index, event, view, self)
        for call in turn:
            send(call)


def walk(
    episode: Episode,
    source_tools: frozenset[str] | None = None,
    *,
    lookups: bool = True,
    transcript: Transcript | None = None,
) -> Walk:
    """The episode's walk: iterate it for its turns, replies and decision points."""
    return Walk(episode, source_tools, lookups=lookups, transcript=transcript)
