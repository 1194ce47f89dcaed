"""The wrapped MCP server as a child process speaking newline-delimited JSON-RPC on stdio."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable

from proxy.wire import write_all


class StartError(Exception):
    """The server could not be started."""


def exit_status(returncode: int) -> int:
    """A shell-style status: the exit code, or 128 + n when killed by signal n."""
    return 128 - returncode if returncode < 0 else returncode


class StdioServer:
    """Starts the server; its stderr is the proxy's stderr, untouched."""

    def __init__(self, command: list[str]) -> None:
        try:
            self._proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=1 << 16
            )
        except OSError as exc:
            raise StartError(
                f"cannot start the server `{command[0]}`: {exc.strerror or exc}"
            ) from exc
        self._stdin_fd = self._proc.stdin.fileno()
        self._write_lock = threading.Lock()
        self._input_closed = False
        self._reader: threading.Thread | None = None
        self.stdout_closed = threading.Event()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def start(self, on_line: Callable[[bytes], None]) -> None:
        """Read the server's stdout on a thread, handing each line (with its ending) over."""

        def pump() -> None:
            stream = self._proc.stdout
            try:
                while True:
                    line = stream.readline()
                    if not line:
                        break
                    on_line(line)
            finally:
                self.stdout_closed.set()

        self._reader = threading.Thread(target=pump, name="server-stdout", daemon=True)
        self._reader.start()

    def send(self, line: bytes) -> bool:
        """Write one line to the server. False when its stdin is closed (it has gone)."""
        with self._write_lock:
            if self._input_closed:
                return False
            try:
                write_all(self._stdin_fd, line)
                return True
            except (BrokenPipeError, ConnectionResetError, OSError):
                return False

    def close_input(self) -> None:
        with self._write_lock:
            if not self._input_closed:
                self._input_closed = True
                try:
                    self._proc.stdin.close()
                except OSError:
                    pass

    def wait(self, timeout: float | None = None) -> int | None:
        """The server's exit status, or None if it is still running after `timeout`."""
        try:
            return exit_status(self._proc.wait(timeout))
        except subprocess.TimeoutExpired:
            return None

    def finish_reading(self, timeout: float) -> None:
        """Give the stdout reader a moment to forward what the server wrote before it exited."""
        if self._reader is not None:
            self._reader.join(timeout)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if self._proc.poll() is None:
            try:
                os.kill(self._proc.pid, sig)
            except ProcessLookupError:
                pass
