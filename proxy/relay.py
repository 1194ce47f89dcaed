"""What the proxy keeps of each line that passes: the log, the requests still waiting for an
answer, the conversation, and what the flow is shown.

The bytes themselves are moved by proxy.transport.pump (or, with `--upstream`, by the HTTP client):
every line is forwarded with the bytes it arrived with, and parsed only to log it and to
remember which of the host's requests still wait for an answer, so that if the server goes
away each of them gets an error instead of hanging the host.

What the flow is shown goes through proxy.serve.flowfeed, which keeps it in order while the flow
loads or a run decides.
"""

from __future__ import annotations

import _thread
import sys
import time

from proxy.record.recorder import Parsed, parse_json_line
from proxy.wire import error_line, id_key, is_request, is_response, messages, write_all

BIG_LINE = 1 << 20  # from_server lets the host have a line this long before it parses it
BIG_LINE_WAIT_S = 10.0  # ... but waits no longer than this for a host that does not read

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from proxy.record.context import ContextFeed
    from proxy.record.recorder import SessionLog
    from proxy.serve.flowfeed import FlowFeed


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
        self.feed: FlowFeed | None = None  # what the flow is shown, with --flow
        self.hold_server_lines = False  # a flow may hold the server's answers (not shadow)
        self.host_has_all: Callable[[], bool] | None = None  # nothing waits for the host
        self._calls: set[str] = set()  # the agent's calls waiting for an answer, with --flow

    # host -> server ------------------------------------------------------------------------

    def from_host(self, line: bytes, t_ns: int | None = None) -> None:
        """Send one of the host's lines to the server (a line that is not JSON is only logged)
        and account for it once the request is on the wire, while the server works on it: the
        upstream reads its answer, or reports an error for it, only after that."""
        parsed = parse_json_line(line)
        if parsed is None:
            self.host_line(line, t_ns, parsed=None)
            return
        if not self.upstream.send(line, parsed, lambda: self.host_line(line, t_ns, parsed=parsed)):
            self.fail_pending("the MCP server is not running")

    def host_line(
        self,
        line: bytes,
        t_ns: int | None = None,
        delivered: bool = True,
        parsed: Parsed | bool = False,
    ) -> bool:
        """Account for a line of the host's, read at `t_ns` and sent on (unless not
        `delivered`: the server is gone), `parsed` already if given. Whether it was JSON."""
        if isinstance(parsed, bool):  # not given
            parsed = parse_json_line(line)
        if parsed is not None:
            value = parsed[0]
            if self.context is not None and _calls_a_tool(value):
                self.log_context()
            self._track_host_message(value)
            if self.feed is not None:
                self.feed.host(value)
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
            if parsed is not None and self.feed is not None:
                self.feed.said(parsed[0])

    def _track_host_message(self, value: object) -> None:
        with self._pending_lock:
            for message in messages(value):
                if is_request(message):
                    key = id_key(message["id"])
                    self._pending[key] = message["id"]
                    if self.feed is not None and message.get("method") == "tools/call":
                        self._calls.add(key)
                elif message.get("method") == "notifications/cancelled":
                    params = message.get("params")
                    if isinstance(params, dict) and "requestId" in params:
                        # A cancelled request gets no answer from the server, nor from us.
                        self._pending.pop(id_key(params["requestId"]), None)

    # server -> host ------------------------------------------------------------------------

    def from_server(self, line: bytes, parsed: Parsed | bool = False) -> Parsed:
        """Send one of the server's lines to the host (unless the flow takes it) and account
        for it; what parse_json_line made of it (`parsed` if the caller has it already).
        The host gets it first, unless a flow may hold it."""
        if not self.hold_server_lines:
            self.to_host(line)
            self._let_host_have(line)
        if isinstance(parsed, bool):  # not given
            parsed = parse_json_line(line)
        forward = self.account_server(line, parsed, None, not self.hold_server_lines)
        if self.hold_server_lines and forward:
            self.to_host(line)
        return parsed

    def forwarded_from_server(self, line: bytes) -> Parsed:
        """Account for one of the server's lines the host has been sent already, piece by
        piece (never while a flow may hold the server's lines)."""
        self._let_host_have(line)
        parsed = parse_json_line(line)
        self.account_server(line, parsed, None, True)
        return parsed

    def _let_host_have(self, line: bytes) -> None:
        if len(line) >= BIG_LINE and self.host_has_all is not None:
            # Parsing holds Python's lock: let the host have a big line first.
            deadline = time.monotonic() + BIG_LINE_WAIT_S
            while not self.host_has_all() and time.monotonic() < deadline:
                time.sleep(0.001)

    def server_line(self, line: bytes, t_ns: int | None = None, forwarded: bool = False) -> bool:
        """Account for a line of the server's, read at `t_ns`. Already `forwarded` to the host,
        or else: whether to forward it as it is (False when the flow took it)."""
        return self.account_server(line, parse_json_line(line), t_ns, forwarded)

    def account_server(
        self, line: bytes, parsed: Parsed, t_ns: int | None, forwarded: bool
    ) -> bool:
        """server_line, for a line parsed already."""
        answers_call = False
        if parsed is not None:
            with self._pending_lock:
                for message in messages(parsed[0]):
                    if is_response(message) and "id" in message:
                        key = id_key(message["id"])
                        self._pending.pop(key, None)
                        if key in self._calls:
                            self._calls.discard(key)
                            answers_call = True
        if self.log is not None:
            self.log.record("server", line, parsed, t_ns)
        if parsed is None or self.feed is None:
            return True
        return not self.feed.server(parsed[0], line, forwarded, answers_call)

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

    @property
    def flow(self) -> Any:
        """The FlowServer, once loaded (None without a flow, or while it loads)."""
        return self.feed.flow if self.feed is not None else None

    def expect_flow(self) -> None:
        """A flow is loading: keep what it must be shown until `attach_flow`."""
        from proxy.serve.flowfeed import FlowFeed  # proxy start-up: only with --flow

        self.feed = FlowFeed(self.to_host)

    def attach_flow(self, flow) -> None:
        """The flow is loaded: show it the session so far, then everything as it passes."""
        if self.feed is not None:
            self.feed.attach(flow)

    def drop_flow(self) -> None:
        """The flow could not be loaded: let go of what was held for it."""
        if self.feed is not None:
            feed, self.feed = self.feed, None
            feed.drop()

    def holds_lines(self) -> bool:
        return self.feed is not None and self.feed.holds_lines()

    def flow_busy(self) -> bool:
        return self.feed is not None and self.feed.busy()

    def flow_to_host(self, line: bytes) -> None:
        """The `to_host` the flow is given."""
        if self.feed is not None:
            self.feed.to_host(line)
        else:
            self.to_host(line)

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
