"""The wrapped MCP server as a child process speaking newline-delimited JSON-RPC on stdio.

Started with `os.posix_spawnp` rather than `subprocess`: the host waits for the proxy before
its first message, and `subprocess` alone costs more start-up than the rest of the proxy.

The server runs in a process group of its own, and is signalled as a group: a server
started through `sh -c` or `npx`, or one that starts helpers, is ended whole.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time


class StartError(Exception):
    """The server could not be started."""


def exit_status(wait_status: int) -> int:
    """A shell-style status: the exit code, or 128 + n when killed by signal n."""
    code = os.waitstatus_to_exitcode(wait_status)
    return 128 - code if code < 0 else code


class StdioServer:
    """Starts the server; its stderr is the proxy's stderr, untouched."""

    def __init__(self, command: list[str]) -> None:
        server_in, self._stdin_fd = os.pipe()
        self._stdout_fd, server_out = os.pipe()
        try:
            self.pid = os.posix_spawnp(
                command[0],
                command,
                os.environ,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, server_in, 0),
                    (os.POSIX_SPAWN_DUP2, server_out, 1),
                ],
                # Python ignores SIGPIPE; the server should not inherit that.
                setsigdef=(signal.SIGPIPE, signal.SIGXFSZ),
                setpgroup=0,  # its own group, led by itself: pgid == pid
            )
        except OSError as exc:
            os.close(self._stdin_fd)
            os.close(self._stdout_fd)
            raise StartError(
                f"cannot start the server `{command[0]}`: {exc.strerror or exc}"
            ) from exc
        finally:
            os.close(server_in)  # the child's ends: it has its own copies now
            os.close(server_out)
        self._write_lock = threading.Lock()
        self._input_closed = False
        self._reader: threading.Thread | None = None
        self._status: int | None = None
        self._exited = threading.Event()
        self._terminated_at: float | None = None  # when the group was sent SIGTERM
        self._on_output_end = lambda: None
        threading.Thread(target=self._reap, name="server-wait", daemon=True).start()

    def _reap(self) -> None:
        _, wait_status = os.waitpid(self.pid, 0)
        self._status = exit_status(wait_status)
        self._exited.set()

    def set_end_handler(self, on_end) -> None:
        """Called once the server's stdout has closed (it exited, or closed it and runs on)."""
        self._on_output_end = on_end

    def start(self, on_line) -> None:
        """Read the server's stdout on a thread, handing each line (with its ending) over."""

        def pump() -> None:
            try:
                with os.fdopen(self._stdout_fd, "rb", buffering=1 << 16) as stream:
                    for line in iter(stream.readline, b""):
                        try:
                            on_line(line)
                        except Exception as exc:  # noqa: BLE001 - never leave the server unread
                            print(f"stretto-proxy: a server line failed: {exc!r}", file=sys.stderr)
            finally:
                self._on_output_end()

        self._reader = threading.Thread(target=pump, name="server-stdout", daemon=True)
        self._reader.start()

    def send(self, line: bytes) -> bool:
        """Write one line to the server. False when its stdin is closed (it has gone)."""
        view = memoryview(line)
        with self._write_lock:
            if self._input_closed:
                return False
            try:
                while view:
                    view = view[os.write(self._stdin_fd, view) :]
                return True
            except OSError:
                return False

    def close_input(self) -> None:
        with self._write_lock:
            if not self._input_closed:
                self._input_closed = True
                os.close(self._stdin_fd)

    def wait(self, timeout: float | None = None) -> int | None:
        """The server's exit status, or None if it is still running after `timeout`."""
        return self._status if self._exited.wait(timeout) else None

    def finish_reading(self, timeout: float) -> None:
        """Give the stdout reader a moment to forward what the server wrote before it exited."""
        if self._reader is not None:
            self._reader.join(timeout)

    def terminate(self) -> None:
        """SIGTERM to the server's whole process group."""
        if self._terminated_at is None:
            self._terminated_at = time.monotonic()
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # the group is empty (or, its leader long gone, the id someone else's)

    def end_group(self, grace: float) -> None:
        """Once the server has exited: end what is left of its process group — SIGTERM, then
        SIGKILL if anything is still there `grace` seconds after the first SIGTERM."""
        if not self._exited.is_set() or not self._group_alive():
            return
        self.terminate()
        deadline = (self._terminated_at or time.monotonic()) + grace
        while time.monotonic() < deadline:
            time.sleep(0.02)
            if not self._group_alive():
                return
        self.kill()

    def _group_alive(self) -> bool:
        """Whether a process of the group still runs (zombies waiting to be reaped don't)."""
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return _has_live_member(self.pid)


def _has_live_member(pgid: int) -> bool:
    """Whether /proc shows a process of group `pgid` that is not a zombie (True without /proc)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            return True
    return False
