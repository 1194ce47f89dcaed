"""A session as the Decider reads it, fed event by event (the one place that keeps it).

The proxy feeds it what passes through it; stretto.offline.walk feeds it a recorded episode in
the order the proxy saw it; both hand the same view to the Decider. It holds:

- `history`: the step names so far (docs/formats.md §3): `tool` or `tool (error)` when a call's
  answer comes back (the agent's calls and the flow's lookups alike; a call never answered is
  not a step), and `respond (end)` for an assistant reply, which becomes `respond` when the
  user speaks after it — the names the flow learned (a reply no user answered ends with
  `(end)`).
- `state`: the binding's SessionState (what the user said, the calls sent, the results).
"""

from __future__ import annotations

from stretto.model.binding import SessionState

RESPOND = "respond"
RESPOND_END = "respond (end)"


def step_name(tool: str, failed: bool) -> str:
    return tool + (" (error)" if failed else "")


class SessionView:
    def __init__(
        self,
        source_tools: frozenset[str] | None = None,
        *,
        history: list[str] | None = None,
        state: SessionState | None = None,
    ) -> None:
        self.history: list[str] = history if history is not None else []
        self.state = state if state is not None else SessionState(source_tools)

    # what happened -------------------------------------------------------------------------

    def user_said(self, text: str) -> None:
        self.state.add_user(text)
        if self.history and self.history[-1] == RESPOND_END:
            self.history[-1] = RESPOND  # the user answered the reply

    def assistant_replied(self, text: str) -> None:
        """A reply with text (an empty one is no step)."""
        if text.strip():
            self.history.append(RESPOND_END)

    def sent(self, tool: str, arguments: dict) -> None:
        """A call went to the server: the host's, or a lookup of the flow's."""
        self.state.add_call(tool, arguments)

    def came_back(self, tool: str, failed: bool, content: str) -> None:
        """A call's answer: `failed` for a JSON-RPC error or `isError`; `content` its text."""
        self.history.append(step_name(tool, failed))
        self.state.add_result(tool, not failed, content)

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
        )
