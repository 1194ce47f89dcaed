"""The wrapped MCP server as a child process speaking newline-delimited JSON-RPC on stdio.

Started with `os.posix_spawnp` rather than `subprocess`: the host waits for the proxy before
its first message, and `subprocess` alone costs more start-up than the rest of the proxy.
"""

from __future__ import annotations

import os
import signal
import threading


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
        threading.Thread(target=self._reap, name="server-wait", daemon=True).start()

    def _reap(self) -> None:
        _, wait_status = os.waitpid(self.pid, 0)
        self._status = exit_status(wait_status)
        self._exited.set()

    def start(self, on_line) -> None:
        """Read the server's stdout on a thread, handing each line (with its ending) over."""

        def pump() -> None:
            with os.fdopen(self._stdout_fd, "rb", buffering=1 << 16) as stream:
                while True:
                    line = stream.readline()
                    if not line:
                        break
                    on_line(line)

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
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if not self._exited.is_set():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass
