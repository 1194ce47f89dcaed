"""stretto.httpguard: uvicorn's connections bounded (a request's headers in time, caps on
connections in all and from one address), on a real uvicorn server with a small app and
limits small enough to reach."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from stretto.httpguard import BACKLOG, Limits, guarded, limits_for
from tests.builders import wait_until
from tests.conftest import free_port

TIMEOUT_S = 0.3  # the headers' time here


async def app(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        # a slow answer is what is tested: it may take longer than the headers may
        await asyncio.sleep(3 * TIMEOUT_S)
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


@contextmanager
def serving(limits: Limits) -> Iterator[int]:
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
        http=guarded(limits),
        ws="none",
        backlog=BACKLOG,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), "the server to start", 30)
    assert server.started, "the server did not start"
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join()


def connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60, source_address=(source, 0))
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything until the server closes the connection."""
    got = b""
    while chunk := sock.recv(4096):
        got += chunk
    return got


def answer(sock: socket.socket) -> bytes:
    """One answer of a kept-alive connection (the app's: 2 bytes of body)."""
    got = b""
    while not got.endswith(b"\r\n\r\nok"):
        chunk = sock.recv(4096)
        assert chunk, got
        got += chunk
    return got


GET = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"


def test_headers_not_complete_in_time_end_the_connection() -> None:
    with serving(Limits(header_timeout_s=TIMEOUT_S)) as port:
        silent = connect(port)
        assert read_all(silent) == b""  # nothing came: closed without a word
        half = connect(port)
        half.sendall(b"GET / HT")
        assert read_all(half).startswith(b"HTTP/1.1 408 ")
        # a kept-alive connection: the second request's headers have their time too
        kept = connect(port)
        kept.sendall(GET)
        assert answer(kept).startswith(b"HTTP/1.1 200 ")
        kept.sendall(b"GET / HTTP/1.1\r\nHost: loc")
        assert read_all(kept).startswith(b"HTTP/1.1 408 ")
        # headers in time, an answer that takes longer: not cut
        slow = connect(port)
        slow.sendall(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert answer(slow).startswith(b"HTTP/1.1 200 ")
        for sock in (silent, half, kept, slow):
            sock.close()


def test_beyond_the_caps_a_connection_gets_503_and_others_are_served() -> None:
    limits = Limits(total=4, per_client=2, header_timeout_s=60)
    with serving(limits) as port:
        held = [connect(port), connect(port)]
        for sock in held:
            sock.sendall(b"GET / HT")
        third = connect(port)
        third.sendall(GET)
        refused = read_all(third)
        assert refused.startswith(b"HTTP/1.1 503 ") and b"retry-after: 5\r\n" in refused
        assert b"2 connections from 127.0.0.1 are open" in refused
        other = connect(port, "127.0.0.2")  # another address: served
        other.sendall(GET)
        assert answer(other).startswith(b"HTTP/1.1 200 ")
        another = connect(port, "127.0.0.3")  # 4 in all: the next one is refused
        fifth = connect(port, "127.0.0.4")
        fifth.sendall(GET)
        assert b"4 connections are open" in read_all(fifth)
        for sock in [*held, other, another]:
            sock.close()
        while True:  # once they are closed, 127.0.0.1 is served again
            again = connect(port)
            again.sendall(GET)
            if (got := read_all_or_answer(again)).startswith(b"HTTP/1.1 200 "):
                break
            assert got.startswith(b"HTTP/1.1 503 "), got
        again.close()
        assert limits.refused >= 2


def read_all_or_answer(sock: socket.socket) -> bytes:
    got = b""
    while not got.endswith(b"\r\n\r\nok") and (chunk := sock.recv(4096)):
        got += chunk
    return got


def test_the_caps_fit_the_descriptors() -> None:
    assert (limits_for(65536).total, limits_for(65536).per_client) == (512, 256)
    assert (limits_for(1024).total, limits_for(1024).per_client) == (320, 160)
    assert (limits_for(256).total, limits_for(256).per_client) == (16, 8)
