"""What the proxy keeps of each line that passes: the log, the requests still waiting for an
answer, the conversation, and what the flow is shown.

The bytes themselves are moved by proxy.pump (or, with `--upstream`, by the HTTP client):
every line is forwarded with the bytes it arrived with, and parsed only to log it and to
remember which of the host's requests still wait for an answer, so that if the server goes
away each of them gets an error instead of hanging the host.

The flow is loaded beside the session's start (proxy.flowload). Until it is there, what it
would have been shown waits in a backlog, replayed to it in order; an answer to one of the
agent's calls, which the flow may extend, is held back meanwhile (with `--flow-shadow`
nothing is held: the agent gets the server's bytes as they come).
"""

from __future__ import annotations

import _thread
import sys

from proxy.recorder import parse_json_line
from proxy.wire import error_line, id_key, is_request, is_response, messages, write_all

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from proxy.context import ContextFeed
    from proxy.recorder import SessionLog


class Relay:
    """`upstream` is what `from_host` sends to (`send(line) -> bool`, False once the server
    is gone); `to_host` writes a whole line to the host (by default to `host_out_fd`)."""

    def __init__(
        self,
        upstream,
        log: SessionLog | None,
        context: ContextFeed | None,
        host_out_fd: int = 1,
        to_host: Callable[[bytes], object] | None = None,
    ) -> None:
        self.upstream = upstream
        self.log = log
        self.context = context
        self._host_fd = host_out_fd
        self._host_lock = _thread.allocate_lock()
        self._write_to_host = to_host
        self.host_gone = False
        self._pending: dict[str, object] = {}
        self._pending_lock = _thread.allocate_lock()
        self.flow = None  # a proxy.serve.FlowServer once loaded
        self._flow_lock = _thread.RLock()
        self._backlog: list[tuple[str, object, bytes | None, bool]] | None = None
        self._backlog_calls: set[str] = set()  # the agent's calls seen while the flow loads
        self._echoes: dict[int, bytes] = {}  # lines forwarded before the flow saw them
        self._echo_lock = _thread.allocate_lock()

    # host -> server ------------------------------------------------------------------------

    def from_host(self, line: bytes, t_ns: int | None = None) -> None:
        """Account for one of the host's lines and send it to the server. (Accounted first:
        the HTTP upstream may answer a request with an error before `send` returns.)"""
        if self.host_line(line, t_ns) and not self.upstream.send(line):
            self.fail_pending("the MCP server is not running")

    def host_line(self, line: bytes, t_ns: int | None = None, delivered: bool = True) -> bool:
        """Account for a line of the host's, read at `t_ns` and sent on (unless not
        `delivered`: the server is gone). Whether it was JSON."""
        parsed = parse_json_line(line)
        if parsed is not None:
            value = parsed[0]
            if _calls_a_tool(value):
                self.log_context()
            self._track_host_message(value)
            if self.flow is not None or self._backlog is not None:
                self._show_flow("host", value)
        if self.log is not None:
            self.log.record("client", line, parsed, t_ns)
        if not delivered and parsed is not None:
            # The server is gone: answer now rather than leave the host waiting.
            self.fail_pending("the MCP server is not running")
        return parsed is not None

    def log_context(self) -> None:
        """Log the conversation lines the host appended since the last look."""
        if self.context is None:
            return
        for entry in self.context.poll():
            parsed = parse_json_line(entry)
            if parsed is None:
                print(
                    f"stretto-proxy: {self.context.path}: a context line is not JSON; "
                    "it is logged as raw text",
                    file=sys.stderr,
                )
            if self.log is not None:
                self.log.record("context", entry, parsed)
            if parsed is not None and (self.flow is not None or self._backlog is not None):
                self._show_flow("said", parsed[0])

    def _track_host_message(self, value: object) -> None:
        with self._pending_lock:
            for message in messages(value):
                if is_request(message):
                    key = id_key(message["id"])
                    self._pending[key] = message["id"]
                    if self._backlog is not None and message.get("method") == "tools/call":
                        self._backlog_calls.add(key)
                elif message.get("method") == "notifications/cancelled":
                    params = message.get("params")
                    if isinstance(params, dict) and "requestId" in params:
                        # A cancelled request gets no answer from the server, nor from us.
                        self._pending.pop(id_key(params["requestId"]), None)

    # server -> host ------------------------------------------------------------------------

    def from_server(self, line: bytes) -> None:
        """Account for one of the server's lines and send it to the host (unless the flow
        takes it)."""
        if self.server_line(line):
            self.to_host(line)

    def server_line(self, line: bytes, t_ns: int | None = None, forwarded: bool = False) -> bool:
        """Account for a line of the server's, read at `t_ns`. Already `forwarded` to the host,
        or else: whether to forward it as it is (False when the flow took it)."""
        parsed = parse_json_line(line)
        if parsed is not None:
            with self._pending_lock:
                for message in messages(parsed[0]):
                    if is_response(message) and "id" in message:
                        self._pending.pop(id_key(message["id"]), None)
        if self.log is not None:
            self.log.record("server", line, parsed, t_ns)
        if parsed is None or (self.flow is None and self._backlog is None):
            return True
        return not self._flow_takes(parsed[0], line, forwarded)

    def to_host(self, line: bytes) -> None:
        if self.host_gone:
            return
        if self._write_to_host is not None:
            if self._write_to_host(line) is False:
                self.host_gone = True
            return
        with self._host_lock:
            try:
                write_all(self._host_fd, line)
            except OSError:
                self.host_gone = True

    # the flow ------------------------------------------------------------------------------

    def expect_flow(self) -> None:
        """A flow is loading: keep what it must be shown until `attach_flow`."""
        self._backlog = []

    def attach_flow(self, flow) -> None:
        """The flow is loaded: show it the session so far, then everything as it passes.
        (On the thread that accounts for lines.)"""
        with self._flow_lock:
            backlog, self._backlog = self._backlog or [], None
            self._backlog_calls.clear()
            self.flow = flow
            for kind, value, line, forwarded in backlog:
                if kind == "host":
                    flow.from_host(value)
                elif kind == "said":
                    flow.said(value)
                elif line is not None and not self._flow_takes(value, line, forwarded):
                    if not forwarded:
                        self.to_host(line)  # held for the flow, which lets it go

    def drop_flow(self) -> None:
        """The flow could not be loaded: let go of what was held for it."""
        with self._flow_lock:
            backlog, self._backlog = self._backlog or [], None
            self._backlog_calls.clear()
        for _, _, line, forwarded in backlog:
            if line is not None and not forwarded:
                self.to_host(line)

    def flow_to_host(self, line: bytes) -> None:
        """What the flow sends the host: all of it, but a line the host already has."""
        with self._echo_lock:
            if self._echoes.get(id(line)) is line:
                del self._echoes[id(line)]
                return
        self.to_host(line)

    def _show_flow(self, kind: str, value: object) -> None:
        with self._flow_lock:
            if self._backlog is not None:
                self._backlog.append((kind, value, None, True))
            elif kind == "host":
                self.flow.from_host(value)
            else:
                self.flow.said(value)

    def _flow_takes(self, value: object, line: bytes, forwarded: bool) -> bool:
        """Whether the flow takes the line (to send on itself, perhaps extended)."""
        with self._flow_lock:
            if self._backlog is not None:
                hold = not forwarded and self._answers_a_call(value)
                self._backlog.append(("server", value, line, forwarded or not hold))
                return hold
            if forwarded:  # the flow will hand the line back when its run ends: drop that
                with self._echo_lock:
                    self._echoes[id(line)] = line
            taken = self.flow.from_server(value, line)
            if forwarded and not taken:
                with self._echo_lock:
                    self._echoes.pop(id(line), None)
            return taken

    def _answers_a_call(self, value: object) -> bool:
        if not isinstance(value, dict) or "method" in value or "id" not in value:
            return False
        key = id_key(value["id"])
        if key in self._backlog_calls:
            self._backlog_calls.discard(key)
            return True
        return False

    # faults --------------------------------------------------------------------------------

    def waiting(self) -> int:
        with self._pending_lock:
            return len(self._pending)

    def fail_pending(self, reason: str) -> int:
        """Answer every request still waiting with a JSON-RPC error; how many there were."""
        with self._pending_lock:
            waiting = list(self._pending.values())
        return self.answer_errors(waiting, reason)

    def answer_errors(self, request_ids: list[object], reason: str) -> int:
        """Answer these requests, if still waiting, with an error of the proxy's own."""
        answered = 0
        for request_id in request_ids:
            with self._pending_lock:
                if self._pending.pop(id_key(request_id), None) is None:
                    continue
            line = error_line(request_id, f"stretto-proxy: {reason}")
            if self.log is not None:
                self.log.record("proxy", line, parse_json_line(line))
            self.to_host(line)
            answered += 1
        return answered


def _calls_a_tool(value: object) -> bool:
    return any(m.get("method") == "tools/call" for m in messages(value))
