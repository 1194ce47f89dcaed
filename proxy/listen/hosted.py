"""One MCP session of a host that speaks Streamable HTTP (`--listen`, proxy.listen.endpoint).

The session is the stdio proxy's own (proxy.listen.piped: proxy.session.open_session on a
thread, a pair of pipes as its host), or with `--servers` one such session per server behind
proxy.listen.fan: the HTTP app writes each message the host POSTs as a line, and is handed the
lines the host is sent. So every rule of forwarding, recording and serving a flow is the one
stdio uses; this module only says which HTTP response each line the host is sent belongs to:

- an answer goes to the POST that carried its request;
- `notifications/progress` goes to the open SSE response of the request that gave its
  `progressToken`;
- anything else the server says (its own requests, other notifications) goes to the GET
  stream when the host has one open, else to the newest open SSE response, else it waits
  (up to BACKLOG messages) for the host's next GET stream.

Everything here but the session's thread runs on the HTTP app's event loop.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import deque

from proxy.listen.fan import Fan
from proxy.listen.piped import PipedSession
from proxy.wire import id_key, is_request, messages
from stretto.logs.deepjson import loads_deep

BACKLOG = 1000  # messages kept for a GET stream the host has not opened yet
END = None  # put in a Reply's queue: the session is over


class Reply:
    """Where the lines for one of the host's requests (or its GET stream) go: a queue the
    HTTP response reads from, until each of `waiting` (request ids) is answered."""

    def __init__(self, waiting: set[str], stream: bool) -> None:
        self.waiting = waiting
        self.stream = stream  # an SSE response: it also takes the server's other messages
        self.queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.answers: list[bytes] = []

    def put(self, body: bytes | None) -> None:
        self.queue.put_nowait(body)


class HostedSession:
    """`servers` (with `--servers`): the servers one session fronts (proxy.listen.fan); else one
    server, the command after `--` or `--upstream`."""

    def __init__(self, session_id: str, args, command: list[str], on_end, servers=None) -> None:
        self.id = session_id
        self._on_end = on_end
        self.last_seen = time.monotonic()
        self.busy = 0  # requests of the host's in progress
        self.ended = False  # the host side is closed: no more requests
        self.over = False  # the session has finished
        self.status: int | None = None
        self._replies: dict[str, Reply | None] = {}  # request id -> its reply (None: gone)
        self._progress: dict[str, Reply] = {}  # progress token -> its SSE reply
        self._streams: list[Reply] = []  # the open SSE replies, oldest first
        self.listener: Reply | None = None  # the GET stream
        self._backlog: deque[bytes] = deque(maxlen=BACKLOG)
        self.inner: PipedSession | Fan
        if servers:
            self.inner = Fan(session_id, args, servers, self.route, self._over)
        else:
            self.inner = PipedSession(session_id, args, command, self.route, self._over)

    # starting and ending -------------------------------------------------------------------

    async def start(self) -> str | None:
        """Start the server(s) and the session; None, or why it cannot start."""
        return await self.inner.start()

    def _over(self, status: int | None) -> None:
        """The session has finished: every reply still open ends."""
        self.status = status
        self.ended = self.over = True
        for reply in {id(r): r for r in self._open_replies()}.values():
            reply.put(END)
        self._replies.clear()
        self._on_end(self)

    def _open_replies(self) -> list[Reply]:
        replies = [r for r in self._replies.values() if r is not None]
        replies += self._streams
        if self.listener is not None:
            replies.append(self.listener)
        return replies

    def end(self) -> None:
        """The host is done (DELETE, idle, the proxy stops): the server's input is closed, as
        at the end of a stdio host's input, and the session finishes as it does there."""
        self.ended = True
        self.inner.end()

    # the host's messages -----------------------------------------------------------------

    def send(self, body: bytes, value: object, stream: bool) -> Reply | None:
        """Send one message (or batch) of the host's to the session, as one line; the Reply
        its answers go to (None when it holds no request)."""
        ids: set[str] = set()
        tokens: list[str] = []
        for message in messages(value):
            if is_request(message):
                ids.add(id_key(message["id"]))
                meta = _params(message).get("_meta") if stream else None
                if isinstance(meta, dict) and "progressToken" in meta:
                    tokens.append(id_key(meta["progressToken"]))
        reply = None
        if ids:
            reply = Reply(ids, stream)
            for key in ids:
                self._replies[key] = reply
            for token in tokens:
                self._progress[token] = reply
            if stream:
                self._streams.append(reply)
        self.inner.write(body + b"\n")
        return reply

    def forget(self, reply: Reply) -> None:
        """The host no longer waits on this reply (answered, or it hung up): answers still to
        come for it are dropped, as no host reads them."""
        for key in reply.waiting:
            if key in self._replies:
                self._replies[key] = None
        for token in [t for t, r in self._progress.items() if r is reply]:
            del self._progress[token]
        if reply in self._streams:
            self._streams.remove(reply)
        if reply is self.listener:
            self.listener = None

    def listen(self) -> Reply:
        """Open the GET stream: what waited for one comes first."""
        reply = self.listener = Reply(set(), True)
        while self._backlog:
            reply.put(self._backlog.popleft())
        return reply

    # the lines the host is sent ------------------------------------------------------------

    def route(self, line: bytes) -> None:
        body = line[:-1] if line.endswith(b"\r") else line
        try:
            value = _loads(body)
        except ValueError:
            print(
                f"stretto-proxy: session {self.id[:8]}: a line of the server's is not JSON; "
                "an HTTP host cannot be sent it (it is in the log)",
                file=sys.stderr,
            )
            return
        target: Reply | None = None
        answered: list[str] = []
        found = False
        for message in messages(value):
            if "method" not in message and "id" in message:  # an answer, however odd
                key = id_key(message["id"])
                if key in self._replies:
                    found = True
                    target = target or self._replies.get(key)
                    answered.append(key)
            elif message.get("method") == "notifications/progress":
                token = _params(message).get("progressToken")
                if token is not None:
                    target = target or self._progress.get(id_key(token))
        if found and target is None:
            for key in answered:
                self._replies.pop(key, None)
            return  # the host hung up on this request
        if target is None:
            target = self.listener or (self._streams[-1] if self._streams else None)
        if target is None:
            if len(self._backlog) == BACKLOG:
                print(
                    f"stretto-proxy: session {self.id[:8]}: {BACKLOG} messages wait for a GET "
                    "stream; the oldest is dropped",
                    file=sys.stderr,
                )
            self._backlog.append(body)
            return
        target.put(body)
        for key in answered:
            target.waiting.discard(key)
            self._replies.pop(key, None)
        if answered and not target.waiting and target is not self.listener:
            target.put(END)
            self.forget(target)


def _loads(body: bytes) -> object:
    """A line's JSON value, at any depth (a result nested past Python's recursion limit is
    JSON too, and must reach the host)."""
    try:
        return json.loads(body)
    except RecursionError:
        return loads_deep(body.decode("utf-8"))


def _params(message: dict) -> dict:
    params = message.get("params")
    return params if isinstance(params, dict) else {}
