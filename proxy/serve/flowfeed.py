"""What the flow is shown, in the order it happened, whenever the flow can take it.

The relay shows the flow the host's messages, the conversation and the server's lines
(proxy.serve.flowserver.FlowServer's `from_host`, `said`, `from_server`). Two things can make
them wait, in a backlog replayed in order later:

- the flow is still loading (proxy.serve.flowload);
- a run is deciding on an answer the host already has. With `--flow-shadow` the relay
  forwards the server's bytes as they come, so the agent may answer and call again before
  the run is over; the flow must see that next call only after the run, as it would had the
  answer waited for the run (one run at a time, each on the session as it was).

Meanwhile, an answer to one of the agent's calls that the host does not have yet (the flow
may extend it) is held, and sent on if the flow lets it go. A run hands back the line it ran
on when it is over (`to_host`); a line the host already has is dropped there, and the
backlog moves on.
"""

from __future__ import annotations

import _thread

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class FlowFeed:
    def __init__(self, to_host: Callable[[bytes], object]) -> None:
        self._to_host = to_host
        self.flow: Any = None  # the FlowServer, once loaded
        self._lock = _thread.RLock()
        # (kind, value, line, forwarded): waiting for the flow, or for a run to end
        self._backlog: list[tuple[str, object, bytes | None, bool]] | None = []
        self._echoes: dict[int, bytes] = {}  # lines the host has, that a run holds
        self._echo_lock = _thread.allocate_lock()

    # what passes -------------------------------------------------------------------------

    def host(self, value: object) -> None:
        self._show("host", value)

    def said(self, value: object) -> None:
        self._show("said", value)

    def server(self, value: object, line: bytes, forwarded: bool, answers_call: bool) -> bool:
        """Whether the flow takes the line (to send on itself, perhaps extended). A line
        already `forwarded` is only shown; one that `answers_call` waits if it must."""
        with self._lock:
            if self._backlog is not None:
                hold = not forwarded and answers_call
                self._backlog.append(("server", value, line, forwarded or not hold))
                return hold
            return self._offer(value, line, forwarded)

    def _show(self, kind: str, value: object) -> None:
        with self._lock:
            if self._backlog is not None:
                self._backlog.append((kind, value, None, True))
            elif kind == "host":
                self.flow.from_host(value)
            else:
                self.flow.said(value)

    def _offer(self, value: object, line: bytes, forwarded: bool) -> bool:
        """Show the flow a server line now (holding the lock)."""
        if forwarded:  # the run hands the line back when it is over: drop it then
            with self._echo_lock:
                self._echoes[id(line)] = line
        taken = self.flow.from_server(value, line)
        if forwarded:
            if taken:
                self._backlog = []  # what comes next waits for this run
            else:
                with self._echo_lock:
                    self._echoes.pop(id(line), None)
        return taken

    # the flow's side -----------------------------------------------------------------------

    def to_host(self, line: bytes) -> None:
        """What the flow sends the host: all of it, but a line the host already has."""
        with self._echo_lock:
            echoed = self._echoes.get(id(line)) is line
            if echoed:
                del self._echoes[id(line)]
        if not echoed:
            self._to_host(line)
            return
        with self._lock:  # that run is over: what waited for it goes on
            backlog, self._backlog = self._backlog or [], None
            self._replay(backlog)

    def attach(self, flow) -> None:
        """The flow is loaded: show it the session so far, then everything as it passes."""
        with self._lock:
            self.flow = flow
            backlog, self._backlog = self._backlog or [], None
            self._replay(backlog)

    def _replay(self, entries: list) -> None:
        for i, (kind, value, line, forwarded) in enumerate(entries):
            if self._backlog is not None:  # a run started: the rest waits for it
                self._backlog.extend(entries[i:])
                return
            if kind == "host":
                self.flow.from_host(value)
            elif kind == "said":
                self.flow.said(value)
            elif line is not None and not self._offer(value, line, forwarded) and not forwarded:
                self._to_host(line)  # held for the flow, which lets it go

    def drop(self) -> None:
        """The flow could not be loaded: let go of what was held for it."""
        with self._lock:
            backlog, self._backlog = self._backlog or [], None
        for _, _, line, forwarded in backlog:
            if line is not None and not forwarded:
                self._to_host(line)

    def holds_lines(self) -> bool:
        """Whether answers the host does not have wait for the flow."""
        with self._lock:
            return any(not forwarded for _, _, _, forwarded in self._backlog or [])

    def busy(self) -> bool:
        """Whether the flow is still to see something, or a run still decides."""
        with self._lock, self._echo_lock:
            return bool(self._backlog or self._echoes)
