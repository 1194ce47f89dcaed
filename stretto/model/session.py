"""A session as the Decider reads it, fed event by event (the one place that keeps it).

The proxy feeds it what passes through it; stretto.offline.walk feeds it a recorded episode in
the order the proxy saw it; both hand the same view to the Decider. It holds:

- `history`: the step names so far (docs/formats.md §3): `tool` or `tool (error)` when a call's
  answer comes back (the agent's calls and the flow's lookups alike; a call never answered is
  not a step), and `respond (end)` for an assistant reply, which becomes `respond` when the
  user speaks after it — the names the flow learned (a reply no user answered ends with
  `(end)`).
- `state`: the binding's SessionState (what the user said, the calls sent, the results).
- `transcript` (optional): an object fed the same events with the calls' ids — what an arbiter
  shows its System-One model (stretto.oracle.state.Conversation); this layer only passes them
  on, so the proxy and the offline walk show the model the same session.
"""

from __future__ import annotations

from typing import Any, Protocol

from stretto.model.binding import SessionState
from stretto.vocabulary import RESPOND, RESPOND_END


def step_name(tool: str, failed: bool) -> str:
    return tool + (" (error)" if failed else "")


class Transcript(Protocol):
    """What a SessionView passes every event on to (stretto.oracle.state.Conversation)."""

    def user_said(self, text: str) -> None: ...
    def assistant_replied(self, text: str) -> None: ...
    def sent(self, call_id: Any, tool: str, arguments: dict) -> None: ...
    def came_back(self, call_id: Any, failed: bool, content: str) -> None: ...
    def fork(self) -> Transcript: ...


class SessionView:
    def __init__(
        self,
        source_tools: frozenset[str] | None = None,
        *,
        history: list[str] | None = None,
        state: SessionState | None = None,
        transcript: Transcript | None = None,
    ) -> None:
        self.history: list[str] = history if history is not None else []
        self.state = state if state is not None else SessionState(source_tools)
        self.transcript = transcript

    # what happened -------------------------------------------------------------------------

    def user_said(self, text: str) -> None:
        self.state.add_user(text)
        if self.transcript is not None:
            self.transcript.user_said(text)
        if self.history and self.history[-1] == RESPOND_END:
            self.history[-1] = RESPOND  # the user answered the reply

    def assistant_replied(self, text: str) -> None:
        """A reply with text (an empty one is no step)."""
        if text.strip():
            self.history.append(RESPOND_END)
        if self.transcript is not None:
            self.transcript.assistant_replied(text)

    def sent(self, tool: str, arguments: dict, call_id: Any = None) -> None:
        """A call went to the server: the host's, or a lookup of the flow's. `call_id` ties
        its answer to it in the transcript."""
        self.state.add_call(tool, arguments)
        if self.transcript is not None:
            self.transcript.sent(call_id, tool, arguments)

    def came_back(self, tool: str, failed: bool, content: str, call_id: Any = None) -> None:
        """A call's answer: `failed` for a JSON-RPC error or `isError`; `content` its text."""
        self.history.append(step_name(tool, failed))
        self.state.add_result(tool, not failed, content)
        if self.transcript is not None:
            self.transcript.came_back(call_id, failed, content)

    # reading -----------------------------------------------------------------------------

    def fork(self) -> SessionView:
        """A copy to extend without touching this one (parsed outputs are shared: they never
        change)."""
        state = self.state
        return SessionView(
            history=list(self.history),
            state=SessionState(
                state.source_tools,
                state.customer,
                list(state.outputs),
                {tool: set(values) for tool, values in state.used.items()},
                set(state.called),
            ),
            transcript=self.transcript.fork() if self.transcript is not None else None,
        )
