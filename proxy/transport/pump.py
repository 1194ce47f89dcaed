"""The proxy's loop: one thread and one `poll` move the bytes between host and server.

Bytes are forwarded as they are read (`os.read` of up to 64 KiB, `os.write` of all that is
there), a line's head before its tail has arrived, so a 16 MB line costs the proxy about what
it costs a pipe. Each whole line is accounted for (parsed, logged, its request remembered,
shown to the flow) later, in the order read, once the exchange has passed and nothing has moved
for a millisecond (or many lines wait): the host and the server get the CPU first. While an
answer is awaited (the host spoke last) or a line is half-way, the lines wait until the oldest
is 20 ms old: parsing the request at once would take the CPU from the server computing its
answer on a busy machine, and make the answer wait if it came meanwhile. While a big line is
on its way (1 MiB waiting), until nothing has moved for 20 ms: a 16 MB line is parsed once it
has passed, not while its echo is on its way. With `--context` the host's lines
are accounted for before the server's next line goes (the conversation is read when a call is).

When a flow may hold the server's answers (`--flow` but not `--flow-shadow`), the server's
lines go the other way round: accounted for first, then forwarded unless the flow took one.

Writes never block the loop: our ends are non-blocking (the host's stdout only when it is a
pipe or a socket, put back as it was at the end), what a reader does not take yet waits in its
outlet (proxy.transport.outlet), and a side whose outlet is full is not read until it drains. Other
threads (a flow's runs, the HTTP upstream's readers, the flow loader) hand lines in through
`to_host` / `to_server` and wake the loop through a pipe, which the signal handlers also write
to.
"""

from __future__ import annotations

import _signal  # type: ignore[import-not-found]  # `signal` without its enums (~4 ms of imports)
import _thread
import os
import select
import stat
import sys
import time

from proxy.transport.outlet import Outlet

CHUNK = 1 << 16  # bytes read at once (more would be an mmap per read)
HIGH_WATER = 1 << 22  # a side is not read while this much waits to be written to the other
ACCOUNT_AFTER_MS = 1  # lines are accounted for once nothing has moved for this long ...
ACCOUNT_WAITING_MS = 20  # ... or, while an answer is awaited, once the oldest is this old
BIG_WAITING = 1 << 20  # ... but with this many bytes waiting and a line half-way, once
# nothing has moved for ACCOUNT_WAITING_MS (a big line is parsed after its echo, not during)
BACKLOG_LINES = 256  # ... or once this many wait
BACKLOG_BYTES = 1 << 26  # ... or this many bytes
SIGNALS = (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP)
_IN = select.POLLIN | select.POLLPRI
_OUT = select.POLLOUT
_GONE = select.POLLHUP | select.POLLERR | select.POLLNVAL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


