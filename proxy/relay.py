"""The relay between the host (our stdin/stdout) and the wrapped server.

Every line is forwarded with the bytes it arrived with. Lines are parsed only to log them
and to remember which of the host's requests still wait for an answer, so that if the server
goes away each of them gets an error instead of hanging the host.
"""

from __future__ import annotations

import sys
import threading

from proxy.context import ContextFeed
from proxy.recorder import SessionLog, parse_json_line
from proxy.wire import error_line, id_key, is_request, is_response, messages, write_all


class Relay:
    """`upstream` is a StdioServer or an HttpUpstream: `send(line) -> bool` (False once the
    server is gone) is all the relay needs of it."""

    def __init__(
        self,
        upstream,
        log: SessionLog | None,
        context: ContextFeed | None,
        host_out_fd: int = 1,
    ) -> None:
        self.upstream = upstream
        self.log = log
        self.context = context
        self._host_fd = host_out_fd
        self._host_lock = threading.Lock()
        self._pending: dict[str, object] = {}
        self._pending_lock = threading.Lock()
        self.host_gone = threading.Event()
        self.flow = None  # a proxy.serve.FlowServer when serving a flow

    # host -> server ------------------------------------------------------------------------

    def from_host(self, line: bytes) -> None:
        parsed = parse_json_line(line)
        if parsed is not None:
            value = parsed[0]
            if _calls_a_tool(value):
                self.log_context()
            self._track_host_message(value)
            if self.flow is not None:
                self.flow.from_host(value)
        if self.log is not None:
            self.log.record("client", line, parsed)
        if not self.upstream.send(line) and parsed is not None:
            # The server is gone: answer now rather than leave the host waiting.
            self.fail_pending("the MCP server is not running")

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
            if self.flow is not None and parsed is not None:
                self.flow.said(parsed[0])

    def _track_host_message(self, value: object) -> None:
        with self._pending_lock:
            for message in messages(value):
                if is_request(message):
                    self._pending[id_key(message["id"])] = message["id"]
                elif message.get("method") == "notifications/cancelled":
                    params = message.get("params")
                    if isinstance(params, dict) and "requestId" in params:
                        # A cancelled request gets no answer from the server, nor from us.
                        self._pending.pop(id_key(params["requestId"]), None)

    # server -> host ------------------------------------------------------------------------

    def from_server(self, line: bytes) -> None:
        parsed = parse_json_line(line)
        if parsed is not None:
            with self._pending_lock:
                for message in messages(parsed[0]):
                    if is_response(message) and "id" in message:
                        self._pending.pop(id_key(message["id"]), None)
        if self.log is not None:
            self.log.record("server", line, parsed)
        if self.flow is not None and parsed is not None and self.flow.from_server(parsed[0], line):
            return  # a lookup's answer, or an answer the flow sends on with its lookups
        self.to_host(line)

    def to_host(self, line: bytes) -> None:
        if self.host_gone.is_set():
            return
        with self._host_lock:
            try:
                write_all(self._host_fd, line)
            except (BrokenPipeError, ConnectionResetError, OSError):
                self.host_gone.set()

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
