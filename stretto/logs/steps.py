"""An episode as abstract steps (../shared/spec/algorithms.md §1.1): one per tool call and one
per assistant reply; arguments are ignored. The warehouse derives the same steps in SQL
(warehouse/sql/steps.sql); tests hold the two to each other."""

from __future__ import annotations

from dataclasses import dataclass

from stretto.logs.episode import Assistant, Episode, User
from stretto.vocabulary import RESPOND, RESPOND_END

OK, FAILED, REPLY, END = "ok", "failed", "reply", "end"


@dataclass
class Step:
    action: str  # a tool's name, or "respond" for a reply
    outcome: str  # ok | failed (tool calls); reply | end (replies: answered by the user or not)
    call_id: str | None = None
    by_proxy: bool = False

    @property
    def is_reply(self) -> bool:
        return self.action == RESPOND and self.call_id is None

    def name(self) -> str:
        """How a flow writes it: `tool`, `tool (error)`, `respond` (a reply the user answered)
        or `respond (end)` (a reply nobody answered: the session ended, or the agent went on)."""
        if self.call_id is None:
            return RESPOND if self.outcome == REPLY else RESPOND_END
        return self.action + (" (error)" if self.outcome == FAILED else "")


def episode_steps(episode: Episode) -> list[Step]:
    results = episode.results_by_key()
    steps: list[Step] = []
    awaiting: Step | None = None
    for event in episode.events:
        if isinstance(event, Assistant) and not event.calls:
            awaiting = Step(RESPOND, END)
            steps.append(awaiting)
        elif isinstance(event, Assistant):
            for call in event.calls:
                result = results.get(call.key)
                ok = result is not None and not result.error
                steps.append(Step(call.name, OK if ok else FAILED, call.id, call.by_proxy))
            awaiting = None
        elif isinstance(event, User) and awaiting is not None:
            awaiting.outcome = REPLY
            awaiting = None
    return steps
