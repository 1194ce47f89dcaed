"""The state slice a System-One model is shown at a decision (../shared/spec/algorithms.md
§13.1): what the customer asked, what the agent last said, and the calls so far — clipped,
so a question's size does not grow with the session.

`Conversation` is fed event by event, like the model's SessionView (the proxy feeds it what
passes through it; an offline walk feeds it a recorded episode), or built from an episode's
events at once.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from stretto.logs.episode import Assistant, Event, ToolResult, User

CUSTOMER_REQUEST_CHARS = 1000
LATER_MESSAGES, LATER_MESSAGE_CHARS = 4, 600
AGENT_MESSAGE_CHARS = 600
EARLIER_LOOKUPS, ARGUMENT_CHARS = 16, 160
LATEST_RESULTS, RESULT_CHARS = 4, 1500
ELLIPSIS = "…"


def clip(text: str, limit: int) -> str:
    """At most `limit` characters; a clipped string ends with `…`."""
    return text if len(text) <= limit else text[: limit - 1] + ELLIPSIS


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


@dataclass
class _Call:
    tool: str
    arguments: dict
    failed: bool | None = None  # None: not answered yet
    result: str = ""
    line: str = ""  # `tool(args)`, clipped: written once, shown at every later decision

    def __post_init__(self) -> None:
        if not self.line:
            self.line = f"{self.tool}({clip(compact(self.arguments), ARGUMENT_CHARS)})"


class Conversation:
    def __init__(self) -> None:
        self.customer: list[str] = []
        self.agent_last: str = ""
        self.calls: list[_Call] = []
        self._open: dict[Hashable, _Call] = {}  # calls awaiting their answer, by id

    # what happened -------------------------------------------------------------------------

    def user_said(self, text: str) -> None:
        if text.strip():
            self.customer.append(text)

    def assistant_replied(self, text: str) -> None:
        if text.strip():
            self.agent_last = text

    def sent(self, call_id: Hashable, tool: str, arguments: dict) -> None:
        call = _Call(tool, dict(arguments))
        self.calls.append(call)
        self._open[call_id] = call

    def came_back(self, call_id: Hashable, failed: bool, content: str) -> None:
        call = self._open.pop(call_id, None)
        if call is not None:
            call.failed, call.result = failed, content

    def fork(self) -> Conversation:
        """A copy to extend without touching this one (a SessionView's fork)."""
        copy = Conversation()
        copy.customer, copy.agent_last = list(self.customer), self.agent_last
        copies = {
            id(call): _Call(call.tool, call.arguments, call.failed, call.result, call.line)
            for call in self.calls
        }
        copy.calls = [copies[id(call)] for call in self.calls]
        copy._open = {key: copies[id(call)] for key, call in self._open.items()}
        return copy

    @classmethod
    def from_events(cls, events: Iterable[Event]) -> Conversation:
        conversation = cls()
        for event in events:
            conversation.add(event)
        return conversation

    def add(self, event: Event) -> None:
        if isinstance(event, User):
            self.user_said(event.text)
        elif isinstance(event, Assistant):
            if event.text:
                self.assistant_replied(event.text)
            for call in event.calls:
                self.sent(call.id, call.name, call.arguments)
        elif isinstance(event, ToolResult):
            self.came_back(event.call_id, event.error, event.content)

    # what the model is shown ---------------------------------------------------------------

    def slice(self) -> dict:
        """`customer_request`, `later_customer_messages`, `agent_last_message`,
        `earlier_lookups` (one line per call: `tool(args) → ok|error`) and `latest_results`
        (the last calls with their results). Calls still awaiting their answer are left out.
        Goal-free flows have no `flow_goal`."""
        answered = [c for c in self.calls if c.failed is not None]
        latest = answered[-LATEST_RESULTS:] if LATEST_RESULTS else []
        earlier = answered[: len(answered) - len(latest)][-EARLIER_LOOKUPS:]
        return {
            "customer_request": clip(self.customer[0], CUSTOMER_REQUEST_CHARS)
            if self.customer
            else "",
            "later_customer_messages": [
                clip(text, LATER_MESSAGE_CHARS) for text in self.customer[1:][-LATER_MESSAGES:]
            ],
            "agent_last_message": clip(self.agent_last, AGENT_MESSAGE_CHARS),
            "earlier_lookups": [f"{c.line} → " + ("error" if c.failed else "ok") for c in earlier],
            "latest_results": [_latest(c) for c in latest],
        }


def _latest(call: _Call) -> dict:
    out: dict[str, Any] = {
        "tool": call.tool,
        "arguments": call.arguments,
        "result": clip(call.result, RESULT_CHARS),
    }
    if call.failed:
        out["error"] = True
    return out
