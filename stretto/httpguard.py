"""The connections of an HTTP server on uvicorn (`stretto-proxy --listen`, `stretto-console`),
kept within bounds against clients that hold them open without finishing a request (slowloris):

- A request's headers must be complete `header_timeout_s` after its first byte (for the first
  request of a connection, after the connection is made); else the connection is closed (with
  408 when part of a request came). uvicorn has no such timeout: its keep-alive timeout runs
  only between requests, so a connection that sends half a request line is held for ever.
- At most `total` connections at once, and `per_client` from one address. One more is answered
  503 (`Retry-After`) at once, its end of the connection shut after the answer, and closed
  `linger_s` later (time for the client to read it); with `answering` such answers under way,
  a further one is dropped at once. So descriptors remain for the other clients, and for the
  rest of the process (the proxy's sessions and their servers).
- uvicorn's own knobs do not reach this: `limit_concurrency` answers 503 only once a request's
  headers are read (a connection that never finishes them is never counted out), and
  `h11_max_incomplete_event_size` bounds the headers' size, not their time. Its `backlog` is
  also how many connections it accepts in one go before any is looked at: `BACKLOG`.

`uvicorn.Config(app, http=guarded(limits_for(...)), ws="none", backlog=BACKLOG)`: a protocol
in front of uvicorn's own (httptools or h11, as `http="auto"` picks), which sees each
connection first. WebSockets are off: an upgraded connection would leave its count behind.

Who may connect at all (the loopback rule, the token) is stretto.listenauth's.
"""

from __future__ import annotations

import asyncio
import resource
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

from uvicorn.protocols.http.auto import AutoHTTPProtocol

HEADER_TIMEOUT_S = 10.0
TOTAL = 512  # connections at once
PER_CLIENT = 256  # ... from one address
ANSWERING = 64  # 503 answers under way at once; beyond, a connection is dropped
BACKLOG = 128  # uvicorn accepts this many connections in one go (and the listen backlog)
FD_WANTED = 65536  # the soft RLIMIT_NOFILE is raised toward this (as the hard one allows)


@dataclass
class Limits:
    """The bounds, and the connections counted against them (one event loop: no locks)."""

    total: int = TOTAL
    per_client: int = PER_CLIENT
    header_timeout_s: float = HEADER_TIMEOUT_S
    answering: int = ANSWERING
    retry_after_s: int = 5
    linger_s: float = 1.0
    open: int = 0
    by_client: Counter[str] = field(default_factory=Counter)
    refusing: int = 0
    refused: int = 0  # connections answered 503 or dropped, since the start
    timed_out: int = 0  # connections closed for headers not complete in time

    def busy(self, client: str) -> bytes:
        """The 503 answer to a connection beyond the caps."""
        whole = self.open >= self.total
        text = (
            f"{self.total} connections are open: try again later\n"
            if whole
            else f"{self.per_client} connections from {client} are open: try again later\n"
        ).encode()
        return (
            b"HTTP/1.1 503 Service Unavailable\r\n"
            b"content-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\n"
            b"retry-after: %d\r\n"
            b"connection: close\r\n\r\n" % (len(text), self.retry_after_s)
        ) + text


TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 35\r\nconnection: close\r\n\r\nthe request headers came too slowly\n"
)


def raise_fd_limit(wanted: int = FD_WANTED) -> int:
    """Raise this process's soft limit on descriptors toward `wanted`, as far as the hard
    limit allows; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return wanted if soft == resource.RLIM_INFINITY else soft


def limits_for(descriptors: int, **given: Any) -> Limits:
    """Limits that leave half of `descriptors` (the process's limit) to the rest of the
    process: the connections, the 503 answers under way and one accepted batch fit in the
    other half; `given` sets the defaults otherwise."""
    limits = Limits(**given)
    room = descriptors // 2 - limits.answering - BACKLOG
    limits.total = max(16, min(limits.total, room))
    limits.per_client = max(8, min(limits.per_client, limits.total // 2))
    return limits


def guarded(limits: Limits) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (as `http="auto"` picks it) behind `limits`."""

    class Guarded(_Guard):
        LIMITS = limits
        INNER = AutoHTTPProtocol

    return Guarded


class _Guard(asyncio.Protocol):
    LIMITS: ClassVar[Limits]
    INNER: ClassVar[type[asyncio.Protocol]]

    def __init__(self, **options: Any) -> None:
        self.inner: Any = self.INNER(**options)  # uvicorn's: config, server_state, ...
        self.loop = asyncio.get_running_loop()
        self.transport: Any = None  # asyncio's, or uvloop's (not an asyncio.Transport)
        self.client = ""
        self.counted = False
        self.refused = False
        self.answering = False
        self.timer: asyncio.TimerHandle | None = None
        self.partial = False  # part of a request came since the timer was armed

    # the connection ------------------------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        limits = self.LIMITS
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.client = str(peer[0]) if isinstance(peer, tuple | list) and peer else ""
        if limits.open >= limits.total or limits.by_client[self.client] >= limits.per_client:
            self._refuse(transport)
            return
        self.counted = True
        limits.open += 1
        limits.by_client[self.client] += 1
        self._arm()
        self.inner.connection_made(transport)

    def _refuse(self, transport: Any) -> None:
        limits = self.LIMITS
        self.refused = True
        limits.refused += 1
        if limits.refusing >= limits.answering:
            transport.abort()
            return
        self.answering = True
        limits.refusing += 1
        transport.write(limits.busy(self.client))
        if transport.can_write_eof():
            transport.write_eof()
        self.timer = self.loop.call_later(limits.linger_s, transport.close)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        limits = self.LIMITS
        if self.counted:
            self.counted = False
            limits.open -= 1
            limits.by_client[self.client] -= 1
            if limits.by_client[self.client] <= 0:
                del limits.by_client[self.client]
        if self.answering:
            self.answering = False
            limits.refusing -= 1
        if not self.refused:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return  # read and dropped: the 503 is on its way
        inner = self.inner
        before = inner.cycle  # the request under way (uvicorn's), None before the first
        if self.timer is None and (before is None or before.response_complete):
            self._arm()  # a new request begins
        self.partial = True
        inner.data_received(data)
        if inner.cycle is not before:  # its headers are complete: the app has it
            self._disarm()

    def eof_received(self) -> bool | None:
        return None if self.refused else self.inner.eof_received()

    def pause_writing(self) -> None:
        if not self.refused:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.inner.resume_writing()

    # the headers' timeout ------------------------------------------------------------------

    def _arm(self) -> None:
        self.partial = False
        self.timer = self.loop.call_later(self.LIMITS.header_timeout_s, self._timed_out)

    def _disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _timed_out(self) -> None:
        self.timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self.LIMITS.timed_out += 1
        if self.partial:
            transport.write(TIMED_OUT)
        transport.close()