class Lines:
    """Cuts a byte stream into lines (each with its `\\n`); keeps the unfinished one."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    @property
    def open(self) -> bool:
        return bool(self._parts)

    def feed(self, data: bytes, into: list, sender: str, t_ns: int, delivered: bool) -> None:
        """Append (sender, line, t_ns, delivered) to `into` for each line `data` finishes; a
        line read in several pieces is that list of pieces (joined when accounted for)."""
        end = data.find(b"\n")
        if end < 0:
            self._parts.append(data)
            return
        end += 1
        if self._parts:
            self._parts.append(data[:end])
            into.append((sender, self._parts, t_ns, delivered))
            self._parts = []
        else:
            into.append((sender, data[:end], t_ns, delivered))
        size = len(data)
        while end < size:
            cut = data.find(b"\n", end)
            if cut < 0:
                self._parts.append(data[end:])
                return
            into.append((sender, data[end : cut + 1], t_ns, delivered))
            end = cut + 1

    def rest(self) -> bytes | None:
        """At the end of the stream: the last line, if it had no `\\n`."""
        if not self._parts:
            return None
        rest, self._parts = b"".join(self._parts), []
        return rest


class Pump:
    """Runs the session's bytes. `server` is a StdioServer (its pipes are polled here) or an
    HttpUpstream (its `send` is called with each of the host's lines; its answers come back
    through `to_host` from its own threads)."""

    def __init__(self, relay, server, *, host_in: int = 0, host_out: int = 1) -> None:
        self.relay = relay
        self.server = server
        self.hold_server_lines = relay.hold_server_lines
        self.log = relay.log
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._loop_thread = _thread.get_ident()
        self._poll = select.poll()
        self._masks: dict[int, int] = {}
        # (sender, line, t_ns, delivered) in the order read, accounted for once nothing has
        # moved for a moment: the host and the server get the CPU first
        self._accounting: list = []
        self._backlog_bytes = 0
        self._host_spoke_last = False  # the last bytes read were the host's: an answer is due
        self._in_order = relay.context is not None
        self.dirty = True  # what to poll for may have changed
        self.changed = True  # something the session waits on may have happened
        self.queued = False  # a thread queued a line

        self.signals: list[int] = []
        self.host_eof = False
        self.output_closed = False  # the server's stdout ended
        self.server_status: int | None = None

        self._host_in = host_in
        self._host_lines = Lines()
        self._host_out_made_nonblocking = _make_nonblocking(host_out)
        self.to_host_outlet = Outlet(host_out, self)
        self.stdio = hasattr(server, "stdout_fd")
        self._handlers: dict[int, Callable[[int], None]] = {
            host_in: self._read_host,
            self._wake_r: self._read_wake,
            host_out: self._host_writable,
        }
        if self.stdio:
            self._server_lines = Lines()
            self.to_server_outlet: Outlet | None = Outlet(server.stdin_fd, self)
            self._handlers[server.stdout_fd] = self._read_server
            self._handlers[server.exit_fd] = self._server_exited
            self._handlers[server.stdin_fd] = self._server_writable
        else:
            self.to_server_outlet = None
            server.wake = self.wake
        self._old_handlers: dict[int, object] = {}
        self._old_wakeup_fd: int | None = None

    # for other threads ------------------------------------------------------------------------

    def wake(self) -> None:
        """Make the loop look around (from any thread)."""
        self.changed = True
        if _thread.get_ident() != self._loop_thread and self._wake_w >= 0:
            try:
                os.write(self._wake_w, b"w")
            except OSError:
                pass  # the pipe is full: the loop wakes anyway

    def to_host(self, line: bytes) -> bool:
        """A whole line for the host (from any thread); False once the host has gone."""
        return self.to_host_outlet.queue(line)

    def stream_to_host(self, data: bytes, line_open: bool) -> bool:
        """Part of a line for the host (from another thread, one line at a time)."""
        return self.to_host_outlet.stream(data, line_open)

    def to_server(self, line: bytes) -> bool:
        """A whole line for the server (from any thread); False once it cannot be sent."""
        if self.to_server_outlet is None:
            return self.server.send(line)
        return self.to_server_outlet.queue(line)

    # state the session waits on ------------------------------------------------------------

    @property
    def host_gone(self) -> bool:
        return self.to_host_outlet.failed

    def drained(self) -> bool:
        """Nothing waits to be written to the host (or it has gone)."""
        return self.to_host_outlet.idle

    def close_server_input(self, drain: bool = True) -> None:
        """No more bytes for the server: its stdin is closed once what waits is written."""
        outlet = self.to_server_outlet
        if outlet is None:
            self.server.close_input()
        elif drain:
            outlet.close_when_empty = True
            outlet.flush()
        else:
            outlet.close()

    # signals -----------------------------------------------------------------------------------

    def catch_signals(self) -> None:
        """SIGTERM, SIGINT and SIGHUP end the session (the loop wakes on them)."""
        try:
            self._old_wakeup_fd = _signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
            for sig in SIGNALS:
                self._old_handlers[sig] = _signal.signal(sig, self._on_signal)
        except ValueError:  # not the main thread: the caller handles signals
            pass

    def _on_signal(self, signum: int, _frame) -> None:
        self.signals.append(signum)
        self.changed = True

    def close(self) -> None:
        """Put back what the loop changed in the process; close its pipe."""
        for sig, handler in self._old_handlers.items():
            _signal.signal(sig, handler)
        if self._old_wakeup_fd is not None:
            _signal.set_wakeup_fd(self._old_wakeup_fd)
        if self._host_out_made_nonblocking:
            try:
                os.set_blocking(self.to_host_outlet.fd, True)
            except OSError:
                pass
        wake_r, wake_w = self._wake_r, self._wake_w
        self._wake_w = -1  # a thread that wakes the loop from now on writes nowhere
        os.close(wake_r)
        os.close(wake_w)

    # the loop --------------------------------------------------------------------------------

    def run_until(self, done: Callable[[], bool], timeout: float | None = None) -> bool:
        """Forward until `done()` (True) or `timeout` seconds have passed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        poll, log, handlers = self._poll.poll, self.log, self._handlers
        self.changed = True
        while True:
            if self.changed:
                self.changed = False
                if done():
                    if self._accounting:
                        self._account()  # the caller sees every line accounted for
                    return True
            if self.queued:
                self.queued = False
                self._take_queued()
            if self.dirty:
                self._watch()
            wait = None if deadline is None else deadline - time.monotonic()
            if log is not None and log._due is not None:
                until_due = log._due - time.monotonic()
                wait = until_due if wait is None else min(wait, until_due)
            wait_ms = None if wait is None else max(0, int(wait * 1000) + 1)
            quiet_for_accounting = False  # a poll that times out means: account now
            if self._accounting:
                after = self._account_after()
                if wait_ms is None or wait_ms >= after:
                    wait_ms, quiet_for_accounting = after, True
            events = poll(wait_ms)
            for fd, event in events:
                handlers[fd](event)
            if self._accounting and (
                (quiet_for_accounting and not events)
                or self._overdue()
                or len(self._accounting) >= BACKLOG_LINES
                or self._backlog_bytes >= BACKLOG_BYTES
            ):
                self._account()
            if log is not None and log._due is not None:
                log.flush_due()
            if deadline is not None and time.monotonic() >= deadline:
                if self._accounting:
                    self._account()
                return done()

    def _line_open(self) -> bool:
        return self._host_lines.open or (self.stdio and self._server_lines.open)

    def _big_line_passing(self) -> bool:
        return self._backlog_bytes >= BIG_WAITING and self._line_open()

    def _account_after(self) -> int:
        """How long (ms) the loop may wait before it accounts for the lines waiting."""
        if not (self._host_spoke_last or self._line_open()):
            return ACCOUNT_AFTER_MS  # the exchange has passed
        if self._big_line_passing():
            return ACCOUNT_WAITING_MS  # of nothing moving
        age_ms = (time.monotonic_ns() - self._accounting[0][2]) // 1_000_000
        return max(0, ACCOUNT_WAITING_MS - age_ms)

    def _overdue(self) -> bool:
        """The oldest line waiting has waited ACCOUNT_WAITING_MS (no big line passing)."""
        oldest = self._accounting[0][2]
        return (
            time.monotonic_ns() - oldest >= ACCOUNT_WAITING_MS * 1_000_000
            and not self._big_line_passing()
        )

    def _take_queued(self) -> None:
        self.changed = True
        self.to_host_outlet.take_queued()
        if self.to_server_outlet is not None:
            self.to_server_outlet.take_queued()
        if self.to_host_outlet._queued or (
            self.to_server_outlet is not None and self.to_server_outlet._queued
        ):
            self.queued = True  # a line is half-written: try again next time round

    def _watch(self) -> None:
        """Poll what can move now."""
        self.dirty = False
        host_outlet, server_outlet = self.to_host_outlet, self.to_server_outlet
        want = {self._wake_r: _IN}
        if not self.host_eof and (server_outlet is None or server_outlet.waiting < HIGH_WATER):
            want[self._host_in] = _IN
        if host_outlet.waiting and not host_outlet.failed:
            want[host_outlet.fd] = _OUT
        if self.stdio:
            server = self.server
            if not self.output_closed and host_outlet.waiting < HIGH_WATER:
                want[server.stdout_fd] = _IN
            if self.server_status is None:
                want[server.exit_fd] = _IN
            if server_outlet is not None and server_outlet.waiting and not server_outlet.closed:
                want[server_outlet.fd] = _OUT
        masks, register, unregister = self._masks, self._poll.register, self._poll.unregister
        for fd in [fd for fd in masks if fd not in want]:
            unregister(fd)
            del masks[fd]
        for fd, mask in want.items():
            if masks.get(fd) != mask:
                register(fd, mask)
                masks[fd] = mask

    def _read_wake(self, _event: int) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except OSError:
            pass
        self.queued = self.changed = True

    def _host_writable(self, event: int) -> None:
        if event & _OUT:
            self.to_host_outlet.flush()
        elif event & _GONE:
            self.to_host_outlet._fail()

    def _server_writable(self, event: int) -> None:
        outlet = self.to_server_outlet
        if outlet is None:
            return
        if event & _OUT:
            outlet.flush()
        elif event & _GONE:
            outlet._fail()

    def _server_exited(self, _event: int) -> None:
        self.server_status = self.server.reap()
        self.dirty = self.changed = True

    def _read_host(self, _event: int) -> None:
        try:
            data = os.read(self._host_in, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""  # our stdin failed: the host has gone
        now = time.monotonic_ns()
        outlet = self.to_server_outlet
        if outlet is None:  # HTTP: each of the host's messages is a request of its own
            self._host_http(data, now)
            return
        if data:
            outlet.send(data, not data.endswith(b"\n"))
            self._backlog_bytes += len(data)
            self._host_spoke_last = True
            delivered = not (outlet.failed or outlet.closed)
            self._host_lines.feed(data, self._accounting, "client", now, delivered)
            if outlet.waiting >= HIGH_WATER:
                self.dirty = True
            return
        self.host_eof = True
        self.dirty = self.changed = True
        outlet.line_open = False
        rest = self._host_lines.rest()
        if rest is not None:
            delivered = not (outlet.failed or outlet.closed)
            self._accounting.append(("client", rest, now, delivered))

    def _host_http(self, data: bytes, now: int) -> None:
        lines: list = []
        if data:
            self._host_lines.feed(data, lines, "client", now, True)
        else:
            self.host_eof = True
            self.dirty = self.changed = True
            rest = self._host_lines.rest()
            if rest is not None:
                lines.append(("client", rest, now, True))
        for _, line, t_ns, _ in lines:
            try:
                self.relay.from_host(b"".join(line) if type(line) is list else line, t_ns)
            except Exception as exc:  # noqa: BLE001 - never stop reading the host
                print(f"stretto-proxy: a client line failed: {exc!r}", file=sys.stderr)

    def _read_server(self, _event: int) -> None:
        fd = self.server.stdout_fd
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        now = time.monotonic_ns()
        server_lines, outlet = self._server_lines, self.to_host_outlet
        if self._accounting and not server_lines.open and self._in_order:
            # The server starts a line: what the host sent before it is accounted for first
            # (--context: the conversation is read when a call is, before its answer goes).
            self._account()
        self._host_spoke_last = False
        if not data:
            self.output_closed = True
            self.dirty = self.changed = True
            os.close(fd)
            rest = server_lines.rest()
            if rest is not None:
                self._accounting.append(("server", rest, now, not self.hold_server_lines))
            if rest is not None and not self.hold_server_lines:
                outlet.end_torn_line()  # sent on as it came, with no end
            else:
                outlet.line_open = False
            self.queued = True
        elif self.hold_server_lines:
            self._backlog_bytes += len(data)
            server_lines.feed(data, self._accounting, "server", now, False)
            self._account()  # the flow decides on each whole line before it is forwarded
        else:
            outlet.send(data, not data.endswith(b"\n"))
            self._backlog_bytes += len(data)
            server_lines.feed(data, self._accounting, "server", now, True)
            if not outlet.line_open and outlet._queued:
                self.queued = True
            if outlet.waiting >= HIGH_WATER:
                self.dirty = True

    def _account(self) -> None:
        batch, self._accounting = self._accounting, []
        self._backlog_bytes = 0
        relay, outlet = self.relay, self.to_host_outlet
        for sender, line, t_ns, delivered in batch:
            if type(line) is list:
                line = b"".join(line)
            try:
                if sender == "client":
                    relay.host_line(line, t_ns, delivered)
                elif relay.server_line(line, t_ns, forwarded=delivered) and not delivered:
                    outlet.send(line)
            except Exception as exc:  # noqa: BLE001 - a line the relay chokes on still goes on
                if sender == "server" and not delivered:
                    outlet.send(line)
                print(f"stretto-proxy: a {sender} line failed: {exc!r}", file=sys.stderr)


def _make_nonblocking(fd: int) -> bool:
    """Make `fd` non-blocking if it is a pipe or a socket (a terminal or a file is left as it
    is: a write there does not wait on us); whether it was changed."""
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)) or not os.get_blocking(fd):
            return False
        os.set_blocking(fd, False)
    except OSError:
        return False
    return True
