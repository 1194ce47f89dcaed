"""The session log writer (session-log format version 2, docs/formats.md).

Every wire line becomes one log line, written with a single `os.write` on an O_APPEND file
so that a crash can tear at most the last line. A line that parses as JSON is embedded
verbatim (its own bytes, never re-serialized); any other line is kept as `raw` text.
"""

from __future__ import annotations

import json
import os
import threading
import time

LOG_VERSION = 2


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def parse_json_line(line: bytes) -> tuple[object, bytes] | None:
    """(parsed value, the line's JSON text) if the line is one strict JSON value, else None.

    The text is the line without its line ending; it is what the log embeds as `message`.
    """
    text = line.rstrip(b"\r\n")
    if not text.strip():
        return None
    try:
        value = json.loads(text.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value, text


def raw_text(line: bytes) -> str:
    return line.rstrip(b"\r\n").decode("utf-8", errors="replace")


def new_session_id(now: float | None = None, pid: int | None = None) -> str:
    """`YYYYMMDDTHHMMSS.mmmZ-<pid>`: the UTC start time and the proxy's pid."""
    now = time.time() if now is None else now
    pid = os.getpid() if pid is None else pid
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return f"{stamp}.{int(now * 1000) % 1000:03d}Z-{pid}"


def make_private_dir(path: str) -> None:
    """Create `path` (and parents) with mode 0700 for the folders we create."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.exists(p):
        missing.append(p)
        p = os.path.dirname(p)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass


class SessionLog:
    """One session's log file. Thread-safe; `t_ms` never decreases down the file."""

    def __init__(
        self,
        directory: str,
        *,
        server_command: list[str],
        domain: str | None,
        agent_model: str | None,
        started: float,
        started_monotonic_ns: int | None = None,
        session: str | None = None,
    ) -> None:
        make_private_dir(directory)
        base = session or new_session_id(started)
        self.session = base
        suffix = 1
        while True:
            path = os.path.join(directory, f"{self.session}.jsonl")
            try:
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
                break
            except FileExistsError:
                suffix += 1
                self.session = f"{base}-{suffix}"
        self.path = path
        self._started_ns = started_monotonic_ns or time.monotonic_ns()
        self._last_ms = 0
        self._lock = threading.Lock()
        header = {
            "stretto_mcp_log": LOG_VERSION,
            "session": self.session,
            "started_unix_ms": int(started * 1000),
            "server_command": server_command,
            "domain": domain,
            "agent_model": agent_model,
        }
        self._write(json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def record(self, sender: str, line: bytes, parsed: tuple[object, bytes] | None) -> None:
        """Log one wire line read from `sender` (client, server, proxy or context)."""
        if parsed is not None:
            body = b'","message":' + parsed[1] + b"}\n"
        else:
            text = json.dumps(raw_text(line), ensure_ascii=False)
            body = b'","raw":' + text.encode("utf-8", errors="surrogatepass") + b"}\n"
        with self._lock:
            now = (time.monotonic_ns() - self._started_ns) // 1_000_000
            if now < self._last_ms:
                now = self._last_ms
            self._last_ms = now
            self._write(b'{"t_ms":%d,"from":"%s' % (now, sender.encode()) + body)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
