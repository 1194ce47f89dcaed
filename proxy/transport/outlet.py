"""Bytes on their way to one of the proxy's file descriptors (the host's stdout, the server's
stdin), written without ever blocking the proxy's loop (proxy.transport.pump).

Our ends are non-blocking: what a reader does not take yet waits in the outlet, and the loop
writes it once the reader has room (`flush`, polled for). The loop streams a line's head
before its tail has arrived; other threads (a flow's runs, the HTTP upstream's readers, the
flow loader) hand in whole lines, which wait while a line is half-written so that bytes never
interleave.
"""

from __future__ import annotations

import _thread
import os

from proxy.wire import IOV_MAX, drop_written


class Outlet:
    """Bytes on their way to one file descriptor, which never blocks the loop.

    The loop streams to it (`send`, a line's head before its tail); other threads send whole
    lines (`queue`): at once when nothing waits and no line is half-written, else once that
    is written. Writes hold the outlet's lock, so bytes never interleave.
    """

    def __init__(self, fd: int, pump) -> None:
        # `pump`: the proxy.transport.pump.Pump whose loop drains this outlet (its `dirty`,
        # `changed` and `queued` flags, its `wake`); not annotated, as proxy.transport.pump
        # imports this module
        self.fd = fd
        self._pieces: list = []  # what the reader has not taken yet, in order
        self.waiting = 0  # their bytes
        self._queued: list[bytes] = []  # whole lines waiting for the half-written one
        self._lock = _thread.allocate_lock()
        self._pump = pump
        self.sent = 0  # bytes taken by the reader so far
        self.line_open = False  # a line is partly sent: queued lines wait for its end
        # The last line sent has no end: the server's output ended in the middle of it (sent
        # on as it came). A line sent after it starts with one, or it would be glued on.
        self.unended = False
        self.failed = False  # the reader has gone: what is sent now is dropped
        self.closed = False
        self.close_when_empty = False

    @property
    def idle(self) -> bool:
        """Nothing waits to be written (or the reader has gone)."""
        return self.failed or self.closed or not (self._pieces or self._queued)

    def send(self, data: bytes, line_open: bool = False) -> None:
        """(Loop thread) write `data` now, or as soon as the reader takes it; `line_open`:
        it ends in the middle of a line."""
        with self._lock:
            self._write(data)
            self.line_open = line_open
            self.unended = not (line_open or data.endswith(b"\n"))

    def end_torn_line(self) -> None:
        """(Loop thread) the stream ended in the middle of the line being sent: a line of the
        proxy's own that comes after it is put on a line of its own."""
        with self._lock:
            self.line_open = False
            self.unended = True

    def _write_line(self, line: bytes) -> None:
        """(Holding the lock.) A whole line of another thread's, after a line that has no end."""
        if self.unended:
            self.unended = False
            self._write(b"\n")
        self._write(line)

    def _write(self, data: bytes) -> None:
        """(Holding the lock.)"""
        if self.failed or self.closed:
            return
        if self._pieces:
            self._pieces.append(data)
            self.waiting += len(data)
            return
        try:
            written = os.write(self.fd, data)
        except BlockingIOError:
            written = 0
        except OSError:
            self._fail()
            return
        self.sent += written
        if written < len(data):
            self._pieces.append(memoryview(data)[written:])
            self.waiting += len(data) - written
            self._pump.dirty = True  # poll for room

    def flush(self) -> None:
        """(Loop thread) write what waits, as far as the reader takes it."""
        with self._lock:
            pieces = self._pieces
            while pieces:
                try:
                    written = os.writev(self.fd, pieces[:IOV_MAX])
                except BlockingIOError:
                    return
                except OSError:
                    self._fail()
                    return
                self.sent += written
                self.waiting -= written
                drop_written(pieces, written)
            self._pump.dirty = self._pump.changed = True
            if self.close_when_empty:
                self._close()

    def _fail(self) -> None:
        self.failed = True
        self._pieces.clear()
        self.waiting = 0
        self._pump.dirty = self._pump.changed = True

    def queue(self, line: bytes) -> bool:
        """(Any thread) send a whole line as soon as no line is half-written; False if the
        reader has gone."""
        with self._lock:
            if self.failed or self.closed or self.close_when_empty:
                return False
            if self.line_open or self._queued:
                self._queued.append(line)
                self._pump.queued = True
            else:
                self._write_line(line)
            left = self.failed or bool(self._queued or self._pieces)
        if left:
            self._pump.wake()  # the loop has something to do about it
        return True

    def stream(self, data: bytes, line_open: bool) -> bool:
        """(Another thread, one line at a time) part of a line, `line_open` until its last
        piece: whole lines queued meanwhile follow it. False if the reader has gone."""
        with self._lock:
            if self.failed or self.closed:
                return False
            if self.unended:
                self.unended = False
                self._write(b"\n")
            self._write(data)
            self.line_open = line_open
            if not line_open and self._queued:
                lines, self._queued = self._queued, []
                for line in lines:
                    self._write(line)
            left = self.failed or bool(self._pieces)
        if left:
            self._pump.wake()
        return not self.failed

    def take_queued(self) -> None:
        """(Loop thread) write the queued lines, unless a line is half-written."""
        with self._lock:
            if self._queued and not self.line_open:
                lines, self._queued = self._queued, []
                for line in lines:
                    self._write_line(line)

    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            self._pieces.clear()
            self.waiting = 0
            self._pump.dirty = self._pump.changed = True
            try:
                os.close(self.fd)
            except OSError:
                pass
