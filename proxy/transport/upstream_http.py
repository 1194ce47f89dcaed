"""`--upstream URL`: the wrapped server speaks MCP's Streamable HTTP transport.

Each line from the host is POSTed as it comes, in order; the answer is JSON or an SSE stream
whose events become lines to the host. The `Mcp-Session-Id` the server hands out on
`initialize` is sent with every later request, and when the server offers it, a GET stream
carries the messages the server starts on its own.
"""

from __future__ import annotations

import base64
import http.client
import queue
import sys
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from proxy.record.recorder import Parsed, parse_json_line
from proxy.transport.upstream_stdio import StartError
from proxy.wire import id_key, is_request, messages

REQUEST_TIMEOUT_S = 600.0  # a tool may run long; a dead server is noticed by the socket
GET_RETRIES = 3
# Servers drop idle keep-alive connections (uvicorn after 5 s); reuse only fresher ones.
REUSE_IDLE_S = 2.0
STREAM_BYTES = 1 << 20  # a JSON answer this long goes to the host as it arrives ...
STREAM_PIECE = 1 << 18  # ... read this much at a time
# With this many requests unanswered, a new one waits a little for a connection to come free
# before it opens another: a burst reuses a few warm connections (and their reader threads)
# instead of a connection and a thread per message, while slow tools delay the next call by
# at most the wait.
BUSY_CONNECTIONS = 8
BUSY_WAIT_S = 0.005


