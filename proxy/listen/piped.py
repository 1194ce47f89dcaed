"""One stdio session of the proxy's (proxy.session.open_session: the server, its log, the relay,
the loop, the flow) run on a thread of its own, with a pair of pipes as its host: the caller
writes the host's lines into one pipe and is handed, line by line, what the session sends its
host. `--listen` runs one per MCP session (proxy.listen.hosted), or one per server when it fronts
several (proxy.listen.fan). Everything here but the session's thread runs on the event loop.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

from proxy.session import open_session

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from proxy.session import Session


class _FromSession(asyncio.Protocol):
    """The lines the session sends its host, split as they arrive."""

    def __init__(self, piped: PipedSession) -> None:
        self._piped = piped
        self._rest = b""

    def data_received(self, data: bytes) -> None:
        data = self._rest + data if self._rest else data
        start = 0
        while True:
            cut = data.find(b"\n", start)
            if cut < 0:
                break
            try:
                self._piped.on_line(data[start:cut])
            except Exception as exc:  # noqa: BLE001 - one odd line must not end the session
                print(f"stretto-proxy: a line for the host failed: {exc!r}", file=sys.stderr)
            start = cut + 1
        self._rest = data[start:]

    def eof_received(self) -> bool:
        if self._rest.strip():
            self._piped.on_line(self._rest)
        self._rest = b""
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._piped.half_done()


class PipedSession:
    """`on_line(line)` gets each line the session sends its host; `on_over(status)` is called
    once the session has finished (its thread and its output both ended). `args` and
    `command` as proxy.options parses them; `host_session` goes in the log's header; `server_env`
    is added to the server's environment."""

    def __init__(
        self,
        host_session: str,
        args,
        command: list[str],
        on_line: Callable[[bytes], None],
        on_over: Callable[[int | None], None],
        server_env: dict[str, str] | None = None,
    ) -> None:
        self.host_session = host_session
        self._args, self._command, self._env = args, command, server_env
        self.on_line, self._on_over = on_line, on_over
        self._loop = asyncio.get_running_loop()
        self.ended = False  # the host side is closed
        self.status: int | None = None
        self.session: Session | None = None  # once started
        self._to_session: asyncio.WriteTransport | None = None
        self._halves = 2  # the session's thread and its output both end
        self._started: asyncio.Future[str | None] = self._loop.create_future()

    async def start(self) -> str | None:
        """Start the server and its session; None, or why it cannot start."""
        host_in, host_in_w = os.pipe()
        host_out_r, host_out = os.pipe()
        loop = self._loop
        self._to_session, _ = await loop.connect_write_pipe(
            asyncio.Protocol, os.fdopen(host_in_w, "wb", buffering=0)
        )
        await loop.connect_read_pipe(
            lambda: _FromSession(self), os.fdopen(host_out_r, "rb", buffering=0)
        )
        thread = threading.Thread(
            target=self._run,
            args=(host_in, host_out),
            name=f"session-{self.host_session[:8]}",
            daemon=True,
        )
        thread.start()
        return await self._started

    def _run(self, host_in: int, host_out: int) -> None:
        """(The session's thread) the stdio session, its host these pipes."""
        status = None
        try:
            session = open_session(  # the log's host session: the MCP session
                self._args,
                self._command,
                time.time(),
                time.monotonic_ns(),
                host_in,
                host_out,
                host_session=self.host_session,
                server_env=self._env,
            )
            if isinstance(session, tuple):
                status = session[0]
                self._loop.call_soon_threadsafe(self._set_started, session[1])
                return
            self.session = session
            self._loop.call_soon_threadsafe(self._set_started, None)
            status = session.run()
        except Exception as exc:  # noqa: BLE001 - one session's failure is not the proxy's
            print(
                f"stretto-proxy: session {self.host_session[:8]} failed: {exc!r}", file=sys.stderr
            )
            self._loop.call_soon_threadsafe(self._set_started, repr(exc))
        finally:
            os.close(host_in)
            os.close(host_out)
            self._loop.call_soon_threadsafe(self._thread_done, status)

    def _set_started(self, failure: str | None) -> None:
        if not self._started.done():
            self._started.set_result(failure)

    def _thread_done(self, status: int | None) -> None:
        self.status = status
        self.end()
        self.half_done()

    def half_done(self) -> None:
        """The thread has finished, or the session's output has ended; once both have, the
        session is over."""
        self._halves -= 1
        if not self._halves:
            self._on_over(self.status)

    def write(self, data: bytes) -> None:
        """Send the session's server these bytes of the host's (whole lines)."""
        if self._to_session is not None and not self.ended:
            self._to_session.write(data)

    def end(self) -> None:
        """The host is done: the server's input is closed, as at the end of a stdio host's
        input, and the session finishes as it does there."""
        if not self.ended:
            self.ended = True
            if self._to_session is not None:
                self._to_session.close()