class Workers:
    """Threads that read answers, kept for the next request rather than started for each
    (starting a thread costs more than a local HTTP round trip's share of the proxy's time)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def run(self, job: Callable[..., None], *args: object) -> None:
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1
        self._jobs.put((job, args))
        if start:
            threading.Thread(target=self._work, name=self._name, daemon=True).start()

    def _work(self) -> None:
        while True:
            job, args = self._jobs.get()
            try:
                job(*args)
            finally:
                with self._lock:
                    self._idle += 1


class HttpUpstream:
    def __init__(self, url: str, headers: dict[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StartError(f"--upstream wants an http:// or https:// URL, got {url!r}")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self._headers = dict(headers)
        if parts.username:
            token = f"{parts.username}:{parts.password or ''}".encode()
            self._headers.setdefault("Authorization", "Basic " + base64.b64encode(token).decode())
        self._session_id: str | None = None
        self._protocol_version: str | None = None
        self._on_line: Callable[..., Parsed] = lambda line, parsed=None: None
        self._readers = Workers("upstream-post")
        self._on_error: Callable[[list[object], str], object] = lambda ids, why: None
        self._idle: list[tuple[float, http.client.HTTPConnection]] = []
        self._lock = threading.Lock()
        self._inflight = 0
        self._settled = threading.Condition(self._lock)
        self._closing = False
        self._done = threading.Event()
        self.wake: Callable[[], None] = lambda: None  # the proxy's loop: something changed
        self._get_started = False
        self._stream_piece: Callable[[bytes, bool], bool] | None = None
        self._streamed: Callable[[bytes], Parsed] = lambda line: None
        self._streaming = threading.Lock()  # one answer's pieces at a time

    # the upstream interface ----------------------------------------------------------------

    def start(self, on_line: Callable[..., Parsed]) -> None:
        """`on_line(line[, parsed])` hands each line from the server on (with what
        parse_json_line made of it, if known) and says what parse_json_line made of it."""
        self._on_line = on_line

    def stream_big_answers(
        self, piece: Callable[[bytes, bool], bool], streamed: Callable[[bytes], Parsed]
    ) -> None:
        """Send a long JSON answer to the host as it arrives, `piece(data, line_open)` at a
        time, then `streamed(line)` to account for it (instead of `on_line`)."""
        self._stream_piece, self._streamed = piece, streamed

    def set_error_handler(self, on_error: Callable[[list[object], str], object]) -> None:
        """Called with request ids the server could not answer, and why."""
        self._on_error = on_error

    def send(
        self,
        line: bytes,
        parsed: Parsed | bool = False,
        accounted: Callable[[], object] = lambda: None,
    ) -> bool:
        """POST one line (`parsed` already, if given). `accounted()` runs once, when the
        request is on the wire (or could not be sent) and before its answer is read or an
        error for it reported: the caller logs the request while the server works on it."""
        if self._closing:
            accounted()
            return False
        body = line.rstrip(b"\r\n")
        if not body.strip():
            accounted()
            return True
        if isinstance(parsed, bool):  # not given
            parsed = parse_json_line(line)
        value = parsed[0] if parsed else None
        ids = [m["id"] for m in messages(value) if is_request(m)]
        initialized = any(m.get("method") == "notifications/initialized" for m in messages(value))
        try:
            conn = self._connection(for_request=True)
            conn.request("POST", self._path, body=body, headers=self._post_headers())
        except OSError as exc:
            accounted()
            self._finished_one()
            self._on_error(ids, f"cannot reach the upstream server: {exc}")
            return True
        accounted()
        # The request is on the wire in order; its answer is read on its own thread so a
        # slow tool does not hold up the calls after it.
        self._readers.run(self._read_answer, conn, ids, value)
        if initialized:
            self._open_get_stream()
        return True

    def close_input(self) -> None:
        with self._lock:
            if self._closing:
                return
            self._closing = True
        threading.Thread(target=self._close, name="upstream-close", daemon=True).start()

    def wait(self, timeout: float | None = None) -> int | None:
        return 0 if self._done.wait(timeout) else None

    def settled(self) -> bool:
        """No request is waiting for its answer."""
        with self._lock:
            return self._inflight == 0

    def finish_reading(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._settled:
            while self._inflight and time.monotonic() < deadline:
                self._settled.wait(deadline - time.monotonic())

    def terminate(self) -> None:
        self._closing = True
        self._done.set()
        self.wake()

    kill = terminate

    # internals -----------------------------------------------------------------------------

    def _connection(self, for_request: bool = False) -> http.client.HTTPConnection:
        """A kept-alive connection if a fresh one is idle, else a new one. `for_request`:
        counted in flight until `_finished_one`, waiting BUSY_WAIT_S at most for one to come
        free while BUSY_CONNECTIONS requests are unanswered."""
        with self._settled:
            deadline = None
            while True:
                now = time.monotonic()
                while self._idle:
                    since, conn = self._idle.pop()
                    if now - since < REUSE_IDLE_S:
                        self._inflight += for_request
                        return conn
                    conn.close()
                if not for_request or self._inflight < BUSY_CONNECTIONS:
                    break
                deadline = now + BUSY_WAIT_S if deadline is None else deadline
                if now >= deadline:
                    break
                self._settled.wait(deadline - now)
            self._inflight += for_request
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=REQUEST_TIMEOUT_S)
        return http.client.HTTPConnection(self._host, self._port, timeout=REQUEST_TIMEOUT_S)

    def _post_headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **self._headers,
        }
        if self._session_id:
            headers["Mcp-Session-Id"] = self._session_id
        if self._protocol_version:
            headers["MCP-Protocol-Version"] = self._protocol_version
        return headers

    def _finished_one(self) -> None:
        with self._settled:
            self._inflight -= 1
            self._settled.notify_all()
        if self._closing:  # the loop waits for the last answers only once the host has gone
            self.wake()

    def _read_answer(self, conn: http.client.HTTPConnection, ids: list[object], sent) -> None:
        try:
            try:
                response = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._on_error(ids, f"the upstream server did not answer: {exc}")
                return
            session = response.getheader("Mcp-Session-Id")
            if session:
                self._session_id = session
            kind = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
            answered: set[str] = set()
            if response.status in (200, 201) and kind == "text/event-stream":
                self._read_events(response, answered, sent)
            elif response.status in (200, 201) and kind == "application/json":
                if self._streams(response, sent):
                    self._stream(response, answered)
                else:
                    self._deliver(response.read(), answered, sent)
            elif response.status == 202:
                response.read()
            else:
                body = response.read()
                self._deliver_error(body, response.status, ids, answered)
            waiting = [i for i in ids if id_key(i) not in answered]
            if waiting and response.status in (200, 201, 202):
                self._on_error(waiting, "the upstream server closed the answer without a response")
            if response.will_close:
                conn.close()
            else:
                with self._lock:
                    self._idle.append((time.monotonic(), conn))
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            self._on_error(ids, f"the upstream connection failed: {exc}")
        finally:
            self._finished_one()

    def _streams(self, response: http.client.HTTPResponse, sent) -> bool:
        return (
            self._stream_piece is not None
            and (response.length or 0) >= STREAM_BYTES
            and not _initializes(sent)
        )

    def _stream(self, response: http.client.HTTPResponse, answered: set[str]) -> None:
        """Hand a long answer to the host piece by piece as it arrives, then account for it."""
        assert self._stream_piece is not None
        pieces: list[bytes] = []
        with self._streaming:
            while True:
                piece = one_line(response.read(STREAM_PIECE))
                if not piece:
                    break
                pieces.append(piece)
                self._stream_piece(piece, True)
            self._stream_piece(b"\n", False)
        parsed = self._streamed(b"".join(pieces) + b"\n")
        self._note_answered(parsed, answered)

    def _deliver(self, payload: bytes, answered: set[str] | None, sent=None) -> None:
        """Hand one JSON-RPC message (or batch) from the server to the host as one line."""
        payload = one_line(payload.strip())
        if not payload:
            return
        line = payload + b"\n"
        if _initializes(sent):
            # Noted before the host has the answer, and so before its next request.
            parsed = parse_json_line(line)
            for message in messages(parsed[0] if parsed is not None else None):
                self._note_initialize(message, sent)
            self._on_line(line, parsed)
        else:
            parsed = self._on_line(line)  # parsed once the host has it, if it may
        self._note_answered(parsed, answered)

    @staticmethod
    def _note_answered(parsed: Parsed, answered: set[str] | None) -> None:
        if parsed is not None and answered is not None:
            for message in messages(parsed[0]):
                if "id" in message and "method" not in message:
                    answered.add(id_key(message["id"]))

    def _note_initialize(self, message: dict, sent) -> None:
        result = message.get("result")
        if not isinstance(result, dict) or "protocolVersion" not in result:
            return
        for request in messages(sent):
            if request.get("method") == "initialize" and request.get("id") == message.get("id"):
                self._protocol_version = str(result["protocolVersion"])

    def _deliver_error(
        self, body: bytes, status: int, ids: list[object], answered: set[str]
    ) -> None:
        parsed = parse_json_line(body.replace(b"\n", b" "))
        if parsed is not None and any("error" in m for m in messages(parsed[0])):
            known = {id_key(i) for i in ids}
            if any(id_key(m.get("id")) in known for m in messages(parsed[0])):
                self._deliver(body, answered)
                return
        if status == 404 and self._session_id:
            why = "the upstream server no longer knows this session (HTTP 404)"
        else:
            text = body.decode("utf-8", "replace").strip().replace("\n", " ")[:200]
            why = f"the upstream server answered HTTP {status}" + (f": {text}" if text else "")
        if ids:
            self._on_error(ids, why)
            answered.update(id_key(i) for i in ids)
        else:
            print(f"stretto-proxy: {why}", file=sys.stderr, flush=True)

    def _read_events(self, response, answered: set[str] | None, sent=None) -> None:
        """Read an SSE stream, delivering each `message` event's data as one line."""
        data: list[bytes] = []
        event = b"message"
        while True:
            raw = response.readline()
            if not raw:
                break
            line = raw.rstrip(b"\r\n")
            if not line:
                if data and event == b"message":
                    self._deliver(b"\n".join(data), answered, sent)
                data, event = [], b"message"
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.partition(b":")
            if value.startswith(b" "):
                value = value[1:]
            if field == b"data":
                data.append(value)
            elif field == b"event":
                event = value or b"message"
        if data and event == b"message":
            self._deliver(b"\n".join(data), answered, sent)

    def _open_get_stream(self) -> None:
        with self._lock:
            if self._get_started:
                return
            self._get_started = True
        threading.Thread(target=self._listen, name="upstream-get", daemon=True).start()

    def _listen(self) -> None:
        """The server's own messages, on a GET stream, while the server offers one."""
        failures = 0
        while not self._closing and failures < GET_RETRIES:
            conn = self._connection()
            headers = {"Accept": "text/event-stream", **self._headers}
            if self._session_id:
                headers["Mcp-Session-Id"] = self._session_id
            if self._protocol_version:
                headers["MCP-Protocol-Version"] = self._protocol_version
            try:
                conn.request("GET", self._path, headers=headers)
                response = conn.getresponse()
                if response.status != 200:
                    response.read()
                    return  # 405: the server offers no such stream
                failures = 0
                self._read_events(response, None)
            except (OSError, http.client.HTTPException):
                failures += 1
                time.sleep(0.2 * failures)
            finally:
                conn.close()

    def _close(self) -> None:
        self.finish_reading(REQUEST_TIMEOUT_S)
        if self._session_id:
            headers = {"Mcp-Session-Id": self._session_id, **self._headers}
            try:
                conn = self._connection()
                conn.timeout = 5
                conn.request("DELETE", self._path, headers=headers)
                conn.getresponse().read()
                conn.close()
            except (OSError, http.client.HTTPException):
                pass
        self._done.set()
        self.wake()


def _initializes(sent) -> bool:
    """The request (or batch) sent holds an `initialize`, whose answer is noted first."""
    return any(m.get("method") == "initialize" for m in messages(sent))


def one_line(body: bytes) -> bytes:
    """A body fit for a line protocol: a line break in JSON is only ever whitespace (one
    inside a string is escaped), so a pretty-printed body becomes one line with every value
    as the server wrote it."""
    if b"\n" in body or b"\r" in body:
        return body.replace(b"\r", b" ").replace(b"\n", b" ")
    return body
